package frontend

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/actors/router"
)

// ProbeConfig configures /health, /live and /ready.
type ProbeConfig struct {
	// Namespace is Dynamo's namespace (--namespace), named in /health's instances. Default "dynamo".
	Namespace string
	// MinReadyWorkers is how many workers must be ready before /ready answers 200. Default 1.
	MinReadyWorkers int
	// Checked, when set, reports whether a worker has passed a health check since it registered; a
	// worker counts as ready only then. Nil: every healthy registered worker is ready.
	Checked func(id uint64) bool
	// Version is what GET /version reports (the binary's version and commit). Default "".
	Version string
	// Models are a frontend's other models (the router given to NewProbes serves the first, named
	// Model): /ready then waits for MinReadyWorkers workers of every model, since a model without ready
	// workers fails all its requests.
	Model  string
	Models []ProbedModel
}

// ProbedModel is one more served model for readiness: its router core and its health checks.
type ProbedModel struct {
	Name    string
	R       *router.Router
	Checked func(id uint64) bool
}

// Probes serves the orchestration endpoints:
//
//	/live   200 {"status":"live"} while the process serves HTTP (Dynamo's shape).
//	/health 200 with Dynamo's shape: status healthy once a worker is registered, endpoints and instances.
//	/ready  200 {"status":"ready"} once MinReadyWorkers workers are healthy and checked, 503
//	        {"status":"notready","reason":...} before that and from the moment the drain starts.
//	/version 200 {"version":...}.
type Probes struct {
	r        *router.Router
	cfg      ProbeConfig
	started  time.Time
	draining atomic.Bool
}

// NewProbes returns the probes over r's fleet.
func NewProbes(r *router.Router, cfg ProbeConfig) *Probes {
	if cfg.Namespace == "" {
		cfg.Namespace = "dynamo"
	}
	if cfg.MinReadyWorkers <= 0 {
		cfg.MinReadyWorkers = 1
	}
	return &Probes{r: r, cfg: cfg, started: time.Now()}
}

// StartDrain makes /ready answer 503 from now on: load balancers stop sending new requests.
func (p *Probes) StartDrain() { p.draining.Store(true) }

// Draining reports whether the drain has started.
func (p *Probes) Draining() bool { return p.draining.Load() }

// Handle serves the probe paths and reports whether ctx was one of them.
func (p *Probes) Handle(ctx *fasthttp.RequestCtx) bool {
	switch string(ctx.Path()) {
	case "/live":
		writeJSON(ctx, map[string]string{"status": "live", "message": "Service is live"})
	case "/health":
		p.health(ctx)
	case "/ready":
		p.ready(ctx)
	case "/version":
		writeJSON(ctx, map[string]string{"version": p.cfg.Version})
	default:
		return false
	}
	return true
}

type healthInstance struct {
	Component  string            `json:"component"`
	Endpoint   string            `json:"endpoint"`
	InstanceID uint64            `json:"instance_id"`
	Namespace  string            `json:"namespace"`
	Transport  map[string]string `json:"transport"`
	// kvroute's additions: the worker's routing state.
	Healthy  bool   `json:"healthy"`
	Degraded string `json:"degraded,omitempty"`
}

func (p *Probes) health(ctx *fasthttp.RequestCtx) {
	insts := []healthInstance{}
	for _, m := range p.r.Fleet.Mirrors() {
		st, ok := p.r.Fleet.StatusOf(m.Spec.ID)
		if !ok {
			continue
		}
		insts = append(insts, healthInstance{Component: "backend", Endpoint: "generate", InstanceID: m.Spec.ID,
			Namespace: p.cfg.Namespace, Transport: map[string]string{"http": m.Spec.URL}, Healthy: st.Healthy, Degraded: st.Degraded})
	}
	if len(insts) == 0 {
		writeJSON(ctx, map[string]any{"status": "unhealthy", "message": "No endpoints available", "instances": insts})
		return
	}
	writeJSON(ctx, map[string]any{"status": "healthy", "endpoints": []string{"dyn://" + p.cfg.Namespace + ".backend.generate"},
		"instances": insts})
}

// ReadyWorkers counts workers that are registered, healthy and checked, over every model.
func (p *Probes) ReadyWorkers() int {
	n := readyOf(p.r, p.cfg.Checked)
	for _, m := range p.cfg.Models {
		n += readyOf(m.R, m.Checked)
	}
	return n
}

// readyOf counts one router core's ready workers.
func readyOf(r *router.Router, checked func(uint64) bool) int {
	n := 0
	for _, m := range r.Fleet.Mirrors() {
		st, ok := r.Fleet.StatusOf(m.Spec.ID)
		if ok && st.Healthy && (checked == nil || checked(m.Spec.ID)) {
			n++
		}
	}
	return n
}

// unreadyModel names the first model with fewer than MinReadyWorkers ready workers ("" none), when
// several are served.
func (p *Probes) unreadyModel() (string, int) {
	if len(p.cfg.Models) == 0 {
		return "", 0
	}
	if n := readyOf(p.r, p.cfg.Checked); n < p.cfg.MinReadyWorkers {
		return p.cfg.Model, n
	}
	for _, m := range p.cfg.Models {
		if n := readyOf(m.R, m.Checked); n < p.cfg.MinReadyWorkers {
			return m.Name, n
		}
	}
	return "", 0
}

func (p *Probes) ready(ctx *fasthttp.RequestCtx) {
	up := time.Since(p.started)
	uptime := map[string]int64{"secs": int64(up / time.Second), "nanos": int64(up % time.Second)}
	reason := ""
	n := p.ReadyWorkers()
	switch {
	case p.draining.Load():
		reason = "draining: shutting down"
	case n < p.cfg.MinReadyWorkers:
		reason = strconv.Itoa(n) + " of " + strconv.Itoa(p.cfg.MinReadyWorkers) + " required workers ready"
	default:
		if name, k := p.unreadyModel(); name != "" {
			reason = "model " + name + ": " + strconv.Itoa(k) + " of " + strconv.Itoa(p.cfg.MinReadyWorkers) + " required workers ready"
		}
	}
	if reason != "" {
		writeJSON(ctx, map[string]any{"status": "notready", "reason": reason, "ready_workers": n, "uptime": uptime})
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		return
	}
	writeJSON(ctx, map[string]any{"status": "ready", "ready_workers": n, "uptime": uptime})
}

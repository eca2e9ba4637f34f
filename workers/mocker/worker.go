package mocker

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/netlimit"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/mm"
)

// WorkerConfig configures one simulated vLLM server: an HTTP endpoint in front of DPSize engines.
type WorkerConfig struct {
	// ID names the worker in request ids and metrics labels. Default 0.
	ID int
	// Engine configures each dp rank's engine (DPRank is set per rank).
	Engine EngineConfig
	// DPSize is the number of data-parallel ranks (engines) behind the one HTTP endpoint. Default 1.
	DPSize int
	// Model is the served model; nil means NewFallbackModel(ServedModelName).
	Model *Model
	// ServedModelName overrides Model.Name when set.
	ServedModelName string
	// HTTPAddr is host:port to listen on; port 0 picks a free port. Default "127.0.0.1:0".
	HTTPAddr string
	// KVEvents configures the ZMQ publisher; Enable false publishes nothing (steps still run).
	KVEvents KVEventsConfig
	// NewPublisher overrides how a rank's publisher is built (tests); nil uses KVEvents.
	NewPublisher func(rank int) (EventPublisher, error)
	// Clock paces the steps and stamps event batches (the engine itself never reads a clock). Default the
	// wall clock; tests pass a clock.Fake and step through virtual time.
	Clock clock.Clock
	// DefaultMaxTokens applies when a request sets neither max_tokens nor max_completion_tokens.
	// vLLM would generate up to the model length; a mocker wants short answers. Default 16.
	DefaultMaxTokens int
	// MediaAllowHosts are the hosts, IPs or CIDRs image URLs may reach although internal; every other
	// internal destination is refused by the frontend's SSRF guard (mm.Guard), before any connection.
	// Default none.
	MediaAllowHosts []string
	// KVTransfer is the transfer model of disaggregated decode (pulling a prefill worker's blocks).
	// Zero fields take the defaults: 64 GB/s, the default model's KV bytes per token.
	KVTransfer KVTransferConfig
	// APIKey, when set, is required on every /v1 call as "Authorization: Bearer <key>" (vLLM's
	// --api-key: 401 otherwise; /health, /metrics and the other paths stay open). Default none.
	APIKey string
}

// DefaultWorkerConfig is one rank with Dynamo's engine defaults, the fallback model, a free port on
// 127.0.0.1 and events off (set KVEvents = DefaultKVEventsConfig() and its endpoints to publish).
func DefaultWorkerConfig() WorkerConfig {
	return WorkerConfig{Engine: DefaultEngineConfig(), DPSize: 1, HTTPAddr: "127.0.0.1:0", DefaultMaxTokens: 16}
}

// Validate checks the engine config and the worker's own fields (zero values take their defaults).
func (c *WorkerConfig) Validate() error {
	if c.DPSize < 0 {
		return fmt.Errorf("%w: dp size %d", ErrBadConfig, c.DPSize)
	}
	if c.DefaultMaxTokens < 0 {
		return fmt.Errorf("%w: default max tokens %d", ErrBadConfig, c.DefaultMaxTokens)
	}
	if c.KVEvents.Enable && c.NewPublisher == nil && c.KVEvents.Endpoint == "" {
		return fmt.Errorf("%w: kv events enabled without an endpoint", ErrBadConfig)
	}
	if !(c.KVTransfer.Bandwidth >= 0) || c.KVTransfer.KVBytesPerToken < 0 {
		return fmt.Errorf("%w: kv transfer bandwidth %v and bytes per token %d must not be negative", ErrBadConfig, c.KVTransfer.Bandwidth, c.KVTransfer.KVBytesPerToken)
	}
	if _, err := mm.NewGuard(c.MediaAllowHosts); err != nil {
		return fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	return c.Engine.Validate()
}

// Worker is one simulated vLLM server: HTTP (OpenAI API, metrics, admin) plus one engine goroutine and one
// event publisher per dp rank.
type Worker struct {
	cfg    WorkerConfig
	model  *Model
	ranks  []*rank
	pubs   []EventPublisher
	ln     net.Listener
	srv    *fasthttp.Server
	images *imageResolver

	stop    chan struct{}
	group   routine.Group
	closeMu sync.Once
	nextReq atomic.Uint64
	metrics serverMetrics
	mmx     mmTransfer // mm transfer hook (mm_transfer.go)
}

// StartWorker validates cfg, opens the publishers and the HTTP listener, and starts the rank loops.
func StartWorker(cfg WorkerConfig) (*Worker, error) {
	model, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	guard, err := mm.NewGuard(cfg.MediaAllowHosts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	w := &Worker{cfg: cfg, model: model, stop: make(chan struct{}), images: newImageResolver(guard)}
	fail := func(err error) (*Worker, error) {
		for _, p := range w.pubs {
			p.Close()
		}
		return nil, err
	}
	if err := w.startRanks(); err != nil {
		return fail(err)
	}
	w.metrics.init(len(w.ranks))
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fail(fmt.Errorf("mocker: worker %d listen %s: %w", cfg.ID, cfg.HTTPAddr, err))
	}
	w.ln = ln
	w.srv = &fasthttp.Server{
		Handler:                       w.handle,
		Name:                          "kvroute-mocker",
		NoDefaultServerHeader:         true,
		NoDefaultDate:                 true,
		DisableHeaderNamesNormalizing: false,
		ReadTimeout:                   5 * time.Minute,
		IdleTimeout:                   2 * time.Minute,
		StreamRequestBody:             false,
		MaxRequestBodySize:            64 << 20,
		CloseOnShutdown:               true,
	}
	for _, r := range w.ranks {
		w.group.Go(rankLoop, func() { r.run(w.stop) })
	}
	// Accepting through errors that pass: fasthttp's Serve returns at the first EMFILE, and a simulated
	// worker in kvroute serve's process shares the frontend's descriptor table.
	w.group.Go(mockerServe, func() { _ = w.srv.Serve(netlimit.NewListener(ln, netlimit.ListenerConfig{})) })
	return w, nil
}

// withDefaults fills c's unset fields, validates it and returns the served model (the fallback model
// when none is set, renamed to ServedModelName when that is set), whose filler tokens the engine samples
// unless others were configured.
func (c *WorkerConfig) withDefaults() (*Model, error) {
	if c.DPSize == 0 {
		c.DPSize = 1
	}
	if len(c.Engine.FillerTokens) == 0 {
		c.Engine.FillerTokens = DefaultEngineConfig().FillerTokens
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:0"
	}
	c.Clock = clock.Or(c.Clock)
	if c.DefaultMaxTokens <= 0 {
		c.DefaultMaxTokens = 16
	}
	model := c.Model
	if model == nil {
		name := c.ServedModelName
		if name == "" {
			name = "kvroute-mocker"
		}
		model = NewFallbackModel(name)
	} else if c.ServedModelName != "" {
		m := *model
		m.Name = c.ServedModelName
		model = &m
	}
	if len(c.Engine.FillerTokens) == 0 || sameFiller(c.Engine.FillerTokens) {
		c.Engine.FillerTokens = model.fillerTokens()
	}
	if err := c.Engine.Validate(); err != nil {
		return nil, err
	}
	return model, nil
}

// startRanks builds each dp rank's engine with its KV event publisher (cfg.NewPublisher, else ZMQ when
// KV events are on, else none); the publishers opened are in w.pubs for the caller to close on failure.
func (w *Worker) startRanks() error {
	cfg := &w.cfg
	for i := range cfg.DPSize {
		var pub EventPublisher
		var err error
		switch {
		case cfg.NewPublisher != nil:
			pub, err = cfg.NewPublisher(i)
		case cfg.KVEvents.Enable:
			pub, err = newZMQPublisher(cfg.KVEvents, i)
		}
		if err != nil {
			return fmt.Errorf("mocker: worker %d rank %d publisher: %w", cfg.ID, i, err)
		}
		if pub != nil {
			w.pubs = append(w.pubs, pub)
		}
		r, err := newRank(i, cfg.Engine, cfg.Clock, pub)
		if err != nil {
			return err
		}
		w.ranks = append(w.ranks, r)
	}
	return nil
}

// The simulated worker's goroutines: one step loop per dp rank and the HTTP server; Close joins them.
var (
	rankLoop    = routine.Named("mocker.rank")
	mockerServe = routine.Named("mocker.serve")
)

func sameFiller(f []uint32) bool {
	d := DefaultEngineConfig().FillerTokens
	if len(f) != len(d) {
		return false
	}
	for i := range f {
		if f[i] != d[i] {
			return false
		}
	}
	return true
}

// Addr is the HTTP listen address (host:port).
func (w *Worker) Addr() string { return w.ln.Addr().String() }

// URL is the worker's base URL, e.g. http://127.0.0.1:8001.
func (w *Worker) URL() string { return "http://" + w.Addr() }

// ID is the worker's configured id.
func (w *Worker) ID() int { return w.cfg.ID }

// DPSize is the number of ranks.
func (w *Worker) DPSize() int { return len(w.ranks) }

// Model is the served model.
func (w *Worker) Model() *Model { return w.model }

// EventsEndpoint and ReplayEndpoint are rank's ZMQ endpoints as a subscriber dials them ("" when events
// or replay are off, or when a custom publisher is used).
func (w *Worker) EventsEndpoint(rank int) string {
	if z, ok := w.ranks[rank].pub.(*zmqPublisher); ok {
		ep, _ := z.endpoints()
		return ep
	}
	return ""
}

// ReplayEndpoint is rank's replay ROUTER endpoint, see EventsEndpoint.
func (w *Worker) ReplayEndpoint(rank int) string {
	if z, ok := w.ranks[rank].pub.(*zmqPublisher); ok {
		_, ep := z.endpoints()
		return ep
	}
	return ""
}

// Submit queues req on a rank (rank < 0: the rank with the fewest requests in flight) and returns its
// stream. A blank req.ID gets a fresh one.
func (w *Worker) Submit(rank int, req Request) (*Stream, error) {
	if req.ID == "" {
		req.ID = "req-" + strconv.Itoa(w.cfg.ID) + "-" + strconv.FormatUint(w.nextReq.Add(1), 10)
	}
	r, err := w.pickRank(rank)
	if err != nil {
		return nil, err
	}
	return r.submit(req)
}

// Abort cancels a submitted request (e.g. the client went away).
func (w *Worker) Abort(s *Stream) { w.ranks[s.rankIdx].abort(s.reqID) }

func (w *Worker) pickRank(idx int) (*rank, error) {
	if idx >= len(w.ranks) {
		return nil, fmt.Errorf("%w: data parallel rank %d out of range [0,%d)", ErrBadRequest, idx, len(w.ranks))
	}
	if idx >= 0 {
		return w.ranks[idx], nil
	}
	best := w.ranks[0]
	for _, r := range w.ranks[1:] {
		if r.inflight.Load() < best.inflight.Load() {
			best = r
		}
	}
	return best, nil
}

// ResetPrefixCache resets every rank's prefix cache; it fails with ErrResetBusy if a rank has blocks in
// use (that rank is left untouched, the others are reset).
func (w *Worker) ResetPrefixCache() error {
	var errs []error
	for _, r := range w.ranks {
		if err := r.resetPrefixCache(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r.idx, err))
		}
	}
	return errors.Join(errs...)
}

// CachedBlocks is the ground truth of rank's prefix cache (what GET /debug/kv_blocks lists).
func (w *Worker) CachedBlocks(rank int) []CachedBlock {
	r := w.ranks[rank]
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.eng.CachedBlocks([]CachedBlock{})
	for i := range out {
		out[i].TokenIDs = append([]uint32(nil), out[i].TokenIDs...)
	}
	return out
}

// Stats returns rank's engine counters.
func (w *Worker) Stats(rank int) Stats {
	r := w.ranks[rank]
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.eng.Stats()
}

// Idle reports whether no rank has a request in flight (tests poll it before comparing ground truth).
func (w *Worker) Idle() bool {
	for _, r := range w.ranks {
		if r.inflight.Load() != 0 {
			return false
		}
		r.mu.Lock()
		busy := r.eng.HasWork()
		r.mu.Unlock()
		if busy {
			return false
		}
	}
	return true
}

// PublishedBatches is the number of event batches rank has published (or dropped without publisher).
func (w *Worker) PublishedBatches(rank int) uint64 { return w.ranks[rank].publishedBatches.Load() }

// PublishedEvents is the number of events rank has published.
func (w *Worker) PublishedEvents(rank int) uint64 { return w.ranks[rank].publishedEvents.Load() }

// Close stops the HTTP server and the rank loops (in-flight streams fail with ErrAborted) and closes the
// publishers.
func (w *Worker) Close() error {
	var err error
	w.closeMu.Do(func() {
		close(w.stop)
		err = w.srv.Shutdown()
		// Shutdown before Serve has registered the listener leaves Serve running: closing the listener
		// ends it either way.
		_ = w.ln.Close()
		w.group.Wait()
		for _, p := range w.pubs {
			if e := p.Close(); e != nil && err == nil {
				err = e
			}
		}
	})
	return err
}

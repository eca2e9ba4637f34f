package routine

import (
	"context"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is one named sort of goroutine and its counts.
type Kind struct {
	name    string
	labels  context.Context // carries the pprof label goroutine=name; made once
	live    atomic.Int64
	started atomic.Uint64
}

var (
	mu    sync.Mutex
	kinds = map[string]*Kind{}
)

// Named returns the kind called name, making it on first use. Call it once per kind (a package-level var),
// not per start.
func Named(name string) *Kind {
	mu.Lock()
	defer mu.Unlock()
	if k, ok := kinds[name]; ok {
		return k
	}
	k := &Kind{name: name, labels: pprof.WithLabels(context.Background(), pprof.Labels("goroutine", name))}
	kinds[name] = k
	return k
}

// Name is the kind's name.
func (k *Kind) Name() string { return k.name }

// Live is how many goroutines of the kind are running.
func (k *Kind) Live() int64 { return k.live.Load() }

// Go starts fn on a new goroutine counted under k and labelled goroutine=<name> for pprof. Use it directly
// only for a goroutine whose end its starter joins itself (a channel it waits on); otherwise use a Group.
func (k *Kind) Go(fn func()) {
	k.started.Add(1)
	k.live.Add(1)
	go k.run(fn)
}

func (k *Kind) run(fn func()) {
	pprof.SetGoroutineLabels(k.labels)
	defer k.live.Add(-1)
	fn()
}

// Group is the set of goroutines one owner started: Go refuses after Stop, Wait joins them. The zero value
// is ready to use.
type Group struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// Go starts fn as a goroutine of kind k owned by g, or returns false when g was stopped.
func (g *Group) Go(k *Kind, fn func()) bool {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return false
	}
	g.wg.Add(1)
	g.mu.Unlock()
	k.started.Add(1)
	k.live.Add(1)
	go g.run(k, fn)
	return true
}

// run counts the goroutine out before Done, so that after Wait the kind's Live no longer includes it.
func (g *Group) run(k *Kind, fn func()) {
	pprof.SetGoroutineLabels(k.labels)
	defer g.wg.Done()
	defer k.live.Add(-1)
	fn()
}

// Stop makes every later Go refuse. It does not end running goroutines: their owner signals them (a
// context, a closed channel) and then calls Wait.
func (g *Group) Stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// Wait blocks until every goroutine g started has returned.
func (g *Group) Wait() { g.wg.Wait() }

// Every calls fn every period, the first time one period from now, until done is closed (a stop
// channel, or a context's Done), and returns then: the body of a periodic goroutine.
func Every(done <-chan struct{}, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			fn()
		}
	}
}

// Count is one kind's counts.
type Count struct {
	Name    string `json:"name"`
	Live    int64  `json:"live"`
	Started uint64 `json:"started"`
}

// Snapshot returns every kind's counts, sorted by name.
func Snapshot() []Count {
	mu.Lock()
	out := make([]Count, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, Count{Name: k.name, Live: k.live.Load(), Started: k.started.Load()})
	}
	mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

var (
	liveDesc    = prometheus.NewDesc("kvroute_goroutines", "Goroutines running, by kind (started through the tracked helper).", []string{"name"}, nil)
	startedDesc = prometheus.NewDesc("kvroute_goroutines_started_total", "Goroutines started, by kind.", []string{"name"}, nil)
)

type collector struct{}

// Collector returns a Prometheus collector of every kind's counts: kvroute_goroutines{name} and
// kvroute_goroutines_started_total{name}. Register it once per registry.
func Collector() prometheus.Collector { return collector{} }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- liveDesc
	ch <- startedDesc
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range Snapshot() {
		ch <- prometheus.MustNewConstMetric(liveDesc, prometheus.GaugeValue, float64(c.Live), c.Name)
		ch <- prometheus.MustNewConstMetric(startedDesc, prometheus.CounterValue, float64(c.Started), c.Name)
	}
}

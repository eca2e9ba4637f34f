package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/netlimit"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/registry"
)

// HealthConfig configures worker health checks and the registration self-test.
type HealthConfig struct {
	// Interval between checks of each worker. Default 2s; 0 or less disables checks.
	Interval time.Duration
	// Timeout bounds one check. Default 1s.
	Timeout time.Duration
	// FailThreshold consecutive failures make a worker unhealthy. Default 2.
	FailThreshold int
	// SelfTest runs the compatibility self-test when a worker registers. Default true in DefaultHealthConfig.
	SelfTest bool
	// SelfTestTimeout bounds the wait for the canary's BlockStored event. Default 10s.
	SelfTestTimeout time.Duration
	// ModelName is the served model name the canary request names.
	ModelName string
}

// DefaultHealthConfig returns the defaults.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{Interval: 2 * time.Second, Timeout: time.Second, FailThreshold: 2, SelfTest: true, SelfTestTimeout: 10 * time.Second}
}

// Monitor checks every worker's /health and /metrics: a worker failing FailThreshold checks in a row
// leaves the candidate set and the index; when it answers again it is resynced and routable. Each check
// also reads vllm:kv_cache_usage_perc (for the decode-blocks busy threshold) and vllm:cache_config_info.
type Monitor struct {
	r    *router.Router
	pool *WorkerPool
	cfg  HealthConfig
	log  *slog.Logger

	mu    sync.Mutex
	fails map[uint64]int
	seen  map[uint64]bool
	// local counts the checks of this round that could not open a socket (client.ErrLocal).
	local atomic.Int64

	cancel    context.CancelFunc
	done      chan struct{}
	selfTests routine.Group // refuses new self-tests after Stop; each ends with its window
}

// The monitor's goroutines: the check loop (joined by Stop) and the registration self-tests.
var (
	healthLoop = routine.Named("frontend.health-monitor")
	selfTest   = routine.Named("frontend.self-test")
)

// NewMonitor returns a stopped monitor; Start runs it.
func NewMonitor(r *router.Router, pool *WorkerPool, cfg HealthConfig, log *slog.Logger) *Monitor {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.FailThreshold <= 0 {
		cfg.FailThreshold = 2
	}
	if cfg.SelfTestTimeout <= 0 {
		cfg.SelfTestTimeout = 10 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Monitor{r: r, pool: pool, cfg: cfg, log: log, fails: map[uint64]int{}, seen: map[uint64]bool{}}
}

// Start runs the checks until Stop.
func (m *Monitor) Start() {
	if m.cfg.Interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan struct{})
	healthLoop.Go(func() {
		defer close(m.done)
		t := time.NewTicker(m.cfg.Interval)
		defer t.Stop()
		for {
			m.round(ctx, m.cfg.Interval/2)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// Checked reports whether a worker has passed a health check since it registered (true for every
// worker when checks are off): the readiness probe counts only those.
func (m *Monitor) Checked(id uint64) bool {
	if m.cfg.Interval <= 0 {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[id]
}

// Stop ends the checks and waits for the current round.
func (m *Monitor) Stop() {
	m.selfTests.Stop()
	if m.cancel != nil {
		m.cancel()
		<-m.done
	}
}

// CheckAll checks every registered worker with a URL once, concurrently, all at once.
func (m *Monitor) CheckAll(ctx context.Context) { m.round(ctx, 0) }

// round checks every registered worker with a URL once, concurrently, the checks' starts spread evenly
// over spread (0: all at once) in a paced loop. Start spreads each round over half the interval: all
// at once, a fleet of 8,192 workers sent 16,384 requests (/health, then /metrics, whose vLLM bodies run
// to tens of KB) in one burst every interval, against a one-second timeout a burst that size can miss
// on a router's few cores (unhealthy marks for live workers), and while routing decisions wait for
// the same cores.
func (m *Monitor) round(ctx context.Context, spread time.Duration) {
	var specs []registry.Spec
	for _, mr := range m.r.Fleet.Mirrors() {
		if mr.Spec.URL != "" {
			specs = append(specs, mr.Spec)
		}
	}
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		if n := m.local.Swap(0); n > 0 {
			m.log.Warn("health checks could not open a socket: this host is out of descriptors or ports; the workers keep their state",
				"checks", n, "open_file_limit", netlimit.OpenFiles())
		}
	}()
	start, n := time.Now(), time.Duration(len(specs))
	for i, spec := range specs {
		// Sleeps under a millisecond are skipped: the checks then start a few at a time.
		if at := start.Add(spread * time.Duration(i) / n); spread > 0 && time.Until(at) > time.Millisecond {
			t := time.NewTimer(time.Until(at))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.check(ctx, spec)
		}()
	}
}

func (m *Monitor) check(ctx context.Context, spec registry.Spec) {
	ep, err := m.pool.Get(spec)
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	err = ep.Health(cctx)
	var met client.Metrics
	if err == nil {
		met, err = ep.ScrapeMetrics(cctx)
	}
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, client.ErrLocal) {
		m.local.Add(1) // the router's own shortage says nothing about the worker
		return
	}
	m.mu.Lock()
	if err != nil {
		m.fails[spec.ID]++
	} else {
		m.fails[spec.ID] = 0
	}
	fails := m.fails[spec.ID]
	first := !m.seen[spec.ID] && err == nil
	if first {
		m.seen[spec.ID] = true
	}
	m.mu.Unlock()

	switch {
	case err != nil && fails == m.cfg.FailThreshold:
		_ = m.r.SetHealthy(spec.ID, false, err.Error())
		// The requests it holds without having answered a byte would wait for it (a non-streamed one up to
		// the worker client's response timeout): they move to other workers now. Answers under way are
		// left to finish, or to the stream idle timeout.
		moved := m.pool.AbortPending(spec.URL)
		m.log.Warn("worker unhealthy: out of routing, its blocks leave the index", "worker", spec.ID, "err", err,
			"requests_moved", moved)
	case err == nil:
		if st, ok := m.r.Fleet.StatusOf(spec.ID); ok && !st.Healthy {
			m.log.Info("worker healthy again: resyncing", "worker", spec.ID)
			_ = m.r.SetHealthy(spec.ID, true, "")
		}
		m.applyMetrics(spec, met)
		if first {
			m.checkCompat(spec, met)
		}
	}
}

// applyMetrics feeds the worker's own KV capacity and usage to the busy thresholds, and the index's count
// of its cached blocks to the scheduler.
func (m *Monitor) applyMetrics(spec registry.Spec, met client.Metrics) {
	if spec.TotalKVBlocks == 0 && met.NumGPUBlocks > 0 {
		m.r.SetCapacity(spec.ID, met.NumGPUBlocks, 0)
	}
	total := spec.TotalKVBlocks
	if total == 0 {
		total = met.NumGPUBlocks
	}
	if total == 0 {
		return
	}
	for r := 0; r < spec.DPRanks(); r++ {
		usage := met.KVUsage
		if r < len(met.Engines) {
			usage = met.Engines[r].KVUsage
		}
		k := scoring.WorkerKey{WorkerID: spec.ID, DPRank: uint32(r)}
		m.r.SetKVUsage(k, uint64(usage*float64(total)+0.5))
		if spec.PublishesEvents() {
			// The index holds its blocks: which caches have room is the kvroute cost's.
			m.r.SyncCachedBlocks(k)
		}
	}
}

// checkCompat is the registration self-test's first half: the block size the worker reports must be the
// router's. The canary (SelfTest) checks the hashing itself.
func (m *Monitor) checkCompat(spec registry.Spec, met client.Metrics) {
	if met.BlockSize != 0 && met.BlockSize != m.r.BlockSize() {
		reason := fmt.Sprintf("worker block size %d != router block size %d: overlaps will never match", met.BlockSize, m.r.BlockSize())
		m.log.Error("worker degraded", "worker", spec.ID, "reason", reason)
		m.r.SetDegraded(spec.ID, reason)
		return
	}
	if m.cfg.SelfTest && spec.PublishesEvents() {
		m.selfTests.Go(selfTest, func() { m.SelfTest(context.Background(), spec) })
	}
}

// SelfTest sends a canary prompt of two random full blocks straight to the worker and waits for its
// BlockStored to reach the index under the router's own hashes of the canary. If it never does, the
// worker's events cannot be matched (block size, tokenizer or hashing differ) and the worker is marked
// degraded with the reason.
//
// A fresh canary is sent every quarter of the window (at most every second): a publisher that has just
// connected drops what it sends before the subscription reaches it (ZMQ's slow joiner), so a single
// canary sent at registration can be lost on a healthy worker; a later one is not.
func (m *Monitor) SelfTest(ctx context.Context, spec registry.Spec) error {
	ep, err := m.pool.Get(spec)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.SelfTestTimeout)
	defer cancel()
	resend := min(m.cfg.SelfTestTimeout/4, time.Second)
	var locals [][]uint64
	for {
		bs := m.r.BlockSize()
		toks := make([]uint32, 2*bs)
		for i := range toks {
			toks[i] = uint32(1000 + rand.IntN(100000))
		}
		locals = append(locals, m.r.HashTokens(nil, toks, ""))
		body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":1}`, m.cfg.ModelName, tokenList(toks))
		var resp client.Response
		if err := ep.Do(cctx, &client.Request{Path: "/v1/completions", Body: []byte(body)}, &resp); err != nil || resp.Status != 200 {
			if cctx.Err() != nil && len(locals) > 1 {
				break // the window closed while a later canary was out
			}
			// The canary could not run; that says nothing about hashing, so the worker is not marked.
			m.log.Info("self-test canary not served", "worker", spec.ID, "status", resp.Status, "err", err)
			return err
		}
		next := time.After(resend)
		for waiting := true; waiting; {
			for _, local := range locals {
				for _, s := range m.r.Overlap(local, nil) {
					if s.Worker.WorkerID == spec.ID && s.Blocks == uint32(len(local)) {
						m.r.SetDegraded(spec.ID, "")
						return nil
					}
				}
			}
			select {
			case <-cctx.Done():
				waiting = false
			case <-next:
				waiting = false
			case <-time.After(20 * time.Millisecond):
			}
		}
		if cctx.Err() != nil {
			break
		}
	}
	reason := fmt.Sprintf("the canary's %d blocks never matched the router's hashes within %v: block size, tokenizer or event stream differ", len(locals[0]), m.cfg.SelfTestTimeout)
	m.log.Error("worker degraded", "worker", spec.ID, "reason", reason)
	m.r.SetDegraded(spec.ID, reason)
	return fmt.Errorf("self-test: %s", reason)
}

func tokenList(toks []uint32) string {
	b := make([]byte, 0, len(toks)*7)
	b = append(b, '[')
	for i, t := range toks {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", t)
	}
	return string(append(b, ']'))
}

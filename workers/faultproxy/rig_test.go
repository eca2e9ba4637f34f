package faultproxy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/faultproxy"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

// rig is a fleet of simulated workers, each publishing its KV events through a fault proxy, and a
// router subscribed to the proxies (everything on loopback TCP).
type rig struct {
	t       *testing.T
	engine  mocker.EngineConfig
	ring    int
	hide    bool
	r       *router.Router
	workers []*simWorker
}

type simWorker struct {
	id       uint64
	mu       sync.Mutex // guards w across a restart
	w        *mocker.Worker
	px       *faultproxy.Proxy
	restarts int
}

func (s *simWorker) worker() *mocker.Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w
}

type rigOpts struct {
	workers   int
	gpuBlocks int // KV capacity per worker: small means eviction pressure
	speedup   float64
	// ringSteps is each worker's replay ring length in batches; 0 keeps vLLM's 10 000.
	ringSteps int
	// hideDisconnects makes the proxies hide a worker's disconnect from the router (a relay in between).
	hideDisconnects bool
	// identityCheck, when set, is the router's timed publisher identity check (default 30s).
	identityCheck time.Duration
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	eng := mocker.DefaultEngineConfig()
	eng.BlockSize = 16
	eng.NumGPUBlocks = o.gpuBlocks
	eng.MaxNumBatchedTokens = 2048
	eng.MaxNumSeqs = 32
	eng.SpeedupRatio = o.speedup
	rg := &rig{t: t, engine: eng, ring: o.ringSteps, hide: o.hideDisconnects}
	rcfg := router.DefaultConfig(16)
	rcfg.TickInterval = -1
	if o.identityCheck != 0 {
		rcfg.Worker.IdentityCheck = o.identityCheck
	}
	system := actors.NewSystem(nil)
	r, err := router.New(system, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	rg.r = r
	t.Cleanup(func() {
		r.Stop()
		system.Shutdown()
		for _, s := range rg.workers {
			if w := s.worker(); w != nil {
				_ = w.Close()
			}
			s.px.Close()
		}
	})
	for i := range o.workers {
		s := &simWorker{id: uint64(i + 1)}
		w, err := rg.startWorker(s)
		if err != nil {
			t.Fatal(err)
		}
		s.w = w
		px, err := faultproxy.Start(faultproxy.Config{Upstream: w.EventsEndpoint(0), UpstreamReplay: w.ReplayEndpoint(0)})
		if err != nil {
			t.Fatal(err)
		}
		s.px = px
		rg.workers = append(rg.workers, s)
		spec := registry.Spec{ID: s.id, URL: w.URL(), Events: px.Addr(), Replay: px.ReplayAddr(), BlockSize: 16,
			TotalKVBlocks: eng.NumGPUBlocks, MaxNumBatchedTokens: eng.MaxNumBatchedTokens}
		if err := r.AddWorker(spec); err != nil {
			t.Fatal(err)
		}
	}
	// Both legs of every stream are up once a probe request's batch reached the router: the proxy's SUB
	// (worker → proxy) and the router's SUB (proxy → router). Until then a probe may be lost on either
	// leg, so probes are repeated.
	wl := newWorkload(0xbeef)
	rg.poll(10*time.Second, "event streams connected", func() error {
		for _, s := range rg.workers {
			if st, _ := r.Fleet.StatusOf(s.id); st.Batches == 0 {
				if _, err := s.worker().Submit(0, mocker.Request{Prompt: wl.tokens(17), MaxTokens: 1}); err != nil {
					return err
				}
				return fmt.Errorf("worker %d: no batch through the proxy yet (proxy %+v)", s.id, s.px.Stats())
			}
		}
		return nil
	})
	return rg
}

func (rg *rig) startWorker(s *simWorker) (*mocker.Worker, error) {
	kv := mocker.DefaultKVEventsConfig()
	kv.Endpoint, kv.ReplayEndpoint = "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
	if rg.ring > 0 {
		kv.BufferSteps = rg.ring
	}
	return mocker.StartWorker(mocker.WorkerConfig{ID: int(s.id), Engine: rg.engine, DPSize: 1, KVEvents: kv})
}

// restart simulates a crash: the worker is closed (its replay ring is lost with it) and a new engine
// starts; its sequence starts again at 0 and its cache is empty. The router keeps subscribing to the same
// endpoint, the proxy's, which follows the new engine (loopback TCP on fresh ports: the proxy is
// re-pointed). A subscriber connected to the worker itself loses its connection when the worker dies; the
// proxy shows that with a cut for as long as the worker is down, unless the rig models a relay that hides
// it (hideDisconnects).
func (rg *rig) restart(s *simWorker) { rg.t.Helper(); rg.restartWith(s, nil) }

// restartWith restarts s as restart does and calls between(old) once the old engine is closed (it publishes
// nothing more) and before the new one starts: faults set there by seq see the old engine's final count.
func (rg *rig) restartWith(s *simWorker, between func(old *mocker.Worker)) {
	rg.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !rg.hide {
		// The worker is down for at least 300ms (a real restart takes seconds): long enough for the
		// router's SUB to see the disconnect.
		t0 := time.Now()
		s.px.Cut(time.Minute)
		defer func() {
			if rest := 300*time.Millisecond - time.Since(t0); rest > 0 {
				<-time.After(rest) // models downtime, not a synchronization
			}
			s.px.Cut(0)
		}()
	}
	_ = s.w.Close()
	if between != nil {
		between(s.w)
	}
	w, err := rg.startWorker(s)
	if err != nil {
		rg.t.Fatalf("restart worker %d: %v", s.id, err)
	}
	s.w = w
	s.px.SetUpstream(w.EventsEndpoint(0), w.ReplayEndpoint(0))
	s.restarts++
}

// poll calls fn until it returns nil or the deadline passes, then fails with fn's last error.
func (rg *rig) poll(d time.Duration, what string, fn func() error) {
	rg.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if f := os.Getenv("FAULTSUITE_DUMP"); f != "" {
				if out, err := os.Create(f); err == nil {
					_ = pprof.Lookup("goroutine").WriteTo(out, 2)
					out.Close()
				}
			}
			rg.t.Fatalf("%s: not reached within %v: %v", what, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// workload is a random stream of prompts with shared prefixes (so stores chain onto parents other
// requests stored) over a KV capacity far smaller than the working set (so eviction runs all the time).
type workload struct {
	rng      *rand.Rand
	prefixes [][]uint32
}

func newWorkload(seed uint64) *workload {
	rng := rand.New(rand.NewPCG(seed, 7))
	wl := &workload{rng: rng}
	for range 12 {
		wl.prefixes = append(wl.prefixes, wl.tokens(16*(1+rng.IntN(6))))
	}
	return wl
}

func (wl *workload) tokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(100 + wl.rng.IntN(50_000))
	}
	return out
}

// prompt is a shared prefix (most of the time), a random middle of 0–8 blocks and a partial tail.
func (wl *workload) prompt() []uint32 {
	var p []uint32
	if wl.rng.IntN(5) != 0 {
		p = append(p, wl.prefixes[wl.rng.IntN(len(wl.prefixes))]...)
	}
	p = append(p, wl.tokens(16*wl.rng.IntN(9)+1+wl.rng.IntN(15))...)
	return p
}

// drive submits n requests to s's current worker, at most conc at a time, each bounded by a timeout. A
// request refused or aborted because its worker is restarting is not an error here.
func (rg *rig) drive(ctx context.Context, s *simWorker, wl *workload, n, conc int) error {
	type job struct {
		prompt []uint32
		max    int
	}
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i] = job{wl.prompt(), 1 + wl.rng.IntN(24)}
	}
	sem := make(chan struct{}, conc)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, j := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w := s.worker()
			st, err := w.Submit(0, mocker.Request{Prompt: j.prompt, MaxTokens: j.max})
			if err != nil {
				return // the worker was closed under us (restart)
			}
			select {
			case <-st.Finished():
			case <-time.After(20 * time.Second):
				errs <- fmt.Errorf("worker %d: request hung", s.id)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// driveAll runs drive on every worker concurrently, each with its own workload stream.
func (rg *rig) driveAll(ctx context.Context, seed uint64, n, conc int) {
	rg.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(rg.workers))
	for i, s := range rg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rg.drive(ctx, s, newWorkload(seed+uint64(i)*1000), n, conc)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			rg.t.Fatal(err)
		}
	}
}

// settle stops the faults, waits for every worker to go idle, then sends each one fresh request: a
// batch after the last faulty one, so that a dropped or held tail shows up as a gap (vLLM has no
// heartbeat; a lost last batch is only noticed when the next one arrives).
func (rg *rig) settle() {
	rg.t.Helper()
	for _, s := range rg.workers {
		s.px.SetFaults(faultproxy.Faults{})
	}
	rg.waitIdle()
	wl := newWorkload(0xfeed)
	for _, s := range rg.workers {
		st, err := s.worker().Submit(0, mocker.Request{Prompt: wl.tokens(33), MaxTokens: 1})
		if err != nil {
			rg.t.Fatal(err)
		}
		select {
		case <-st.Finished():
		case <-time.After(10 * time.Second):
			rg.t.Fatalf("worker %d: settle request hung", s.id)
		}
	}
	rg.waitIdle()
}

func (rg *rig) waitIdle() {
	rg.t.Helper()
	rg.poll(20*time.Second, "workers idle", func() error {
		for _, s := range rg.workers {
			if !s.worker().Idle() {
				return fmt.Errorf("worker %d busy", s.id)
			}
		}
		return nil
	})
}

// converged polls until every worker's index entries equal its simulator's ground truth.
func (rg *rig) converged(d time.Duration) {
	rg.t.Helper()
	rg.poll(d, "index equals ground truth", func() error {
		rg.r.Index.Flush()
		var errs []string
		for _, s := range rg.workers {
			if err := rg.compare(s); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	})
}

// truth is one worker's ground truth, in the router's terms.
type truth struct {
	distinct int        // distinct engine hashes cached
	chains   [][]uint64 // per distinct block whose whole ancestry is cached: the local hashes root → block
	orphans  int        // cached blocks with an evicted ancestor (the index cannot hold their chain)
}

func groundTruth(w *mocker.Worker) truth {
	blocks := w.CachedBlocks(0)
	byHash := make(map[uint64]*mocker.CachedBlock, len(blocks))
	for i := range blocks {
		byHash[blocks[i].Hash] = &blocks[i]
	}
	memo := map[uint64][]uint64{}
	var chain func(h uint64, depth int) ([]uint64, bool)
	chain = func(h uint64, depth int) ([]uint64, bool) {
		if c, ok := memo[h]; ok {
			return c, c != nil
		}
		b := byHash[h]
		if b == nil || depth > 10_000 {
			return nil, false
		}
		var c []uint64
		if b.Parent != nil {
			pc, ok := chain(*b.Parent, depth+1)
			if !ok {
				memo[h] = nil
				return nil, false
			}
			c = append(c, pc...)
		}
		c = append(c, scoring.BlockHash(b.TokenIDs, nil, scoring.Seed))
		memo[h] = c
		return c, true
	}
	var t truth
	hashes := make([]uint64, 0, len(byHash))
	for h := range byHash {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool { return hashes[i] < hashes[j] })
	t.distinct = len(hashes)
	for _, h := range hashes {
		c, ok := chain(h, 0)
		if !ok {
			t.orphans++
			continue
		}
		t.chains = append(t.chains, c)
	}
	return t
}

// compare checks one worker: every cached chain scores fully for it, and the index holds as many of its
// blocks as the simulator caches.
func (rg *rig) compare(s *simWorker) error {
	w := s.worker()
	if !w.Idle() {
		return fmt.Errorf("worker %d busy", s.id)
	}
	gt := groundTruth(w)
	key := prefix.WorkerKey{WorkerID: s.id}
	var out []prefix.Score
	missing := 0
	for _, c := range gt.chains {
		out = rg.r.Index.FindMatches(c, out[:0])
		got := 0
		for _, sc := range out {
			if sc.Worker == key {
				got = int(sc.Blocks)
			}
		}
		if got != len(c) {
			missing++
		}
	}
	held := rg.r.Index.Blocks(key)
	if missing > 0 || (gt.orphans == 0 && held != gt.distinct) {
		st, _ := rg.r.Fleet.StatusOf(s.id)
		return fmt.Errorf("worker %d: %d of %d cached chains not fully indexed, index holds %d blocks, simulator caches %d (%d orphans); mirror %+v; proxy %+v",
			s.id, missing, len(gt.chains), held, gt.distinct, gt.orphans, st, s.px.Stats())
	}
	return nil
}

package natsplane

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

const testBlockSize = 16

func startTestCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startSimWorkers starts n simulated workers publishing KV events on ipc:// endpoints under a temp dir.
func startSimWorkers(t testing.TB, n, gpuBlocks int) []*mocker.Worker {
	t.Helper()
	dir := t.TempDir()
	var ws []*mocker.Worker
	for i := 0; i < n; i++ {
		kv := mocker.DefaultKVEventsConfig()
		kv.Endpoint = "ipc://" + filepath.Join(dir, fmt.Sprintf("w%d.ev", i+1))
		kv.ReplayEndpoint = "ipc://" + filepath.Join(dir, fmt.Sprintf("w%d.rp", i+1))
		eng := mocker.DefaultEngineConfig()
		eng.BlockSize = testBlockSize
		eng.NumGPUBlocks = gpuBlocks
		eng.SpeedupRatio = 1000
		w, err := mocker.StartWorker(mocker.WorkerConfig{ID: i + 1, Engine: eng, DPSize: 1, KVEvents: kv})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ws = append(ws, w)
	}
	return ws
}

// startRelay runs `kvroute relay` for a simulated worker.
func startRelay(t testing.TB, url string, w *mocker.Worker, durable bool) *Relay {
	t.Helper()
	nc := connect(t, url)
	rl, err := NewRelay(nc, RelayConfig{WorkerID: uint64(w.ID()), Events: []string{w.EventsEndpoint(0)}, Replay: []string{w.ReplayEndpoint(0)},
		Durable: durable, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return rl
}

// startStoppableRelay is startRelay (core mode) with a stop function for restart tests.
func startStoppableRelay(t testing.TB, url string, w *mocker.Worker) (stop func()) {
	t.Helper()
	rl, err := NewRelay(connect(t, url), RelayConfig{WorkerID: uint64(w.ID()), Events: []string{w.EventsEndpoint(0)}, Replay: []string{w.ReplayEndpoint(0)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rl.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// frontend is one router core fed by the NATS event plane.
type frontend struct {
	r   *router.Router
	src *Source
	nc  *nats.Conn
}

func startFrontend(t testing.TB, url string, ws []*mocker.Worker, scfg SourceConfig, mod func(*router.Config)) *frontend {
	t.Helper()
	sys := actors.NewSystem(nil)
	cfg := router.DefaultConfig(testBlockSize)
	cfg.TickInterval = -1
	if mod != nil {
		mod(&cfg)
	}
	r, err := router.New(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for _, w := range ws {
		if err := r.AddWorker(registry.Spec{ID: uint64(w.ID()), URL: w.URL(), BlockSize: testBlockSize}); err != nil {
			t.Fatal(err)
		}
	}
	nc := connect(t, url)
	src, err := NewSource(nc, fleetOf(r), scfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Stop)
	return &frontend{r: r, src: src, nc: nc}
}

// multiset of engine hashes per worker.
type truth map[uint64]map[uint64]int

func groundTruth(ws []*mocker.Worker) truth {
	out := truth{}
	for _, w := range ws {
		m := map[uint64]int{}
		for _, b := range w.CachedBlocks(0) {
			m[b.Hash]++
		}
		out[uint64(w.ID())] = m
	}
	return out
}

func indexTruth(f *frontend, ws []*mocker.Worker) truth {
	f.r.Fleet.Sync()
	out := truth{}
	for _, w := range ws {
		out[uint64(w.ID())] = map[uint64]int{}
	}
	f.r.Index.Dump(func(e prefix.DumpEntry) {
		if m := out[e.Worker.WorkerID]; m != nil {
			m[e.Block.EngineHash]++
		}
	})
	return out
}

// diff describes how got differs from want ("" when equal).
func (want truth) diff(got truth) string {
	var ids []uint64
	for id := range want {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		w, g := want[id], got[id]
		missing, extra := 0, 0
		for h, n := range w {
			if g[h] < n {
				missing += n - g[h]
			}
		}
		for h, n := range g {
			if w[h] < n {
				extra += n - w[h]
			}
		}
		if missing+extra > 0 {
			return fmt.Sprintf("worker %d: %d blocks in truth, %d indexed, %d missing, %d extra", id, len(w), len(g), missing, extra)
		}
	}
	return ""
}

// prompts is a workload of shared-prefix prompts: groups share a 64-token system prefix, requests add a
// random suffix.
type prompts struct {
	rng      *rand.Rand
	prefixes [][]uint32
}

func newPrompts(seed uint64, groups int) *prompts {
	p := &prompts{rng: rand.New(rand.NewPCG(seed, seed+1))}
	for g := 0; g < groups; g++ {
		pre := make([]uint32, 64)
		for i := range pre {
			pre[i] = uint32(1000 + g*100 + i)
		}
		p.prefixes = append(p.prefixes, pre)
	}
	return p
}

func (p *prompts) next() []uint32 {
	pre := p.prefixes[p.rng.IntN(len(p.prefixes))]
	out := append([]uint32(nil), pre...)
	for i := p.rng.IntN(48); i > 0; i-- {
		out = append(out, uint32(5000+p.rng.IntN(20000)))
	}
	return out
}

// runWorkload submits n random prompts to random workers, at most par at a time, and waits for all.
func runWorkload(t testing.TB, ws []*mocker.Worker, p *prompts, n, par int) {
	t.Helper()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		w := ws[p.rng.IntN(len(ws))]
		prompt := p.next()
		sem <- struct{}{}
		st, err := w.Submit(0, mocker.Request{Prompt: prompt, MaxTokens: 2})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			select {
			case <-st.Finished():
			case <-time.After(20 * time.Second):
			}
		}()
	}
	wg.Wait()
	testutil.Until(t, 10*time.Second, "workers idle", func() string {
		for _, w := range ws {
			if !w.Idle() {
				return fmt.Sprintf("worker %d busy", w.ID())
			}
		}
		return ""
	})
}

// converge waits until every frontend's index equals the simulators' ground truth.
func converge(t testing.TB, fs []*frontend, ws []*mocker.Worker, d time.Duration) {
	t.Helper()
	testutil.Until(t, d, "indexes equal ground truth", func() string {
		want := groundTruth(ws)
		var out string
		for i, f := range fs {
			if msg := want.diff(indexTruth(f, ws)); msg != "" {
				out += fmt.Sprintf("\nfrontend %d: %s (stats %+v)", i, msg, f.src.Stats())
			}
		}
		return out
	})
}

// atomicCounter hands out 0, 1, 2, ... to parallel benchmark goroutines.
type atomicCounter struct{ n atomic.Uint64 }

func (c *atomicCounter) add() uint64 { return c.n.Add(1) - 1 }

// fleetOf wires a router's fleet and index to a Source, as cmd/kvroute does.
func fleetOf(r *router.Router) Fleet {
	return Fleet{Sink: r.Fleet.NewInjector(), Index: r.Index, Barrier: r.Fleet.Sync}
}

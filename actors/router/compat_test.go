package router

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// The compatibility matrix: every publisher dialect × connect/bind × dp 1/2 × restart/gap/duplicate,
// through real ZMQ sockets into the router, each checked against what the publishing engines hold.

// freePorts returns a base port such that base..base+n-1 are free now, below the ephemeral range
// (testutil.PortRange): the publishers bind them after.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	return testutil.PortRange(t, n)
}

// engine is one dp rank's publishing engine: a kvevents.Publisher writing its dialect, with faults on
// demand, and the blocks it holds.
type engine struct {
	t       *testing.T
	cfg     kvevents.PublisherConfig
	dialect kvevents.Dialect
	rank    uint32
	p       *kvevents.Publisher
	cancel  context.CancelFunc
	// skip and twice name a seq to withhold from the wire (kept for replay) or to send twice; -1: none.
	skip, twice atomic.Int64
}

func startEngine(t *testing.T, cfg kvevents.PublisherConfig, d kvevents.Dialect, rank uint32) *engine {
	t.Helper()
	e := &engine{t: t, cfg: cfg, dialect: d, rank: rank}
	e.skip.Store(-1)
	e.twice.Store(-1)
	e.cfg.SkipSend = func(seq uint64) bool { return int64(seq) == e.skip.Load() }
	e.cfg.SendTwice = func(seq uint64) bool { return int64(seq) == e.twice.Load() }
	e.start()
	t.Cleanup(e.stop)
	return e
}

// start runs the publisher; a bind that fails because the previous engine's port is still being
// released is retried.
func (e *engine) start() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := kvevents.NewPublisher(e.cfg)
		if err != nil {
			e.t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- p.Run(ctx) }()
		select {
		case <-p.Ready():
			e.p, e.cancel = p, cancel
			return
		case err := <-errc:
			cancel()
			if time.Now().After(deadline) {
				e.t.Fatalf("publisher: %v", err)
			}
			time.Sleep(5 * time.Millisecond) // the old socket's port is released asynchronously by libzmq
		}
	}
}

func (e *engine) stop() {
	if e.cancel != nil {
		e.cancel()
		<-e.p.Done()
		e.cancel = nil
	}
}

// restart replaces the engine by a new incarnation: same endpoints, sequence from 0, nothing cached.
func (e *engine) restart() {
	e.stop()
	e.start()
}

// nextSeq is the seq of the next batch published, once every batch published so far has been sent.
func (e *engine) nextSeq() int64 { return int64(e.p.Stats().Published) }

// store publishes one BlockStored of blocks (4 tokens each) with engine hashes from hash on.
func (e *engine) store(parent uint64, hasParent bool, hash uint64, tokens []uint32) {
	e.t.Helper()
	hashes := make([]uint64, len(tokens)/4)
	for i := range hashes {
		hashes[i] = hash + uint64(i)
	}
	e.publish(kvevents.Event{Kind: kvevents.Stored, BlockHashes: hashes, ParentHash: parent, HasParent: hasParent,
		TokenIDs: tokens, BlockSize: 4, Medium: "GPU"})
}

func (e *engine) remove(hash uint64) {
	e.t.Helper()
	e.publish(kvevents.Event{Kind: kvevents.Removed, BlockHashes: []uint64{hash}, Medium: "GPU"})
}

func (e *engine) publish(ev kvevents.Event) {
	e.t.Helper()
	b := &kvevents.Batch{TS: 1, HasDPRank: true, DPRank: e.rank, Events: []kvevents.Event{ev}}
	if err := e.p.PublishRaw(context.Background(), kvevents.AppendDialect(nil, b, e.dialect)); err != nil {
		e.t.Fatal(err)
	}
}

// prompt is a 2-block prompt distinct per (rank, n).
func prompt(rank uint32, n int) []uint32 {
	out := make([]uint32, 8)
	for i := range out {
		out[i] = uint32(1000*(int(rank)+1) + 100*n + i)
	}
	return out
}

func overlapAt(r *Router, tokens []uint32, id uint64, rank uint32) uint32 {
	for _, s := range r.Overlap(r.HashTokens(nil, tokens, ""), nil) {
		if s.Worker.WorkerID == id && s.Worker.DPRank == rank {
			return s.Blocks
		}
	}
	return 0
}

// compatCase is one cell of the matrix.
type compatCase struct {
	dialect kvevents.Dialect
	bind    bool
	dp      int
	fault   string
}

func TestCompatMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("sixty router and publisher setups")
	}
	for _, d := range kvevents.Dialects() {
		for _, bind := range []bool{false, true} {
			for _, dp := range []int{1, 2} {
				for _, fault := range []string{"restart", "gap", "duplicate"} {
					tc := compatCase{dialect: d, bind: bind, dp: dp, fault: fault}
					mode := "connect"
					if bind {
						mode = "bind"
					}
					t.Run(fmt.Sprintf("%v/%s/dp%d/%s", d, mode, dp, fault), func(t *testing.T) { runCompat(t, tc) })
				}
			}
		}
	}
}

func runCompat(t *testing.T, tc compatCase) {
	const id = 1
	system := actors.NewSystem(nil)
	cfg := DefaultConfig(4)
	cfg.Scoring.Mode = scoring.ModeKV
	cfg.Worker.InitialBackoff, cfg.Worker.BackoffWindow = 10*time.Millisecond, time.Second
	cfg.Worker.ReplayTimeout = 300 * time.Millisecond
	replayBase := freePorts(t, tc.dp)
	spec := registry.Spec{ID: id, DPSize: tc.dp, Replay: "tcp://127.0.0.1:" + strconv.Itoa(replayBase)}
	var eventsBase int
	if tc.bind {
		for r := 0; r < tc.dp; r++ {
			cfg.Worker.BindEndpoints = append(cfg.Worker.BindEndpoints, "tcp://127.0.0.1:*")
		}
		spec.Topic = "kv@127.0.0.1:8001@m"
	} else {
		eventsBase = freePorts(t, tc.dp)
		spec.Events = "tcp://127.0.0.1:" + strconv.Itoa(eventsBase)
	}
	r, err := New(system, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(); system.Shutdown() })

	engines := make([]*engine, tc.dp)
	for rank := range engines {
		pc := kvevents.PublisherConfig{ReplayEndpoint: "tcp://127.0.0.1:" + strconv.Itoa(replayBase+rank), Topic: spec.Topic}
		if tc.bind {
			pc.Endpoint = r.Fleet.BindAddrs()[rank] // vLLM's rank r connects to the router's port + r
		} else {
			pc.Endpoint, pc.Bind = "tcp://127.0.0.1:"+strconv.Itoa(eventsBase+rank), true
		}
		engines[rank] = startEngine(t, pc, tc.dialect, uint32(rank))
	}
	if err := r.AddWorker(spec); err != nil {
		t.Fatal(err)
	}

	// Each rank caches prompt 0: its first block (sent until it is through ZMQ's slow-joiner window; a
	// repeat is one more reference), then the second under it as parent.
	hashOf := func(rank, n int) uint64 { return uint64(1<<20*(rank+1) + 16*n) }
	for rank, e := range engines {
		rk, p, h := uint32(rank), prompt(uint32(rank), 0), hashOf(rank, 0)
		testutil.Eventually(t, "rank's first block", func() bool {
			e.store(0, false, h, p[:4])
			return overlapAt(r, p, id, rk) >= 1
		})
		e.store(h, true, h+1, p[4:])
		testutil.Eventually(t, "rank's second block", func() bool { return overlapAt(r, p, id, rk) == 2 })
	}
	// held[rank] are the prompts each rank's engine holds whole.
	held := make([][]int, tc.dp)
	for rank := range held {
		held[rank] = []int{0}
	}

	e0 := engines[0]
	switch tc.fault {
	case "gap": // the first batch of prompt 1 never reaches the wire; the next one shows the gap
		p, h := prompt(0, 1), hashOf(0, 1)
		e0.skip.Store(e0.nextSeq())
		e0.store(0, false, h, p[:4])
		e0.store(h, true, h+1, p[4:])
		testutil.Eventually(t, "the withheld batch replayed", func() bool { return overlapAt(r, p, id, 0) == 2 })
		held[0] = append(held[0], 1)
		if st, _ := r.Fleet.StatusOf(id); st.Gaps == 0 || st.Replays == 0 {
			t.Fatalf("gap not seen: %+v", st)
		}
	case "duplicate": // prompt 1's second batch arrives twice; a single removal must still drop it
		p, h := prompt(0, 1), hashOf(0, 1)
		e0.store(0, false, h, p[:4])
		// Once the first block is indexed, it was sent: the next seq is the second batch's.
		testutil.Eventually(t, "prompt 1's first block", func() bool { return overlapAt(r, p, id, 0) == 1 })
		e0.twice.Store(e0.nextSeq())
		e0.store(h, true, h+1, p[4:])
		testutil.Eventually(t, "prompt 1 indexed", func() bool { return overlapAt(r, p, id, 0) == 2 })
		testutil.Eventually(t, "the duplicate counted", func() bool { st, _ := r.Fleet.StatusOf(id); return st.DuplicateBatches > 0 })
		e0.remove(h + 1)
		testutil.Eventually(t, "the removal", func() bool { return overlapAt(r, p, id, 0) == 1 })
	case "restart": // rank 0's engine restarts: its blocks go, rank 1's stay
		e0.restart()
		p, h := prompt(0, 2), hashOf(0, 2)
		testutil.Eventually(t, "the new engine's block", func() bool {
			e0.store(0, false, h, p[:4])
			return overlapAt(r, p, id, 0) >= 1
		})
		e0.store(h, true, h+1, p[4:])
		testutil.Eventually(t, "the new engine's prompt", func() bool { return overlapAt(r, p, id, 0) == 2 })
		testutil.Eventually(t, "the old engine's blocks dropped", func() bool { return overlapAt(r, prompt(0, 0), id, 0) == 0 })
		held[0] = []int{2}
		if st, _ := r.Fleet.StatusOf(id); st.Resets == 0 {
			t.Fatalf("restart not counted: %+v", st)
		}
	}

	// Against the engines' state: every prompt a rank holds is indexed whole on that rank only, and a
	// request for it is routed to that rank.
	r.Index.Flush()
	for rank := range engines {
		for _, n := range held[rank] {
			p := prompt(uint32(rank), n)
			for other := range engines {
				want := uint32(0)
				if other == rank {
					want = 2
				}
				if got := overlapAt(r, p, id, uint32(other)); got != want {
					t.Fatalf("prompt %d of rank %d: rank %d overlap %d, want %d", n, rank, other, got, want)
				}
			}
			res, err := r.Route(context.Background(), &RouteRequest{ID: fmt.Sprintf("req-%d-%d", rank, n), Tokens: p})
			if err != nil {
				t.Fatal(err)
			}
			if res.Worker.WorkerID != id || res.Worker.DPRank != uint32(rank) || res.OverlapBlocks != 2 {
				t.Fatalf("prompt %d of rank %d routed to %+v with overlap %d", n, rank, res.Worker, res.OverlapBlocks)
			}
			_ = r.Free(fmt.Sprintf("req-%d-%d", rank, n))
		}
	}
	if st, _ := r.Fleet.StatusOf(id); st.RejectedStores != 0 || st.DecodeErrors != 0 || st.OutOfRangeRanks != 0 || st.State != "ready" {
		t.Fatalf("status %+v", st)
	}
}

// gathered returns the value of a metric family's first sample (counter or gauge) matching the label
// value, if any.
func gathered(t *testing.T, reg *prometheus.Registry, name, label string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// Nothing silent: a worker whose publisher uses another topic is marked degraded with the reason (its
// topic and the unregistered ones seen) within the grace period, and /metrics counts the messages; a
// batch naming a dp rank the worker does not have is counted, not indexed, and degrades the worker too.
func TestEventProblemsAreVisible(t *testing.T) {
	system := actors.NewSystem(nil)
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig(4)
	cfg.Registerer = reg
	cfg.Worker.BindEndpoints = []string{"tcp://127.0.0.1:*"}
	cfg.Worker.Grace = 300 * time.Millisecond
	r, err := New(system, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(); system.Shutdown() })

	wrong := startEngine(t, kvevents.PublisherConfig{Endpoint: r.Fleet.BindAddr(), Topic: "kv@127.0.0.1:8001@typo"}, kvevents.DialectVLLM, 0)
	if err := r.AddWorker(registry.Spec{ID: 1, Topic: "kv@127.0.0.1:8001@m"}); err != nil {
		t.Fatal(err)
	}
	// A connect-mode worker with one rank whose engine stamps rank 3.
	base := freePorts(t, 1)
	rank3 := startEngine(t, kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:" + strconv.Itoa(base), Bind: true}, kvevents.DialectVLLM, 3)
	if err := r.AddWorker(registry.Spec{ID: 2, Events: "tcp://127.0.0.1:" + strconv.Itoa(base)}); err != nil {
		t.Fatal(err)
	}
	// A worker whose endpoint nobody serves, and one whose engine is connected but idle (publishes
	// nothing, as vLLM does until blocks change).
	ports := freePorts(t, 2)
	startEngine(t, kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:" + strconv.Itoa(ports+1), Bind: true}, kvevents.DialectVLLM, 0)
	for id, port := range map[uint64]int{3: ports, 4: ports + 1} {
		if err := r.AddWorker(registry.Spec{ID: id, Events: "tcp://127.0.0.1:" + strconv.Itoa(port)}); err != nil {
			t.Fatal(err)
		}
	}
	p := prompt(0, 0)
	start := time.Now()
	testutil.Eventually(t, "three workers degraded", func() bool {
		wrong.store(0, false, 1, p)
		rank3.store(0, false, 1, p)
		s1, _ := r.Fleet.StatusOf(1)
		s2, _ := r.Fleet.StatusOf(2)
		s3, _ := r.Fleet.StatusOf(3)
		return s1.Degraded != "" && s2.Degraded != "" && s3.Degraded != ""
	})
	r.Fleet.Audit(time.Now().Add(time.Hour))
	if s3, _ := r.Fleet.StatusOf(3); !strings.Contains(s3.Degraded, "never connected") {
		t.Fatalf("unserved endpoint: %+v", s3)
	}
	if s4, _ := r.Fleet.StatusOf(4); s4.Degraded != "" {
		t.Fatalf("a connected idle worker was marked: %+v", s4)
	}
	t.Logf("degraded %v after registration (grace %v)", time.Since(start).Round(time.Millisecond), cfg.Worker.Grace)
	s1, _ := r.Fleet.StatusOf(1)
	if s1.State != "connecting" || s1.Topic != "kv@127.0.0.1:8001@m" ||
		!strings.Contains(s1.Degraded, `topic "kv@127.0.0.1:8001@m"`) || !strings.Contains(s1.Degraded, "kv@127.0.0.1:8001@typo") {
		t.Fatalf("wrong-topic worker: %+v", s1)
	}
	s2, _ := r.Fleet.StatusOf(2)
	if s2.OutOfRangeRanks == 0 || s2.IndexedBlocks != 0 || !strings.Contains(s2.Degraded, "dp rank >= dp_size 1") {
		t.Fatalf("out-of-range worker: %+v", s2)
	}
	if v, ok := gathered(t, reg, "kvroute_kv_events_unknown_topic_total", ""); !ok || v == 0 {
		t.Fatalf("unknown topics on /metrics: %v %v", v, ok)
	}
	if v, ok := gathered(t, reg, "kvroute_worker_kv_event_out_of_range_rank_total", "2"); !ok || v == 0 {
		t.Fatalf("out-of-range ranks on /metrics: %v %v", v, ok)
	}
	for _, id := range []string{"1", "2"} {
		if v, ok := gathered(t, reg, "kvroute_worker_kv_events_degraded", id); !ok || v != 1 {
			t.Fatalf("worker %s degraded gauge %v %v", id, v, ok)
		}
	}
}

// A block offloaded to host memory (medium "CPU") is not device cache: not credited, counted; its
// eviction from host memory leaves the device copy.
func TestOffloadedBlocksNotDeviceCache(t *testing.T) {
	r := newRouter(t, 4)
	base := freePorts(t, 1)
	e := startEngine(t, kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:" + strconv.Itoa(base), Bind: true}, kvevents.DialectVLLMArray, 0)
	if err := r.AddWorker(registry.Spec{ID: 1, Events: "tcp://127.0.0.1:" + strconv.Itoa(base)}); err != nil {
		t.Fatal(err)
	}
	dev, host := prompt(0, 0), prompt(0, 1)
	testutil.Eventually(t, "the device block", func() bool {
		e.store(0, false, 10, dev[:4])
		return overlapOf(r, dev, 1) == 1
	})
	e.publish(kvevents.Event{Kind: kvevents.Stored, BlockHashes: []uint64{20}, TokenIDs: host[:4], BlockSize: 4, Medium: "CPU"})
	e.publish(kvevents.Event{Kind: kvevents.Removed, BlockHashes: []uint64{10}, Medium: "CPU"})
	testutil.Eventually(t, "both host events counted", func() bool { st, _ := r.Fleet.StatusOf(1); return st.OtherTierEvents == 2 })
	if overlapOf(r, host, 1) != 0 || overlapOf(r, dev, 1) != 1 {
		t.Fatalf("host block credited (%d) or device copy removed (%d)", overlapOf(r, host, 1), overlapOf(r, dev, 1))
	}
}

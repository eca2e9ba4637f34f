package router

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// goldenHex reads one of kvevents' golden byte examples (vLLM's event encoding of known inputs).
func goldenHex(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "workers", "kvevents", "testdata", name+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type pub struct {
	p      *kvevents.Publisher
	cancel context.CancelFunc
}

func startPublisher(t *testing.T, endpoint, replay string, layout kvevents.Layout, skip func(uint64) bool) *pub {
	t.Helper()
	return startPub(t, kvevents.PublisherConfig{Endpoint: endpoint, ReplayEndpoint: replay, Layout: layout, SkipSend: skip})
}

// startTopicPub starts a publisher of topic connecting to a bind address, with a replay endpoint of its
// own, stopped when the test ends.
func startTopicPub(t *testing.T, addr, topic string) *pub {
	t.Helper()
	p := startPub(t, kvevents.PublisherConfig{Endpoint: addr, ReplayEndpoint: "tcp://127.0.0.1:*", Topic: topic})
	t.Cleanup(p.stop)
	return p
}

// startPub runs a publisher until stop.
func startPub(t *testing.T, cfg kvevents.PublisherConfig) *pub {
	t.Helper()
	p, err := kvevents.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = p.Run(ctx) }()
	select {
	case <-p.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("publisher not ready")
	}
	return &pub{p: p, cancel: cancel}
}

func (p *pub) stop() {
	p.cancel()
	<-p.p.Done()
}

func (p *pub) publish(t *testing.T, b *kvevents.Batch) {
	t.Helper()
	if err := p.p.Publish(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func stored(parent uint64, hasParent bool, hashes []uint64, tokens []uint32) *kvevents.Batch {
	return &kvevents.Batch{TS: 1, HasDPRank: true, Events: []kvevents.Event{{
		Kind: kvevents.Stored, BlockHashes: hashes, ParentHash: parent, HasParent: hasParent,
		TokenIDs: tokens, BlockSize: 4, Medium: "GPU",
	}}}
}

func overlapOf(r *Router, tokens []uint32, id uint64) uint32 {
	for _, s := range r.Overlap(r.HashTokens(nil, tokens, ""), nil) {
		if s.Worker.WorkerID == id {
			return s.Blocks
		}
	}
	return 0
}

func newRouter(t *testing.T, blockSize int) *Router {
	t.Helper()
	cfg := DefaultConfig(blockSize)
	cfg.Worker.InitialBackoff = 10 * time.Millisecond
	cfg.Worker.BackoffWindow = time.Second
	return startRouter(t, cfg)
}

// startRouter starts a router of cfg in an actor system of its own, both stopped at the test's end.
func startRouter(t *testing.T, cfg Config) *Router {
	t.Helper()
	system := actors.NewSystem(nil)
	r, err := New(system, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Stop()
		system.Shutdown()
	})
	return r
}

// decodeGolden decodes a spec byte example and checks that the encoder reproduces it, so publishing the
// decoded batch puts exactly the spec's bytes on the wire.
func decodeGolden(t *testing.T, name string, layout kvevents.Layout) *kvevents.Batch {
	t.Helper()
	raw := goldenHex(t, name)
	var b kvevents.Batch
	if err := kvevents.Decode(raw, &b); err != nil {
		t.Fatal(err)
	}
	if got := kvevents.AppendBatch(nil, &b, layout); !bytes.Equal(got, raw) {
		t.Fatalf("%s: re-encoded bytes differ from the spec example", name)
	}
	return &b
}

func TestGoldenBytesOverZMQBothLayouts(t *testing.T) {
	r := newRouter(t, 4)
	for i, tc := range []struct {
		golden string
		layout kvevents.Layout
	}{{"stored_map", kvevents.LayoutMap}, {"stored_array", kvevents.LayoutArray}} {
		id := uint64(i + 1)
		p := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", tc.layout, nil)
		defer p.stop()
		if err := r.AddWorker(registry.Spec{ID: id, Events: p.p.Addr(), Replay: p.p.ReplayAddr()}); err != nil {
			t.Fatal(err)
		}
		// The golden block: tokens 1..4 with engine hash 0xdab89baa7b5857c0, then a child 5..8.
		p.publish(t, decodeGolden(t, tc.golden, tc.layout))
		p.publish(t, stored(0xdab89baa7b5857c0, true, []uint64{77}, []uint32{5, 6, 7, 8}))
		testutil.Eventually(t, tc.golden+" overlap", func() bool { return overlapOf(r, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}, id) == 2 })
		if got := overlapOf(r, []uint32{1, 2, 3, 4, 9, 9, 9, 9}, id); got != 1 {
			t.Fatalf("%s: diverging second block: overlap %d, want 1", tc.golden, got)
		}
		st, _ := r.Fleet.StatusOf(id)
		if st.IndexedBlocks != 2 || st.State != "ready" || st.LastSequence != 1 {
			t.Fatalf("%s: status %+v", tc.golden, st)
		}
	}
}

func TestDroppedBatchRecoveredThroughReplay(t *testing.T) {
	r := newRouter(t, 4)
	dropped := func(seq uint64) bool { return seq == 2 }
	p := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", kvevents.LayoutMap, dropped)
	defer p.stop()
	if err := r.AddWorker(registry.Spec{ID: 9, Events: p.p.Addr(), Replay: p.p.ReplayAddr()}); err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, 16)
	for i := range tokens {
		tokens[i] = uint32(100 + i)
	}
	// seq 0..3 store a 4-block chain one block at a time; seq 2 never goes out live.
	for i := 0; i < 4; i++ {
		p.publish(t, stored(uint64(i), i > 0, []uint64{uint64(i + 1)}, tokens[4*i:4*i+4]))
	}
	testutil.Eventually(t, "replayed chain", func() bool { return overlapOf(r, tokens, 9) == 4 })
	st, _ := r.Fleet.StatusOf(9)
	if st.Replays == 0 || st.RejectedStores != 0 {
		t.Fatalf("status after gap: %+v", st)
	}
}

func TestRestartedPublisherClearsWorker(t *testing.T) {
	dir := t.TempDir()
	ep, rep := "ipc://"+filepath.Join(dir, "ev"), "ipc://"+filepath.Join(dir, "rep")
	r := newRouter(t, 4)
	p := startPublisher(t, ep, rep, kvevents.LayoutMap, nil)
	if err := r.AddWorker(registry.Spec{ID: 3, Events: ep, Replay: rep}); err != nil {
		t.Fatal(err)
	}
	old := []uint32{1, 1, 1, 1, 2, 2, 2, 2}
	p.publish(t, stored(0, false, []uint64{10}, old[:4]))
	p.publish(t, stored(10, true, []uint64{11}, old[4:]))
	testutil.Eventually(t, "old chain", func() bool { return overlapOf(r, old, 3) == 2 })
	p.stop()

	// The engine restarts: a new publisher counts from 0 again and knows nothing of the old blocks.
	p2 := startPublisher(t, ep, rep, kvevents.LayoutMap, nil)
	defer p2.stop()
	fresh := []uint32{7, 7, 7, 7}
	p2.publish(t, stored(0, false, []uint64{20}, fresh))
	p2.publish(t, stored(20, true, []uint64{21}, []uint32{8, 8, 8, 8}))
	testutil.Eventually(t, "fresh chain after restart", func() bool {
		return overlapOf(r, []uint32{7, 7, 7, 7, 8, 8, 8, 8}, 3) == 2 && overlapOf(r, old, 3) == 0
	})
	st, _ := r.Fleet.StatusOf(3)
	if st.Resets == 0 || st.IndexedBlocks != 2 {
		t.Fatalf("status after restart: %+v", st)
	}
}

func TestRemoveWorkerDropsBlocks(t *testing.T) {
	r := newRouter(t, 4)
	p := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", kvevents.LayoutArray, nil)
	defer p.stop()
	if err := r.AddWorker(registry.Spec{ID: 5, Events: p.p.Addr(), Replay: p.p.ReplayAddr()}); err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(registry.Spec{ID: 5}); err == nil {
		t.Fatal("duplicate worker accepted")
	}
	toks := []uint32{4, 4, 4, 4}
	p.publish(t, stored(0, false, []uint64{1}, toks))
	testutil.Eventually(t, "indexed", func() bool { return overlapOf(r, toks, 5) == 1 })
	if err := r.RemoveWorker(5); err != nil {
		t.Fatal(err)
	}
	if got := overlapOf(r, toks, 5); got != 0 {
		t.Fatalf("removed worker still scores %d", got)
	}
	if _, ok := r.Fleet.StatusOf(5); ok {
		t.Fatal("removed worker still listed")
	}
	if r.Index.Size() != 0 {
		t.Fatalf("index holds %d entries after removal", r.Index.Size())
	}
	if err := r.RemoveWorker(5); err == nil {
		t.Fatal("second removal succeeded")
	}
}

func TestResyncReplaysFromZero(t *testing.T) {
	r := newRouter(t, 4)
	p := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", kvevents.LayoutMap, nil)
	defer p.stop()
	if err := r.AddWorker(registry.Spec{ID: 6, Events: p.p.Addr(), Replay: p.p.ReplayAddr()}); err != nil {
		t.Fatal(err)
	}
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	p.publish(t, stored(0, false, []uint64{1}, toks[:4]))
	p.publish(t, stored(1, true, []uint64{2}, toks[4:]))
	testutil.Eventually(t, "indexed", func() bool { return overlapOf(r, toks, 6) == 2 })
	if err := r.Fleet.Resync(6); err != nil {
		t.Fatal(err)
	}
	// The restarted subscriber replays seq 0.. from the worker's buffer: same picture, no doubled refcounts.
	testutil.Eventually(t, "resynced", func() bool { return overlapOf(r, toks, 6) == 2 })
	r.Index.Flush()
	if n := r.Index.Blocks(prefix.WorkerKey{WorkerID: 6}); n != 2 {
		t.Fatalf("%d blocks after resync, want 2", n)
	}
	// One removal must now drop the block (a doubled refcount would keep it).
	p.publish(t, &kvevents.Batch{HasDPRank: true, Events: []kvevents.Event{{Kind: kvevents.Removed, BlockHashes: []uint64{2}, Medium: "GPU"}}})
	testutil.Eventually(t, "removal", func() bool { return overlapOf(r, toks, 6) == 1 })
}

// Publishers that connect to the router (vLLM with a connect-style endpoint, llm-d): one bound SUB
// socket, batches attributed by topic.
func TestBindModeAttributesByTopic(t *testing.T) {
	system := actors.NewSystem(nil)
	cfg := DefaultConfig(4)
	cfg.Worker.BindEndpoints = []string{"tcp://127.0.0.1:*"}
	r, err := New(system, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.Stop(); system.Shutdown() }()
	addr := r.Fleet.BindAddr()
	if addr == "" {
		t.Fatal("no bind address")
	}
	topics := []string{kvevents.VLLMTopic("127.0.0.1:8001", "m"), kvevents.VLLMTopic("127.0.0.1:8002", "m")}
	var pubs []*pub
	for i, topic := range topics {
		pp := startTopicPub(t, addr, topic)
		pubs = append(pubs, pp)
		if err := r.AddWorker(registry.Spec{ID: uint64(10 + i), Topic: topic, Replay: pp.p.ReplayAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.AddWorker(registry.Spec{ID: 99, Topic: topics[0]}); err == nil {
		t.Fatal("second worker on a taken topic accepted")
	}
	a, b := []uint32{1, 1, 1, 1}, []uint32{2, 2, 2, 2}
	// Keep publishing until the connect-side publishers are through ZMQ's slow-joiner window.
	testutil.Eventually(t, "both topics indexed", func() bool {
		pubs[0].publish(t, stored(0, false, []uint64{5}, a))
		pubs[1].publish(t, stored(0, false, []uint64{6}, b))
		return overlapOf(r, a, 10) == 1 && overlapOf(r, b, 11) == 1
	})
	if overlapOf(r, a, 11) != 0 || overlapOf(r, b, 10) != 0 {
		t.Fatal("batches attributed to the wrong worker")
	}
	if err := r.RemoveWorker(10); err != nil {
		t.Fatal(err)
	}
	if overlapOf(r, a, 10) != 0 {
		t.Fatal("removed bound worker still indexed")
	}
}

// With CURVE on, the router takes a worker's events only from the holder of the worker's secret key:
// a rogue publisher at the worker's address (another key, or none) injects nothing.
func TestCurveKeepsRoguePublishersOut(t *testing.T) {
	r := newRouter(t, 4)
	workerPub, workerSec, err := kvevents.NewCurveKeypair()
	if err != nil {
		t.Fatal(err)
	}
	good, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*", CurveSecretKey: workerSec})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = good.Run(ctx) }()
	<-good.Ready()
	if err := r.AddWorker(registry.Spec{ID: 1, Events: good.Addr(), Replay: good.ReplayAddr(), CurveKey: workerPub}); err != nil {
		t.Fatal(err)
	}
	rogue := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", kvevents.LayoutMap, nil)
	defer rogue.stop()
	// Worker 2 claims the rogue's address but carries worker 1's public key: nothing may arrive.
	if err := r.AddWorker(registry.Spec{ID: 2, Events: rogue.p.Addr(), Replay: rogue.p.ReplayAddr(), CurveKey: workerPub}); err != nil {
		t.Fatal(err)
	}
	toks, evil := []uint32{1, 2, 3, 4}, []uint32{6, 6, 6, 6}
	testutil.Eventually(t, "authenticated events", func() bool {
		_ = good.Publish(ctx, stored(0, false, []uint64{1}, toks))
		rogue.publish(t, stored(0, false, []uint64{9}, evil))
		return overlapOf(r, toks, 1) == 1
	})
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		rogue.publish(t, stored(0, false, []uint64{9}, evil))
		time.Sleep(10 * time.Millisecond)
	}
	if overlapOf(r, evil, 2) != 0 || r.Index.Size() != 1 {
		t.Fatalf("rogue publisher injected events: size %d", r.Index.Size())
	}
}

// A worker whose events stop while it is sent requests is predicted from routing history alone, until
// its events resume and a resync completes.
func TestPerWorkerDegradation(t *testing.T) {
	system := actors.NewSystem(nil)
	cfg := DefaultConfig(4)
	cfg.TickInterval = -1
	cfg.EventsStaleAfter = 150 * time.Millisecond
	cfg.Worker.InitialBackoff, cfg.Worker.BackoffWindow = 10*time.Millisecond, time.Second
	r, err := New(system, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.Stop(); system.Shutdown() }()
	p := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", kvevents.LayoutMap, nil)
	defer p.stop()
	if err := r.AddWorker(registry.Spec{ID: 1, Events: p.p.Addr(), Replay: p.p.ReplayAddr()}); err != nil {
		t.Fatal(err)
	}
	first := []uint32{1, 2, 3, 4}
	p.publish(t, stored(0, false, []uint64{1}, first))
	testutil.Eventually(t, "first batch", func() bool { return overlapOf(r, first, 1) == 1 })

	// Requests go out; the worker's stream falls silent.
	if _, err := r.Route(context.Background(), &RouteRequest{ID: "a", Tokens: []uint32{7, 7, 7, 7, 8, 8, 8, 8}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	r.Tick()
	if st, _ := r.Fleet.StatusOf(1); st.Prediction != "approximate" {
		t.Fatalf("prediction %q after the stream stopped", st.Prediction)
	}
	// Now its routed prompts are predicted from history.
	hist := []uint32{9, 9, 9, 9, 10, 10, 10, 10}
	if _, err := r.Route(context.Background(), &RouteRequest{ID: "b", Tokens: hist}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "routing history indexed", func() bool { return overlapOf(r, hist, 1) == 2 })

	// Events resume: resync drops the history and rebuilds from the worker's replay buffer.
	p.publish(t, stored(1, true, []uint64{2}, []uint32{5, 6, 7, 8}))
	testutil.Eventually(t, "events resumed", func() bool {
		r.Tick()
		st, _ := r.Fleet.StatusOf(1)
		return st.Prediction == "events"
	})
	testutil.Eventually(t, "resynced", func() bool {
		return overlapOf(r, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, 1) == 2 && overlapOf(r, hist, 1) == 0
	})
}

// TestSaltedChainsOverZMQ: vLLM puts a request's cache_salt in its first block's extra keys; the worker's
// blocks of that chain, continuations included, are re-keyed in the salt's namespace, so only requests of
// the same namespace match them, and unsalted chains keep matching unsalted requests.
func TestSaltedChainsOverZMQ(t *testing.T) {
	r := newRouter(t, 4)
	p := startPublisher(t, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", kvevents.LayoutMap, nil)
	defer p.stop()
	if err := r.AddWorker(registry.Spec{ID: 5, Events: p.p.Addr(), Replay: p.p.ReplayAddr()}); err != nil {
		t.Fatal(err)
	}
	salted := stored(0, false, []uint64{100}, []uint32{1, 2, 3, 4})
	salted.Events[0].ExtraKeys = [][]kvevents.ExtraKey{{{Kind: kvevents.ExtraString, Str: "tenant-a"}}}
	p.publish(t, salted)
	p.publish(t, stored(100, true, []uint64{101}, []uint32{5, 6, 7, 8})) // continuation: inherits the salt
	p.publish(t, stored(0, false, []uint64{200}, []uint32{9, 9, 9, 9}))  // unsalted chain
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	ns := func(tokens []uint32, namespace string) uint32 {
		for _, s := range r.Overlap(r.HashSalted(nil, tokens, "", namespace), nil) {
			if s.Worker.WorkerID == 5 {
				return s.Blocks
			}
		}
		return 0
	}
	testutil.Eventually(t, "salted chain", func() bool { return ns(prompt, "tenant-a") == 2 && ns([]uint32{9, 9, 9, 9}, "") == 1 })
	if got := ns(prompt, ""); got != 0 {
		t.Fatalf("unsalted request matches %d salted blocks", got)
	}
	if got := ns(prompt, "tenant-b"); got != 0 {
		t.Fatalf("another namespace matches %d blocks", got)
	}
	res, err := r.Route(context.Background(), &RouteRequest{ID: "s", Tokens: prompt, CacheNamespace: "tenant-a"})
	if err != nil || res.OverlapBlocks != 2 {
		t.Fatalf("route in the namespace: %+v, %v", res, err)
	}
	// Removing the salted blocks forgets their salt: a later unsalted chain under the same engine hash
	// (a new engine incarnation would reuse none, but the map must not grow) is re-keyed unsalted.
	p.publish(t, &kvevents.Batch{TS: 1, HasDPRank: true, Events: []kvevents.Event{{Kind: kvevents.Removed, BlockHashes: []uint64{100, 101}, Medium: "GPU"}}})
	p.publish(t, stored(0, false, []uint64{100}, []uint32{1, 2, 3, 4}))
	testutil.Eventually(t, "unsalted after removal", func() bool { return ns(prompt[:4], "") == 1 && ns(prompt, "tenant-a") == 0 })
}

// TestBindSocketsShared: a second router (a model's prefill core, or another model) sharing the first's
// bind sockets (Worker.BindShare) binds nothing of its own; each router's topic-attributed workers get
// their own batches from the shared sockets, a topic registered on one router is refused on the other,
// and a third router sharing the second's ends on the first's sockets too.
func TestBindSocketsShared(t *testing.T) {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	cfg := DefaultConfig(4)
	cfg.Worker.BindEndpoints = []string{"tcp://127.0.0.1:*"}
	host, err := New(system, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Stop()
	scfg := DefaultConfig(4)
	scfg.Worker.BindEndpoints = cfg.Worker.BindEndpoints // ignored: the sockets are the host's
	scfg.Worker.BindShare = host.Fleet
	sharer, err := New(system, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sharer.Stop()
	scfg.Worker.BindShare = sharer.Fleet
	third, err := New(system, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Stop()
	addr := host.Fleet.BindAddr()
	if addr == "" || sharer.Fleet.BindAddr() != addr || third.Fleet.BindAddr() != addr {
		t.Fatalf("bind addresses %q, %q, %q", addr, sharer.Fleet.BindAddr(), third.Fleet.BindAddr())
	}
	routers := []*Router{host, sharer, third}
	var pubs []*pub
	for i, r := range routers {
		topic := kvevents.VLLMTopic(fmt.Sprintf("127.0.0.1:%d", 8001+i), "m")
		pp := startTopicPub(t, addr, topic)
		pubs = append(pubs, pp)
		if err := r.AddWorker(registry.Spec{ID: uint64(10 + i), Topic: topic, Replay: pp.p.ReplayAddr()}); err != nil {
			t.Fatal(err)
		}
		for j, other := range routers {
			if j != i && other.AddWorker(registry.Spec{ID: 99, Topic: topic}) == nil {
				t.Fatalf("topic %q of router %d accepted by router %d", topic, i, j)
			}
		}
	}
	toks := [][]uint32{{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}}
	testutil.Eventually(t, "every router's topic indexed", func() bool {
		ok := true
		for i, r := range routers {
			pubs[i].publish(t, stored(0, false, []uint64{uint64(5 + i)}, toks[i]))
			ok = ok && overlapOf(r, toks[i], uint64(10+i)) == 1
		}
		return ok
	})
	for i, r := range routers {
		if n := r.Index.Size(); n != 1 {
			t.Fatalf("router %d's index holds %d blocks, want its worker's one", i, n)
		}
	}
}

package worker

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

const testBlockSize = 16

// fleetRig is one simulated vLLM worker publishing real KV events (ZMQ over ipc://), mirrored by a fleet
// into a sharded index.
type fleetRig struct {
	w     *mocker.Worker
	index *indexer.Indexer
	fleet *Fleet
	key   prefix.WorkerKey
}

func startRig(t *testing.T, initialBackoff time.Duration) *fleetRig {
	t.Helper()
	dir := t.TempDir()
	kv := mocker.DefaultKVEventsConfig()
	kv.Endpoint = "ipc://" + filepath.Join(dir, "w.ev")
	kv.ReplayEndpoint = "ipc://" + filepath.Join(dir, "w.rp")
	eng := mocker.DefaultEngineConfig()
	eng.BlockSize = testBlockSize
	eng.NumGPUBlocks = 1024
	eng.SpeedupRatio = 1000
	w, err := mocker.StartWorker(mocker.WorkerConfig{ID: 1, Engine: eng, DPSize: 1, KVEvents: kv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() }) // after the fleet's (cleanups run last first)
	cfg := DefaultConfig(testBlockSize)
	cfg.InitialBackoff = initialBackoff
	f, index := startFleet(t, cfg)
	spec, err := registry.Parse(w.Spec())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Add(spec); err != nil {
		t.Fatal(err)
	}
	return &fleetRig{w: w, index: index, fleet: f, key: prefix.WorkerKey{WorkerID: spec.ID}}
}

// startFleet starts a fleet of cfg over a fresh sharded index in a fresh actor system, all stopped when
// the test ends.
func startFleet(t *testing.T, cfg Config) (*Fleet, *indexer.Indexer) {
	t.Helper()
	system := actors.NewSystem(nil)
	index, err := indexer.New(system, indexer.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFleet(system, index, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Stop()
		index.Stop()
		system.Shutdown()
	})
	return f, index
}

// serve runs one request of n prompt blocks on the worker to its end, so it stores those blocks.
func (r *fleetRig) serve(t *testing.T, id string, blocks int) {
	t.Helper()
	prompt := make([]uint32, blocks*testBlockSize)
	for i := range prompt {
		prompt[i] = uint32(len(id)*7919 + int(id[len(id)-1])*31 + i)
	}
	s, err := r.w.Submit(0, mocker.Request{ID: id, Prompt: prompt, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "request "+id+" done", func() bool {
		select {
		case <-s.Notify():
		default:
		}
		return s.Read(0, nil).Done
	})
}

func (r *fleetRig) status(t *testing.T) Status {
	t.Helper()
	st, ok := r.fleet.StatusOf(r.key.WorkerID)
	if !ok {
		t.Fatal("worker not in the fleet")
	}
	return st
}

// A resync drops the worker's blocks and restarts its subscriber, which replays the worker's stream from
// sequence 0: the index ends as it was, each block stored once.
func TestResyncReplaysTheStream(t *testing.T) {
	r := startRig(t, 10*time.Millisecond)
	r.serve(t, "a", 4)
	testutil.Eventually(t, "4 blocks indexed", func() bool { return r.index.Blocks(r.key) == 4 })
	before := r.status(t)
	if err := r.fleet.Resync(r.key.WorkerID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the subscriber restarted and replayed", func() bool {
		st := r.status(t)
		return st.Restarts == before.Restarts+1 && st.Replays > before.Replays && r.index.Blocks(r.key) == 4
	})
	r.serve(t, "b", 2) // the restarted subscriber follows the live stream
	testutil.Eventually(t, "6 blocks indexed", func() bool { return r.index.Blocks(r.key) == 6 })
	r.fleet.Sync()
	if n := r.index.Blocks(r.key); n != 6 {
		t.Fatalf("%d blocks indexed after the resync, want 6 (each once)", n)
	}
}

// A batch of a subscriber generation a resync retired is dropped by the mirror; the same batch from the
// current generation is applied.
func TestStaleGenerationBatchIsDropped(t *testing.T) {
	r := startRig(t, 10*time.Millisecond)
	r.serve(t, "a", 2)
	testutil.Eventually(t, "2 blocks indexed", func() bool { return r.index.Blocks(r.key) == 2 })
	m, _ := r.fleet.Get(r.key.WorkerID)
	old := m.subs[0].gen.Load()
	if err := r.fleet.Resync(r.key.WorkerID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the replay", func() bool { return r.index.Blocks(r.key) == 2 })
	batch := func(gen uint64, hash uint64) *eventsArrived {
		return &eventsArrived{Rank: 0, Gen: gen, BadRank: -1, Apply: &indexer.Apply{WorkerID: r.key.WorkerID,
			Ops: []indexer.Op{{Kind: indexer.OpStore, Blocks: []prefix.Block{{EngineHash: hash, LocalHash: hash}}}}}}
	}
	tests := []struct {
		name string
		gen  uint64
		want int
	}{
		{"retired generation", old, 2},
		{"current generation", m.subs[0].gen.Load(), 3},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r.fleet.system.Root.Send(m.pid, batch(tc.gen, uint64(1_000_000+i)))
			r.fleet.Sync() // the mirror has handled it, the index has applied what it forwarded
			if n := r.index.Blocks(r.key); n != tc.want {
				t.Fatalf("%d blocks indexed, want %d", n, tc.want)
			}
		})
	}
}

// A subscriber that keeps failing is restarted after a growing delay: the k-th failure within the
// backoff window waits k × InitialBackoff (protoactor's exponential backoff strategy). The bound is a
// lower one: a restart never comes early, however loaded the machine.
func TestSubscriberRestartBackoff(t *testing.T) {
	const initial = 40 * time.Millisecond
	r := startRig(t, initial)
	testutil.Eventually(t, "the subscriber connected", func() bool { return r.status(t).Replays > 0 })
	for k := 1; k <= 3; k++ {
		t.Run(fmt.Sprint("failure ", k), func(t *testing.T) {
			t0 := time.Now()
			if err := r.fleet.Resync(r.key.WorkerID); err != nil { // the subscriber panics: a failure
				t.Fatal(err)
			}
			testutil.Eventually(t, "the restart", func() bool { return r.status(t).Restarts == uint64(k) })
			if d, want := time.Since(t0), time.Duration(k)*initial; d < want {
				t.Fatalf("restart %d came after %v, want at least %v", k, d, want)
			}
		})
	}
}

// TestFleetSchemesFollowJoinsAndRemovals: AllLegacyMM and AllHexMMIDs answer for the fleet as it is after
// every join and removal, and no for an empty fleet.
func TestFleetSchemesFollowJoinsAndRemovals(t *testing.T) {
	f, _ := startFleet(t, DefaultConfig(testBlockSize))
	step := func(name string, change func() error, legacy, hex bool) {
		t.Helper()
		if err := change(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if f.AllLegacyMM() != legacy || f.AllHexMMIDs() != hex {
			t.Fatalf("%s: AllLegacyMM %v, AllHexMMIDs %v; want %v, %v", name, f.AllLegacyMM(), f.AllHexMMIDs(), legacy, hex)
		}
	}
	add := func(id uint64, engine, scheme string) func() error {
		return func() error { return f.Add(registry.Spec{ID: id, Engine: engine, MMScheme: scheme}) }
	}
	remove := func(id uint64) func() error { return func() error { return f.Remove(id) } }
	step("empty", func() error { return nil }, false, false)
	step("an SGLang worker", add(1, registry.EngineSGLang, ""), false, true)
	step("and a TensorRT-LLM one", add(2, registry.EngineTRTLLM, ""), false, true)
	step("and a vLLM one", add(3, registry.EngineVLLM, ""), false, false)
	step("the vLLM one gone", remove(3), false, true)
	step("every worker gone", func() error { return errors.Join(f.Remove(1), f.Remove(2)) }, false, false)
	step("a legacy-scheme vLLM worker", add(4, registry.EngineVLLM, registry.MMSchemeBlockMMInfos), true, false)
	step("and a legacy-scheme SGLang one", add(5, registry.EngineSGLang, registry.MMSchemeBlockMMInfos), true, false)
	step("the vLLM one gone", remove(4), true, true)
	step("a worker of the default scheme", add(6, registry.EngineSGLang, ""), false, true)
}

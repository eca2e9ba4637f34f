package main

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// twoCores is one model's decode and prefill cores with worker 1 (decode) and worker 2 (prefill).
func twoCores(t *testing.T) *cores {
	t.Helper()
	system := actor.NewActorSystem()
	rcfg := router.DefaultConfig(16)
	rcfg.TickInterval = -1
	r, err := router.New(system, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	pcfg := rcfg
	pcfg.Scoring = frontend.PrefillConfig(rcfg.Scoring)
	pr, err := router.New(system, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pr.Stop)
	pd, err := frontend.NewDisagg(pr, frontend.DefaultDisaggConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := &cores{names: []string{"m"}, rs: []*router.Router{r}, pds: []*frontend.Disagg{pd}}
	for _, spec := range []registry.Spec{{ID: 1, URL: "http://127.0.0.1:1"}, {ID: 2, URL: "http://127.0.0.1:2", Role: registry.RolePrefill}} {
		if err := c.AddWorker(spec); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestCoresEventsAndSnapshot: the NATS event source's view of a model's two cores delivers each worker's
// batches to the core holding it (an unknown worker's are refused as unknown), and a snapshot of both
// restores into fresh cores with every block back in its own core.
func TestCoresEventsAndSnapshot(t *testing.T) {
	c := twoCores(t)
	fl := c.fleet()
	toks := make([]uint32, 32)
	for _, w := range []struct {
		id     uint64
		blocks []uint64
	}{{1, []uint64{11, 12}}, {2, []uint64{21}}} {
		b := &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.Stored, BlockHashes: w.blocks, TokenIDs: toks[:16*len(w.blocks)], BlockSize: 16}}}
		if err := fl.Sink.Deliver(w.id, 0, 1, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := fl.Sink.Deliver(9, 0, 1, &kvevents.Batch{}); err == nil {
		t.Fatal("a batch of worker 9, in no core, was taken")
	}
	fl.Barrier()
	indexed := func(c *cores) (decode, prefill int) {
		d, _ := c.rs[0].Fleet.StatusOf(1)
		p, _ := c.pds[0].Prefill.Fleet.StatusOf(2)
		return d.IndexedBlocks, p.IndexedBlocks
	}
	if d, p := indexed(c); d != 2 || p != 1 {
		t.Fatalf("indexed blocks: decode core %d, prefill core %d; want 2 and 1", d, p)
	}
	var entries []prefix.DumpEntry
	if skipped := fl.Index.Dump(func(e prefix.DumpEntry) { entries = append(entries, e) }); skipped != 0 || len(entries) != 3 {
		t.Fatalf("dump: %d entries, %d skipped", len(entries), skipped)
	}
	fresh := twoCores(t)
	ffl := fresh.fleet()
	ffl.Index.Restore(entries)
	ffl.Index.Flush()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, p := indexed(fresh)
		if d == 2 && p == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restored: decode core %d blocks, prefill core %d; want 2 and 1", d, p)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Removing worker 2 goes through its model's prefill side (its count of prefill workers).
	if err := c.RemoveWorker(2); err != nil || len(c.pds[0].Prefill.Workers()) != 0 {
		t.Fatalf("remove worker 2: %v, %d prefill workers left", err, len(c.pds[0].Prefill.Workers()))
	}
	if err := c.RemoveWorker(9); err == nil {
		t.Fatal("removing unknown worker 9 did not fail")
	}
}

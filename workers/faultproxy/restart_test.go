package faultproxy_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/kvroute/kvroute/workers/faultproxy"
	"github.com/kvroute/kvroute/workers/mocker"
)

// Convergence cases found by the fault suite, each reproduced deterministically (explicit seq faults
// instead of probabilities).

// TestRestartPastLastSeqIsDetected: a worker restarts and, before the router sees any batch of the new
// engine, the new engine has already published past the router's last seq (its first batches were lost:
// ZMQ's slow-joiner window at the relay, or drops). The router's connection (to the relay) never broke,
// so no reconnect catch-up runs; the live stream only shows a forward gap. Treated as a plain gap, the
// replay filled it with the new engine's batches on top of the old engine's blocks: stale blocks stayed
// in the index for good and the new chains missed their parents. Fixed in workers/kvevents: an ambiguous
// live seq (a gap, or a step backwards outside the duplicate window) is settled by replaying from the
// last seq and checking the digest of the batch under it, as the reconnect catch-up does.
func TestRestartPastLastSeqIsDetected(t *testing.T) {
	rg := newRig(t, rigOpts{workers: 1, gpuBlocks: 128, speedup: 100, hideDisconnects: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := rg.workers[0]
	rg.driveAll(ctx, 1, 40, 8)
	rg.settle()
	rg.converged(10 * time.Second)

	// The new engine's batches 0..last+2 never reach the router, last being the old engine's count once
	// it is closed: read before, an engine still publishing (a step in flight after convergence) could
	// pass batches last..last+2 before the faults were set, and the new engine's next would then
	// continue the sequence without a gap (TestRestartContinuingSeqBehindRelay's case, not this one).
	var last uint64
	rg.restartWith(s, func(old *mocker.Worker) {
		last = old.PublishedBatches(0)
		drop := map[uint64]faultproxy.Fault{}
		for seq := uint64(0); seq < last+3; seq++ {
			drop[seq] = faultproxy.Drop
		}
		s.px.SetFaults(faultproxy.Faults{BySeq: drop})
	})
	for i := uint64(2); s.worker().PublishedBatches(0) < last+10; i++ {
		if err := rg.drive(ctx, s, newWorkload(i), 20, 8); err != nil {
			t.Fatal(err)
		}
	}
	rg.settle()
	rg.converged(10 * time.Second)
	if st, _ := rg.r.Fleet.StatusOf(s.id); st.Resets == 0 {
		t.Fatalf("the restart was not detected: %+v", st)
	}
}

// TestLateBatchIsNotARestart: one batch arrives after its successor (reordered or delayed on the way).
// The successor opens a gap, the replay fills it; then the late batch, whose seq is below the last one
// but outside the replay's duplicate window, reads as "the sequence went backwards": an engine restart.
// The worker is cleared and replayed from 0, which restores the index only while the replay ring still
// holds the worker's whole history. With a ring that has wrapped (vLLM keeps 10 000 batches: minutes of
// traffic), every block stored before the ring's oldest batch was lost from the index. Fixed by the same
// digest check: the publisher still holds our last batch, so the late one is a duplicate.
func TestLateBatchIsNotARestart(t *testing.T) {
	// A cache large enough to keep the first blocks for the whole test, a ring far smaller than the history.
	rg := newRig(t, rigOpts{workers: 1, gpuBlocks: 4096, speedup: 100, ringSteps: 32})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := rg.workers[0]
	for i := uint64(1); s.worker().PublishedBatches(0) < 96; i++ {
		rg.driveAll(ctx, i, 30, 8) // until the ring of 32 has wrapped twice
	}
	rg.settle()
	rg.converged(10 * time.Second)
	next := s.worker().PublishedBatches(0)
	s.px.SetFaults(faultproxy.Faults{BySeq: map[uint64]faultproxy.Fault{next + 2: faultproxy.Reorder},
		DelayFor: 200 * time.Millisecond})
	rg.driveAll(ctx, 2, 30, 8)
	rg.settle()
	if px := s.px.Stats(); px.Reordered != 1 {
		t.Fatalf("proxy reordered %d batches, want 1 (seq %d; proxy %+v; published %d)", px.Reordered, next+2, px, s.worker().PublishedBatches(0))
	}
	rg.converged(10 * time.Second)
	if st, _ := rg.r.Fleet.StatusOf(s.id); st.Resets != 0 {
		t.Fatalf("a late batch was taken for an engine restart (%d resets)", st.Resets)
	}
}

// TestRestartContinuingSeqBehindRelay is a KNOWN FAILURE, skipped unless KVROUTE_KNOWN_FAILURES=1.
//
// A worker restarts behind a relay that hides its disconnect, and the first batch of the new engine that
// reaches the router carries exactly last+1 (the new engine's earlier batches were lost on the way). The
// sequence looks in order, nothing is ambiguous, and the router applies the new engine's batches on top of
// the old engine's blocks. No rule on sequence numbers can see this: the stream needs an engine identity
// (an epoch in the topic or the batch) or the relay must propagate the disconnect (faultproxy does by
// default, and then the reconnect catch-up's digest check detects the restart). Directly connected
// subscribers are not affected: the engine's death breaks their connection. The timed identity check
// (kvevents.Config.IdentityCheck) does not help here either: by the time it runs, the last batch applied
// is already the new engine's, so the publisher does hold it (TestIdleRestartBehindRelay is the case it
// catches).
func TestRestartContinuingSeqBehindRelay(t *testing.T) {
	if os.Getenv("KVROUTE_KNOWN_FAILURES") == "" {
		t.Skip("known failure (see the comment); run with KVROUTE_KNOWN_FAILURES=1")
	}
	rg := newRig(t, rigOpts{workers: 1, gpuBlocks: 128, speedup: 100, hideDisconnects: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := rg.workers[0]
	rg.driveAll(ctx, 1, 40, 8)
	rg.settle()
	rg.converged(10 * time.Second)
	last := s.worker().PublishedBatches(0) - 1

	// The new engine's batches 0..last never reach the router; its batch last+1 does.
	drop := map[uint64]faultproxy.Fault{}
	for seq := uint64(0); seq <= last; seq++ {
		drop[seq] = faultproxy.Drop
	}
	s.px.SetFaults(faultproxy.Faults{BySeq: drop})
	rg.restart(s)
	for i := uint64(2); s.worker().PublishedBatches(0) < last+10; i++ {
		if err := rg.drive(ctx, s, newWorkload(i), 20, 8); err != nil {
			t.Fatal(err)
		}
	}
	rg.settle()
	rg.converged(10 * time.Second)
}

// TestIdleRestartBehindRelay: a worker restarts behind a relay that hides its disconnect and then stays
// idle, so no batch of the new engine arrives to betray it by its sequence number. The timed identity
// check asks the new publisher for the last batch applied, which it does not hold: the worker is reset,
// and the index converges to the new engine's empty cache instead of keeping the old engine's blocks.
func TestIdleRestartBehindRelay(t *testing.T) {
	rg := newRig(t, rigOpts{workers: 1, gpuBlocks: 128, speedup: 100, hideDisconnects: true, identityCheck: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := rg.workers[0]
	rg.driveAll(ctx, 1, 20, 8)
	rg.settle()
	rg.converged(10 * time.Second)
	if st, _ := rg.r.Fleet.StatusOf(s.id); st.IndexedBlocks == 0 {
		t.Fatal("nothing indexed before the restart")
	}
	rg.restart(s)
	rg.converged(10 * time.Second)
	if st, _ := rg.r.Fleet.StatusOf(s.id); st.Resets == 0 || st.IndexedBlocks != 0 {
		t.Fatalf("after an idle restart: %+v", st)
	}
}

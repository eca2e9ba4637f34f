package natsplane

import (
	"context"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/mocker"
)

// TestDurableSurvivesNodeLoss: in durable mode, killing one of three NATS nodes in the middle of a
// workload loses no events once relays and frontends reconnect: every index equals the ground truth and
// no frontend saw a sequence gap. The node then comes back and the plane keeps up.
func TestDurableSurvivesNodeLoss(t *testing.T) {
	c := startTestCluster(t)
	ws := startSimWorkers(t, 4, 96)
	scfg := DefaultSourceConfig()
	scfg.Durable, scfg.Replicas = true, 3
	var fs []*frontend
	for i := 0; i < 3; i++ {
		fs = append(fs, startFrontend(t, c.URL(), ws, scfg, nil))
	}
	var relays []*Relay
	for _, w := range ws {
		relays = append(relays, startRelay(t, c.URL(), w, true))
	}
	p := newPrompts(3, 6)
	runWorkload(t, ws, p, 80, 16)
	c.Kill(0)
	runWorkload(t, ws, p, 80, 16)
	defer func() {
		if t.Failed() {
			for i, rl := range relays {
				t.Logf("relay %d: %+v", i, rl.Stats())
			}
		}
	}()
	converge(t, fs, ws, 45*time.Second)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	runWorkload(t, ws, p, 80, 16)
	converge(t, fs, ws, 45*time.Second)
	for i, f := range fs {
		st := f.src.Stats()
		if st.Gaps != 0 || st.BadMessages != 0 || st.UnknownWorker != 0 {
			t.Fatalf("frontend %d: %+v", i, st)
		}
		t.Logf("frontend %d: %+v", i, st)
	}
	for i, rl := range relays {
		t.Logf("relay %d: %+v", i, rl.Stats())
	}
}

// TestSnapshotRestore: frontends snapshot their index every few stream messages (one skips its dump when
// the store holds another's snapshot near its position); a fourth frontend started later restores the
// latest snapshot, reads only the stream tail, and matches the others.
func TestSnapshotRestore(t *testing.T) {
	c := startTestCluster(t)
	ws := startSimWorkers(t, 4, 96)
	scfg := DefaultSourceConfig()
	scfg.Durable, scfg.Replicas, scfg.SnapshotThreshold = true, 3, 25
	var fs []*frontend
	for i := 0; i < 3; i++ {
		fs = append(fs, startFrontend(t, c.URL(), ws, scfg, nil))
	}
	for _, w := range ws {
		startRelay(t, c.URL(), w, true)
	}
	p := newPrompts(5, 6)
	runWorkload(t, ws, p, 200, 16)
	converge(t, fs, ws, 20*time.Second)
	var written uint64
	for _, f := range fs {
		written += f.src.Stats().Snapshots
	}
	if written == 0 {
		t.Fatal("no frontend wrote a snapshot")
	}
	// A frontend reaching its threshold where the store already holds another's snapshot skips its dump;
	// one past half a threshold from it writes its own.
	at := fs[0].src.Stats().StreamSeq
	ctx := context.Background()
	fs[0].src.mu.Lock()
	err := fs[0].src.snapshot(ctx, at)
	fs[0].src.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	half := uint64(scfg.SnapshotThreshold / 2)
	if !fs[1].src.snapshotFresh(ctx, at+half) || !fs[1].src.snapshotFresh(ctx, at-1) || fs[1].src.snapshotFresh(ctx, at+half+1) {
		t.Fatalf("a snapshot at %d: fresh at %d and %d, stale at %d expected", at, at+half, at-1, at+half+1)
	}
	late := startFrontend(t, c.URL(), ws, scfg, nil)
	fs = append(fs, late)
	converge(t, fs, ws, 20*time.Second)
	st := late.src.Stats()
	total := fs[0].src.Stats().Messages
	if st.Restored == 0 || st.Messages >= total {
		t.Fatalf("late frontend did not restore: %+v (others read %d messages)", st, total)
	}
	t.Logf("late frontend: restored %d entries, read %d of %d stream messages", st.Restored, st.Messages, total)
	runWorkload(t, ws, p, 100, 16)
	converge(t, fs, ws, 20*time.Second)
}

// startStallWatched starts a three-node cluster, two simulated workers with durable relays, and one
// durable frontend whose stall watch fires after stall.
func startStallWatched(t *testing.T, stall time.Duration) (*frontend, []*mocker.Worker) {
	t.Helper()
	c := startTestCluster(t)
	ws := startSimWorkers(t, 2, 96)
	scfg := DefaultSourceConfig()
	scfg.Durable, scfg.Replicas, scfg.StallAfter = true, 3, stall
	f := startFrontend(t, c.URL(), ws, scfg, nil)
	for _, w := range ws {
		startRelay(t, c.URL(), w, true)
	}
	return f, ws
}

// TestDurableSourceReplacesStalledConsumer: an ordered consumer that goes silent while the stream grows
// (one left waiting after its server shut down stalled a frontend this way) is replaced once the
// frontend's position has not moved for StallAfter; the new consumer starts after the last applied
// stream sequence, and the index catches up with no gap.
func TestDurableSourceReplacesStalledConsumer(t *testing.T) {
	f, ws := startStallWatched(t, 300*time.Millisecond)
	p := newPrompts(4, 4)
	runWorkload(t, ws, p, 40, 8)
	converge(t, []*frontend{f}, ws, 20*time.Second)
	// At the stream's last sequence the watch sees nothing to restart for; one message behind, it would
	// (read again while a late event moves the stream meanwhile).
	stream, err := f.src.js.Stream(context.Background(), EventStream)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		info, err := stream.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	for tries := 0; ; tries++ {
		last := lastSeq()
		atLast, behind := f.src.streamAhead(last), f.src.streamAhead(last-1)
		if lastSeq() != last && tries < 100 {
			continue
		}
		if atLast || !behind {
			t.Fatalf("stream at %d: ahead of %d %v (want false), ahead of %d %v (want true)", last, last, atLast, last-1, behind)
		}
		break
	}

	// Silence the consumer behind the source's back: it delivers nothing more and reports no error.
	f.src.ccMu.Lock()
	f.src.cc.Stop()
	f.src.ccMu.Unlock()
	before := f.src.Stats()
	runWorkload(t, ws, p, 40, 8)
	converge(t, []*frontend{f}, ws, 20*time.Second)
	st := f.src.Stats()
	if st.Restarts == before.Restarts || st.StreamSeq <= before.StreamSeq || st.Gaps != 0 || st.BadMessages != 0 {
		t.Fatalf("stalled consumer not replaced cleanly: before %+v, after %+v", before, st)
	}
	t.Logf("frontend: %+v", st)
}

// TestDurableSourceWaitsForSlowApply: a message being applied (a snapshot runs inside the handler and can
// take seconds) is not a stall, however long the stream is held ahead meanwhile: the watch restarts
// nothing, and the index catches up once the apply ends.
func TestDurableSourceWaitsForSlowApply(t *testing.T) {
	const stallAfter = time.Second
	f, ws := startStallWatched(t, stallAfter)
	p := newPrompts(5, 4)
	runWorkload(t, ws, p, 20, 8)
	converge(t, []*frontend{f}, ws, 20*time.Second)

	f.src.mu.Lock() // the next message's apply holds here, as a snapshot would hold it
	runWorkload(t, ws, p, 20, 8)
	testutil.Until(t, 20*time.Second, "a message in hand", func() string {
		if f.src.handling.Load() == 0 {
			return "no handle call in progress"
		}
		return ""
	})
	// Three times StallAfter in hand: without the handling guard the watch restarts the consumer here
	// (the stream is ahead and the position does not move). A slower machine only gives it less time.
	time.Sleep(3 * stallAfter)
	restarts := f.src.Stats().Restarts
	f.src.mu.Unlock()
	converge(t, []*frontend{f}, ws, 20*time.Second)
	if st := f.src.Stats(); restarts != 0 || st.Gaps != 0 || st.BadMessages != 0 {
		t.Fatalf("a slow apply taken for a stall: %d restarts while it held, stats %+v", restarts, st)
	}
}

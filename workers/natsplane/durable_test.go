package natsplane

import (
	"testing"
	"time"
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

// TestSnapshotRestore: frontends snapshot their index every few stream messages; a fourth frontend
// started later restores the latest snapshot, reads only the stream tail, and matches the others.
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
	for i, f := range fs {
		if f.src.Stats().Snapshots == 0 {
			t.Fatalf("frontend %d wrote no snapshot: %+v", i, f.src.Stats())
		}
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

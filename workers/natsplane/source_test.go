package natsplane

import (
	"testing"
	"time"
)

// TestEventPlaneGroundTruth: 4 simulated workers behind relays, a 3-node NATS cluster, 3 frontends. After
// a random workload (with evictions) every frontend's index equals the simulators' caches, in core and
// durable mode.
func TestEventPlaneGroundTruth(t *testing.T) {
	tests := []struct {
		name    string
		durable bool
	}{
		{"core", false},
		{"durable", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := startTestCluster(t)
			ws := startSimWorkers(t, 4, 96)
			scfg := DefaultSourceConfig()
			scfg.Durable, scfg.Replicas = tc.durable, 3
			var fs []*frontend
			for i := 0; i < 3; i++ {
				fs = append(fs, startFrontend(t, c.URL(), ws, scfg, nil))
			}
			for _, w := range ws {
				startRelay(t, c.URL(), w, tc.durable)
			}
			runWorkload(t, ws, newPrompts(1, 6), 200, 16)
			converge(t, fs, ws, 15*time.Second)
			for i, f := range fs {
				st := f.src.Stats()
				if st.Batches == 0 || st.BadMessages != 0 || st.UnknownWorker != 0 || st.Dropped != 0 {
					t.Fatalf("frontend %d: %+v", i, st)
				}
				t.Logf("frontend %d: %+v", i, st)
			}
		})
	}
}

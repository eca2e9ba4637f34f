package natsplane

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/workers/mocker"
)

// TestWorkerAndRelayRestart: a worker that restarts (empty cache, sequence from 0) is cleared at the
// frontend through the relay's reset; a relay that restarts replays the worker's ring under a new epoch
// and the frontend starts that worker over. Both end equal to the ground truth.
func TestWorkerAndRelayRestart(t *testing.T) {
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	url := s.ClientURL()
	ws := startSimWorkers(t, 1, 96)
	f := startFrontend(t, url, ws, DefaultSourceConfig(), nil)
	stopRelay := startStoppableRelay(t, url, ws[0])
	p := newPrompts(9, 4)
	runWorkload(t, ws, p, 40, 8)
	converge(t, []*frontend{f}, ws, 10*time.Second)

	// Worker restart: same endpoints, new engine.
	ev, rp := ws[0].EventsEndpoint(0), ws[0].ReplayEndpoint(0)
	if err := ws[0].Close(); err != nil {
		t.Fatal(err)
	}
	kv := mocker.DefaultKVEventsConfig()
	kv.Endpoint, kv.ReplayEndpoint = ev, rp
	eng := mocker.DefaultEngineConfig()
	eng.BlockSize, eng.NumGPUBlocks, eng.SpeedupRatio = testBlockSize, 96, 1000
	w, err := mocker.StartWorker(mocker.WorkerConfig{ID: 1, Engine: eng, DPSize: 1, KVEvents: kv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	ws[0] = w
	runWorkload(t, ws, p, 40, 8)
	converge(t, []*frontend{f}, ws, 10*time.Second)
	if f.src.Stats().Resets == 0 {
		t.Fatalf("no reset seen: %+v", f.src.Stats())
	}

	// Relay restart: a new epoch replays the ring from 0.
	stopRelay()
	before := f.src.Stats().Resets
	startStoppableRelay(t, url, ws[0])
	runWorkload(t, ws, p, 20, 8)
	converge(t, []*frontend{f}, ws, 10*time.Second)
	if st := f.src.Stats(); st.Resets == before || st.BadMessages != 0 {
		t.Fatalf("relay restart not handled: %+v", st)
	}
	t.Logf("frontend: %+v", f.src.Stats())
}

package mocker

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/goccy/go-json"

	"github.com/kvroute/kvroute/internal/testutil"
)

// TestFleet64Workers starts 64 workers with ZMQ events and replay in one process, sends each a request
// over HTTP and checks that every worker answered and published.
func TestFleet64Workers(t *testing.T) {
	eng := DefaultEngineConfig()
	eng.BlockSize, eng.NumGPUBlocks, eng.SpeedupRatio = 16, 256, 100
	f, err := StartFleet(FleetConfig{NumWorkers: 64, FirstID: 100, Template: WorkerConfig{Engine: eng, KVEvents: DefaultKVEventsConfig()}})
	must(t, err)
	t.Cleanup(func() { f.Close() })
	var wg sync.WaitGroup
	errs := make(chan error, len(f.Workers))
	for i, w := range f.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(map[string]any{"prompt": seq(i*1000, 40), "max_tokens": 3})
			resp, err := httpPost(w.URL()+"/v1/completions", b)
			if err != nil || !strings.Contains(resp, `"completion_tokens":3`) {
				errs <- fmt.Errorf("worker %d: %v %s", w.ID(), err, resp)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, w := range f.Workers {
		if w.ID() != 100+i || !strings.HasPrefix(w.Spec(), fmt.Sprintf("id=%d,url=http://127.0.0.1:", 100+i)) {
			t.Fatalf("spec %s", w.Spec())
		}
		ep := w.EventsEndpoint(0)
		if ep == "" || seen[ep] || w.ReplayEndpoint(0) == "" {
			t.Fatalf("worker %d endpoints %q %q", i, ep, w.ReplayEndpoint(0))
		}
		seen[ep] = true
		testutil.Eventually(t, "published", func() bool { return w.PublishedBatches(0) == 1 })
	}
}

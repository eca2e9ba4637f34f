package frontend

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/kvroute/kvroute/internal/testutil"
)

// GET /debug/goroutines lists the process's goroutines by kind: with two simulated workers, each
// worker's KV event subscriber and each rank loop is counted, as /metrics' kvroute_goroutines would.
func TestDebugGoroutines(t *testing.T) {
	s := startStack(t, stackOpts{workers: 2, speedup: 1e6})
	get := func() goroutinesView {
		resp, err := http.Get(s.base + "/debug/goroutines")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		var v goroutinesView
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		return v
	}
	live := func(v goroutinesView, name string) int64 {
		for _, k := range v.Kinds {
			if k.Name == name {
				return k.Live
			}
		}
		return -1
	}
	testutil.Eventually(t, "both subscribers and rank loops counted", func() bool {
		v := get()
		return live(v, "worker.subscriber") >= 2 && live(v, "mocker.rank") >= 2 && v.Total >= len(v.Kinds)
	})
	if r := s.post(t, "/debug/goroutines", "{}"); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST /debug/goroutines: %d, want 405", r.status)
	}
}

package frontend

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// TestRouteSessionAffinity: the standalone /v1/route takes X-Dynamo-Session-ID, so with
// --router-session-affinity-ttl-secs a session's second request goes to its first worker although that
// worker is the busier one; without the TTL it goes to the idle worker.
func TestRouteSessionAffinity(t *testing.T) {
	for _, ttl := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("ttl=", ttl), func(t *testing.T) {
			base, r := startRouterAPI(t, 4, ServerConfig{})
			publisherFor(t, base, 1)
			publisherFor(t, base, 2)
			cfg := r.Config()
			cfg.SessionAffinityTTL = ttl
			if err := r.SetConfig(cfg); err != nil {
				t.Fatal(err)
			}
			route := func(id string, first uint32) float64 {
				t.Helper()
				toks := make([]uint32, 32)
				for i := range toks {
					toks[i] = first + uint32(i)
				}
				req, _ := http.NewRequest("POST", base+"/v1/route", strings.NewReader(fmt.Sprintf(`{"request_id":%q,"tokens":%s}`, id, tokenList(toks))))
				req.Header.Set("X-Dynamo-Session-ID", "conversation-1")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				var out struct {
					WorkerID float64 `json:"worker_id"`
				}
				if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil {
					t.Fatalf("route %s: %d %s", id, resp.StatusCode, b)
				}
				return out.WorkerID
			}
			first := route("a", 1)
			second := route("b", 1001) // another prompt, while a still loads its worker
			if ttl > 0 && second != first {
				t.Fatalf("with affinity: the session's second request went to worker %v, its first to %v", second, first)
			}
			if ttl == 0 && second == first {
				t.Fatalf("without affinity: the second request joined the loaded worker %v", first)
			}
		})
	}
}

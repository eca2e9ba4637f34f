package frontend

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring/policy"
	"github.com/kvroute/kvroute/workers/registry"
)

// policyDoc has an interactive family that queues while a worker has any prefill in flight and holds at
// most one waiting request per worker, and an explicit class "capped" that queues likewise and holds
// none (every request that would wait is rejected).
const policyDoc = `
default_policy_family: interactive
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - name: interactive
    policy_family: interactive
    cache_bucket: all
    quantum: 16
    prefill_busy_threshold: 0
    request_queue_limit_per_worker: 1
  - name: capped
    quantum: 16
    prefill_busy_threshold: 0
    request_queue_limit_per_worker: 0
`

// startPolicyRouterAPI serves a router whose --router-policy-config is policyDoc (a file, as the flag
// gives it), with one worker.
func startPolicyRouterAPI(t *testing.T) (string, *router.Router) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policyDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	system := actors.NewSystem(nil)
	rcfg := router.DefaultConfig(4)
	rcfg.Scoring.PolicyConfig = path
	r, err := router.New(system, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{}, &RouterAPI{R: r})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		r.Stop()
		system.Shutdown()
	})
	if err := r.AddWorker(registry.Spec{ID: 1, URL: "http://127.0.0.1:9"}); err != nil {
		t.Fatal(err)
	}
	return "http://" + ln.Addr().String(), r
}

func queued(r *router.Router, class string) int {
	for _, q := range r.QueueClasses() {
		if q.Class == class {
			return int(q.Requests)
		}
	}
	return -1
}

// TestRouteAPIPolicyClassOverLimit: through /v1/route, a request of a class whose queue is at its
// per-worker limit is answered 529 with an OpenAI-style error; the class is taken from the body's
// policy_class or the x-dynamo-meta-policy-class header, and a waiting request is served when capacity
// frees.
func TestRouteAPIPolicyClassOverLimit(t *testing.T) {
	base, r := startPolicyRouterAPI(t)
	if code, body := call(t, "POST", base+"/v1/route", `{"request_id":"a","tokens":[1,2,3,4,5,6,7,8]}`); code != 200 {
		t.Fatalf("first route: %d %v", code, body)
	}
	// The worker has 8 prefill tokens in flight: busy for both classes. "capped" holds no waiting request.
	code, body := call(t, "POST", base+"/v1/route", `{"request_id":"c","tokens":[11,12,13,14],"policy_class":"capped"}`)
	if code != StatusOverloaded || body["error"] == nil {
		t.Fatalf("capped class: %d %v", code, body)
	}
	e := body["error"].(map[string]any)
	if e["code"] != float64(529) || e["type"] != "overloaded_error" || !strings.Contains(e["message"].(string), `"capped"`) {
		t.Fatalf("529 body: %v", e)
	}

	// interactive holds one waiting request (1 per worker × 1 worker).
	done := make(chan int, 1)
	go func() {
		code, _ := call(t, "POST", base+"/v1/route", `{"request_id":"w","tokens":[21,22,23,24]}`)
		done <- code
	}()
	testutil.Within(t, 15*time.Second, "w waits in interactive", func() bool { return queued(r, "interactive") == 1 })
	req, err := http.NewRequest("POST", base+"/v1/route", strings.NewReader(`{"request_id":"x","tokens":[31,32,33,34]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(PolicyClassHeader, "interactive") // the family, by header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != StatusOverloaded {
		t.Fatalf("second waiting interactive request: %d, want 529", resp.StatusCode)
	}
	if code, body := call(t, "POST", base+"/v1/route/a/prefill_done", ""); code != 200 {
		t.Fatalf("prefill_done: %d %v", code, body)
	}
	if code := <-done; code != 200 {
		t.Fatalf("waiting request answered %d after capacity freed", code)
	}
}

// TestE2EPolicyClassOverLimit: the OpenAI frontend over simulated vLLM workers publishing real KV events:
// with the worker busy, a chat request in a class at its queue limit (x-dynamo-meta-policy-class) gets
// 529 with an OpenAI error body; one in a class that never queues is served.
func TestE2EPolicyClassOverLimit(t *testing.T) {
	pc, err := policy.Parse([]byte(`
default_policy_family: open
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: open, policy_family: open, cache_bucket: all, quantum: 16}
  - {name: capped, quantum: 16, prefill_busy_threshold: 0, request_queue_limit_per_worker: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := startStack(t, stackOpts{workers: 1, speedup: 100, policy: pc})
	// Hold prefill on the worker: a /v1/route decision is charged until its prefill_done.
	tokens := make([]string, 64)
	for i := range tokens {
		tokens[i] = fmt.Sprint(1000 + i)
	}
	if r := s.post(t, "/v1/route", `{"request_id":"hold","tokens":[`+strings.Join(tokens, ",")+`]}`); r.status != 200 {
		t.Fatalf("hold: %d %s", r.status, r.raw)
	}
	rej := s.post(t, "/v1/chat/completions", chatBody(s.name, "over the limit", ""), PolicyClassHeader, "capped")
	if rej.status != 529 {
		t.Fatalf("capped class: %d %s", rej.status, rej.raw)
	}
	if e, ok := rej.body["error"].(map[string]any); !ok || e["type"] != "overloaded_error" || e["code"] != float64(529) {
		t.Fatalf("529 body: %s", rej.raw)
	}
	ok := s.post(t, "/v1/chat/completions", chatBody(s.name, "never queues", ""))
	if ok.status != 200 {
		t.Fatalf("open class: %d %s", ok.status, ok.raw)
	}
	if r := s.post(t, "/v1/route/hold/prefill_done", ""); r.status != 200 {
		t.Fatalf("prefill_done: %d %s", r.status, r.raw)
	}
	// With the worker's prefill drained, the capped class no longer has to wait: it is served.
	if r := s.post(t, "/v1/chat/completions", chatBody(s.name, "room now", ""), PolicyClassHeader, "capped"); r.status != 200 {
		t.Fatalf("capped class with room: %d %s", r.status, r.raw)
	}
}

package frontend

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// startRouterAPI serves a real router's API (after any extra handlers) on 127.0.0.1 and returns its base
// URL, https:// when cfg sets TLS.
func startRouterAPI(t *testing.T, blockSize int, cfg ServerConfig, extra ...Handler) (string, *router.Router) {
	t.Helper()
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(blockSize))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cfg, append(extra, &RouterAPI{R: r})...)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		r.Stop()
		system.Shutdown()
	})
	scheme := "http://"
	if cfg.TLSCert != "" {
		scheme = "https://"
	}
	return scheme + ln.Addr().String(), r
}

func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: non-JSON body %q", method, url, raw)
		}
	}
	return resp.StatusCode, out
}

func TestRouterAPIEndToEnd(t *testing.T) {
	base, _ := startRouterAPI(t, 4, ServerConfig{})
	p, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-p.Done() }()
	go func() { _ = p.Run(ctx) }()
	<-p.Ready()

	reg := `{"id":42,"url":"http://127.0.0.1:9","events":"` + p.Addr() + `","replay":"` + p.ReplayAddr() + `"}`
	if code, body := call(t, "POST", base+"/v1/workers", reg); code != 200 || body["worker_id"] != float64(42) {
		t.Fatalf("register: %d %v", code, body)
	}
	if code, _ := call(t, "POST", base+"/v1/workers", reg); code != 400 {
		t.Fatalf("duplicate register: %d", code)
	}
	_ = p.Publish(ctx, &kvevents.Batch{HasDPRank: true, Events: []kvevents.Event{{Kind: kvevents.Stored,
		BlockHashes: []uint64{1, 2}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"}}})

	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := call(t, "POST", base+"/v1/overlap_scores", `{"tokens":[1,2,3,4,5,6,7,8,9]}`)
		if code != 200 {
			t.Fatalf("overlap: %d %v", code, body)
		}
		scores := body["scores"].([]any)
		if len(scores) == 1 {
			s := scores[0].(map[string]any)
			if s["worker_id"] != float64(42) || s["overlap_blocks"] != float64(2) || s["dp_rank"] != float64(0) {
				t.Fatalf("score %v", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("events never reached the index")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The same query by block hashes (as `kvroute hash --block-size 4` prints them).
	code, body := call(t, "POST", base+"/v1/overlap_scores", `{"block_hashes":[14643705804678351452]}`)
	if code != 200 || len(body["scores"].([]any)) != 1 {
		t.Fatalf("hash query: %d %v", code, body)
	}
	// A query in a cache namespace hashes in it: the unsalted chain is not its prefix.
	if code, body := call(t, "POST", base+"/v1/overlap_scores", `{"tokens":[1,2,3,4,5,6,7,8],"cache_salt":"t"}`); code != 200 || len(body["scores"].([]any)) != 0 {
		t.Fatalf("salted query: %d %v", code, body)
	}
	code, body = call(t, "GET", base+"/v1/workers", "")
	ws := body["workers"].([]any)
	if code != 200 || len(ws) != 1 || ws[0].(map[string]any)["indexed_blocks"] != float64(2) {
		t.Fatalf("workers: %d %v", code, body)
	}
	if code, _ := call(t, "GET", base+"/v1/workers/42", ""); code != 200 {
		t.Fatalf("get worker: %d", code)
	}
	if code, _ := call(t, "DELETE", base+"/v1/workers/42", ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code, body := call(t, "POST", base+"/v1/overlap_scores", `{"tokens":[1,2,3,4]}`); code != 200 || len(body["scores"].([]any)) != 0 {
		t.Fatalf("after delete: %d %v", code, body)
	}
	if code, _ := call(t, "GET", base+"/health", ""); code != 200 {
		t.Fatalf("health %d", code)
	}
	if code, _ := call(t, "GET", base+"/live", ""); code != 200 {
		t.Fatalf("live %d", code)
	}
}

func TestRouterAPIBadInput(t *testing.T) {
	base, _ := startRouterAPI(t, 4, ServerConfig{MaxBodyBytes: 1 << 16})
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"empty body", "POST", "/v1/overlap_scores", "", 400},
		{"bad json", "POST", "/v1/overlap_scores", "{", 400},
		{"not an object", "POST", "/v1/overlap_scores", "[1,2]", 400},
		{"tokens wrong type", "POST", "/v1/overlap_scores", `{"tokens":"abc"}`, 400},
		{"negative token", "POST", "/v1/overlap_scores", `{"tokens":[-1]}`, 400},
		{"token too big", "POST", "/v1/overlap_scores", `{"tokens":[4294967296]}`, 400},
		{"float token", "POST", "/v1/overlap_scores", `{"tokens":[1.5]}`, 400},
		{"hash wrong type", "POST", "/v1/overlap_scores", `{"block_hashes":["x"]}`, 400},
		{"both fields", "POST", "/v1/overlap_scores", `{"tokens":[1],"block_hashes":[1]}`, 400},
		{"no field", "POST", "/v1/overlap_scores", `{}`, 400},
		{"trailing garbage", "POST", "/v1/overlap_scores", `{"tokens":[1]} x`, 400},
		{"overlap GET", "GET", "/v1/overlap_scores", "", 405},
		{"register bad json", "POST", "/v1/workers", "{{", 400},
		{"register no id", "POST", "/v1/workers", `{"url":"http://h:1"}`, 400},
		{"register bad endpoint", "POST", "/v1/workers", `{"id":1,"events":"http://x"}`, 400},
		{"register id string", "POST", "/v1/workers", `{"id":"one"}`, 400},
		{"register unknown field", "POST", "/v1/workers", `{"id":1,"block_sise":16}`, 400},
		{"register unknown device", "POST", "/v1/workers", `{"id":1,"device":"tpu"}`, 400},
		{"register another block size", "POST", "/v1/workers", `{"id":1,"block_size":32}`, 400},
		{"delete unknown", "DELETE", "/v1/workers/77", "", 404},
		{"delete bad id", "DELETE", "/v1/workers/abc", "", 400},
		{"get unknown", "GET", "/v1/workers/77", "", 404},
		{"workers PUT", "PUT", "/v1/workers", "", 405},
		{"unknown path", "GET", "/nope", "", 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(t, tc.method, base+tc.path, tc.body)
			if code != tc.status {
				t.Fatalf("status %d, want %d (%v)", code, tc.status, body)
			}
			e, ok := body["error"].(map[string]any)
			if !ok || e["message"] == "" || e["type"] == "" || e["code"] != float64(tc.status) {
				t.Fatalf("not an OpenAI error body: %v", body)
			}
		})
	}
	// Still serving.
	if code, _ := call(t, "POST", base+"/v1/overlap_scores", `{"tokens":[1,2,3,4]}`); code != 200 {
		t.Fatalf("server stopped answering: %d", code)
	}
}

func TestRegisterRequiresID(t *testing.T) {
	// A zero id is legal (Dynamo ids are lease ids); the JSON must still name it.
	base, _ := startRouterAPI(t, 4, ServerConfig{})
	if code, body := call(t, "POST", base+"/v1/workers", `{"id":0}`); code != 200 {
		t.Fatalf("id 0: %d %v", code, body)
	}
}

// TestRegisterKeyEnvNeedsPrefix: a worker registered over the admin API takes its key only from a
// variable named KVROUTE_WORKER_KEY...: the frontend would send any other variable's value (the router
// API token, a cloud credential) to a URL the caller chose. The refusal is the same whether the variable
// exists or not, so it does not tell the caller which do.
func TestRegisterKeyEnvNeedsPrefix(t *testing.T) {
	t.Setenv("KVROUTE_WORKER_KEY_TEST", "k1")
	t.Setenv("KVROUTE_ROUTER_API_TOKEN_TEST", "secret")
	base, _ := startRouterAPI(t, 4, ServerConfig{})
	var refusals []string
	for _, name := range []string{"KVROUTE_ROUTER_API_TOKEN_TEST", "KVROUTE_NO_SUCH_VARIABLE", "HOME"} {
		code, body := call(t, "POST", base+"/v1/workers", fmt.Sprintf(`{"id":7,"url":"http://127.0.0.1:9","api_key_env":%q}`, name))
		if code != 400 {
			t.Fatalf("api_key_env %s: %d %v", name, code, body)
		}
		refusals = append(refusals, fmt.Sprint(body))
	}
	if refusals[0] != refusals[1] || refusals[1] != refusals[2] {
		t.Fatalf("the refusals differ by variable: %q", refusals)
	}
	if code, body := call(t, "POST", base+"/v1/workers", `{"id":7,"url":"http://127.0.0.1:9","api_key_env":"KVROUTE_WORKER_KEY_TEST"}`); code != 200 {
		t.Fatalf("prefixed variable: %d %v", code, body)
	}
}

// TestOverlapScoresOrder: /v1/overlap_scores lists the largest overlap first, ties by worker id and then
// rank, over a large answer with many ties.
func TestOverlapScoresOrder(t *testing.T) {
	var scores []prefix.Score
	for i := range 5000 {
		scores = append(scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64((i * 7919) % 1201), DPRank: uint32(i % 3)},
			Blocks: uint32((i * 31) % 17)})
	}
	out := toOverlapScores(scores)
	if len(out) != len(scores) {
		t.Fatalf("%d scores listed, want %d", len(out), len(scores))
	}
	for i := 1; i < len(out); i++ {
		a, b := out[i-1], out[i]
		if a.OverlapBlocks < b.OverlapBlocks || (a.OverlapBlocks == b.OverlapBlocks &&
			(a.WorkerID > b.WorkerID || (a.WorkerID == b.WorkerID && a.DPRank > b.DPRank))) {
			t.Fatalf("position %d: %+v before %+v", i, a, b)
		}
	}
}

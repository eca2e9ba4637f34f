package frontend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// publisherFor starts a real vLLM-format publisher on loopback and registers it as worker id.
func publisherFor(t *testing.T, base string, id int) *kvevents.Publisher {
	t.Helper()
	p, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); <-p.Done() })
	go func() { _ = p.Run(ctx) }()
	<-p.Ready()
	body := fmt.Sprintf(`{"id":%d,"url":"http://127.0.0.1:9","events":%q,"replay":%q,"max_num_batched_tokens":100}`, id, p.Addr(), p.ReplayAddr())
	if code, b := call(t, "POST", base+"/v1/workers", body); code != 200 {
		t.Fatalf("register %d: %d %v", id, code, b)
	}
	return p
}

func routeTo(t *testing.T, base, id string, toks []uint32) (int, map[string]any) {
	t.Helper()
	return call(t, "POST", base+"/v1/route", fmt.Sprintf(`{"request_id":%q,"tokens":%s}`, id, tokenList(toks)))
}

func TestRouteFollowsCacheThenLoad(t *testing.T) {
	base, r := startRouterAPI(t, 4, ServerConfig{})
	p1 := publisherFor(t, base, 1)
	publisherFor(t, base, 2)

	prompt := make([]uint32, 32) // 8 blocks of 4
	for i := range prompt {
		prompt[i] = uint32(1000 + i)
	}
	// Worker 1 caches the whole prompt (one store of 8 blocks, engine hashes 1..8).
	hashes := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	_ = p1.Publish(context.Background(), &kvevents.Batch{HasDPRank: true, Events: []kvevents.Event{{Kind: kvevents.Stored,
		BlockHashes: hashes, TokenIDs: prompt, BlockSize: 4, Medium: "GPU"}}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, b := call(t, "POST", base+"/v1/overlap_scores", `{"tokens":`+tokenList(prompt)+`}`)
		if code == 200 && len(b["scores"].([]any)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("store never indexed")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// 1. The prompt goes to the worker that holds it, and the answer says why.
	code, b := routeTo(t, base, "a", prompt)
	if code != 200 || b["worker_id"] != float64(1) || b["overlap_blocks"] != float64(8) {
		t.Fatalf("cached prompt: %d %v", code, b)
	}
	if c := b["candidates"].([]any); len(c) != 2 {
		t.Fatalf("candidates %v", c)
	}
	if code, _ := routeTo(t, base, "a", prompt); code != 400 {
		t.Fatalf("duplicate id: %d", code)
	}
	if code, _ := call(t, "POST", base+"/v1/route/a/free", ""); code != 200 {
		t.Fatalf("free a: %d", code)
	}

	// 2. Equal caches (prompts nobody holds): load decides. Two in flight on different workers.
	other, other2 := make([]uint32, 32), make([]uint32, 32)
	for i := range other {
		other[i], other2[i] = uint32(5000+i), uint32(7000+i)
	}
	_, b1 := routeTo(t, base, "x1", other)
	_, b2 := routeTo(t, base, "x2", other2)
	if b1["worker_id"] == b2["worker_id"] {
		// The first request's prefill load is on its worker: with prefill tracking the idle worker must
		// win. (The same prompt twice would follow the first: predict-on-route counts it as cached there.)
		t.Fatalf("both requests on worker %v", b1["worker_id"])
	}
	for _, id := range []string{"x1", "x2"} {
		if code, _ := call(t, "POST", base+"/v1/route/"+id+"/free", ""); code != 200 {
			t.Fatalf("free %s: %d", id, code)
		}
	}
	// Freeing restores balance: a third prompt nobody holds sees equal load again (cost equal on both).
	other3 := make([]uint32, 32)
	for i := range other3 {
		other3[i] = uint32(9000 + i)
	}
	_, b3 := routeTo(t, base, "x3", other3)
	cs := b3["candidates"].([]any)
	if cs[0].(map[string]any)["cost"] != cs[1].(map[string]any)["cost"] {
		t.Fatalf("after free, costs differ: %v", cs)
	}
	_, _ = call(t, "POST", base+"/v1/route/x3/free", "")

	// 3. Busy thresholds: at most 10 active prefill tokens per worker, then every worker is busy → 503.
	if code, b := call(t, "POST", base+"/busy_threshold", `{"active_prefill_tokens_threshold":10}`); code != 200 || b["active_prefill_tokens_threshold"] != float64(10) {
		t.Fatalf("set threshold: %d %v", code, b)
	}
	// (Distinct prompts: a repeat would be predicted cached on its worker, with no prefill to charge.)
	fresh := func(n int) []uint32 {
		p := make([]uint32, 32)
		for i := range p {
			p[i] = uint32(20000 + 100*n + i)
		}
		return p
	}
	routeTo(t, base, "b1", fresh(1))
	routeTo(t, base, "b2", fresh(2))
	code, b = routeTo(t, base, "b3", fresh(3))
	if code != 503 || b["error"].(map[string]any)["type"] != "service_unavailable_error" {
		t.Fatalf("all busy: %d %v", code, b)
	}
	// prefill_done releases the prefill charge: capacity returns.
	if code, _ := call(t, "POST", base+"/v1/route/b1/prefill_done", ""); code != 200 {
		t.Fatal("prefill_done")
	}
	if code, _ := routeTo(t, base, "b4", fresh(4)); code != 200 {
		t.Fatalf("after prefill_done: %d", code)
	}
	if code, _ := call(t, "POST", base+"/v1/route/nope/free", ""); code != 404 {
		t.Fatal("unknown id must be 404")
	}
	if code, _ := call(t, "POST", base+"/v1/route/nope/prefill_done", ""); code != 404 {
		t.Fatal("unknown id must be 404")
	}
	if code, b := call(t, "POST", base+"/busy_threshold", `{"active_prefill_tokens_threshold":-1}`); code != 200 || b["active_prefill_tokens_threshold"] != nil {
		t.Fatalf("clear threshold: %d %v", code, b)
	}
	_ = r
}

func TestRouteBadInput(t *testing.T) {
	base, _ := startRouterAPI(t, 4, ServerConfig{})
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"no workers", "POST", "/v1/route", `{"request_id":"a","tokens":[1,2,3,4]}`, 503},
		{"no id", "POST", "/v1/route", `{"tokens":[1]}`, 400},
		{"no tokens", "POST", "/v1/route", `{"request_id":"a"}`, 400},
		{"both", "POST", "/v1/route", `{"request_id":"a","tokens":[1],"block_hashes":[1]}`, 400},
		{"negative priority", "POST", "/v1/route", `{"request_id":"a","tokens":[1],"priority":-1}`, 400},
		{"bad override", "POST", "/v1/route", `{"request_id":"a","tokens":[1],"router_config_override":{"overlap_score_credit":-3}}`, 400},
		{"route GET", "GET", "/v1/route", "", 405},
		{"bad action", "POST", "/v1/route/a/explode", "", 404},
		{"free GET", "GET", "/v1/route/a/free", "", 405},
		{"busy bad json", "POST", "/busy_threshold", "{", 400},
		{"busy PUT", "PUT", "/busy_threshold", "", 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(t, tc.method, base+tc.path, tc.body)
			if code != tc.status {
				t.Fatalf("status %d, want %d (%v)", code, tc.status, body)
			}
		})
	}
}

// TestBusyThresholdPerModel: POST /busy_threshold sets the thresholds of the model it names (the first
// model's without a name; 404 for a model not served), GET lists every model's, GET ?model= one's, as
// Dynamo's frontend answers them.
func TestBusyThresholdPerModel(t *testing.T) {
	system := actors.NewSystem(nil)
	llama, err := router.New(system, router.DefaultConfig(16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { llama.Stop(); system.Shutdown() })
	api := &RouterAPI{Model: "qwen", Models: map[string]*router.Router{"llama": llama}}
	base, qwen := startRouterAPI(t, 16, ServerConfig{}, api)
	api.R = qwen

	code, b := call(t, "POST", base+"/busy_threshold", `{"model":"llama","active_decode_blocks_threshold":0.5}`)
	if code != 200 || b["model"] != "llama" || b["active_decode_blocks_threshold"] != 0.5 {
		t.Fatalf("set llama's: %d %v", code, b)
	}
	if got, other := llama.Config().ActiveDecodeBlocksThreshold, qwen.Config().ActiveDecodeBlocksThreshold; !got.Set || got.V != 0.5 || other.Set {
		t.Fatalf("llama's threshold %+v, qwen's %+v: want llama's alone set", got, other)
	}
	if code, b := call(t, "POST", base+"/busy_threshold", `{"active_prefill_tokens_threshold":100}`); code != 200 || b["model"] != "qwen" {
		t.Fatalf("set without a model: %d %v", code, b)
	}
	if got := qwen.Config().ActivePrefillTokensThreshold; !got.Set || got.V != 100 || llama.Config().ActivePrefillTokensThreshold.Set {
		t.Fatal("a POST without a model did not set the first model's alone")
	}
	if code, b := call(t, "POST", base+"/busy_threshold", `{"model":"nope","active_decode_blocks_threshold":0.1}`); code != 404 {
		t.Fatalf("a model not served: %d %v", code, b)
	}

	code, b = call(t, "GET", base+"/busy_threshold", "")
	list, _ := b["thresholds"].([]any)
	if code != 200 || len(list) != 2 {
		t.Fatalf("list: %d %v", code, b)
	}
	first, second := list[0].(map[string]any), list[1].(map[string]any)
	if first["model"] != "qwen" || first["active_prefill_tokens_threshold"] != float64(100) || first["active_decode_blocks_threshold"] != nil ||
		second["model"] != "llama" || second["active_decode_blocks_threshold"] != 0.5 {
		t.Fatalf("list: %v", list)
	}
	if code, b := call(t, "GET", base+"/busy_threshold?model=llama", ""); code != 200 || b["active_decode_blocks_threshold"] != 0.5 {
		t.Fatalf("one model's: %d %v", code, b)
	}
	if code, _ := call(t, "GET", base+"/busy_threshold?model=nope", ""); code != 404 {
		t.Fatalf("one model not served: %d", code)
	}
}

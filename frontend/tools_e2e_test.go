package frontend

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// TestE2EToolsRenderedAlike sends a chat with tools (and a tool call turn) twice: the simulated worker
// renders the template exactly as the router, so the second request's predicted overlap equals the
// tokens the worker reports cached, /tokenize of the frontend and of the worker agree on the same chat
// body, and every worker stays healthy and trusted.
func TestE2EToolsRenderedAlike(t *testing.T) {
	s := startStack(t, stackOpts{workers: 2, speedup: 100})
	tools := `[{"type":"function","function":{"name":"get_weather","description":"Weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	msgs := `[{"role":"system","content":"You are terse."},` +
		`{"role":"user","content":` + mustJSON(longText("tools", 120)) + `},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"sunny, 21C"}]`
	body := fmt.Sprintf(`{"model":%q,"messages":%s,"tools":%s,"max_tokens":4}`, s.name, msgs, tools)

	first := s.post(t, "/v1/chat/completions", body)
	if first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	s.waitOverlap(t, "", first.worker)
	second := s.post(t, "/v1/chat/completions", body)
	if second.status != 200 || second.worker != first.worker {
		t.Fatalf("second: %d on worker %q (first %q) %s", second.status, second.worker, first.worker, second.raw)
	}
	cached := second.body["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	var overlap float64
	fmt.Sscan(second.overlap, &overlap)
	if overlap == 0 || cached != overlap*16 {
		t.Fatalf("worker cached %v tokens, router predicted %v blocks (%v tokens)", cached, overlap, overlap*16)
	}

	// The same chat body tokenized by the frontend and by the worker.
	tokBody := fmt.Sprintf(`{"model":%q,"messages":%s,"tools":%s}`, s.name, msgs, tools)
	front := s.post(t, "/tokenize", tokBody)
	if front.status != 200 {
		t.Fatalf("frontend /tokenize: %d %s", front.status, front.raw)
	}
	spec := s.fleet.Specs()[0]
	url := spec[strings.Index(spec, "url=")+4:]
	url = url[:strings.IndexByte(url+",", ',')]
	resp, err := http.Post(url+"/tokenize", "application/json", strings.NewReader(tokBody))
	if err != nil {
		t.Fatal(err)
	}
	var worker map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&worker)
	resp.Body.Close()
	if fmt.Sprint(worker["tokens"]) != fmt.Sprint(front.body["tokens"]) {
		t.Fatalf("/tokenize differs: frontend %v tokens, worker %v tokens", front.body["count"], worker["count"])
	}
	noTools := s.post(t, "/tokenize", fmt.Sprintf(`{"model":%q,"messages":%s}`, s.name, msgs))
	if noTools.body["count"] == front.body["count"] {
		t.Fatal("/tokenize ignores tools")
	}

	for _, w := range s.router.Workers() {
		if !w.Healthy || w.Degraded != "" || w.Prediction != "events" {
			t.Errorf("worker %d after a chat with tools: healthy %v, degraded %q, prediction %q", w.ID, w.Healthy, w.Degraded, w.Prediction)
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

package frontend

import (
	"fmt"
	"testing"

	json "github.com/goccy/go-json"
)

// TestE2EContinueFinalMessage: a chat request that continues its final (assistant) message is tokenized by
// the frontend exactly as the simulated worker (vLLM's rules) renders it — cut after the final text, no
// end-of-turn, no generation prompt — so the repeated request's predicted overlap is what the worker's
// own cache hits, to the last block. Combining it with add_generation_prompt is a 400.
func TestE2EContinueFinalMessage(t *testing.T) {
	s := startStack(t, stackOpts{workers: 2, speedup: 100})
	answer, _ := json.Marshal("Sure. " + longText("partial", 120))
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q},{"role":"assistant","content":%s}],"max_tokens":4,"continue_final_message":true,"add_generation_prompt":false}`,
		s.name, longText("question", 60), answer)
	first := s.post(t, "/v1/chat/completions", body)
	if first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	s.waitOverlap(t, "", first.worker)
	second := s.post(t, "/v1/chat/completions", body)
	if second.status != 200 || second.worker != first.worker {
		t.Fatalf("second: %d on %s (first %s): %s", second.status, second.worker, first.worker, second.raw)
	}
	usage := second.body["usage"].(map[string]any)
	cached := usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	prompt := usage["prompt_tokens"].(float64)
	var overlap float64
	fmt.Sscan(second.overlap, &overlap)
	if overlap == 0 || cached != overlap*16 || overlap != float64(int(prompt)/16) {
		t.Fatalf("predicted %v blocks, worker cached %v of %v prompt tokens", overlap, cached, prompt)
	}
	bad := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure"}],"continue_final_message":true,"add_generation_prompt":true}`, s.name)
	if r := s.post(t, "/v1/chat/completions", bad); r.status != 400 {
		t.Fatalf("continue + add_generation_prompt: %d %s", r.status, r.raw)
	}
}

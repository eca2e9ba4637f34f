package mocker

import (
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

const fixtureModel = "../../testdata/models/Qwen3-VL-2B-Instruct"

func TestQwenModelChatAndImages(t *testing.T) {
	m, err := LoadModel(fixtureModel, "qwen")
	if err != nil {
		t.Skipf("model fixture: %v", err)
	}
	w := startTestWorker(t, func(c *WorkerConfig) { c.Model = m })
	msgs := []map[string]any{{"role": "user", "content": []map[string]any{
		{"type": "image_url", "image_url": map[string]any{"url": pngDataURI(t, 512, 320)}},
		{"type": "text", "text": "Describe the picture."},
	}}}
	_, tok := postJSON(t, w.URL()+"/tokenize", map[string]any{"messages": msgs})
	var tr struct{ Tokens []uint32 }
	must(t, json.Unmarshal(tok, &tr))
	pads := 0
	for _, id := range tr.Tokens {
		if id == qwenImagePad {
			pads++
		}
	}
	// 512×320 → 32·20 patches of 16 → 160 tokens after the 2×2 merge.
	if pads != 160 || tr.Tokens[0] != qwenImStart {
		t.Fatalf("%d pads, first token %d", pads, tr.Tokens[0])
	}
	status, body := postJSON(t, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 4})
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	var r completionResp
	must(t, json.Unmarshal(body, &r))
	if r.Usage.PromptTokens != len(tr.Tokens) || r.Usage.CompletionTokens != 4 || !strings.Contains(fillerText+fillerText, r.Choices[0].Message.Content) {
		t.Fatalf("usage %+v content %q", r.Usage, r.Choices[0].Message.Content)
	}
	_, tok = postJSON(t, w.URL()+"/tokenize", map[string]any{"prompt": "Hello world"})
	if !strings.Contains(string(tok), `"count":2`) {
		t.Fatalf("tokenize %s", tok)
	}
}

package mocker

import (
	"testing"

	"github.com/goccy/go-json"

	"github.com/kvroute/kvroute/mm"
)

// FuzzParseRequest feeds arbitrary bodies to the OpenAI request parsing (prompt forms and chat content
// parts): it must return an error or a prompt, never panic.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hi","max_tokens":3}`,
		`{"prompt":[1,2,3]}`,
		`{"prompt":[[1,2]]}`,
		`{"prompt":["a"]}`,
		`{"messages":[{"role":"user","content":"x"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="},"uuid":"u"}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":"http://x"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	guard, _ := mm.NewGuard(nil)
	w := &Worker{model: NewFallbackModel("m"), images: newImageResolver(guard)}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req openAIRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		_, _ = w.parsePrompt(req.Prompt)
		if msgs, err := parseMessages(req.Messages); err == nil {
			for _, m := range msgs {
				for _, p := range m.Parts {
					if p.Image && len(p.URL) > 5 && p.URL[:5] == "data:" {
						_, _, _, _ = w.images.resolve(p)
					}
				}
			}
		}
	})
}

// FuzzParseTokenIDs checks the token-id fast path against the JSON decoder.
func FuzzParseTokenIDs(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2,3]`, `[ 1 , 2 ]`, `[4294967295]`, `[4294967296]`, `[01]`, `[1.5]`, `[-1]`, `[1,]`, `[,1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := parseTokenIDs(raw)
		if !ok {
			return
		}
		var want []uint32
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("fast path accepted %q, decoder: %v", raw, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %v vs %v", raw, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: %v vs %v", raw, got, want)
			}
		}
	})
}

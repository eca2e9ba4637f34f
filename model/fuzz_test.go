package model

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzEncode: arbitrary bytes never panic any of the three tokenizers, every id is in the vocabulary, and valid
// UTF-8 round-trips: exactly for Llama-3 (no normalizer), up to NFC for Qwen3, and for Llama-2 when the text
// holds no "▁" and no added token (SentencePiece turns spaces into "▁" and back). Seeds: f.Add below and
// testdata/fuzz/FuzzEncode.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "it's   \n\n x", "<|im_start|>user\nhi<|im_end|>", "a\xffb\xc0", "\u0085\u00a0\u3000", "e\u0301 ﬁ ＡＢ 👨‍👩‍👧", "12345 ... 'LL", "<s></s><unk>"} {
		f.Add([]byte(s))
	}
	toks := []*Tokenizer{testTokenizer(f, "qwen3"), testTokenizer(f, "llama3"), testTokenizer(f, "llama2")}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := string(data)
		for i, tok := range toks {
			ids := tok.Encode(s)
			for _, id := range ids {
				if int(id) >= tok.VocabSize() {
					t.Fatalf("tokenizer %d: id %d out of range", i, id)
				}
			}
			if !utf8.ValidString(s) {
				_ = tok.Decode(ids, DecodeOptions{})
				continue
			}
			got := tok.Decode(ids, DecodeOptions{})
			switch i {
			case 0:
				if want := norm.NFC.String(s); got != want {
					t.Fatalf("qwen3 round trip %q: got %q", want, got)
				}
			case 1:
				if got != s {
					t.Fatalf("llama3 round trip %q: got %q", s, got)
				}
			case 2:
				if !strings.Contains(s, "\u2581") && !strings.Contains(s, "<s>") && !strings.Contains(s, "</s>") && !strings.Contains(s, "<unk>") && got != s {
					t.Fatalf("llama2 round trip %q: got %q", s, got)
				}
			}
		}
	})
}

// FuzzChatMessages: any messages JSON either fails to parse or renders and encodes without panicking, and the
// native renderers (fixture, Qwen3 text) agree with gonja wherever gonja renders.
func FuzzChatMessages(f *testing.F) {
	f.Add([]byte(`[{"role":"user","content":"hi"}]`))
	f.Add([]byte(`[{"role":"system","content":null},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:,"}},{"type":"text","text":"x"}]}]`))
	f.Add([]byte(`[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":[1,2.5e300,null]}"}}]},{"role":"tool","content":"r"}]`))
	m := fixture(f)
	qwen3, err := NewChatTemplate(m.TokenizerConfig.ChatTemplate, m.TokenizerConfig.TemplateVars())
	if err != nil {
		f.Fatal(err)
	}
	var pairs [][2]*ChatTemplate
	for _, ct := range []*ChatTemplate{m.ChatTemplate, qwen3} {
		slow := *ct
		slow.native = nil
		pairs = append(pairs, [2]*ChatTemplate{ct, &slow})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, err := ParseMessages(data)
		if err != nil || len(msgs) == 0 {
			return
		}
		_, _ = m.EncodeChat(msgs, ChatOptions{AddGenerationPrompt: true})
		for i, p := range pairs {
			want, err := p[1].Render(msgs, ChatOptions{AddGenerationPrompt: true})
			if err != nil {
				continue
			}
			if got, err := p[0].Render(msgs, ChatOptions{AddGenerationPrompt: true}); err != nil || got != want {
				t.Fatalf("template %d: native %q (%v), gonja %q", i, got, err, want)
			}
		}
	})
}

// FuzzNFC: the piecewise NFC equals x/text's on any input.
func FuzzNFC(f *testing.F) {
	for _, s := range []string{"cafe\u0301", "\u1100\u1161\u11a8x", "a\u0301\u0323b\u212b", "\xffe\u0301", "👍🏽e\u0300"} {
		f.Add(s)
	}
	initNFCInert()
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(appendNFC(nil, s)), norm.NFC.String(s); got != want {
			t.Fatalf("appendNFC(%q) = %q, want %q", s, got, want)
		}
	})
}

// FuzzSplitter: the hand-written splitters agree with the regex engine running the same patterns.
func FuzzSplitter(f *testing.F) {
	for _, s := range []string{"it's  a\n\n b", "x'LL'd 123456 ！？\u3000y", "\u0085\u00a0a\t\tb  \r\n", "👍🏽abc'"} {
		f.Add(s)
	}
	initClasses()
	pats := []struct {
		fast preTokenizer
		slow *regexSplitter
	}{}
	for _, p := range []struct {
		pattern string
		fast    preTokenizer
	}{{patternQwen, gpt4Splitter{maxDigits: 1}}, {patternLlama3, gpt4Splitter{maxDigits: 3}}, {patternGPT2, gpt2Splitter{}}} {
		slow, err := newRegexSplitter(p.pattern)
		if err != nil {
			f.Fatal(err)
		}
		pats = append(pats, struct {
			fast preTokenizer
			slow *regexSplitter
		}{p.fast, slow})
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for i, p := range pats {
			got, want := p.fast.split(s, nil), p.slow.split(s, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("pattern %d %q:\n fast  %q\n regex %q", i, s, words(s, got), words(s, want))
			}
		}
	})
}

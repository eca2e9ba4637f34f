package model

import (
	"strconv"
	"strings"
	"testing"
)

// longConversation returns about `tokens` tokens of multi-turn chat (`turns` messages after a system prompt)
// from the corpus.
func longConversation(tb testing.TB, m *Model, tokens, turns int) []Message {
	tb.Helper()
	corpus := readCorpus(tb)
	var msgs []Message
	msgs = append(msgs, Message{Role: "system", Content: TextContent("You are a helpful assistant.")})
	per := tokens / turns
	line := 0
	for i := 0; i < turns; i++ {
		var sb strings.Builder
		n := 0
		for n < per {
			s := corpus[line%len(corpus)]
			line++
			sb.WriteString(s)
			sb.WriteByte('\n')
			n += len(m.Tokenizer.Encode(s)) + 1
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, Message{Role: role, Content: TextContent(sb.String())})
	}
	return msgs
}

// BenchmarkEncodeChatLong: one op renders and tokenizes a ~100k-token conversation of M messages whose earlier
// turns were seen before and whose last user turn (~60 tokens) is new every op — the steady state of a long chat
// session. Compare with full=true, the same prompt tokenized without the segment cache.
func BenchmarkEncodeChatLong(b *testing.B) {
	m := fixture(b)
	for _, turns := range []int{40, 200} {
		msgs := longConversation(b, m, 100_000, turns)
		if _, err := m.EncodeChat(msgs, ChatOptions{AddGenerationPrompt: true}); err != nil { // warm the cache
			b.Fatal(err)
		}
		for _, full := range []bool{false, true} {
			benchChatLong(b, m, msgs, "T=100k/M="+strconv.Itoa(turns)+"/full="+strconv.FormatBool(full), full)
		}
	}
}

func benchChatLong(b *testing.B, m *Model, msgs []Message, name string, full bool) {
	last := "Given everything above, summarise the three most important points, question number "
	{
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			conv := append(msgs[:len(msgs):len(msgs)], Message{Role: "user"})
			i, n := 0, 0
			cpu := startCPU()
			for b.Loop() {
				i++
				conv[len(conv)-1].Content = TextContent(last + strconv.Itoa(i) + strings.Repeat(" and more detail", 10))
				var ids []uint32
				if full {
					text, err := m.RenderChat(conv, ChatOptions{AddGenerationPrompt: true})
					if err != nil {
						b.Fatal(err)
					}
					ids = m.Tokenizer.Encode(text)
				} else {
					var err error
					if ids, err = m.EncodeChat(conv, ChatOptions{AddGenerationPrompt: true}); err != nil {
						b.Fatal(err)
					}
				}
				n = len(ids)
			}
			cpu.report(b, 0)
			b.ReportMetric(float64(n), "prompt-tokens")
		})
	}
}

// BenchmarkRender: one op renders a ~100k-token conversation of M messages (template only, no tokenization), with
// the fixture template's native renderer or through gonja (the path of any template without one).
func BenchmarkRender(b *testing.B) {
	m := fixture(b)
	gonja := *m.ChatTemplate
	gonja.native = nil
	for _, turns := range []int{40, 200} {
		msgs := longConversation(b, m, 100_000, turns)
		for _, engine := range []string{"native", "gonja"} {
			ct := m.ChatTemplate
			if engine == "gonja" {
				ct = &gonja
			}
			b.Run("M="+strconv.Itoa(turns)+"/engine="+engine, func(b *testing.B) {
				b.ReportAllocs()
				cpu := startCPU()
				defer cpu.report(b, 0)
				for b.Loop() {
					if _, err := ct.Render(msgs, ChatOptions{AddGenerationPrompt: true}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

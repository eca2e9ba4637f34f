package model

import (
	"strings"
	"testing"
)

// mixedCorpus is about 1 MB of the exactness corpus (English, code, JSON, CJK, Korean, Arabic, Russian, emoji,
// white-space runs, special tokens) joined by newlines and repeated.
func mixedCorpus(tb testing.TB) string {
	tb.Helper()
	var sb strings.Builder
	lines := readCorpus(tb)
	for sb.Len() < 1<<20 {
		for _, s := range lines {
			sb.WriteString(s)
			sb.WriteByte('\n')
		}
	}
	return sb.String()[:1<<20]
}

// BenchmarkEncode: one op encodes the 1 MB mixed corpus. warm = the word cache already holds its words (the steady
// state of a router); cold = the cache is emptied before every op. Reports tokens/s on one goroutine.
func BenchmarkEncode(b *testing.B) {
	text := mixedCorpus(b)
	for _, name := range []string{"qwen3", "llama3", "llama2"} {
		tok := testTokenizer(b, name)
		n := len(tok.Encode(text))
		for _, mode := range []string{"warm", "cold"} {
			b.Run("tok="+name+"/cache="+mode, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(text)))
				dst := make([]uint32, 0, n)
				cpu := startCPU()
				for b.Loop() {
					if mode == "cold" {
						tok.cache.reset()
					}
					dst = tok.AppendEncode(dst[:0], text)
				}
				cpu.report(b, n)
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

package frontend

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkModelOfBody is what several models add to a request: reading the body's top-level "model"
// (one op: one 8k-token-sized chat body, "model" after the messages, the worst case for the scan).
func BenchmarkModelOfBody(b *testing.B) {
	body := []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet ", 1200) +
		`"}],"max_tokens":16,"model":"llama"}`)
	var ctx fasthttp.RequestCtx
	ctx.Request.SetBody(body)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if name, ok := bodyModel(&ctx); !ok || name != "llama" {
			b.Fatal(name)
		}
	}
}

package mm

import (
	"context"
	"strconv"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// BenchmarkResolveWarm: one op resolves a request of N images whose sizes are cached (identity from
// the URL, cache hit, token count); the metric ns/image is the per-image cost on the request path.
func BenchmarkResolveWarm(b *testing.B) {
	png := encodePNG(b, 640, 480)
	srv := newImageServer(b, map[string][]byte{"/a.png": png, "/images/a.png": png})
	for _, n := range []int{1, 4} {
		b.Run("images="+strconv.Itoa(n), func(b *testing.B) {
			r, _ := newTestResolver(b, qwen3Spec(), DefaultResolveConfig(), "127.0.0.1")
			parts := make([]Part, n)
			for i := range parts {
				parts[i] = Part{URL: srv.URL + "/images/a.png?sig=0123456789abcdef&i=" + strconv.Itoa(i)}
			}
			ctx := context.Background()
			dst, reason := r.Resolve(ctx, parts, nil)
			if reason != FallbackNone {
				b.Fatal(reason)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				dst, reason = r.Resolve(ctx, parts, dst)
				if reason != FallbackNone {
					b.Fatal(reason)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/image")
		})
	}
}

// BenchmarkProbeCold: one op is a cache-missing size probe over loopback HTTP (a new URL each time):
// one Range request of 4 KiB, header parse, cache insert.
func BenchmarkProbeCold(b *testing.B) {
	for _, f := range []struct {
		name string
		data []byte
	}{{"png", encodePNG(b, 640, 480)}, {"jpeg", encodeJPEG(b, 640, 480)}} {
		b.Run("format="+f.name, func(b *testing.B) {
			srv := newImageServer(b, map[string][]byte{"/a": f.data})
			p := newTestProber(b, nil, "127.0.0.1")
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				u := srv.URL + "/a?i=" + strconv.Itoa(i)
				h, _, _ := HashURL(u)
				if _, err := p.Size(ctx, u, h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/probe")
		})
	}
}

// BenchmarkExpandHash: one op builds the routing view of a request with 4 images (Qwen3-VL 640x480,
// 300 tokens each) and T text tokens, then computes its local and sequence block hashes (bs=16), as
// the frontend does before the overlap query.
func BenchmarkExpandHash(b *testing.B) {
	spec := qwen3Spec()
	for _, textTokens := range []int{8192} {
		b.Run("images=4/T="+strconv.Itoa(textTokens), func(b *testing.B) {
			var toks []uint32
			per := textTokens / 5
			for img := 0; img < 4; img++ {
				for i := 0; i < per; i++ {
					toks = append(toks, uint32(1000+i))
				}
				toks = append(toks, 151652, imgTok, 151653)
			}
			for len(toks) < textTokens+4*3 {
				toks = append(toks, 7)
			}
			entries := make([]Entry, 4)
			for i := range entries {
				entries[i] = Entry{Hash: Hash(0x9e3779b97f4a7c15 * uint64(i+1)), NumTokens: spec.NumTokens(Size{640, 480})}
			}
			var dst []uint32
			var local, seq []uint64
			for _, stage := range []string{"expand", "expand+hash"} {
				b.Run("stage="+stage, func(b *testing.B) {
					b.ReportAllocs()
					for i := 0; i < b.N; i++ {
						rt, reason := Expand(dst, toks, spec.ImageTokenID, entries, 0, false, 16, DefaultLimits())
						if reason != FallbackNone {
							b.Fatal(reason)
						}
						dst = rt.Tokens
						if stage == "expand+hash" {
							local = scoring.LocalBlockHashes(local[:0], rt.Tokens, 16, scoring.Seed, nil)
							seq = scoring.SequenceHashes(seq[:0], local)
						}
					}
					b.ReportMetric(float64(len(dst)), "routing-tokens")
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/request")
				})
			}
		})
	}
}

// BenchmarkCalculateNumTokens: one op counts the tokens of one 1999x1125 image.
func BenchmarkCalculateNumTokens(b *testing.B) {
	for _, f := range []struct {
		fam Family
		cfg ProcessorConfig
	}{{FamilyQwen2VL, cfgQwen2}, {FamilyQwen3VL, cfgQwen3}, {FamilyLlavaNext, cfgLlava}, {FamilyLlama4, cfgLlama4}, {FamilyKimiK25, cfgKimi}} {
		b.Run("family="+f.fam.String(), func(b *testing.B) {
			n := 0
			for i := 0; i < b.N; i++ {
				n += CalculateNumTokens(1999, 1125, f.fam, f.cfg)
			}
			if n == 0 {
				b.Fatal("zero")
			}
		})
	}
}

// BenchmarkHashURL: one op is the URL identity of a canonical signed URL.
func BenchmarkHashURL(b *testing.B) {
	u := "https://cdn.example.com/images/2026/12/cat.png?X-Amz-Signature=0123456789abcdef0123456789abcdef&X-Amz-Expires=3600"
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := HashURL(u); err != nil {
			b.Fatal(err)
		}
	}
}

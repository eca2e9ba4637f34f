package openai

import (
	"strings"
	"testing"
)

// BenchmarkDecodeChat: one op is DecodeChat (parse + validate) of a chat body; msgs=N is the number of
// messages of ~60 bytes, images=1 adds one image part (the media scan).
func BenchmarkDecodeChat(b *testing.B) {
	for _, tc := range []struct {
		name string
		msgs int
		img  bool
	}{{"msgs=1", 1, false}, {"msgs=16", 16, false}, {"msgs=16/images=1", 16, true}} {
		var sb strings.Builder
		sb.WriteString(`{"model":"m","max_tokens":16,"stream":true,"stream_options":{"include_usage":true},"temperature":0.7,"messages":[`)
		for i := range tc.msgs {
			if i > 0 {
				sb.WriteByte(',')
			}
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			sb.WriteString(`{"role":"` + role + `","content":"The quick brown fox jumps over the lazy dog, again."}`)
		}
		if tc.img {
			sb.WriteString(`,{"role":"user","content":[{"type":"text","text":"what is it?"},{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}`)
		}
		sb.WriteString(`]}`)
		body := []byte(sb.String())
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := DecodeChat(body, Limits{}, []string{"m"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeCompletion: one op is DecodeCompletion of a 512-token-id prompt.
func BenchmarkDecodeCompletion(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","max_tokens":16,"prompt":[`)
	for i := range 512 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString("151643")
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := DecodeCompletion(body, Limits{}, []string{"m"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSetMediaUUIDs: one op rewrites the uuid of one image part in a 16-message body.
func BenchmarkSetMediaUUIDs(b *testing.B) {
	body := []byte(`{"model":"m","messages":[` + strings.Repeat(`{"role":"user","content":"The quick brown fox jumps over the lazy dog."},`, 16) +
		`{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`)
	r, err := ParseChat(body)
	if err != nil {
		b.Fatal(err)
	}
	uuids := []string{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SetMediaUUIDs(body, r.Media, uuids); err != nil {
			b.Fatal(err)
		}
	}
}

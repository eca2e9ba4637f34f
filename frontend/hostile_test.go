package frontend

import (
	"encoding/binary"
	"hash/crc32"
	"net"
	"net/http"
	"strings"
	"testing"
)

// pngHeaderOnly is a PNG whose IHDR claims w×h pixels but which carries no image data: an image that
// lies about its size (a decompression bomb's header).
func pngHeaderOnly(w, h uint32) []byte {
	b := []byte("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2 // 8-bit RGB
	chunk := append([]byte("IHDR"), ihdr...)
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], 13)
	b = append(b, l[:]...)
	b = append(b, chunk...)
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc32.ChecksumIEEE(chunk))
	return append(b, c[:]...)
}

// Hostile inputs against a whole stack with multimodal routing on: each gets the right OpenAI error and
// the server keeps serving.
func TestHostileRequests(t *testing.T) {
	imgs := startImageServer(t)
	imgs.pngs["bomb.png"] = pngHeaderOnly(200000, 200000)
	// A redirect from an allowed host to an internal address (cloud metadata).
	redirect := http.NewServeMux()
	redirect.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	rs := &http.Server{Handler: redirect}
	go func() { _ = rs.Serve(ln) }()
	t.Cleanup(func() { _ = rs.Close() })

	s := startStack(t, stackOpts{workers: 1, speedup: 100, mm: true, allowHosts: []string{"127.0.0.1"}})
	m := s.name
	img := func(url string) string { return imageChat(m, []string{url}, "hi") }
	many := make([]string, 40)
	for i := range many {
		many[i] = imgs.base + "/img/cat.png"
	}
	tests := []struct {
		name, path, body string
		status           int
	}{
		{"invalid utf-8 in content", "/v1/chat/completions", "{\"model\":\"" + m + "\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfeb\"}]}", 400},
		{"invalid utf-8 in prompt", "/v1/completions", "{\"model\":\"" + m + "\",\"prompt\":\"\xc3\x28\"}", 400},
		{"image lies about its size", "/v1/chat/completions", img(imgs.base + "/img/bomb.png"), 400},
		{"redirect to metadata address", "/v1/chat/completions", img("http://" + ln.Addr().String() + "/x.png"), 400},
		{"private address direct", "/v1/chat/completions", img("http://10.0.0.1/x.png"), 400},
		{"link-local address", "/v1/chat/completions", img("http://169.254.169.254/x.png"), 400},
		{"too many images", "/v1/chat/completions", imageChat(m, many, "hi"), 400},
		{"image url not a string", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":5}}]}]}`, 400},
		{"image part without url", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`, 400},
		{"deeply nested messages", "/v1/chat/completions", `{"model":"` + m + `","messages":` + strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000) + `}`, 400},
		{"null bytes in model", "/v1/chat/completions", "{\"model\":\"a\\u0000b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404},
		{"huge max_tokens type", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"x"}],"max_tokens":1e400}`, 400},
		{"negative n", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"x"}],"n":-1}`, 400},
		{"tools not a list", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"x"}],"tools":"rm -rf"}`, 400},
		{"duplicate model key with garbage", "/v1/chat/completions", `{"model":"` + m + `","model":{"x":1},"messages":[{"role":"user","content":"x"}]}`, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.post(t, tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.raw)
			}
			if e, ok := r.body["error"].(map[string]any); !ok || e["message"] == "" {
				t.Fatalf("not an OpenAI error: %s", r.raw)
			}
		})
	}
	if r := s.post(t, "/v1/chat/completions", chatBody(m, "still serving?", "")); r.status != 200 {
		t.Fatalf("server stopped serving: %d %s", r.status, r.raw)
	}
}

package frontend

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
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
	// A pin to a worker that is not registered is the client's error, not an outage.
	if r := s.post(t, "/v1/chat/completions", chatBody(m, "pinned", ""), "x-dynamo-worker-instance-id", "99"); r.status != 404 {
		t.Fatalf("pin to an unknown worker by header: %d %s", r.status, r.raw)
	}
	if r := s.post(t, "/v1/chat/completions", chatBody(m, "pinned", `,"nvext":{"backend_instance_id":99}`)); r.status != 404 {
		t.Fatalf("pin to an unknown worker in nvext: %d %s", r.status, r.raw)
	}
	if r := s.post(t, "/v1/chat/completions", chatBody(m, "still serving?", "")); r.status != 200 {
		t.Fatalf("server stopped serving: %d %s", r.status, r.raw)
	}
}

// canary is a loopback listener that must never be connected to.
type canary struct {
	ln       net.Listener
	accepted atomic.Int64
}

func startCanary(t *testing.T, network, addr string) *canary {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil
	}
	c := &canary{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.accepted.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

// Every SSRF form against a loopback canary, through the frontend (multimodal routing on and off) and
// straight at the simulated worker: each is refused or routed without a fetch, never a 5xx, and nothing
// ever connects to the canary.
func TestSSRFNeverReachesCanary(t *testing.T) {
	c4 := startCanary(t, "tcp", "127.0.0.1:0")
	port := strconv.Itoa(c4.ln.Addr().(*net.TCPAddr).Port)
	c6 := startCanary(t, "tcp", "[::1]:"+port)
	if c6 == nil {
		c6 = startCanary(t, "tcp", "[::1]:0")
	}
	hosts := []string{"127.0.0.1", "2130706433", "127.1", "0x7f.1", "017700000001", "0", "0x7f000001", "127.0.0.1.",
		"%31%32%37.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "[0:0:0:0:0:0:0:1]", "localhost", "LOCALHOST", "a.localhost"}
	var urls []string
	for _, h := range hosts {
		urls = append(urls, "http://"+h+":"+port+"/x.png", "HTTP://"+h+":"+port+"/x.png")
	}
	if c6 != nil {
		urls = append(urls, "http://[::1]:"+strconv.Itoa(c6.ln.Addr().(*net.TCPAddr).Port)+"/x.png")
	}
	urls = append(urls,
		"http://8.8.8.8@127.0.0.1:"+port+"/x.png",
		"http://8.8.8.8\\@127.0.0.1:"+port+"/x.png",
		" http://127.0.0.1:"+port+"/x.png",
		"http://127.0.0.1:"+port+"\\x.png",
		"file:///etc/passwd",
	)
	data := pngDataURIForTest()
	// bodies returns the requests: the first refused ones must get a 4xx (a media part with a canary URL
	// that every parser reads); the rest (disguised keys) may also be routed on their text, unfetched.
	bodies := func(m string) (out []string, refused int) {
		part := func(u string, extra string) string {
			return fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q}%s},{"type":"text","text":"hi"}]}]}`, m, u, extra)
		}
		for _, u := range urls {
			out = append(out, part(u, ""), part(u, `,"uuid":"u-`+strconv.Itoa(len(out))+`"`))
			out = append(out, fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":%q}}]}]}`, m, u))
		}
		refused = len(out)
		canaryURL := "http://127.0.0.1:" + port + "/x.png"
		out = append(out,
			// Keys a case-folding decoder would read and a case-sensitive scanner would not (or the reverse).
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"hi"}],"Messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q}}]}]}`, m, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"Messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q}}]}]}`, m, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","Content":[{"type":"image_url","image_url":{"url":%q}}]}]}`, m, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","Image_URL":{"url":%q}},{"type":"text","text":"hi"}]}]}`, m, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"URL":%q}},{"type":"text","text":"hi"}]}]}`, m, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q,"URL":%q}},{"type":"text","text":"hi"}]}]}`, m, data, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"TYPE":"image_url","type":"text","text":"a","image_url":{"url":%q}}]}]}`, m, canaryURL),
			// Repeated keys: the last one wins for the decoder, the scanner and vLLM alike.
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q,"url":%q}},{"type":"text","text":"hi"}]}]}`, m, data, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q},"image_url":{"url":%q}},{"type":"text","text":"hi"}]}]}`, m, data, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q}}]}]}`, m, canaryURL),
			fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q},"video_url":{"url":%q}},{"type":"text","text":"hi"}]}]}`, m, data, canaryURL),
		)
		return out, refused
	}
	check := func(t *testing.T, post func(body string) (int, string), m string) {
		all, refused := bodies(m)
		for i, b := range all {
			code, raw := post(b)
			if code >= 500 || (i < refused && code < 400) {
				t.Errorf("%s\n-> %d %s", b, code, raw)
			}
		}
	}
	// The frontend's guard alone: its workers would fetch anything.
	for _, mmOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("frontend mm=%v", mmOn), func(t *testing.T) {
			s := startStack(t, stackOpts{workers: 1, speedup: 100, mm: mmOn, workerAllowHosts: []string{"0.0.0.0/0", "::/0"}})
			check(t, func(body string) (int, string) {
				r := s.post(t, "/v1/chat/completions", body)
				return r.status, r.raw
			}, s.name)
		})
	}
	// The simulated worker's guard alone, as a client that bypasses the frontend reaches it.
	t.Run("worker", func(t *testing.T) {
		s := startStack(t, stackOpts{workers: 1, speedup: 100})
		w := s.fleet.Workers[0]
		check(t, func(body string) (int, string) {
			resp, err := http.Post(w.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(raw)
		}, s.name)
	})
	if n := c4.accepted.Load(); n != 0 {
		t.Fatalf("the IPv4 canary was connected to %d times", n)
	}
	if c6 != nil && c6.accepted.Load() != 0 {
		t.Fatalf("the IPv6 canary was connected to %d times", c6.accepted.Load())
	}
}

// pngDataURIForTest is a small PNG as a data: URI (a benign image that needs no fetch).
func pngDataURIForTest() string {
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngOf(32, 32, 9))
}

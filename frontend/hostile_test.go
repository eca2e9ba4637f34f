package frontend

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	if r := s.post(t, "/v1/chat/completions", chatBody(m, "pinned", ""), "x-dynamo-worker-instance-id", "1", "x-dynamo-dp-rank", "7"); r.status != 400 {
		t.Fatalf("pin to a dp rank the worker does not have: %d %s", r.status, r.raw)
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
		urls = append(urls, "http://"+h+":"+port+"/x.png")
	}
	urls = append(urls, "HTTP://127.0.0.1:"+port+"/x.png", "hTTp://0x7f.1:"+port+"/x.png")
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

// rawExchange writes req on a fresh connection and reads every response until the server closes it or
// the deadline passes; it returns the statuses and whether the server closed the connection.
func rawExchange(t *testing.T, addr string, req []byte, deadline time.Duration) (statuses []int, bodies []string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(deadline))
	_, _ = c.Write(req)
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, bodies, !(errors.As(err, &ne) && ne.Timeout())
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses, bodies = append(statuses, resp.StatusCode), append(bodies, string(b))
	}
}

// The hostile-input suite: a few hundred malformed, mistyped, oversized, smuggling, slow-client and SSRF
// requests against a whole stack (frontend, router, simulated worker, multimodal routing on). Every
// answer is checked (never a 5xx, errors in OpenAI form, smuggled requests never answered), the server
// keeps serving, and its memory is bounded afterwards.
func TestHostileSuite(t *testing.T) {
	const timeout = 500 * time.Millisecond
	s := startStack(t, stackOpts{workers: 1, speedup: 200, mm: true,
		server: ServerConfig{MaxBodyBytes: 1 << 20, HeaderTimeout: timeout, ReadTimeout: timeout, MaxHeaderBytes: 8 << 10}})
	addr := strings.TrimPrefix(s.base, "http://")
	m := s.name
	runtime.GC()
	rssStart := rssBytes(t)
	cases, failures := 0, 0
	fail := func(format string, args ...any) {
		failures++
		if failures <= 20 {
			t.Errorf(format, args...)
		}
	}
	checkJSON := func(name, path, body string, want func(int) bool) {
		cases++
		r := s.post(t, path, body)
		if r.status >= 500 || (want != nil && !want(r.status)) {
			fail("%s: %d %.300s\n%.300s", name, r.status, r.raw, body)
			return
		}
		if r.status >= 400 {
			e, ok := r.body["error"].(map[string]any)
			if !ok || e["message"] == "" || e["code"] != float64(r.status) {
				fail("%s: %d is not an OpenAI error: %.300s", name, r.status, r.raw)
			}
		}
	}
	is4xx := func(c int) bool { return c >= 400 && c < 500 }

	// 1. Truncated JSON: every cut of a valid body is a 400.
	valid := chatBody(m, "hostile", "")
	for i := 0; i < len(valid)-1; i += 2 {
		checkJSON(fmt.Sprintf("truncated at %d", i), "/v1/chat/completions", valid[:i], func(c int) bool { return c == 400 })
	}
	// 2. Every field with values of every type: a 4xx or a served request, never a 5xx.
	fields := []string{"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
		"stream_options", "stop", "seed", "user", "presence_penalty", "frequency_penalty", "tools", "tool_choice",
		"response_format", "logprobs", "top_logprobs", "nvext", "cache_salt", "priority", "request_id",
		"data_parallel_rank", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "mm_processor_kwargs", "mm_kwargs"}
	values := []string{`"x"`, `-1`, `0`, `1e400`, `9223372036854775808`, `[]`, `{}`, `null`, `true`, `[1,"a",{}]`, `"\u0000\ud800"`}
	for _, f := range fields {
		for _, v := range values {
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"typed"}],"max_tokens":2,%q:%s}`, m, f, v)
			checkJSON(f+"="+v, "/v1/chat/completions", body, nil)
		}
	}
	for _, v := range values {
		checkJSON("prompt="+v, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":2}`, m, v), nil)
		checkJSON("content="+v, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%s}],"max_tokens":2}`, m, v), nil)
		checkJSON("part="+v, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":[%s]}],"max_tokens":2}`, m, v), nil)
	}
	// 3. SSRF forms: refused before anything is fetched.
	for _, u := range []string{"http://2130706433/a.png", "http://127.1/a.png", "http://0x7f.1/a.png", "http://017700000001/a.png",
		"http://0/a.png", "http://[::1]/a.png", "http://localhost/a.png", "http://169.254.169.254/a.png", "file:///etc/passwd",
		"http://8.8.8.8\\@127.0.0.1/a.png"} {
		checkJSON("ssrf "+u, "/v1/chat/completions", imageChat(m, []string{u}, "hi"), is4xx)
		checkJSON("ssrf uuid "+u, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q},"uuid":"x"}]}]}`, m, u), is4xx)
	}
	// 4. Raw HTTP: smuggling, malformed framing, oversized parts. None may be answered 2xx or 5xx, and a
	// request hidden behind an ambiguous frame is never answered.
	smuggled := "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
	raw := []struct {
		name, req string
		want      int // expected status of the one answer; 0: any 4xx, or none (closed)
	}{
		{"CL and TE", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 0},
		{"TE and CL", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n" + smuggled, 0},
		{"two CLs", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}" + smuggled, 400},
		{"TE list", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400},
		{"TE obfuscated", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\nContent-Length: 3\r\n\r\nabc", 400},
		{"TE with space", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400},
		{"CL plus", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}", 400},
		{"CL negative", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
		{"CL hex", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0x2\r\n\r\n{}", 400},
		{"CL huge", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
		{"CL over limit", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n{", 413},
		{"chunk size huge", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", 400},
		{"chunked over limit", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("ffff\r\n"+strings.Repeat("a", 0xffff)+"\r\n", 17) + "0\r\n\r\n", 413},
		{"chunk without CRLF", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2{}0\r\n\r\n", 400},
		{"chunked HTTP/1.0", "POST /v1/chat/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400},
		{"folded header", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n X-Folded: y\r\nContent-Length: 2\r\n\r\n{}", 400},
		{"header too large", "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n", 431},
		{"many headers", "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: b\r\n", 2000) + "\r\n", 431},
		{"URI too long", "GET /v1/models?" + strings.Repeat("a", 9000) + " HTTP/1.1\r\nHost: x\r\n\r\n", 431},
		{"bad method", "P\x00ST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 0},
		{"bad version", "POST /v1/chat/completions HTTP/9.9\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 0},
		{"no host", "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 0},
		{"NUL in header", "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 0},
		{"absolute URI to elsewhere", "GET http://169.254.169.254/latest HTTP/1.1\r\nHost: x\r\n\r\n", 404},
		{"CONNECT", "CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n", 0},
		{"expect 100 over limit", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2000000\r\n\r\n", 413},
		{"body shorter than CL", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{}", 408},
		{"gzip body", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", 400},
		{"text/plain body", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", 415},
	}
	for _, rc := range raw {
		cases++
		statuses, bodies, _ := rawExchange(t, addr, []byte(rc.req), 5*time.Second)
		switch {
		case len(statuses) > 1:
			fail("%s: %d answers %v: a second request was read out of the first one's framing", rc.name, len(statuses), statuses)
		case len(statuses) == 1 && rc.want != 0 && statuses[0] != rc.want:
			fail("%s: %d, want %d: %.200s", rc.name, statuses[0], rc.want, bodies[0])
		case len(statuses) == 1 && (statuses[0] < 400 || statuses[0] >= 500) && rc.want != 404:
			fail("%s: %d: %.200s", rc.name, statuses[0], bodies[0])
		case len(statuses) == 1 && strings.Contains(bodies[0], "X-Big") || len(statuses) == 1 && strings.Contains(bodies[0], "buffer size"):
			fail("%s: the error echoes the raw request: %.200s", rc.name, bodies[0])
		}
	}
	// 5. Slow clients: dripping headers or bodies are cut at their deadlines, however they drip.
	var wg sync.WaitGroup
	var slowFail atomic.Int64
	for i := 0; i < 40; i++ {
		cases++
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				slowFail.Add(1)
				return
			}
			defer c.Close()
			began := time.Now()
			_ = c.SetDeadline(began.Add(10 * time.Second))
			if i%2 == 0 {
				fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{")
			} else {
				fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
			}
			buf := make([]byte, 1)
			for {
				if _, err := c.Write([]byte{'a'}); err != nil {
					break
				}
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) // the drip rate
				if _, err := c.Read(buf); err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() && time.Since(began) < 5*time.Second {
						continue
					}
					break
				}
				break // the server answered (408)
			}
			if time.Since(began) > timeout+3*time.Second {
				slowFail.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := slowFail.Load(); n > 0 {
		fail("%d slow clients were held past their deadline", n)
	}
	// The server still serves, and its memory is bounded.
	if r := s.post(t, "/v1/chat/completions", chatBody(m, "still serving?", "")); r.status != 200 {
		t.Fatalf("server stopped serving: %d %s", r.status, r.raw)
	}
	runtime.GC()
	grew := rssBytes(t) - rssStart
	t.Logf("%d hostile cases, %d failures; RSS %+.1f MiB", cases, failures, mib(grew))
	if !raceDetector && grew > 64<<20 {
		t.Fatalf("RSS grew by %.1f MiB", mib(grew))
	}
}

package frontend

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestJSONContentTypeOnly: the OpenAI endpoints take a body declared application/json (charset and other
// parameters allowed) and answer any other media type, or none, 415 with an OpenAI error, as vLLM's and
// Dynamo's servers do. A text/plain or form POST is what a page of any origin may send without a CORS
// preflight; before, it was served.
func TestJSONContentTypeOnly(t *testing.T) {
	s := startStack(t, stackOpts{workers: 1, speedup: 100})
	body := chatBody("Qwen3-VL-2B-Instruct", "hello", "")
	for _, tc := range []struct {
		path, contentType string
		status            int
	}{
		{"/v1/chat/completions", "application/json", 200},
		{"/v1/chat/completions", "Application/JSON; charset=utf-8", 200},
		{"/v1/chat/completions", "text/plain", 415},
		{"/v1/chat/completions", "application/x-www-form-urlencoded", 415},
		{"/v1/chat/completions", "", 415},
		{"/v1/completions", "text/plain;charset=UTF-8", 415},
		{"/tokenize", "multipart/form-data; boundary=x", 415},
	} {
		r := s.post(t, tc.path, body, "Content-Type", tc.contentType)
		if r.status != tc.status {
			t.Errorf("POST %s as %q: %d, want %d: %s", tc.path, tc.contentType, r.status, tc.status, r.raw)
			continue
		}
		if tc.status == 415 {
			e, _ := r.body["error"].(map[string]any)
			if e == nil || e["code"] != float64(415) || e["type"] != "invalid_request_error" {
				t.Errorf("POST %s as %q: not an OpenAI error: %s", tc.path, tc.contentType, r.raw)
			}
		}
	}
}

// TestRequestTimeoutIs504: a request still running at --request-timeout is a 504 timeout_error (a stream:
// an SSE error event with code 504), not a 503 naming the worker's address.
func TestRequestTimeoutIs504(t *testing.T) {
	s := startStack(t, stackOpts{workers: 1, speedup: 1, requestTimeout: 300 * time.Millisecond})
	r := s.post(t, "/v1/chat/completions", chatBody("Qwen3-VL-2B-Instruct", "a long answer", `,"max_tokens":3000,"ignore_eos":true`))
	e, _ := r.body["error"].(map[string]any)
	if r.status != 504 || e == nil || e["type"] != "timeout_error" || strings.Contains(r.raw, "127.0.0.1") {
		t.Fatalf("unary past the timeout: %d %s", r.status, r.raw)
	}
	r = s.post(t, "/v1/chat/completions", chatBody("Qwen3-VL-2B-Instruct", "a long stream", `,"max_tokens":3000,"ignore_eos":true,"stream":true`))
	if r.status != 200 || !strings.Contains(r.raw, `"code":504`) || !strings.Contains(r.raw, "timeout_error") || !strings.HasSuffix(strings.TrimSpace(r.raw), "data: [DONE]") {
		t.Fatalf("stream past the timeout: %d %s", r.status, r.raw[max(0, len(r.raw)-400):])
	}
}

// TestMethodNotAllowedSaysAllow: a 405 names the methods the path serves in Allow (RFC 9110).
func TestMethodNotAllowedSaysAllow(t *testing.T) {
	base, _ := startRouterAPI(t, 4, ServerConfig{})
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/busy_threshold", "GET, POST"},
		{"GET", "/v1/overlap_scores", "POST"},
		{"PATCH", "/v1/workers", "GET, POST"},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d, Allow %q, want 405 and %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
		}
	}
}

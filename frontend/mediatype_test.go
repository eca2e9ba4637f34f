package frontend

import "testing"

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

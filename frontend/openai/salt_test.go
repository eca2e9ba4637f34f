package openai

import (
	"testing"

	json "github.com/goccy/go-json"
)

// TestSetCacheSalt: the salt lands as a top-level member of objects of any shape, escaped, and the rest of
// the body is kept byte for byte.
func TestSetCacheSalt(t *testing.T) {
	for _, body := range []string{`{}`, ` { } `, `{"model":"m","messages":[]}`, "\n{\n\"a\":{\"cache_salt\":1}}"} {
		out, err := SetCacheSalt([]byte(body), `t"1\é`)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%q -> %q: %v", body, out, err)
		}
		if m["cache_salt"] != `t"1\é` {
			t.Fatalf("%q -> %q: cache_salt %v", body, out, m["cache_salt"])
		}
	}
	for _, body := range []string{``, `[]`, `"x"`, `  `} {
		if _, err := SetCacheSalt([]byte(body), "s"); err == nil {
			t.Errorf("%q: no error", body)
		}
	}
}

package frontend

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
)

// postOversize sends only the headers of a request whose Content-Length exceeds the server's body limit,
// then reads the answer. A normal client that keeps writing the body can see its connection reset once
// the server has answered 413 and closed (a race in the test, not in the server), so the body is not sent.
func postOversize(t *testing.T, base, path string, length int) (int, map[string]any) {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", path, addr, length)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func TestOversizeBodies(t *testing.T) {
	base, _ := startRouterAPI(t, 4, ServerConfig{MaxBodyBytes: 1 << 16})
	for _, path := range []string{"/v1/overlap_scores", "/v1/workers", "/v1/route"} {
		code, body := postOversize(t, base, path, 1<<20)
		if code != 413 {
			t.Fatalf("%s: status %d, want 413", path, code)
		}
		if e, ok := body["error"].(map[string]any); !ok || e["code"] != float64(413) {
			t.Fatalf("%s: not an OpenAI error: %v", path, body)
		}
	}
	if code, _ := call(t, "POST", base+"/v1/overlap_scores", `{"tokens":[1,2,3,4]}`); code != 200 {
		t.Fatalf("server stopped answering: %d", code)
	}
}

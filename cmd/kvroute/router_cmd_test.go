package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// TestRouterCommand runs `kvroute router` as an operator would and checks its own flags over HTTP: it
// listens on --http-host:--http-port, --block-size (the alias of --kv-cache-block-size) sets how many
// blocks a prompt is cut into, and --worker registers a worker.
func TestRouterCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildKVRouteBinary(t, root)
	port := launchPortRange(t, 1) // a process binds it later: below the ephemeral range
	cmd := exec.Command(bin, "router", "--http-host", "127.0.0.1", "--http-port", strconv.Itoa(port), "--block-size", "4",
		"--worker", "id=7,url=http://127.0.0.1:9", "--log-format", "json", "--max-conns", "2")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	bound := make(chan any, 1) // the edge's connection bound, from its startup line
	exited := make(chan struct{})
	var lines []string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "kvroute router listening" {
				addr <- rec["addr"].(string)
			}
			if rec["msg"] == "HTTP connections" {
				bound <- rec["max_conns"]
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var base string
	select {
	case a := <-addr:
		if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(port)); a != want {
			t.Fatalf("listening on %s, want %s", a, want)
		}
		base = "http://" + a
	case <-exited:
		t.Fatalf("router exited: %s", strings.Join(lines, "\n"))
	case <-time.After(30 * time.Second):
		t.Fatal("router did not listen within 30s")
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	do := func(method, path, body string) string {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return string(b)
	}
	tokens := make([]string, 32)
	for i := range tokens {
		tokens[i] = strconv.Itoa(i + 1)
	}
	var ov struct {
		Blocks int `json:"blocks"`
	}
	if err := json.Unmarshal([]byte(do("POST", "/v1/overlap_scores", `{"tokens":[`+strings.Join(tokens, ",")+`]}`)), &ov); err != nil || ov.Blocks != 8 {
		t.Fatalf("--block-size 4: a 32-token prompt is %d blocks (%v), want 8", ov.Blocks, err)
	}
	if w := do("GET", "/v1/workers", ""); !strings.Contains(w, `"http://127.0.0.1:9"`) {
		t.Fatalf("--worker: /v1/workers %s", w)
	}
	// The probes are the frontend's: ready with its one worker, listed on /health; without workers not
	// ready (they answered a bare 200 whatever the fleet).
	if h := do("GET", "/health", ""); !strings.Contains(h, `"instance_id":7`) || !strings.Contains(h, `"status":"healthy"`) {
		t.Fatalf("/health: %s", h)
	}
	do("GET", "/ready", "")
	do("DELETE", "/v1/workers/7", "")
	resp, err := hc.Get(base + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/ready with no worker: %d, want 503", resp.StatusCode)
	}
	// --max-conns reaches the edge: its startup line (logged before the listening one) states the bound.
	select {
	case b := <-bound:
		if b != float64(2) {
			t.Fatalf("--max-conns 2: the startup log's max_conns is %v", b)
		}
	default:
		t.Fatal("no startup line for the HTTP connections before the listening one")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("router did not exit on SIGTERM within 10s")
	}
}

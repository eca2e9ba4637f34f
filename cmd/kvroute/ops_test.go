package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// TestServeOperations runs the kvroute binary as an operator would (kvroute serve, JSON logs, access
// log, a short drain) and checks: every log line is JSON, /ready turns 200 once the workers are checked,
// X-Request-Id comes back and reaches the access log, /health has Dynamo's shape, and SIGTERM with a
// 3,000-token stream in flight exits within the drain cap.
func TestServeOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildKVRouteBinary(t, root)
	const grace, drain = time.Second, time.Second
	cmd := exec.Command(bin, "serve", "--http-host", "127.0.0.1", "--http-port", "0", "--workers", "2", "--speedup-ratio", "1",
		"--log-format", "json", "--access-log", "--graceful-shutdown-grace-period", grace.String(), "--graceful-shutdown-timeout", drain.String())
	cmd.Dir = root
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var mu sync.Mutex
	var lines []string
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "kvroute frontend listening" {
				addr <- rec["addr"].(string)
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
		base = "http://" + a
	case <-exited:
		t.Fatalf("serve exited: %s", strings.Join(lines, "\n"))
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not listen within 60s")
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		resp, err := hc.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	launchWaitFor(t, 30*time.Second, exited, "/ready 200", func() bool { code, _ := get("/ready"); return code == 200 })
	if code, body := get("/version"); code != 200 || !strings.Contains(body, `"version":"kvroute `) {
		t.Fatalf("/version: %d %s", code, body)
	}
	if code, body := get("/health"); code != 200 || !strings.Contains(body, `"status":"healthy"`) || strings.Count(body, `"instance_id"`) != 2 {
		t.Fatalf("/health: %d %s", code, body)
	}

	// A request with the client's id: echoed, and named in the access log.
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(
		`{"model":"Qwen3-VL-2B-Instruct","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "ops-test-42")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != "ops-test-42" {
		t.Fatalf("chat: %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	launchWaitFor(t, 10*time.Second, exited, "access log line", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, `"request_id":"ops-test-42"`) && strings.Contains(l, `"status":200`) {
				return true
			}
		}
		return false
	})
	if _, m := get("/metrics"); !strings.Contains(m, `dynamo_frontend_requests_total{endpoint="chat_completions",model="Qwen3-VL-2B-Instruct",request_type="unary",status="success"} 1`) {
		t.Errorf("/metrics lacks the request in Dynamo's labels")
	}

	// A long stream in flight, then SIGTERM.
	sreq, _ := http.NewRequest("POST", base+"/v1/completions", strings.NewReader(
		`{"model":"Qwen3-VL-2B-Instruct","prompt":"a long story","max_tokens":3000,"stream":true}`))
	sreq.Header.Set("Content-Type", "application/json")
	sresp, err := (&http.Client{}).Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	br := bufio.NewReader(sresp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	streamDone := make(chan int64, 1)
	go func() { n, _ := io.Copy(io.Discard, br); streamDone <- n }()
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sawNotReady := false
	for !sawNotReady {
		code, _ := get("/ready")
		if code == http.StatusServiceUnavailable {
			sawNotReady = true
		}
		if code == 0 || time.Since(start) > grace {
			break // the listener closed: the grace period is over
		}
	}
	cap := grace + drain + time.Second // + the second cancelled streams get to close
	select {
	case <-exited:
	case <-time.After(cap + 5*time.Second):
		t.Fatalf("still running %v after SIGTERM (cap %v)", time.Since(start), cap)
	}
	took := time.Since(start)
	select {
	case <-streamDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end with the process")
	}
	t.Logf("exit %v after SIGTERM with a 3000-token stream in flight (cap %v)", took.Round(time.Millisecond), cap)
	if took > cap+2*time.Second {
		t.Errorf("shutdown took %v, cap %v", took, cap)
	}
	if took < grace {
		t.Errorf("shutdown took %v: the stream did not get its grace period %v", took, grace)
	}
	if !sawNotReady {
		t.Error("/ready never answered 503 during the drain")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("--log-format json wrote a non-JSON line: %q", l)
		}
	}
	if !bytes.Contains([]byte(strings.Join(lines, "\n")), []byte(`"msg":"shutdown: drained"`)) {
		t.Error("no drained line in the log")
	}
}

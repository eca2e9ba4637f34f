package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/kvroute/kvroute/internal/testutil"
)

// TestLaunchScript runs scripts/launch.sh with `kvroute mocker` in place of `vllm serve`: two workers and the
// frontend come up on loopback, a repeated long prompt is routed by the workers' KV events, and SIGTERM to the
// script leaves no process and no listener behind.
func TestLaunchScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bin := buildKVRouteBinary(t, root)
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))
	ports := launchPortRange(t, 7)
	frontendPort, httpBase, eventsBase, replayBase := ports, ports+1, ports+3, ports+5
	modelDir := filepath.Join(root, "testdata", "models", "Qwen3-VL-2B-Instruct")

	var out launchOutput
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "launch.sh"))
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(),
		"VLLM_CMD="+bin+" mocker",
		"KVROUTE="+bin,
		"MODEL="+modelDir,
		"SERVED_MODEL_NAME=", // the default: the model argument, as vLLM names it
		"NUM_WORKERS=2",
		"BLOCK_SIZE=16",
		"SINGLE_GPU=0",
		"WORKER_HOST=127.0.0.1",
		"FRONTEND_HOST=127.0.0.1",
		"FRONTEND_PORT="+strconv.Itoa(frontendPort),
		"HTTP_PORT_BASE="+strconv.Itoa(httpBase),
		"KV_EVENTS_PORT_BASE="+strconv.Itoa(eventsBase),
		"KV_REPLAY_PORT_BASE="+strconv.Itoa(replayBase),
		// Mocker-only flags, through the same hatch real deployments use for vLLM's.
		"VLLM_EXTRA_ARGS=--speedup-ratio 20 --num-gpu-blocks 2048",
		"FRONTEND_EXTRA_ARGS=",
		"HEALTH_TIMEOUT=30", // generous: `make test` loads both cores
		"STOP_TIMEOUT=5",
		"LOG_DIR=",
	)
	cmd.WaitDelay = 2 * time.Second // a surviving child keeps the output pipes open
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for _, pgid := range launchedPIDs(out.String()) { // children live in their own process groups
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		<-exited
		if t.Failed() {
			t.Logf("launch.sh output:\n%s", out.String())
		}
	})

	base := "http://127.0.0.1:" + strconv.Itoa(frontendPort)
	hc := &http.Client{Timeout: 5 * time.Second}
	launchWaitFor(t, 45*time.Second, exited, "frontend /health", func() bool {
		resp, err := hc.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	t.Logf("fleet up at %v", time.Since(start).Round(time.Millisecond))
	var prompt strings.Builder
	for i := range 40 {
		fmt.Fprintf(&prompt, "Sentence %d of a long shared context that the router should find cached. ", i)
	}
	body, _ := json.Marshal(map[string]any{
		"model":      modelDir,
		"messages":   []map[string]string{{"role": "user", "content": prompt.String()}},
		"max_tokens": 4,
	})
	first := launchChat(t, hc, base, body)
	if first.worker != "1" && first.worker != "2" {
		t.Fatalf("x-kvroute-worker-id = %q, want 1 or 2", first.worker)
	}

	// KV events reach the router asynchronously: repeat until the index holds the prompt. A repeat routed
	// before then sees two equal idle workers and may land on either; every worker that served the prompt
	// caches it.
	var again launchChatResult
	served := map[string]bool{first.worker: true}
	launchWaitFor(t, 10*time.Second, exited, "x-kvroute-overlap-blocks > 0", func() bool {
		again = launchChat(t, hc, base, body)
		if again.overlap == 0 {
			served[again.worker] = true
		}
		return again.overlap > 0
	})
	if !served[again.worker] {
		t.Errorf("repeat went to worker %s, the prompt's blocks are on %v", again.worker, served)
	}
	if again.cached == 0 {
		t.Errorf("repeat: usage.prompt_tokens_details.cached_tokens = 0 with %d overlap blocks predicted", again.overlap)
	}

	t.Logf("overlap %d blocks on worker %s at %v", again.overlap, again.worker, time.Since(start).Round(time.Millisecond))
	pids := launchedPIDs(out.String())
	if len(pids) != 3 {
		t.Fatalf("launch.sh reported %d started processes, want 3 (two workers, the frontend)", len(pids))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		var ee *exec.ExitError
		if !errors.As(exitErr, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Errorf("launch.sh after SIGTERM: %v, want exit status %d", exitErr, 128+int(syscall.SIGTERM))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("launch.sh still running 15s after SIGTERM")
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pgid := range pids {
		for syscall.Kill(-pgid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("process group %d still alive after launch.sh exited", pgid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for p := ports; p < ports+7; p++ {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still accepts connections after launch.sh exited", p)
		}
	}
}

// buildKVRouteBinary builds the binary as `make build` does (sharing its build cache). Not with -race even under
// `go test -race`: race-built processes load the model several times slower, and the processes are not what this
// test checks.
func buildKVRouteBinary(t *testing.T, root string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	testBinary.once.Do(func() {
		if testBinary.dir, testBinary.err = os.MkdirTemp("", "kvroute-test-bin-"); testBinary.err != nil {
			return
		}
		testBinary.path = filepath.Join(testBinary.dir, "kvroute")
		build := exec.Command(goBin, "build", "-o", testBinary.path, "./cmd/kvroute")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			testBinary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if testBinary.err != nil {
		t.Fatal(testBinary.err)
	}
	return testBinary.path
}

// testBinary is the kvroute binary the tests run, built once per test process (each build links for
// seconds); TestMain removes it.
var testBinary struct {
	once      sync.Once
	dir, path string
	err       error
}

// launchPortRange finds n consecutive ports free on every interface (the workers' ZMQ sockets bind tcp://*).
func launchPortRange(t *testing.T, n int) int {
	t.Helper()
	return testutil.PortRange(t, n)
}

type launchChatResult struct {
	worker  string
	overlap int
	cached  int
}

func launchChat(t *testing.T, hc *http.Client, base string, body []byte) launchChatResult {
	t.Helper()
	resp, err := hc.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: status %d: %s", resp.StatusCode, b)
	}
	var parsed struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &parsed); err != nil {
		t.Fatalf("chat: %v: %s", err, b)
	}
	r := launchChatResult{worker: resp.Header.Get("x-kvroute-worker-id"), cached: parsed.Usage.Details.Cached}
	if r.overlap, err = strconv.Atoi(resp.Header.Get("x-kvroute-overlap-blocks")); err != nil {
		t.Fatalf("x-kvroute-overlap-blocks: %v", err)
	}
	return r
}

// launchWaitFor polls cond until it holds, failing at the deadline or when the script exits first.
func launchWaitFor(t *testing.T, d time.Duration, exited <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		select {
		case <-exited:
			t.Fatalf("launch.sh exited while waiting for %s", what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var launchedRE = regexp.MustCompile(`launch: started \S+ \(pid (\d+)\)`)

// launchedPIDs reads the children's pids, which are also their process group ids, from the script's log.
func launchedPIDs(log string) []int {
	var pids []int
	for _, m := range launchedRE.FindAllStringSubmatch(log, -1) {
		if p, err := strconv.Atoi(m[1]); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// launchOutput is a bytes.Buffer the script's stdout and stderr copiers may write concurrently.
type launchOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *launchOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *launchOutput) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLaunchScriptBusyFrontendPort: another process already answers /health on the frontend's port. The script
// must not take that answer for its frontend's: it stops with the reason and leaves nothing running.
// SINGLE_GPU is given as the seed scripts write it (true).
func TestLaunchScriptBusyFrontendPort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a worker")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildKVRouteBinary(t, root)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		_ = http.Serve(other, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	}()
	busy := other.Addr().(*net.TCPAddr).Port
	ports := launchPortRange(t, 3)
	var out launchOutput
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "launch.sh"))
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(),
		"VLLM_CMD="+bin+" mocker", "KVROUTE="+bin, "MODEL="+filepath.Join(root, "testdata", "models", "Qwen3-VL-2B-Instruct"),
		"NUM_WORKERS=1", "SINGLE_GPU=true", "WORKER_HOST=127.0.0.1", "FRONTEND_HOST=127.0.0.1",
		"FRONTEND_PORT="+strconv.Itoa(busy), "HTTP_PORT_BASE="+strconv.Itoa(ports),
		"KV_EVENTS_PORT_BASE="+strconv.Itoa(ports+1), "KV_REPLAY_PORT_BASE="+strconv.Itoa(ports+2),
		"VLLM_EXTRA_ARGS=--speedup-ratio 20", "HEALTH_TIMEOUT=30", "STOP_TIMEOUT=5", "LOG_DIR=")
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		for _, pgid := range launchedPIDs(out.String()) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		t.Fatalf("launch.sh still running with its frontend port taken:\n%s", out.String())
	}
	log := out.String()
	if err == nil || strings.Contains(log, "frontend healthy") || !strings.Contains(log, "port "+strconv.Itoa(busy)+" is already in use") {
		t.Fatalf("launch.sh with a busy frontend port: %v\n%s", err, log)
	}
	if !strings.Contains(log, "worker-1 healthy") {
		t.Errorf("the worker never came up\n%s", log)
	}
	for _, pgid := range launchedPIDs(log) {
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(-pgid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("process group %d still alive after launch.sh exited", pgid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestLaunchScriptDisaggregated runs the P/D layout (PREFILL_WORKERS=1 of NUM_WORKERS=2) with simulated
// workers: the workers register with their roles and a request takes the prefill hop on worker 1, then
// decodes on worker 2 (every request disaggregated: --conditional-prefill-policy never).
func TestLaunchScriptDisaggregated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := buildKVRouteBinary(t, root)
	ports := launchPortRange(t, 9)
	frontendPort := ports
	modelDir := filepath.Join(root, "testdata", "models", "Qwen3-VL-2B-Instruct")
	var out launchOutput
	cmd := exec.Command(bash, filepath.Join(root, "scripts", "launch.sh"))
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "VLLM_CMD="+bin+" mocker", "KVROUTE="+bin, "MODEL="+modelDir, "SERVED_MODEL_NAME=m",
		"NUM_WORKERS=2", "PREFILL_WORKERS=1", "NIXL_SIDE_CHANNEL_PORT_BASE="+strconv.Itoa(ports+7), "BLOCK_SIZE=16", "SINGLE_GPU=0",
		"WORKER_HOST=127.0.0.1", "FRONTEND_HOST=127.0.0.1", "FRONTEND_PORT="+strconv.Itoa(frontendPort),
		"HTTP_PORT_BASE="+strconv.Itoa(ports+1), "KV_EVENTS_PORT_BASE="+strconv.Itoa(ports+3), "KV_REPLAY_PORT_BASE="+strconv.Itoa(ports+5),
		"VLLM_EXTRA_ARGS=--speedup-ratio 20 --num-gpu-blocks 2048", "FRONTEND_EXTRA_ARGS=--conditional-prefill-policy never",
		"HEALTH_TIMEOUT=30", "STOP_TIMEOUT=5", "LOG_DIR=")
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for _, pgid := range launchedPIDs(out.String()) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		<-exited
		if t.Failed() {
			t.Logf("launch.sh output:\n%s", out.String())
		}
	})
	base := "http://127.0.0.1:" + strconv.Itoa(frontendPort)
	hc := &http.Client{Timeout: 5 * time.Second}
	launchWaitFor(t, 45*time.Second, exited, "frontend /health", func() bool {
		resp, err := hc.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(out.String(), `--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`) {
		t.Fatal("workers were not started with the NixlConnector transfer config")
	}
	resp, err := hc.Get(base + "/v1/workers")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `"role":"prefill"`) || !strings.Contains(string(page), `"role":"decode"`) {
		t.Fatalf("/v1/workers: %s", page)
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": "hello"}}, "max_tokens": 4})
	resp, err = hc.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-kvroute-serving") != "disaggregated" ||
		resp.Header.Get("x-kvroute-prefill-worker-id") != "1" || resp.Header.Get("x-kvroute-worker-id") != "2" {
		t.Fatalf("status %d serving %q prefill %q decode %q: %s", resp.StatusCode, resp.Header.Get("x-kvroute-serving"),
			resp.Header.Get("x-kvroute-prefill-worker-id"), resp.Header.Get("x-kvroute-worker-id"), b)
	}
}

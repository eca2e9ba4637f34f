package main

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors/indexer"
)

// Tests that show what a flag does where no other test did; flag_coverage_test.go points at them.

// Every refused Dynamo flag stops kvroute frontend with exit 2 and its reason; a refused boolean's --no-
// form (kvroute's behaviour anyway) is accepted.
func TestRefusedFlagsSayWhy(t *testing.T) {
	for _, r := range refusedFlags {
		args := []string{"--" + r.name}
		if !r.isBool {
			args = append(args, "x")
		}
		_, herr := captureCLI(t)
		if _, _, code, ok := parseFrontend("frontend", args, nil); ok || code != 2 || !strings.Contains(herr.String(), r.reason) {
			t.Errorf("%v: exit %d ok %v, stderr %q; want exit 2 with %q", args, code, ok, herr.String(), r.reason)
		}
		if r.isBool {
			_, herr = captureCLI(t)
			if _, _, code, ok := parseFrontend("frontend", []string{"--no-" + r.name}, nil); !ok {
				t.Errorf("--no-%s: exit %d, %q", r.name, code, herr.String())
			}
		}
	}
}

// kvroute router refuses, with the reason, the shared flags it has nothing to apply to; the value that is
// its behaviour anyway is accepted.
func TestRouterRefusesFrontendOnlyFlags(t *testing.T) {
	for _, r := range routerRefuses {
		_, herr := captureCLI(t)
		if code := runRouter([]string{"--" + r.name + "=1"}); code != 2 || !strings.Contains(herr.String(), r.reason) {
			t.Errorf("router --%s=1: exit %d, stderr %q; want exit 2 with %q", r.name, code, herr.String(), r.reason)
		}
		fs := flag.NewFlagSet("router", flag.ContinueOnError)
		if _, err := addRouterFlags(fs); err != nil {
			t.Fatal(err)
		}
		if code, ok := parseFlagsTo(fs, []string{"--" + r.name + "=" + r.allow}, false, io.Discard, io.Discard); !ok {
			t.Errorf("router --%s=%s: exit %d", r.name, r.allow, code)
		}
		// Its variable is refused too (it was read into the shared configuration and ignored).
		t.Run(r.env, func(t *testing.T) {
			t.Setenv(r.env, "1")
			if _, err := addRouterFlags(flag.NewFlagSet("router", flag.ContinueOnError)); err == nil || !strings.Contains(err.Error(), "$"+r.env) {
				t.Errorf("$%s=1: %v, want refused", r.env, err)
			}
		})
	}
	// $DYN_HTTP_PORT is the router's default port, as the frontend's.
	t.Setenv("DYN_HTTP_PORT", "18123")
	rf, err := addRouterFlags(flag.NewFlagSet("router", flag.ContinueOnError))
	if err != nil || *rf.port != 18123 {
		t.Fatalf("$DYN_HTTP_PORT=18123: port %v (%v)", rf, err)
	}
}

// Dynamo's compatibility flags take the value kvroute implements and refuse the others with the reason
// (the shared cache tier in both commands); --discovery-backend nats switches discovery to the NATS bucket.
func TestCompatFlagsRefuseOtherValues(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" accepted
	}{
		{[]string{"--metrics-prefix", "dynamo_frontend"}, ""},
		{[]string{"--metrics-prefix", "myco"}, "--metrics-prefix"},
		{[]string{"--dyn-chat-processor", "dynamo"}, ""},
		{[]string{"--dyn-chat-processor", "vllm"}, "--dyn-chat-processor"},
		{[]string{"--request-plane", "http"}, ""},
		{[]string{"--request-plane", "tcp"}, "--request-plane tcp: not supported"},
		{[]string{"--discovery-backend", "mem"}, ""},
		{[]string{"--discovery-backend", "kubernetes"}, "--discovery-backend kubernetes: not supported"},
		{[]string{"--discovery-backend", "nats", "--discovery", "static"}, "disagree"},
		{[]string{"--shared-cache-type", "none", "--shared-cache-multiplier", "0.5"}, ""},
		{[]string{"--shared-cache-type", "hicache"}, "--shared-cache-type hicache: not supported"},
		{[]string{"--shared-cache-multiplier", "0.8"}, "--shared-cache-multiplier 0.8: applies only with --shared-cache-type hicache"},
	}
	for _, tc := range tests {
		_, herr := captureCLI(t)
		_, _, code, ok := parseFrontend("frontend", tc.args, nil)
		switch {
		case tc.want == "" && !ok:
			t.Errorf("%v: exit %d, %q", tc.args, code, herr.String())
		case tc.want != "" && (ok || code != 2 || !strings.Contains(herr.String(), tc.want)):
			t.Errorf("%v: exit %d ok %v, stderr %q; want exit 2 with %q", tc.args, code, ok, herr.String(), tc.want)
		}
	}
	for _, args := range [][]string{{"--shared-cache-type", "hicache"}, {"--shared-cache-multiplier", "0.8"}} {
		_, herr := captureCLI(t)
		if code := runRouter(args); code != 2 || !strings.Contains(herr.String(), "not support") {
			t.Errorf("router %v: exit %d, stderr %q", args, code, herr.String())
		}
	}
	captureCLI(t)
	f, _, _, ok := parseFrontend("frontend", []string{"--discovery-backend", "nats"}, nil)
	if !ok || *f.nats.discovery != "nats" {
		t.Fatalf("--discovery-backend nats: ok %v", ok)
	}
}

// --log-level drops lines below the level; Dynamo's DYN_LOG form takes its first bare level.
func TestLogLevelFilters(t *testing.T) {
	for _, tc := range []struct {
		level       string
		debug, info bool
	}{{"debug", true, true}, {"info", false, true}, {"warn", false, false}, {"warn,dynamo_llm=debug", false, false}} {
		captureCLI(t)
		f, _, code, ok := parseFrontend("frontend", []string{"--log-level", tc.level}, nil)
		if !ok {
			t.Fatalf("--log-level %s: exit %d", tc.level, code)
		}
		var buf bytes.Buffer
		log, err := f.ops.log.logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Debug("d-line")
		log.Info("i-line")
		log.Warn("w-line")
		out := buf.String()
		if strings.Contains(out, "d-line") != tc.debug || strings.Contains(out, "i-line") != tc.info || !strings.Contains(out, "w-line") {
			t.Errorf("--log-level %s: logged %q", tc.level, out)
		}
	}
}

// kvroute frontend with and without a handful of switches, checked over HTTP: --model-path names the
// served model when --model-name is unset; --namespace names /health's instances; --pprof serves /debug/pprof/;
// --no-mm-routing keeps multimodal routing off for a model whose family is known; --router-event-threads
// sets the number of index shards; --router-id labels the router's metrics.
// startFlagFrontend starts kvroute frontend in-process on the model directory, on a loopback port, with
// one unreachable worker, no health checks and extra flags; it returns what it logged while starting.
// The app stops when the test ends.
func startFlagFrontend(t *testing.T, modelDir string, extra ...string) (*frontendApp, string, error) {
	t.Helper()
	app, logged, err := startFlagFrontendLog(t, modelDir, extra...)
	return app, logged.String(), err
}

// startFlagFrontendLog is startFlagFrontend with the log as it goes on after the start.
func startFlagFrontendLog(t *testing.T, modelDir string, extra ...string) (*frontendApp, *syncBuffer, error) {
	t.Helper()
	_, herr := captureCLI(t)
	args := append([]string{"--model-path", modelDir, "--http-host", "127.0.0.1", "--http-port", "0", "--health-check-interval", "0",
		"--no-worker-self-test", "--worker", "id=1,url=http://127.0.0.1:9"}, extra...)
	f, _, code, ok := parseFrontend("frontend", args, nil)
	if !ok {
		t.Fatalf("%v: exit %d: %s", args, code, herr.String())
	}
	logged := &syncBuffer{}
	app, err := startFrontend(f, newRegistry(), slog.New(slog.NewTextHandler(logged, nil)))
	if err == nil {
		t.Cleanup(app.stop)
	}
	return app, logged, err
}

func TestFrontendOpsFlags(t *testing.T) {
	modelDir, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(app *frontendApp, path string) (int, string) {
		t.Helper()
		resp, err := hc.Get("http://" + app.ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	start := func(extra ...string) (*frontendApp, string) {
		t.Helper()
		app, logged, err := startFlagFrontend(t, modelDir, extra...)
		if err != nil {
			t.Fatal(err)
		}
		return app, logged
	}

	def, logged := start()
	if _, b := get(def, "/v1/models"); !strings.Contains(b, `"`+filepath.Base(modelDir)+`"`) {
		t.Errorf("default: /v1/models does not serve the model directory's name: %s", b)
	}
	if _, b := get(def, "/health"); !strings.Contains(b, `"namespace":"dynamo"`) {
		t.Errorf("default: /health lacks the dynamo namespace: %s", b)
	}
	if st, _ := get(def, "/debug/pprof/"); st != http.StatusNotFound {
		t.Errorf("default: /debug/pprof/ answers %d, want 404 without --pprof", st)
	}
	if !strings.Contains(logged, "multimodal routing on") {
		t.Errorf("default: multimodal routing not on for %s:\n%s", modelDir, logged)
	}
	if _, b := get(def, "/metrics"); !strings.Contains(b, `router_id="kvroute"`) {
		t.Errorf("default: /metrics lacks router_id=\"kvroute\"")
	}
	if n, want := len(def.router.Index.ShardWorkers()), min(4, runtime.GOMAXPROCS(0)); n != want {
		t.Errorf("default: %d index shards, want %d (4, at most GOMAXPROCS)", n, want)
	}
	if p := def.router.Index.WarmEvery(); p != indexer.DefaultWarmEvery {
		t.Errorf("default: the index warms every %v, want %v", p, indexer.DefaultWarmEvery)
	}

	set, logged := start("--model-name", "served-x", "--namespace", "team-x", "--pprof", "--no-mm-routing", "--router-event-threads", "3",
		"--router-id", "r-test", "--router-index-warm-secs", "0")
	if _, b := get(set, "/v1/models"); !strings.Contains(b, `"served-x"`) {
		t.Errorf("--model-name served-x: /v1/models %s", b)
	}
	if _, b := get(set, "/health"); !strings.Contains(b, `"namespace":"team-x"`) {
		t.Errorf("--namespace team-x: /health %s", b)
	}
	if st, b := get(set, "/debug/pprof/"); st != http.StatusOK || !strings.Contains(b, "goroutine") {
		t.Errorf("--pprof: /debug/pprof/ answers %d", st)
	}
	if strings.Contains(logged, "multimodal routing on") {
		t.Errorf("--no-mm-routing: multimodal routing turned on:\n%s", logged)
	}
	if _, b := get(set, "/metrics"); !strings.Contains(b, `router_id="r-test"`) || strings.Contains(b, `router_id="kvroute"`) {
		t.Errorf("--router-id r-test: /metrics does not label the router r-test")
	}
	if n := len(set.router.Index.ShardWorkers()); n != 3 {
		t.Errorf("--router-event-threads 3: %d index shards", n)
	}
	if p := set.router.Index.WarmEvery(); p != 0 {
		t.Errorf("--router-index-warm-secs 0: the index warms every %v", p)
	}
}

// --request-timeout bounds a request whose worker never answers: the client gets an error within the
// bound instead of waiting on the worker. The worker comes from --worker.
func TestRequestTimeout(t *testing.T) {
	var reached atomic.Int32
	release := make(chan struct{})
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		select { // never answers on its own
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); worker.Close() })
	_, herr := captureCLI(t)
	args := []string{"--tokenizer", "none", "--model-name", "m", "--http-host", "127.0.0.1", "--http-port", "0",
		"--health-check-interval", "0", "--no-worker-self-test", "--worker", "id=1,url=" + worker.URL, "--request-timeout", "300ms"}
	f, _, code, ok := parseFrontend("frontend", args, nil)
	if !ok {
		t.Fatalf("parse: exit %d: %s", code, herr.String())
	}
	app, err := startFrontend(f, newRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer app.stop()
	hc := &http.Client{Timeout: 10 * time.Second}
	t0 := time.Now()
	resp, err := hc.Post("http://"+app.ln.Addr().String()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":[1,2,3,4,5,6,7,8],"max_tokens":1}`))
	if err != nil {
		t.Fatalf("no answer within the client's 10 s: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(t0)
	if reached.Load() == 0 {
		t.Fatalf("the --worker worker never saw the request: %d %s", resp.StatusCode, b)
	}
	if resp.StatusCode < 400 || !strings.Contains(string(b), "error") || took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("answer %d %s after %v; want an error after about 300ms", resp.StatusCode, b, took)
	}
}

// --otlp-traces-endpoint exports the request spans over OTLP/HTTP to that URL, named by
// --otel-service-name; the spans are flushed when the frontend stops.
func TestOTLPTracesExported(t *testing.T) {
	var posts atomic.Int32
	var got atomic.Value // []byte: the last export body
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			got.Store(b)
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	_, herr := captureCLI(t)
	args := []string{"--tokenizer", "none", "--model-name", "m", "--http-host", "127.0.0.1", "--http-port", "0",
		"--health-check-interval", "0", "--otlp-traces-endpoint", collector.URL + "/v1/traces", "--otel-service-name", "svc-under-test"}
	f, _, code, ok := parseFrontend("frontend", args, nil)
	if !ok {
		t.Fatalf("parse: exit %d: %s", code, herr.String())
	}
	app, err := startFrontend(f, newRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Post("http://"+app.ln.Addr().String()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":[1,2,3,4],"max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	app.stop() // flushes the batch
	b, _ := got.Load().([]byte)
	if posts.Load() == 0 || !bytes.Contains(b, []byte("svc-under-test")) {
		t.Fatalf("collector got %d exports; last %d bytes without the service name", posts.Load(), len(b))
	}
}

// kvroute relay refuses an events or replay endpoint that is not a ZMQ endpoint, and a dp size under 1
// (it ran relaying nothing).
func TestRelayEndpointsChecked(t *testing.T) {
	for _, tc := range []struct {
		events, replay string
		dp             int
		ok             bool
	}{
		{"tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558", 2, true},
		{"nonsense", "", 1, false},
		{"tcp://127.0.0.1:5557", "nonsense", 1, false},
		{"tcp://127.0.0.1:5557", "", 0, false},
	} {
		eps, _, err := rankEndpoints(tc.events, tc.replay, tc.dp)
		if (err == nil) != tc.ok || tc.ok && len(eps) != tc.dp {
			t.Errorf("%+v: %v %v", tc, eps, err)
		}
	}
}

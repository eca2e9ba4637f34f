package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/actors/worker"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

// twoModelArgs are kvroute serve's flags for two models of different families and block sizes: the
// fixture Qwen3-VL (16-token blocks) and the Llama-3 tokenizer directory (32-token blocks).
func twoModelArgs(t *testing.T) []string {
	t.Helper()
	qwen, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	llama, err := filepath.Abs(filepath.Join("..", "..", "testdata", "tokenizers", "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--model", "qwen=" + qwen, "--model", "llama=" + llama + ",block_size=32",
		"--http-host", "127.0.0.1", "--http-port", "0", "--health-check-interval", "200ms"}
}

// post sends a JSON body and returns the status, the worker that served it and the routed overlap.
func post(t *testing.T, base, path string, body any, hdr ...string) (status int, worker, overlap int, out []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ = io.ReadAll(resp.Body)
	worker, _ = strconv.Atoi(resp.Header.Get("x-kvroute-worker-id"))
	overlap, _ = strconv.Atoi(resp.Header.Get("x-kvroute-overlap-blocks"))
	return resp.StatusCode, worker, overlap, out
}

func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// launchFrontend parses kvroute frontend's args and starts it, logs discarded; it stops with the test.
func launchFrontend(t *testing.T, args []string) *frontendApp {
	t.Helper()
	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("frontend", args, nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, herr.String())
	}
	app, err := startFrontend(f, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.stop)
	return app
}

// waitUntil polls cond until it holds or 10 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntilWithin(t, what, 10*time.Second, cond)
}

// waitUntilWithin polls cond until it holds or d passes.
func waitUntilWithin(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kvroute serve with two models: /v1/models lists both, /v1/models/{id} answers each and 404s others,
// an unknown model is OpenAI's 404, and a prompt of one model only ever reaches that model's workers,
// its KV overlap following its own workers' events (the other model's index never sees it).
func TestServeTwoModels(t *testing.T) {
	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("serve", twoModelArgs(t), nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, herr.String())
	}
	app, err := startServe(f, serveConfig{workers: 2, gpuBlocks: 1024, speedup: 50}, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.closeFleet)
	t.Cleanup(app.stop)
	base := "http://" + app.ln.Addr().String()

	st, b := getBody(t, base+"/v1/models")
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, OwnedBy string
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil || st != 200 || list.Object != "list" || len(list.Data) != 2 ||
		list.Data[0].ID != "qwen" || list.Data[1].ID != "llama" {
		t.Fatalf("/v1/models: %d %s", st, b)
	}
	if st, b := getBody(t, base+"/v1/models/llama"); st != 200 || !strings.Contains(string(b), `"id":"llama"`) || !strings.Contains(string(b), `"object":"model"`) {
		t.Errorf("/v1/models/llama: %d %s", st, b)
	}
	var apiErr struct {
		Error struct {
			Message, Type string
			Param         *string
			Code          int
		} `json:"error"`
	}
	st, b = getBody(t, base+"/v1/models/gpt-4")
	if err := json.Unmarshal(b, &apiErr); err != nil || st != 404 || apiErr.Error.Code != 404 || apiErr.Error.Param == nil || *apiErr.Error.Param != "model" {
		t.Errorf("/v1/models/gpt-4: %d %s", st, b)
	}
	st, _, _, b = post(t, base, "/v1/chat/completions", map[string]any{"model": "gpt-4", "messages": []map[string]string{{"role": "user", "content": "hi"}}})
	if err := json.Unmarshal(b, &apiErr); err != nil || st != 404 || !strings.Contains(apiErr.Error.Message, "gpt-4") {
		t.Errorf("unknown model: %d %s", st, b)
	}

	ids := map[string][]int{"qwen": {1, 2}, "llama": {3, 4}}
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog while the cat watches. ", 20)
	for _, m := range []string{"qwen", "llama"} {
		// Each model's first request finds nothing cached: the other model's blocks are in another index.
		st, w, ov, b := post(t, base, "/v1/completions", map[string]any{"model": m, "prompt": prompt, "max_tokens": 2})
		if st != 200 || (w != ids[m][0] && w != ids[m][1]) || ov != 0 {
			t.Fatalf("%s first: status %d worker %d overlap %d: %s", m, st, w, ov, b)
		}
		if !strings.Contains(string(b), `"model":"`+m+`"`) {
			t.Errorf("%s: the worker did not answer as %s: %s", m, m, b)
		}
		// Repeats stay on the model's workers and, once the worker's KV events arrive, find its prefix.
		waitUntil(t, m+" overlap from its own workers' events", func() bool {
			st, w, ov, b := post(t, base, "/v1/completions", map[string]any{"model": m, "prompt": prompt, "max_tokens": 2})
			if st != 200 || (w != ids[m][0] && w != ids[m][1]) {
				t.Fatalf("%s repeat: status %d on worker %d (not one of %v): %s", m, st, w, ids[m], b)
			}
			return ov > 0
		})
	}
	// Each model's chat template renders its own prompt (Llama-3 headers, Qwen's im_start).
	for _, m := range []string{"qwen", "llama"} {
		st, w, _, b := post(t, base, "/v1/chat/completions", map[string]any{"model": m, "max_tokens": 2,
			"messages": []map[string]string{{"role": "user", "content": "Hello there"}}})
		if st != 200 || (w != ids[m][0] && w != ids[m][1]) {
			t.Errorf("%s chat: status %d worker %d: %s", m, st, w, b)
		}
	}
	// Per-model router cores: block sizes 16 and 32.
	if app.routers[0].BlockSize() != 16 || app.routers[1].BlockSize() != 32 {
		t.Errorf("block sizes %d, %d; want 16, 32", app.routers[0].BlockSize(), app.routers[1].BlockSize())
	}
	if _, b := getBody(t, base+"/metrics"); !strings.Contains(string(b), `dynamo_frontend_model_kv_cache_block_size{model="llama"} 32`) {
		t.Errorf("/metrics lacks llama's block size")
	}
}

// Workers behind an API key (vLLM's --api-key) are served through the frontend, which sends each its
// key; the key shows in no log line (debug level, access log), no endpoint and no dumped config, whether
// it came from the environment (api_key_env) or inline in a registration (api_key).
func TestWorkerAPIKeyNeverShown(t *testing.T) {
	const key, inline = "sk-kvroute-env-7d1e9b", "sk-kvroute-inline-3c5a"
	t.Setenv("KVROUTE_TEST_WORKER_KEY", key)
	_, herr := captureCLI(t)
	dump := filepath.Join(t.TempDir(), "config.json")
	args := append(twoModelArgs(t), "--log-level", "debug", "--access-log", "--dump-config-to", dump)
	f, _, code, ok := parseFrontend("serve", args, nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, herr.String())
	}
	var logged syncBuffer
	log, err := f.ops.log.logger(&logged)
	if err != nil {
		t.Fatal(err)
	}
	sc := serveConfig{workers: 1, gpuBlocks: 1024, speedup: 50}
	if err := sc.setKeyEnv("KVROUTE_UNSET_TEST_VARIABLE"); err == nil {
		t.Error("--worker-api-key-env with an unset variable accepted")
	}
	if err := sc.setKeyEnv("KVROUTE_TEST_WORKER_KEY"); err != nil { // --worker-api-key-env
		t.Fatal(err)
	}
	app, err := startServe(f, sc, newRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.closeFleet)
	t.Cleanup(app.stop)
	base := "http://" + app.ln.Addr().String()

	// The workers refuse calls without the key...
	wurl := app.fleets[0].Workers[0].URL()
	if st, _, _, _ := post(t, wurl, "/v1/completions", map[string]any{"model": "qwen", "prompt": "hi", "max_tokens": 1}); st != 401 {
		t.Fatalf("worker without the key: %d, want 401", st)
	}
	// ...and answer the frontend, which sends it.
	var seen []string
	for _, m := range []string{"qwen", "llama"} {
		st, _, _, b := post(t, base, "/v1/chat/completions", map[string]any{"model": m, "max_tokens": 2,
			"messages": []map[string]string{{"role": "user", "content": "Hello"}}})
		if st != 200 {
			t.Fatalf("%s through the frontend: %d %s", m, st, b)
		}
		st, _, _, b = post(t, base, "/v1/completions", map[string]any{"model": m, "prompt": "Hello", "max_tokens": 2, "stream": true})
		if st != 200 || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("%s stream: %d %s", m, st, b)
		}
		seen = append(seen, string(b))
	}
	// A worker registered over the API with its key inline.
	extra := startSimWorker(t, "llama", filepath.Join("testdata", "tokenizers", "llama3"), 9, 32, inline)
	reg := map[string]any{"id": 9, "url": extra, "model": "llama", "api_key": inline}
	if st, _, _, b := post(t, base, "/v1/workers", reg); st != 200 {
		t.Fatalf("register: %d %s", st, b)
	} else {
		seen = append(seen, string(b))
	}
	waitUntil(t, "worker 9 served through the frontend", func() bool {
		st, w, _, b := post(t, base, "/v1/completions", map[string]any{"model": "llama", "prompt": "Hello again", "max_tokens": 1},
			"x-dynamo-worker-instance-id", "9")
		if st != 200 && st != 503 {
			t.Fatalf("pinned to worker 9: %d %s", st, b)
		}
		return st == 200 && w == 9
	})
	for _, p := range []string{"/v1/workers", "/v1/workers/1", "/v1/workers/9", "/v1/models", "/v1/models/llama", "/metrics", "/health", "/ready"} {
		_, b := getBody(t, base+p)
		seen = append(seen, string(b))
	}
	cfg, _ := os.ReadFile(dump)
	seen = append(seen, string(cfg), logged.String(), herr.String())
	for _, s := range seen {
		for _, k := range []string{key, inline} {
			if strings.Contains(s, k) {
				t.Fatalf("the key %q shows:\n%s", k, s)
			}
		}
	}
	if !strings.Contains(logged.String(), "status=200") {
		t.Errorf("the access log did not log the requests (nothing was checked):\n%s", logged.String())
	}
}

// startSimWorker starts a simulated worker serving name from the model directory dir (relative to the
// repository root) with blockSize-token blocks, requiring key when set, without KV events.
func startSimWorker(t *testing.T, name, dir string, id, blockSize int, key string) string {
	t.Helper()
	dir, _ = filepath.Abs(filepath.Join("..", "..", dir))
	m, err := loadModel(dir) // loaded once for the test binary (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mocker.DefaultWorkerConfig()
	cfg.Model, cfg.APIKey, cfg.ID = mocker.ModelOf(m, name), key, id
	cfg.Engine.BlockSize, cfg.Engine.SpeedupRatio = blockSize, 50
	w, err := mocker.StartWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w.URL()
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// n > 1 is forwarded and answered with n choices, and the router books it as n sequences on one
// prefill: while a stream with n=3 runs, its worker counts 3 active sequences and the prompt's
// prefill once.
func TestNSequencesAccounted(t *testing.T) {
	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("serve", []string{"--http-host", "127.0.0.1", "--http-port", "0", "--health-check-interval", "0",
		"--model-path", filepath.Join("..", "..", defaultModelPath)}, nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, herr.String())
	}
	app, err := startServe(f, serveConfig{workers: 1, gpuBlocks: 1024, speedup: 1}, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.closeFleet)
	t.Cleanup(app.stop)
	base := "http://" + app.ln.Addr().String()
	st, _, _, b := post(t, base, "/v1/chat/completions", map[string]any{"model": app.name, "n": 2, "max_tokens": 3,
		"messages": []map[string]string{{"role": "user", "content": "Hello"}}})
	var a struct {
		Choices []struct{ Index int }
	}
	if err := json.Unmarshal(b, &a); err != nil || st != 200 || len(a.Choices) != 2 || a.Choices[1].Index != 1 {
		t.Fatalf("n=2: %d %s", st, b)
	}

	body, _ := json.Marshal(map[string]any{"model": app.name, "n": 3, "max_tokens": 4000, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": "Tell me a long story"}}})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil { // the stream has started: routed and booked
		t.Fatal(err)
	}
	want := `kvroute_worker_active_requests{dp_rank="0",worker_id="1",worker_type="decode"} 3`
	if _, m := getBody(t, base+"/metrics"); !strings.Contains(string(m), want) {
		i := strings.Index(string(m), "kvroute_worker_active_requests{")
		t.Fatalf("n=3 stream: want %s, metrics show %.120s", want, string(m[max(i, 0):]))
	}
}

// --allowed-origins: a preflight from an allowed origin is answered 204 with the CORS headers, before
// any access check; from another origin 403; an allowed origin's answers carry Allow-Origin. Without the
// flag there is no CORS: OPTIONS is a 405 and no Allow-Origin is sent.
func TestAllowedOrigins(t *testing.T) {
	start := func(extra ...string) string {
		t.Helper()
		args := append([]string{"--http-host", "127.0.0.1", "--http-port", "0", "--health-check-interval", "0",
			"--no-worker-self-test", "--worker", "id=1,url=http://127.0.0.1:9", "--model-path", filepath.Join("..", "..", defaultModelPath)}, extra...)
		app := launchFrontend(t, args)
		return "http://" + app.ln.Addr().String()
	}
	do := func(method, url, origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(`{}`))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	base := start("--allowed-origins", `["https://app.example"]`)
	r := do(http.MethodOptions, base+"/v1/chat/completions", "https://app.example")
	if r.StatusCode != 204 || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "POST") ||
		r.Header.Get("Access-Control-Allow-Headers") != "authorization, content-type" {
		t.Errorf("allowed preflight: %d %v", r.StatusCode, r.Header)
	}
	// The admin plane's access rule does not apply to a preflight (it carries no credentials)...
	if r := do(http.MethodOptions, base+"/v1/workers", "https://app.example"); r.StatusCode != 204 {
		t.Errorf("preflight of an admin path: %d", r.StatusCode)
	}
	if r := do(http.MethodOptions, base+"/v1/chat/completions", "https://evil.example"); r.StatusCode != 403 || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("other origin's preflight: %d %v", r.StatusCode, r.Header)
	}
	if r := do(http.MethodGet, base+"/v1/models", "https://app.example"); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("allowed origin's GET: %d %v", r.StatusCode, r.Header)
	}
	// (no body and no Content-Type: 415, the media type is checked first)
	if r := do(http.MethodPost, base+"/v1/chat/completions", "https://app.example"); r.StatusCode != 415 || r.Header.Get("Access-Control-Allow-Origin") == "" {
		t.Errorf("allowed origin's bad POST keeps the CORS header on its error: %d %v", r.StatusCode, r.Header)
	}
	any := start("--allowed-origins", "*")
	if r := do(http.MethodOptions, any+"/v1/completions", "https://x.example"); r.StatusCode != 204 || r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("'*': %d %v", r.StatusCode, r.Header)
	}
	none := start()
	if r := do(http.MethodOptions, none+"/v1/chat/completions", "https://app.example"); r.StatusCode != 405 && r.StatusCode != 404 || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("no --allowed-origins: %d %v", r.StatusCode, r.Header)
	}
}

// The endpoints beyond chat and completions, through a two-model frontend: each goes to its model's
// workers (embeddings, score, rerank routed on their inputs' tokens; responses as the chat it renders),
// tokenize / detokenize use the model's own tokenizer, and bad bodies are OpenAI errors.
func TestServeEndpoints(t *testing.T) {
	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("serve", twoModelArgs(t), nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, herr.String())
	}
	app, err := startServe(f, serveConfig{workers: 2, gpuBlocks: 1024, speedup: 50}, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.closeFleet)
	t.Cleanup(app.stop)
	base := "http://" + app.ln.Addr().String()
	ids := map[string][]int{"qwen": {1, 2}, "llama": {3, 4}}
	for _, m := range []string{"qwen", "llama"} {
		cases := []struct {
			path string
			body map[string]any
			want string
		}{
			{"/v1/embeddings", map[string]any{"model": m, "input": []string{"a b c", "d e f"}}, `"object":"embedding"`},
			{"/v1/score", map[string]any{"model": m, "text_1": "q", "text_2": []string{"x", "q"}}, `"object":"score"`},
			{"/v1/rerank", map[string]any{"model": m, "query": "q", "documents": []string{"x", "q"}}, `"relevance_score"`},
			{"/v1/responses", map[string]any{"model": m, "input": "Say hi", "max_output_tokens": 3}, `"object":"response"`},
		}
		for _, tc := range cases {
			st, w, _, b := post(t, base, tc.path, tc.body)
			if st != 200 || (w != ids[m][0] && w != ids[m][1]) || !strings.Contains(string(b), tc.want) || !strings.Contains(string(b), `"model":"`+m+`"`) {
				t.Errorf("%s %s: status %d worker %d: %s", m, tc.path, st, w, b)
			}
		}
	}
	// A conversation sent as chat, then as a response, shares its prefix: the response is rendered and
	// hashed as the same chat, so it finds the blocks the chat left on its worker.
	long := strings.Repeat("Routing keeps prefixes warm across a fleet of engines. ", 12)
	st, cw, _, b := post(t, base, "/v1/chat/completions", map[string]any{"model": "qwen", "max_tokens": 1,
		"messages": []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": long}}})
	if st != 200 {
		t.Fatalf("chat: %d %s", st, b)
	}
	waitUntil(t, "the chat's blocks indexed", func() bool {
		for _, w := range app.routers[0].Workers() {
			if int(w.ID) == cw && w.IndexedBlocks >= 8 {
				return true
			}
		}
		return false
	})
	st, w, ov, b := post(t, base, "/v1/responses", map[string]any{"model": "qwen", "instructions": "Be brief.", "input": long,
		"max_output_tokens": 1})
	var ru struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
		}
	}
	_ = json.Unmarshal(b, &ru)
	if full := ru.Usage.InputTokens / 16; st != 200 || w != cw || full < 8 || ov != full {
		t.Errorf("the response after the same chat: status %d, worker %d (chat's %d), overlap %d blocks (want all %d full blocks): %s",
			st, w, cw, ov, full, b)
	}
	// Each model tokenizes with its own tokenizer: the same text gives other ids.
	_, _, _, q := post(t, base, "/tokenize", map[string]any{"model": "qwen", "prompt": "Hello world"})
	_, _, _, l := post(t, base, "/tokenize", map[string]any{"model": "llama", "prompt": "Hello world"})
	if string(q) == string(l) {
		t.Errorf("/tokenize: both models gave %s", q)
	}
	var tl struct{ Tokens []uint32 }
	_ = json.Unmarshal(l, &tl)
	if st, _, _, b := post(t, base, "/detokenize", map[string]any{"model": "llama", "tokens": tl.Tokens}); st != 200 || !strings.Contains(string(b), "Hello world") {
		t.Errorf("/detokenize: %d %s", st, b)
	}
	bad := []struct {
		path   string
		body   map[string]any
		status int
	}{
		{"/v1/embeddings", map[string]any{"model": "llama"}, 400},
		{"/v1/embeddings", map[string]any{"model": "nope", "input": "x"}, 404},
		{"/v1/rerank", map[string]any{"model": "qwen", "query": "q"}, 400},
		{"/v1/responses", map[string]any{"model": "qwen", "input": "x", "previous_response_id": "resp_1"}, 400},
		{"/v1/responses", map[string]any{"model": "nope", "input": "x"}, 404},
	}
	for _, tc := range bad {
		st, _, _, b := post(t, base, tc.path, tc.body)
		if st != tc.status || !strings.Contains(string(b), `"error":{"message"`) {
			t.Errorf("%s %v: %d %s, want %d", tc.path, tc.body, st, b, tc.status)
		}
	}
}

// A --worker without model= joins the model its own /v1/models names; /ready waits for a ready worker
// of every model and says which one lacks it.
func TestWorkerModelInferredAndEveryModelReady(t *testing.T) {
	qwenURL := startSimWorker(t, "qwen", defaultModelPath, 1, 16, "")
	llamaURL := startSimWorker(t, "llama", filepath.Join("testdata", "tokenizers", "llama3"), 2, 32, "")
	args := append(twoModelArgs(t), "--no-worker-self-test", "--worker", "id=1,url="+qwenURL)
	app := launchFrontend(t, args)
	base := "http://" + app.ln.Addr().String()
	if len(app.routers[0].Workers()) != 1 || len(app.routers[1].Workers()) != 0 {
		t.Fatalf("worker 1 (serving qwen, no model=) joined qwen %d, llama %d", len(app.routers[0].Workers()), len(app.routers[1].Workers()))
	}
	waitUntil(t, "/ready to name llama as the model without workers", func() bool {
		st, b := getBody(t, base+"/ready")
		return st == 503 && strings.Contains(string(b), "model llama")
	})
	if st, _, _, b := post(t, base, "/v1/workers", map[string]any{"id": 2, "url": llamaURL, "model": "llama"}); st != 200 {
		t.Fatalf("register llama worker: %d %s", st, b)
	}
	if st, _, _, b := post(t, base, "/v1/workers", map[string]any{"id": 3, "url": llamaURL, "model": "mistral"}); st != 404 {
		t.Errorf("register for an unserved model: %d %s", st, b)
	}
	waitUntil(t, "/ready once both models have a ready worker", func() bool {
		st, _ := getBody(t, base+"/ready")
		return st == 200
	})
	if st, w, _, b := post(t, base, "/v1/completions", map[string]any{"model": "llama", "prompt": "hi", "max_tokens": 1}); st != 200 || w != 2 {
		t.Errorf("llama request: %d on worker %d: %s", st, w, b)
	}
}

// TestServeWithBindSockets: kvroute serve with --kv-events-bind binds each endpoint once, whatever the
// cores: both models' decode cores and their prefill cores share the first model's sockets (every core
// binding the endpoint made the second bind time out, and serve never started), and a topic registered
// on one core is refused on another.
func TestServeWithBindSockets(t *testing.T) {
	captureCLI(t)
	args := append(twoModelArgs(t), "--kv-events-bind", "tcp://127.0.0.1:*")
	f, _, code, ok := parseFrontend("serve", args, nil)
	if !ok {
		t.Fatalf("exit %d", code)
	}
	app, err := startServe(f, serveConfig{workers: 1, gpuBlocks: 1024, speedup: 50}, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer app.closeFleet()
	defer app.stop()
	addr := app.router.Fleet.BindAddr()
	if addr == "" {
		t.Fatal("no bind address")
	}
	fleets := []*worker.Fleet{}
	for i, r := range app.routers {
		fleets = append(fleets, r.Fleet, app.pds[i].Prefill.Fleet)
	}
	for i, fl := range fleets {
		if fl.BindAddr() != addr {
			t.Fatalf("core %d's bind address %q, the first's %q", i, fl.BindAddr(), addr)
		}
	}
	topic := kvevents.VLLMTopic("127.0.0.1:9", "qwen")
	if err := app.routers[1].AddWorker(registry.Spec{ID: 77, Topic: topic}); err != nil {
		t.Fatal(err)
	}
	if err := app.pds[0].Prefill.AddWorker(registry.Spec{ID: 78, Topic: topic}); err == nil {
		t.Fatal("a topic registered on one core accepted on another")
	}
}

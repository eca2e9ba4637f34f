package frontend

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/model"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/policy"
	"github.com/kvroute/kvroute/transfer"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/faultproxy"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

const fixtureModel = "../testdata/models/Qwen3-VL-2B-Instruct"

// stack is a whole deployment on loopback: simulated vLLM workers publishing real KV events, the router
// core, the OpenAI frontend.
type stack struct {
	base   string
	fleet  *mocker.Fleet
	router *router.Router
	api    *OpenAIAPI
	srv    *Server
	pool   *WorkerPool
	name   string
	sender *transfer.Sender
}

type stackOpts struct {
	workers        int
	speedup        float64
	migrationLimit int
	// mm turns on multimodal routing; allowHosts are --media-allow-hosts; decode is --frontend-decoding.
	mm         bool
	allowHosts []string
	// workerAllowHosts widen only the simulated workers' guard (to test the frontend's alone).
	workerAllowHosts []string
	decode           bool
	// mmBudget adjusts the image stage's probe and resolve configurations (byte budgets).
	mmBudget func(*mm.ProbeConfig, *mm.ResolveConfig)
	// transfer is --mm-transfer (shm or net); "" is off.
	transfer string
	// policy is the router policy document (--router-policy-config); nil: one synthetic class.
	policy *policy.Config
	// scoring adjusts the router configuration (flags) before the router starts.
	scoring func(*scoring.Config)
	// eventFaults, when set, puts a fault proxy (workers/faultproxy) with these faults between each
	// worker's KV event stream and the router.
	eventFaults *faultproxy.Faults
	// seed makes the router's random choices reproducible.
	seed *uint64
	// tracer traces requests (nil: off).
	tracer trace.Tracer
	// server configures the HTTP edge; zero: a 1 MiB body limit and the defaults.
	server ServerConfig
	// modelDir and modelName serve another model directory or name (default: the Qwen3-VL fixture as
	// "Qwen3-VL-2B-Instruct"); the name is what family detection reads.
	modelDir, modelName string
	// eventLayout is the simulated workers' KV event layout (default vLLM's map layout).
	eventLayout kvevents.Layout
	// mmScheme is each worker's registered mm_scheme ("" = pad).
	mmScheme string
	// engine is each worker's registered engine ("" = vllm).
	engine string
	// registry receives the router's metrics (nil: private).
	registry prometheus.Registerer
	// passiveHealth takes a worker out of routing when a connection to it is refused.
	passiveHealth bool
	// requestTimeout is --request-timeout (0: 30 s).
	requestTimeout time.Duration
}

// fixtureLoaded is the fixture model, loaded once per test binary and shared by every stack's frontend
// and simulated workers (read-only after loading; parsing its tokenizer takes 2-5 s under the race
// detector, and a stack used to parse it three times).
var fixtureLoaded = sync.OnceValues(func() (*model.Model, error) { return model.Load(fixtureModel) })

// fixtureModels is the fixture model (fixtureLoaded) for a frontend and for simulated workers serving
// it as name.
func fixtureModels(t testing.TB, name string) (*model.Model, *mocker.Model) {
	t.Helper()
	m, err := fixtureLoaded()
	if err != nil {
		t.Fatal(err)
	}
	return m, mocker.ModelOf(m, name)
}

func startStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	dir, name := fixtureModel, "Qwen3-VL-2B-Instruct"
	if o.modelDir != "" {
		dir = o.modelDir
	}
	if o.modelName != "" {
		name = o.modelName
	}
	load := func() (*model.Model, error) { return model.Load(dir) }
	if dir == fixtureModel {
		load = fixtureLoaded
	}
	m, err := load()
	if err != nil {
		t.Fatal(err)
	}
	wm := mocker.ModelOf(m, name)
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.KVEvents.Layout = o.eventLayout
	tmpl.Engine.BlockSize = 16
	tmpl.Engine.NumGPUBlocks = 2048
	tmpl.Engine.SpeedupRatio = o.speedup
	tmpl.MediaAllowHosts = append(append([]string(nil), o.allowHosts...), o.workerAllowHosts...)
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: o.workers, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	system := actors.NewSystem(nil)
	rcfg := router.DefaultConfig(16)
	rcfg.Worker.ImageTokenID = uint32(m.Config.ImageTokenID)
	if info, err := mm.ModelInfoFrom(m, name); err == nil {
		if sp := mm.Detect(info); sp.Enabled {
			rcfg.Worker.ImageTokenID, rcfg.Worker.ImageEndTokenID = sp.RunTokenID, sp.EndTokenID
		}
	}
	rcfg.Scoring.MigrationLimit = o.migrationLimit
	rcfg.Policy = o.policy
	rcfg.Seed = o.seed
	rcfg.Registerer = o.registry
	if o.scoring != nil {
		o.scoring(&rcfg.Scoring)
	}
	r, err := router.New(system, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fleet.Specs() {
		if o.mmScheme != "" {
			s += ",mm_scheme=" + o.mmScheme
		}
		if o.engine != "" {
			s += ",engine=" + o.engine
		}
		sp, err := registry.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if o.eventFaults != nil {
			px, err := faultproxy.Start(faultproxy.Config{Upstream: sp.Events, UpstreamReplay: sp.Replay})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(px.Close)
			px.SetFaults(*o.eventFaults)
			sp.Events, sp.Replay = px.Addr(), px.ReplayAddr()
		}
		if err := r.AddWorker(sp); err != nil {
			t.Fatal(err)
		}
	}
	pool := NewWorkerPool(client.DefaultConfig())
	var st0 *transfer.Sender
	guard, err := mm.NewGuard(o.allowHosts)
	if err != nil {
		t.Fatal(err)
	}
	timeout := o.requestTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	api := NewOpenAIAPI(r, m, name, system, pool, OpenAIConfig{MigrationLimit: o.migrationLimit, RequestTimeout: timeout, MediaGuard: guard, PassiveHealth: o.passiveHealth}, NewFrontendMetrics(nil))
	api.Tracer = o.tracer
	if o.mm {
		info, err := mm.ModelInfoFrom(m, name)
		if err != nil {
			t.Fatal(err)
		}
		spec := mm.Detect(info)
		pc := mm.DefaultProbeConfig()
		pc.AllowHosts = o.allowHosts
		rc := mm.DefaultResolveConfig()
		rc.FrontendDecoding = o.decode
		if o.mmBudget != nil {
			o.mmBudget(&pc, &rc)
		}
		prober, err := mm.NewProber(pc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(prober.Close)
		res, err := mm.NewResolver(spec, prober, rc)
		if err != nil {
			t.Fatal(err)
		}
		mc := &MMConfig{Resolver: res, Limits: mm.DefaultLimits()}
		if o.transfer != "" {
			mode, err := transfer.ParseMode(o.transfer)
			if err != nil {
				t.Fatal(err)
			}
			sender, err := transfer.NewSender(transfer.Config{Mode: mode, Processor: transfer.Qwen3VLProcessor(),
				Fetch: func(ctx context.Context, u string) ([]byte, error) { return prober.Fetch(ctx, u, 0) }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sender.Close() })
			mc.Transfer = sender
			st0 = sender
		}
		api.EnableMM(mc, nil)
	}
	scfg := o.server
	if scfg.MaxBodyBytes == 0 {
		scfg.MaxBodyBytes = 1 << 20
	}
	srv := NewServer(scfg, api, &RouterAPI{R: r})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	st := &stack{base: "http://" + ln.Addr().String(), fleet: fleet, router: r, api: api, srv: srv, pool: pool, name: name, sender: st0}
	t.Cleanup(func() {
		_ = srv.Shutdown()
		pool.Close()
		r.Stop()
		system.Shutdown()
		_ = fleet.Close()
	})
	// Wait until every worker's event stream is connected (its catch-up replay answered).
	deadline := time.Now().Add(10 * time.Second)
	for _, w := range r.Workers() {
		for w.Replays == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			w, _ = r.Fleet.StatusOf(w.ID)
		}
	}
	return st
}

// startBenchStack is a stack tuned for measuring the frontend: simulated time ~free, no health checks.
func startBenchStack(b *testing.B, workers int) *stack {
	return startStack(b, stackOpts{workers: workers, speedup: 1e6})
}

type reply struct {
	status  int
	worker  string
	overlap string
	body    map[string]any
	raw     string
	header  http.Header
}

// post sends a JSON body; hdr are extra header name, value pairs.
func (s *stack) post(t *testing.T, path, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, worker: resp.Header.Get("x-kvroute-worker-id"), overlap: resp.Header.Get("x-kvroute-overlap-blocks"), raw: string(raw), header: resp.Header}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func chatBody(model, content string, extra string) string {
	b, _ := json.Marshal(content)
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%s}],"max_tokens":4%s}`, model, b, extra)
}

// waitIndexed polls until the index holds a worker's blocks for tokens of this prompt (events are
// asynchronous: a request's blocks arrive shortly after the worker cached them).
func (s *stack) waitOverlap(t *testing.T, content string, worker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, w := range s.router.Workers() {
			if fmt.Sprint(w.ID) == worker && w.IndexedBlocks > 0 {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("worker %s never reported blocks", worker)
}

func longText(seed string, words int) string {
	var b strings.Builder
	for i := 0; i < words; i++ {
		fmt.Fprintf(&b, "%s-%d ", seed, i)
	}
	return b.String()
}

func TestE2ESamePromptSameWorker(t *testing.T) {
	s := startStack(t, stackOpts{workers: 3, speedup: 100})
	prompt := longText("alpha", 200)
	first := s.post(t, "/v1/chat/completions", chatBody(s.name, prompt, ""))
	if first.status != 200 || first.worker == "" || first.overlap != "0" {
		t.Fatalf("first: %d worker=%q overlap=%q %s", first.status, first.worker, first.overlap, first.raw)
	}
	s.waitOverlap(t, prompt, first.worker)
	second := s.post(t, "/v1/chat/completions", chatBody(s.name, prompt, `,"nvext":{"return_routing":true}`))
	if second.status != 200 || second.worker != first.worker || second.overlap == "0" {
		t.Fatalf("second: %d worker=%q (first %q) overlap=%q", second.status, second.worker, first.worker, second.overlap)
	}
	// The worker confirms the prediction: its cached tokens equal the predicted overlap in tokens.
	usage := second.body["usage"].(map[string]any)
	cached := usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	var overlap float64
	fmt.Sscan(second.overlap, &overlap)
	if cached != overlap*16 {
		t.Fatalf("worker cached %v tokens, router predicted %v blocks", cached, overlap)
	}
	routing := second.body["nvext"].(map[string]any)["routing"].(map[string]any)
	if len(routing["candidates"].([]any)) != 3 {
		t.Fatalf("return_routing: %v", routing)
	}

	// A shared long prefix with a different suffix follows the prefix.
	third := s.post(t, "/v1/chat/completions", chatBody(s.name, prompt+" and then something new entirely", ""))
	if third.worker != first.worker || third.overlap == "0" {
		t.Fatalf("shared prefix went to %q (prefix on %q), overlap %q", third.worker, first.worker, third.overlap)
	}
}

func TestE2EDistinctPromptsSpread(t *testing.T) {
	s := startStack(t, stackOpts{workers: 4, speedup: 1})
	// Concurrent distinct prompts: load (prefill tokens, active blocks) spreads them.
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := s.post(t, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":8}`, s.name, longText(fmt.Sprint("p", i), 150)))
			if r.status != 200 {
				t.Errorf("request %d: %d %s", i, r.status, r.raw)
				return
			}
			mu.Lock()
			seen[r.worker]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if len(seen) < 3 {
		t.Fatalf("8 concurrent distinct prompts used only %d workers: %v", len(seen), seen)
	}
}

func TestE2EStreamingAndCompletions(t *testing.T) {
	s := startStack(t, stackOpts{workers: 2, speedup: 100})
	resp, err := http.Post(s.base+"/v1/chat/completions", "application/json",
		strings.NewReader(chatBody(s.name, "stream this please", `,"stream":true,"stream_options":{"include_usage":true},"nvext":{"return_routing":true}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") || resp.Header.Get("x-kvroute-worker-id") == "" {
		t.Fatalf("stream headers: %d %v", resp.StatusCode, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			events = append(events, strings.TrimPrefix(line, "data: "))
		}
	}
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events: %v", events)
	}
	if !strings.Contains(events[0], `"nvext"`) || !strings.Contains(events[len(events)-2], `"usage"`) {
		t.Fatalf("first event lacks routing or last lacks usage: %v", events)
	}
	// Token-id prompt on /v1/completions.
	r := s.post(t, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"max_tokens":2}`, s.name))
	if r.status != 200 || r.body["object"] != "text_completion" {
		t.Fatalf("completion: %d %s", r.status, r.raw)
	}
	// The router's lifecycle ended every request (first token → prefill done, end → free): no load left.
	deadline := time.Now().Add(5 * time.Second)
	for s.router.ActiveRequests() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still active after their responses ended", s.router.ActiveRequests())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A worker that dies with requests in flight: requests that have not sent a byte to the client complete
// on another worker (migration), and later requests avoid it once it is removed.
func TestE2EKilledWorkerMigrates(t *testing.T) {
	s := startStack(t, stackOpts{workers: 2, speedup: 0.5, migrationLimit: 2})
	prompt := longText("kill", 100)
	first := s.post(t, "/v1/chat/completions", chatBody(s.name, prompt, ""))
	if first.status != 200 {
		t.Fatalf("warm-up: %d %s", first.status, first.raw)
	}
	s.waitOverlap(t, prompt, first.worker)
	var victim *mocker.Worker
	for _, w := range s.fleet.Workers {
		if fmt.Sprint(w.ID()) == first.worker {
			victim = w
		}
	}
	// Requests for the cached prompt are routed to the victim; kill it while they run.
	results := make(chan reply, 4)
	for i := 0; i < 4; i++ {
		go func() { results <- s.post(t, "/v1/chat/completions", chatBody(s.name, prompt, `,"max_tokens":64`)) }()
	}
	// Kill it once all four are routed and in flight (not after a guessed delay: under load the posts
	// may not have reached the router yet).
	deadline := time.Now().Add(10 * time.Second)
	for s.router.ActiveRequests() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 requests in flight", s.router.ActiveRequests())
		}
		time.Sleep(time.Millisecond)
	}
	_ = victim.Close()
	moved := 0
	for i := 0; i < 4; i++ {
		r := <-results
		if r.status != 200 {
			t.Fatalf("request %d after the kill: %d %s", i, r.status, r.raw)
		}
		if r.worker != first.worker {
			moved++
		}
	}
	// At 0.5× speed 64 output tokens take seconds: every request was still pending when the victim
	// died, and each one finished on the other worker.
	if moved != 4 {
		t.Fatalf("%d of 4 pending requests moved to the surviving worker", moved)
	}
}

func TestE2EMalformedRequests(t *testing.T) {
	s := startStack(t, stackOpts{workers: 1, speedup: 100})
	m := s.name
	tests := []struct {
		name, path, body string
		status           int
	}{
		{"empty body", "/v1/chat/completions", ``, 400},
		{"not json", "/v1/chat/completions", `hello`, 400},
		{"truncated json", "/v1/chat/completions", `{"model":"x"`, 400},
		{"array body", "/v1/chat/completions", `[1,2]`, 400},
		{"missing model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404},
		{"model wrong type", "/v1/chat/completions", `{"model":5,"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"missing messages", "/v1/chat/completions", `{"model":"` + m + `"}`, 400},
		{"empty messages", "/v1/chat/completions", `{"model":"` + m + `","messages":[]}`, 400},
		{"messages not list", "/v1/chat/completions", `{"model":"` + m + `","messages":"hi"}`, 400},
		{"message not object", "/v1/chat/completions", `{"model":"` + m + `","messages":[5]}`, 400},
		{"unknown role", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"wizard","content":"hi"}]}`, 400},
		{"missing role", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"content":"hi"}]}`, 400},
		{"content number", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":5}]}`, 400},
		{"bad part type", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, 400},
		{"negative max_tokens", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}`, 400},
		{"zero max_tokens", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400},
		{"max_tokens string", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}],"max_tokens":"ten"}`, 400},
		{"temperature too high", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}],"temperature":5}`, 400},
		{"stream not bool", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, 400},
		{"n over the limit", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}],"n":129}`, 422},
		{"n zero", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}],"n":0}`, 400},
		{"bad priority header value", "/v1/chat/completions", `{"model":"` + m + `","messages":[{"role":"user","content":"hi"}],"nvext":{"agent_hints":{"priority":"high"}}}`, 400},
		{"completion missing prompt", "/v1/completions", `{"model":"` + m + `"}`, 400},
		{"completion prompt object", "/v1/completions", `{"model":"` + m + `","prompt":{"a":1}}`, 400},
		{"completion negative token", "/v1/completions", `{"model":"` + m + `","prompt":[-5]}`, 400},
		{"completion token too big", "/v1/completions", `{"model":"` + m + `","prompt":[99999999999]}`, 400},
		{"completion prompt embeds", "/v1/completions", `{"model":"` + m + `","prompt":"a","prompt_embeds":"AAAA"}`, 422},
		{"completion batched prompts", "/v1/completions", `{"model":"` + m + `","prompt":["a","b"]}`, 422},
		{"completion empty prompt", "/v1/completions", `{"model":"` + m + `","prompt":""}`, 400},
		{"tokenize bad json", "/tokenize", `{`, 400},
		{"tokenize nothing", "/tokenize", `{}`, 400},
		{"tokenize unknown model", "/tokenize", `{"model":"nope","prompt":"a"}`, 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.post(t, tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.raw)
			}
			e, ok := r.body["error"].(map[string]any)
			if !ok || e["message"] == "" || e["code"] != float64(tc.status) {
				t.Fatalf("not an OpenAI error: %s", r.raw)
			}
		})
	}
	if code, _ := postOversize(t, s.base, "/v1/chat/completions", 2<<20); code != 413 {
		t.Fatalf("huge body: %d, want 413", code)
	}
	if r := s.post(t, "/v1/chat/completions", chatBody(m, "still serving?", "")); r.status != 200 {
		t.Fatalf("server stopped serving: %d %s", r.status, r.raw)
	}
	if r := s.post(t, "/tokenize", `{"prompt":"hello world"}`); r.status != 200 || r.body["count"].(float64) < 1 {
		t.Fatalf("tokenize: %d %s", r.status, r.raw)
	}
}

// The official openai npm client against the frontend: chat, streaming chat, completions, an error.
func TestE2EOpenAINodeClient(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is required for this test (it is on every machine of this project's kind)")
	}
	dir := t.TempDir()
	src := filepath.Join("testdata", "openai-client")
	for _, f := range []string{"package.json", "client.mjs"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install openai: %v\n%s", err, out)
	}
	s := startStack(t, stackOpts{workers: 2, speedup: 100})
	run := exec.CommandContext(ctx, "node", "client.mjs", s.base, s.name)
	run.Dir = dir
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, out)
	}
	var res struct {
		Chat struct {
			Content string
			Usage   struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		Stream struct {
			Text   string
			Chunks int
			Usage  *struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		Completion struct{ Text string }
		Error      struct {
			Status int
			Type   string
		}
		Empty struct{ Status int }
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	if res.Chat.Content == "" || res.Chat.Usage.PromptTokens == 0 {
		t.Fatalf("chat: %+v", res.Chat)
	}
	if res.Stream.Text == "" || res.Stream.Chunks < 2 || res.Stream.Usage == nil || res.Stream.Usage.CompletionTokens != 4 {
		t.Fatalf("stream: %+v", res.Stream)
	}
	if res.Completion.Text == "" {
		t.Fatalf("completion: %+v", res.Completion)
	}
	if res.Error.Status != 404 || res.Empty.Status != 400 {
		t.Fatalf("errors: %+v %+v", res.Error, res.Empty)
	}
}

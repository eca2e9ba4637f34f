package frontend

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

// capture is a recording reverse proxy in front of one simulated worker: it keeps every request body
// and X-Request-Id the frontend sent, and every response body the worker returned.
type capture struct {
	mu   sync.Mutex
	reqs []captured
	url  string
}

type captured struct {
	path, requestID string
	body, response  []byte
}

func startCapture(t *testing.T, upstream string) *capture {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	c := &capture{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && resp.Request.URL.Path != "/metrics" {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
			c.mu.Lock()
			if n := len(c.reqs); n > 0 {
				c.reqs[n-1].response = b
			}
			c.mu.Unlock()
		}
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			c.mu.Lock()
			c.reqs = append(c.reqs, captured{path: r.URL.Path, requestID: r.Header.Get("X-Request-Id"), body: b})
			c.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c.url = "http://" + ln.Addr().String()
	return c
}

func (c *capture) requests() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]captured(nil), c.reqs...)
}

// pdStack is a disaggregated deployment on loopback: prefill and decode mockers publishing real KV
// events, the two router cores, the frontend.
type pdStack struct {
	base            string
	prefill, decode *mocker.Fleet
	pcap, dcap      []*capture
	r               *router.Router
	pd              *Disagg
}

func startPDStack(t *testing.T, prefill, decode int, cfg DisaggConfig) *pdStack {
	t.Helper()
	const name = "Qwen3-VL-2B-Instruct"
	m, wm := fixtureModels(t, name)
	var err error
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize, tmpl.Engine.NumGPUBlocks, tmpl.Engine.SpeedupRatio = 16, 2048, 100
	s := &pdStack{}
	if s.prefill, err = mocker.StartFleet(mocker.FleetConfig{NumWorkers: prefill, Template: tmpl, FirstID: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.prefill.Close() })
	if s.decode, err = mocker.StartFleet(mocker.FleetConfig{NumWorkers: decode, Template: tmpl, FirstID: 11}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.decode.Close() })
	system := actors.NewSystem(nil)
	t.Cleanup(system.Shutdown)
	rcfg := router.DefaultConfig(16)
	rcfg.Worker.ImageTokenID = uint32(m.Config.ImageTokenID)
	rcfg.Scoring.MigrationLimit = 1
	if s.r, err = router.New(system, rcfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.r.Stop)
	pcfg := rcfg
	pcfg.Scoring = PrefillConfig(rcfg.Scoring)
	pcfg.RouterID = "kvroute-prefill"
	pr, err := router.New(system, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pr.Stop)
	if s.pd, err = NewDisagg(pr, cfg); err != nil {
		t.Fatal(err)
	}
	pool := NewWorkerPool(client.DefaultConfig())
	t.Cleanup(pool.Close)
	api := NewOpenAIAPI(s.r, m, name, system, pool, OpenAIConfig{MigrationLimit: 1, RequestTimeout: 30 * time.Second}, NewFrontendMetrics(nil))
	api.PD = s.pd
	srv := NewServer(ServerConfig{MaxBodyBytes: 1 << 20}, api, &RouterAPI{R: s.r, PD: s.pd, RequireURL: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	s.base = "http://" + ln.Addr().String()
	// Workers register through POST /v1/workers with their role, each behind a recording proxy.
	for _, f := range []struct {
		fleet *mocker.Fleet
		role  string
		caps  *[]*capture
	}{{s.prefill, "prefill", &s.pcap}, {s.decode, "decode", &s.dcap}} {
		for _, w := range f.fleet.Workers {
			sp, err := registry.Parse(w.Spec())
			if err != nil {
				t.Fatal(err)
			}
			c := startCapture(t, sp.URL)
			*f.caps = append(*f.caps, c)
			sp.URL, sp.Role = c.url, f.role
			b, _ := json.Marshal(sp)
			resp, err := http.Post(s.base+"/v1/workers", "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(out), `"role":"`+f.role+`"`) {
				t.Fatalf("register %s worker %d: %d %s", f.role, sp.ID, resp.StatusCode, out)
			}
		}
	}
	for _, core := range []*router.Router{s.r, pr} {
		testutil.Eventually(t, "every worker's event stream connected", func() bool {
			for _, w := range core.Workers() {
				if w.Replays == 0 {
					return false
				}
			}
			return true
		})
	}
	return s
}

type pdReply struct {
	status int
	header http.Header
	body   string
	events []string // SSE data payloads, [DONE] included
}

func (s *pdStack) post(t *testing.T, body string, hdr ...string) pdReply {
	t.Helper()
	req, _ := http.NewRequest("POST", s.base+"/v1/chat/completions", strings.NewReader(body))
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
	r := pdReply{status: resp.StatusCode, header: resp.Header, body: string(raw)}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			r.events = append(r.events, d)
		}
	}
	return r
}

func pdChat(content string, extra string) string {
	b, _ := json.Marshal(content)
	return fmt.Sprintf(`{"model":"Qwen3-VL-2B-Instruct","messages":[{"role":"user","content":%s}]%s}`, b, extra)
}

// workerByID finds a simulated worker of a fleet.
func workerByID(f *mocker.Fleet, id string) *mocker.Worker {
	for _, w := range f.Workers {
		if fmt.Sprint(w.ID()) == id {
			return w
		}
	}
	return nil
}

// TestDisaggE2E is the disaggregated request path end to end over HTTP, with real KV events from
// simulated workers in both roles: a repeated long prompt is prefilled on the prefill worker holding it
// (the overlap header is that worker's cached tokens), decoded on the least-loaded decode worker whatever
// it caches, and the client sees one ordinary stream; a short prompt skips the prefill hop.
func TestDisaggE2E(t *testing.T) {
	cfg := DefaultDisaggConfig()
	cfg.BypassPolicy = BypassNever // every request disaggregated; TestDisaggBypass covers the policy
	s := startPDStack(t, 2, 2, cfg)
	long := pdChat(longText("pd", 900), `,"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}`)

	first := s.post(t, long)
	if first.status != 200 || first.header.Get("x-kvroute-serving") != "disaggregated" {
		t.Fatalf("first: %d serving %q: %s", first.status, first.header.Get("x-kvroute-serving"), first.body)
	}
	checkStream(t, first, 6)
	pw, dw := first.header.Get("x-kvroute-prefill-worker-id"), first.header.Get("x-kvroute-worker-id")
	prefillW, decodeW := workerByID(s.prefill, pw), workerByID(s.decode, dw)
	if prefillW == nil || decodeW == nil {
		t.Fatalf("prefill worker %q, decode worker %q: not in their fleets", pw, dw)
	}
	// The decode worker stored the pulled blocks and announced them: its core indexes the prompt.
	testutil.Eventually(t, "decode core indexes the pulled blocks", func() bool {
		st, _ := s.r.Fleet.StatusOf(uint64(decodeW.ID()))
		return st.IndexedBlocks > 100
	})
	testutil.Eventually(t, "prefill core indexes the prompt", func() bool {
		st, _ := s.pd.Prefill.Fleet.StatusOf(uint64(prefillW.ID()))
		return st.IndexedBlocks > 100
	})

	// Load the decode worker that holds the prompt: the decode decision must leave it (credit 0).
	busy := &router.RouteRequest{ID: "busy", Tokens: make([]uint32, 64*16), Pin: &scoring.WorkerKey{WorkerID: uint64(decodeW.ID())}}
	if _, err := s.r.Route(t.Context(), busy); err != nil {
		t.Fatal(err)
	}
	hitsBefore := prefillW.Stats(0).PrefixHits
	second := s.post(t, long)
	if second.status != 200 || second.header.Get("x-kvroute-prefill-worker-id") != pw {
		t.Fatalf("second: %d prefill worker %q, want %s (it holds the prompt)", second.status, second.header.Get("x-kvroute-prefill-worker-id"), pw)
	}
	checkStream(t, second, 6)
	if got := second.header.Get("x-kvroute-worker-id"); got == dw {
		t.Fatalf("decode went to worker %s, the loaded one, not the least-loaded", got)
	}
	cached := prefillW.Stats(0).PrefixHits - hitsBefore
	if ov := second.header.Get("x-kvroute-prefill-overlap-blocks"); ov != fmt.Sprint(cached/16) || cached == 0 {
		t.Fatalf("prefill overlap header %s blocks; the worker served %d cached tokens (%d blocks)", ov, cached, cached/16)
	}
	_ = s.r.Free("busy")
	// Both hops were freed: nothing stays charged on either core once the streams ended.
	testutil.Eventually(t, "both cores free", func() bool { return s.r.ActiveRequests() == 0 && s.pd.Prefill.ActiveRequests() == 0 })

	// The requests each worker received, field by field against vLLM's P/D protocol.
	checkPDProtocol(t, s, long, pw, dw)

	// x-dynamo-prefill-instance-id pins the prefill hop (Dynamo's direct-mode header), even away from
	// the worker holding the prompt.
	other := "1"
	if pw == "1" {
		other = "2"
	}
	pinned := s.post(t, long, "x-dynamo-prefill-instance-id", other)
	if pinned.status != 200 || pinned.header.Get("x-kvroute-prefill-worker-id") != other {
		t.Fatalf("pinned prefill: %d on worker %q, want %s", pinned.status, pinned.header.Get("x-kvroute-prefill-worker-id"), other)
	}

	// nvext.return_routing names both decisions: the decode worker at the top, the prefill one inside.
	unary := s.post(t, pdChat(longText("pd", 900), `,"max_tokens":2,"nvext":{"return_routing":true}`))
	var nv struct {
		NVExt struct {
			Routing struct {
				WorkerID uint64 `json:"worker_id"`
				Prefill  *struct {
					WorkerID      uint64 `json:"worker_id"`
					OverlapBlocks uint32 `json:"overlap_blocks"`
					Candidates    []any  `json:"candidates"`
				} `json:"prefill"`
			} `json:"routing"`
		} `json:"nvext"`
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal([]byte(unary.body), &nv); err != nil || unary.status != 200 {
		t.Fatalf("unary: %d %s", unary.status, unary.body)
	}
	r := nv.NVExt.Routing
	if r.Prefill == nil || fmt.Sprint(r.Prefill.WorkerID) != unary.header.Get("x-kvroute-prefill-worker-id") ||
		fmt.Sprint(r.WorkerID) != unary.header.Get("x-kvroute-worker-id") || len(r.Prefill.Candidates) != 2 || r.Prefill.OverlapBlocks == 0 {
		t.Fatalf("nvext routing %s", unary.body)
	}
	if nv.KV != nil {
		t.Fatalf("the client's answer carries the prefill handshake: %s", unary.body)
	}

	if d, b, f := s.pd.Counts(); d != 4 || b != 0 || f != 0 {
		t.Fatalf("counts disaggregated %d bypassed %d fallback %d, want 4 0 0", d, b, f)
	}
}

// TestDisaggBypass: with the token_cap policy (thresholds scaled down to test prompts) a short prompt is
// served aggregated with no prefill hop, a long novel one is disaggregated, and the same long prompt
// again is bypassed: the decode worker that pulled its blocks holds them, so little is left to compute.
func TestDisaggBypass(t *testing.T) {
	cfg := DefaultDisaggConfig()
	cfg.BypassBelowTokens, cfg.DisaggAboveTokens = 1000, 2000
	s := startPDStack(t, 1, 1, cfg)
	prefillRequests := func() int { return len(s.pcap[0].requests()) }
	short := s.post(t, pdChat("hello there", `,"max_tokens":3,"stream":true`))
	if short.status != 200 || short.header.Get("x-kvroute-serving") != "bypassed" || short.header.Get("x-kvroute-prefill-worker-id") != "" {
		t.Fatalf("short: %d serving %q prefill %q", short.status, short.header.Get("x-kvroute-serving"), short.header.Get("x-kvroute-prefill-worker-id"))
	}
	checkStream(t, short, 3)
	if n := prefillRequests(); n != 0 {
		t.Fatalf("a bypassed request reached the prefill worker (%d requests)", n)
	}
	if pinned := s.post(t, pdChat("hello again", `,"max_tokens":3`), "x-dynamo-prefill-instance-id", "1"); pinned.header.Get("x-kvroute-serving") != "disaggregated" {
		t.Fatalf("a prefill-pinned short prompt was %q, want disaggregated", pinned.header.Get("x-kvroute-serving"))
	}
	long := pdChat(longText("bypass", 900), `,"max_tokens":3,"stream":true`)
	first := s.post(t, long)
	if first.header.Get("x-kvroute-serving") != "disaggregated" || prefillRequests() != 2 {
		t.Fatalf("long novel prompt: serving %q, %d prefill requests", first.header.Get("x-kvroute-serving"), prefillRequests())
	}
	testutil.Eventually(t, "decode core indexes the pulled blocks", func() bool {
		st, _ := s.r.Fleet.StatusOf(11)
		return st.IndexedBlocks > 100
	})
	again := s.post(t, long)
	if again.header.Get("x-kvroute-serving") != "bypassed" || again.header.Get("x-kvroute-overlap-blocks") == "0" || prefillRequests() != 2 {
		t.Fatalf("repeated prompt: serving %q overlap %q, %d prefill requests; want bypassed on the decode worker holding it",
			again.header.Get("x-kvroute-serving"), again.header.Get("x-kvroute-overlap-blocks"), prefillRequests())
	}
	if d, b, f := s.pd.Counts(); d != 2 || b != 2 || f != 0 {
		t.Fatalf("counts disaggregated %d bypassed %d fallback %d, want 2 2 0", d, b, f)
	}
}

// checkStream asserts one ordinary OpenAI stream: n content chunks, a usage chunk if asked, [DONE] once
// at the end, and nothing of the prefill hop (no kv_transfer_params).
func checkStream(t *testing.T, r pdReply, n int) {
	t.Helper()
	if !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("content type %q", r.header.Get("Content-Type"))
	}
	if len(r.events) == 0 || r.events[len(r.events)-1] != "[DONE]" || strings.Count(r.body, "[DONE]") != 1 {
		t.Fatalf("stream does not end with one [DONE]: %s", r.body)
	}
	content := 0
	for _, e := range r.events[:len(r.events)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			KV json.RawMessage `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("chunk %q: %v", e, err)
		}
		if c.KV != nil {
			t.Fatalf("the client saw kv_transfer_params: %s", e)
		}
		if len(c.Choices) == 1 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			content++
		}
	}
	if content != n {
		t.Fatalf("%d content chunks, want %d: %s", content, n, r.body)
	}
}

// checkPDProtocol compares the last request each hop's worker received with vLLM's disaggregated proxy
// protocol (NixlConnector): the prefill request is the client's with kv_transfer_params asking for remote
// decode, max_tokens 1, stream false and no stream_options; the decode request is the client's with the
// prefill answer's kv_transfer_params; both carry the same X-Request-Id.
func checkPDProtocol(t *testing.T, s *pdStack, clientBody, pw, dw string) {
	t.Helper()
	var client map[string]json.RawMessage
	if err := json.Unmarshal([]byte(clientBody), &client); err != nil {
		t.Fatal(err)
	}
	// The first request's hops: its prefill worker's first request, its decode worker's first request.
	var pre, dec *captured
	for i, w := range s.prefill.Workers {
		if fmt.Sprint(w.ID()) == pw {
			r := s.pcap[i].requests()
			pre = &r[0]
		}
	}
	for i, w := range s.decode.Workers {
		if fmt.Sprint(w.ID()) == dw {
			r := s.dcap[i].requests()
			dec = &r[0]
		}
	}
	if pre == nil || dec == nil {
		t.Fatal("no captured hop")
	}
	if pre.path != "/v1/chat/completions" || dec.path != "/v1/chat/completions" {
		t.Fatalf("paths %s, %s", pre.path, dec.path)
	}
	if pre.requestID == "" || pre.requestID != dec.requestID {
		t.Fatalf("X-Request-Id %q on prefill, %q on decode: vLLM's proxy keeps one id", pre.requestID, dec.requestID)
	}
	var pb, db map[string]json.RawMessage
	if err := json.Unmarshal(pre.body, &pb); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(dec.body, &db); err != nil {
		t.Fatal(err)
	}
	// Prefill: exactly these kv_transfer_params.
	var kt map[string]any
	if err := json.Unmarshal(pb["kv_transfer_params"], &kt); err != nil {
		t.Fatalf("prefill kv_transfer_params %s: %v", pb["kv_transfer_params"], err)
	}
	want := map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	if len(kt) != len(want) {
		t.Fatalf("prefill kv_transfer_params %v, want exactly %v", kt, want)
	}
	for k, v := range want {
		if got, ok := kt[k]; !ok || got != v {
			t.Fatalf("prefill kv_transfer_params[%s] = %v, want %v", k, got, v)
		}
	}
	for k, v := range map[string]string{"max_tokens": "1", "stream": "false"} {
		if string(pb[k]) != v {
			t.Fatalf("prefill %s = %s, want %s", k, pb[k], v)
		}
	}
	if _, ok := pb["stream_options"]; ok {
		t.Fatal("prefill request kept stream_options")
	}
	for k, v := range client {
		switch k {
		case "max_tokens", "stream", "stream_options":
			continue
		}
		if !bytes.Equal(pb[k], v) {
			t.Fatalf("prefill %s = %s, client sent %s", k, pb[k], v)
		}
	}
	// Decode: the client's request as sent, plus the prefill answer's kv_transfer_params.
	var pr struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(pre.response, &pr); err != nil || len(pr.KV) == 0 {
		t.Fatalf("prefill answer %s: %v", pre.response, err)
	}
	var gotKV, wantKV map[string]any
	_ = json.Unmarshal(db["kv_transfer_params"], &gotKV)
	_ = json.Unmarshal(pr.KV, &wantKV)
	if fmt.Sprint(gotKV) != fmt.Sprint(wantKV) || wantKV["do_remote_prefill"] != true || wantKV["remote_block_ids"] == nil {
		t.Fatalf("decode kv_transfer_params %s, prefill answered %s", db["kv_transfer_params"], pr.KV)
	}
	if len(db) != len(client)+1 {
		t.Fatalf("decode body has %d fields, want the client's %d plus kv_transfer_params", len(db), len(client))
	}
	for k, v := range client {
		if !bytes.Equal(db[k], v) {
			t.Fatalf("decode %s = %s, client sent %s", k, db[k], v)
		}
	}
}

// TestDisaggPrefillDown: with every prefill worker down, --decode-fallback serves the request
// aggregated on a decode worker; without it the client gets 503 with an OpenAI error body.
func TestDisaggPrefillDown(t *testing.T) {
	long := pdChat(longText("down", 900), `,"max_tokens":4,"stream":true`)
	t.Run("dead process, fallback", func(t *testing.T) {
		cfg := DefaultDisaggConfig()
		cfg.BypassPolicy, cfg.DecodeFallback = BypassNever, true
		s := startPDStack(t, 1, 1, cfg)
		_ = s.prefill.Close()
		r := s.post(t, long)
		if r.status != 200 || r.header.Get("x-kvroute-serving") != "fallback" || r.header.Get("x-kvroute-worker-id") != "11" {
			t.Fatalf("status %d serving %q worker %q: %s", r.status, r.header.Get("x-kvroute-serving"), r.header.Get("x-kvroute-worker-id"), r.body)
		}
		checkStream(t, r, 4)
		if d := s.dcap[0].requests(); len(d) != 1 || bytes.Contains(d[0].body, []byte("kv_transfer_params")) {
			t.Fatalf("decode worker got %d requests, want 1 aggregated one", len(d))
		}
	})
	for _, fallback := range []bool{true, false} {
		t.Run(fmt.Sprintf("unhealthy, fallback=%v", fallback), func(t *testing.T) {
			cfg := DefaultDisaggConfig()
			cfg.BypassPolicy, cfg.DecodeFallback = BypassNever, fallback
			s := startPDStack(t, 1, 1, cfg)
			if err := s.pd.Prefill.SetHealthy(1, false, "test"); err != nil {
				t.Fatal(err)
			}
			r := s.post(t, long)
			if fallback {
				if r.status != 200 || r.header.Get("x-kvroute-serving") != "fallback" {
					t.Fatalf("status %d serving %q: %s", r.status, r.header.Get("x-kvroute-serving"), r.body)
				}
				return
			}
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != 503 || e.Error.Code != 503 || !strings.Contains(e.Error.Message, "prefill") {
				t.Fatalf("status %d body %s, want a 503 OpenAI error naming prefill", r.status, r.body)
			}
			if n := len(s.dcap[0].requests()); n != 0 {
				t.Fatalf("decode worker got %d requests", n)
			}
		})
	}
}

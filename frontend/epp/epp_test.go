package epp

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/model"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

const (
	fixtureModel = "../../testdata/models/Qwen3-VL-2B-Instruct"
	modelName    = "Qwen3-VL-2B-Instruct"
)

// rig is a picker deployment on loopback: simulated vLLM workers publishing real ZMQ KV events, the
// router core, the frontend's request path, the ext_proc server on a real gRPC listener, and a client
// that plays the gateway.
type rig struct {
	router *router.Router
	reg    *prometheus.Registry
	srv    *Server
	conn   *grpc.ClientConn
	images string // base URL of a PNG server
}

// fixtureLoaded is the fixture model, loaded once per test binary and shared by every rig's picker and
// simulated workers (read-only after loading; parsing its tokenizer takes seconds under -race).
var fixtureLoaded = sync.OnceValues(func() (*model.Model, error) { return model.Load(fixtureModel) })

func startRig(t testing.TB, workers int, cfg Config) *rig {
	t.Helper()
	m, err := fixtureLoaded()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: mocker.ModelOf(m, modelName), KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize, tmpl.Engine.NumGPUBlocks, tmpl.Engine.SpeedupRatio = 16, 2048, 20
	tmpl.MediaAllowHosts = []string{"127.0.0.1"}
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: workers, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	system := actors.NewSystem(nil)
	reg := prometheus.NewRegistry()
	rcfg := router.DefaultConfig(16)
	rcfg.Worker.ImageTokenID = uint32(m.Config.ImageTokenID)
	rcfg.Registerer = reg
	r, err := router.New(system, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fleet.Specs() {
		sp, err := registry.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.AddWorker(sp); err != nil {
			t.Fatal(err)
		}
	}
	pool := frontend.NewWorkerPool(client.DefaultConfig())
	guard, err := mm.NewGuard([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	api := frontend.NewOpenAIAPI(r, m, modelName, system, pool, frontend.OpenAIConfig{RequestTimeout: 30 * time.Second, MediaGuard: guard}, frontend.NewFrontendMetrics(nil))
	spec, err := mm.LoadSpec(fixtureModel, modelName)
	if err != nil {
		t.Fatal(err)
	}
	pc := mm.DefaultProbeConfig()
	pc.AllowHosts = []string{"127.0.0.1"}
	prober, err := mm.NewProber(pc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := mm.NewResolver(spec, prober, mm.DefaultResolveConfig())
	if err != nil {
		t.Fatal(err)
	}
	api.EnableMM(&frontend.MMConfig{Resolver: res, Limits: mm.DefaultLimits()}, nil)

	srv, err := NewServer(cfg, api, RouterWorkers{R: r})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extproc.RegisterExternalProcessorServer(gs, srv)
	healthpb.RegisterHealthServer(gs, &Health{Ready: func() bool { return len(r.Workers()) > 0 }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	imgs := startPNGServer(t)
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		prober.Close()
		pool.Close()
		r.Stop()
		system.Shutdown()
		_ = fleet.Close()
	})
	// Every worker's event stream is connected (its catch-up replay answered) before the first request.
	for _, w := range r.Workers() {
		id := w.ID
		testutil.Eventually(t, fmt.Sprintf("worker %d's events connected", id), func() bool {
			st, _ := r.Fleet.StatusOf(id)
			return st.Replays > 0
		})
	}
	return &rig{router: r, reg: reg, srv: srv, conn: conn, images: imgs}
}

// load reads a worker's gauge from the router's metrics: active requests or active prefill tokens.
func (r *rig) load(t testing.TB, metric string, worker string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "worker_id" && l.GetValue() == worker {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// workerOf maps an ip:port destination to its worker id.
func (r *rig) workerOf(t testing.TB, dest string) string {
	t.Helper()
	for _, w := range r.router.Workers() {
		if addrOf(w.URL) == dest {
			return fmt.Sprint(w.ID)
		}
	}
	t.Fatalf("destination %q is no worker", dest)
	return ""
}

// gateway plays Envoy's ext_proc filter for one request.
type gateway struct {
	t      testing.TB
	stream extproc.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	duplex bool
}

func (r *rig) open(t testing.TB, duplex bool) *gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := extproc.NewExternalProcessorClient(r.conn).Process(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &gateway{t: t, stream: s, cancel: cancel, duplex: duplex}
}

func (g *gateway) send(req *extproc.ProcessingRequest) {
	g.t.Helper()
	if err := g.stream.Send(req); err != nil {
		g.t.Fatal(err)
	}
}

func (g *gateway) recv() *extproc.ProcessingResponse {
	g.t.Helper()
	resp, err := g.stream.Recv()
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// decision is what the picker answered for the request phase.
type decision struct {
	header, metadata string
	body             []byte // the body the gateway forwards
	immediate        *extproc.ImmediateResponse
}

// request sends the request headers and the body in chunks, as Envoy does in the gateway's body mode
// (FULL_DUPLEX_STREAMED when duplex, else BUFFERED), and returns the picker's decision.
func (g *gateway) request(path string, body []byte, chunks int, md *corev3.Metadata) decision {
	g.t.Helper()
	mode := filterv3.ProcessingMode_BUFFERED
	if g.duplex {
		mode = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	}
	g.send(&extproc.ProcessingRequest{
		ProtocolConfig: &extproc.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: mode},
		Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{
			Headers: hdrs(":method", "POST", ":path", path, "content-type", "application/json", ":authority", "gateway")}}})
	var d decision
	if !g.duplex {
		if resp := g.recv(); resp.GetRequestHeaders() == nil {
			g.t.Fatalf("headers answer: %v", resp)
		}
		chunks = 1 // BUFFERED: the whole body in one message
	}
	step := (len(body) + chunks - 1) / chunks
	for off := 0; off < len(body); off += step {
		end := min(off+step, len(body))
		g.send(&extproc.ProcessingRequest{MetadataContext: md, Request: &extproc.ProcessingRequest_RequestBody{
			RequestBody: &extproc.HttpBody{Body: body[off:end], EndOfStream: end == len(body)}}})
	}
	resp := g.recv()
	if ir := resp.GetImmediateResponse(); ir != nil {
		d.immediate = ir
		return d
	}
	var common *extproc.CommonResponse
	if g.duplex {
		common = resp.GetRequestHeaders().GetResponse()
	} else {
		common = resp.GetRequestBody().GetResponse()
	}
	if common == nil {
		g.t.Fatalf("decision answer: %v", resp)
	}
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == DestinationKey {
			d.header = string(h.GetHeader().GetRawValue())
		}
	}
	d.metadata = resp.GetDynamicMetadata().GetFields()[DefaultNamespace].GetStructValue().GetFields()[DestinationKey].GetStringValue()
	d.body = body
	if g.duplex {
		br := g.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if br == nil || !br.GetEndOfStream() {
			g.t.Fatalf("full duplex: the body did not come back whole")
		}
		d.body = br.GetBody()
	} else if b := common.GetBodyMutation().GetBody(); b != nil {
		d.body = b
	}
	return d
}

// forward sends the request to the picked endpoint as the gateway would and returns the open response.
func (g *gateway) forward(dest, path string, body []byte) *http.Response {
	g.t.Helper()
	resp, err := http.Post("http://"+dest+path, "application/json", bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// responseHeaders passes the worker's status to the picker.
func (g *gateway) responseHeaders(status int) {
	g.t.Helper()
	g.send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extproc.HttpHeaders{
		Headers: hdrs(":status", fmt.Sprint(status), "content-type", "application/json")}}})
	if resp := g.recv(); resp.GetResponseHeaders() == nil {
		g.t.Fatalf("response headers answer: %v", resp)
	}
}

// responseChunk passes one response body chunk and checks the answer (echoed in full duplex mode).
func (g *gateway) responseChunk(chunk []byte, eos bool) {
	g.t.Helper()
	g.send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseBody{ResponseBody: &extproc.HttpBody{Body: chunk, EndOfStream: eos}}})
	resp := g.recv().GetResponseBody()
	if resp == nil {
		g.t.Fatal("no response body answer")
	}
	if g.duplex && !bytes.Equal(resp.GetResponse().GetBodyMutation().GetStreamedResponse().GetBody(), chunk) {
		g.t.Fatal("full duplex: the response chunk did not come back unchanged")
	}
}

func chat(content string, stream bool) []byte {
	return []byte(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":8,"stream":%v}`, modelName, content, stream))
}

func longText(seed string, words int) string {
	var b strings.Builder
	for i := 0; i < words; i++ {
		fmt.Fprintf(&b, "%s-%d ", seed, i)
	}
	return b.String()
}

// TestPickerDrivesTheLoadLifecycle plays Envoy for a chat request (BUFFERED body), a streaming chat
// (FULL_DUPLEX_STREAMED, body in chunks) and an image request: the destination comes back in the header
// and the envoy.lb metadata, prefill completes at the first response chunk, the request is freed at the
// end of the stream, and a repeated prompt goes to the worker the KV events say holds it.
func TestPickerDrivesTheLoadLifecycle(t *testing.T) {
	r := startRig(t, 3, DefaultConfig())
	const path = "/v1/chat/completions"

	// Chat, BUFFERED: one body message, the answer in the body response.
	prompt := longText("epp-chat", 120)
	g := r.open(t, false)
	d := g.request(path, chat(prompt, false), 1, nil)
	if d.immediate != nil || d.header == "" || d.header != d.metadata {
		t.Fatalf("chat: header %q, metadata %q, immediate %v", d.header, d.metadata, d.immediate)
	}
	w := r.workerOf(t, d.header)
	if n := r.load(t, "kvroute_worker_active_requests", w); n != 1 {
		t.Fatalf("chat: worker %s has %v active requests after the pick", w, n)
	}
	if n := r.load(t, "dynamo_frontend_worker_active_prefill_tokens", w); n == 0 {
		t.Fatalf("chat: no prefill tokens charged before the first token")
	}
	resp := g.forward(d.header, path, d.body)
	body, _ := io.ReadAll(resp.Body)
	g.responseHeaders(resp.StatusCode)
	g.responseChunk(body, true)
	if resp.StatusCode != 200 {
		t.Fatalf("worker answered %d: %s", resp.StatusCode, body)
	}
	testutil.Eventually(t, "the chat request freed", func() bool { return r.load(t, "kvroute_worker_active_requests", w) == 0 })
	if err := g.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// The same prompt again: the worker that cached it, once its KV events are indexed.
	testutil.Eventually(t, "the first prompt's blocks indexed", func() bool {
		for _, s := range r.router.Workers() {
			if fmt.Sprint(s.ID) == w && s.IndexedBlocks >= 8 {
				return true
			}
		}
		return false
	})
	for i := 0; i < 3; i++ {
		g2 := r.open(t, i%2 == 1)
		d2 := g2.request(path, chat(prompt, false), 3, nil)
		if d2.header != d.header {
			t.Fatalf("repeat %d: picked %s, the prompt is cached on %s", i, d2.header, d.header)
		}
		g2.cancel() // a broken stream frees it
		testutil.Eventually(t, "the cancelled repeat freed", func() bool { return r.load(t, "kvroute_worker_active_requests", w) == 0 })
	}

	// Streaming chat, FULL_DUPLEX_STREAMED: body in chunks, the response streamed chunk by chunk.
	g = r.open(t, true)
	d = g.request(path, chat(longText("epp-stream", 60), true), 4, nil)
	if d.header == "" || d.header != d.metadata {
		t.Fatalf("stream: header %q, metadata %q", d.header, d.metadata)
	}
	w = r.workerOf(t, d.header)
	resp = g.forward(d.header, path, d.body)
	g.responseHeaders(resp.StatusCode)
	if r.load(t, "dynamo_frontend_worker_active_prefill_tokens", w) == 0 {
		t.Fatal("stream: prefill done before the first token")
	}
	buf := make([]byte, 64<<10)
	first := true
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			g.responseChunk(append([]byte(nil), buf[:n]...), false)
			if first {
				first = false
				if p := r.load(t, "dynamo_frontend_worker_active_prefill_tokens", w); p != 0 {
					t.Fatalf("stream: %v prefill tokens after the first token", p)
				}
				if a := r.load(t, "kvroute_worker_active_requests", w); a != 1 {
					t.Fatalf("stream: %v active requests while streaming", a)
				}
			}
		}
		if err != nil {
			break
		}
	}
	if first {
		t.Fatal("stream: no response bytes")
	}
	g.responseChunk(nil, true)
	testutil.Eventually(t, "the stream freed at its end", func() bool { return r.load(t, "kvroute_worker_active_requests", w) == 0 })

	// A stream that dies mid-response frees its request.
	g = r.open(t, true)
	d = g.request(path, chat(longText("epp-broken", 40), true), 2, nil)
	w = r.workerOf(t, d.header)
	resp = g.forward(d.header, path, d.body)
	g.responseHeaders(resp.StatusCode)
	n, _ := resp.Body.Read(buf)
	g.responseChunk(append([]byte(nil), buf[:n]...), false)
	if a := r.load(t, "kvroute_worker_active_requests", w); a != 1 {
		t.Fatalf("broken: %v active requests before the break", a)
	}
	g.cancel()
	testutil.Eventually(t, "the broken stream's request freed", func() bool { return r.load(t, "kvroute_worker_active_requests", w) == 0 })
	testutil.Eventually(t, "the broken streams counted", func() bool { return r.srv.Stats().Broken >= 4 })

	// An image request: routed on the image (its uuid added to the body the gateway forwards), and the
	// same image again goes where its blocks are.
	img := fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q}},{"type":"text","text":"What is this?"}]}]}`,
		modelName, r.images+"/cat.png")
	g = r.open(t, true)
	d = g.request(path, []byte(img), 2, nil)
	if d.header == "" || !bytes.Contains(d.body, []byte(`"uuid"`)) {
		t.Fatalf("image: header %q, forwarded body %s", d.header, d.body)
	}
	w = r.workerOf(t, d.header)
	resp = g.forward(d.header, path, d.body)
	body, _ = io.ReadAll(resp.Body)
	g.responseHeaders(resp.StatusCode)
	g.responseChunk(body, true)
	if resp.StatusCode != 200 {
		t.Fatalf("image: worker answered %d: %s", resp.StatusCode, body)
	}
	testutil.Eventually(t, "the image request freed", func() bool { return r.load(t, "kvroute_worker_active_requests", w) == 0 })
	testutil.Eventually(t, "the image's blocks indexed", func() bool { return indexed(r, w) > 0 })
	img2 := strings.Replace(img, "What is this?", "Describe the colours.", 1)
	g = r.open(t, false)
	d2 := g.request(path, []byte(img2), 1, nil)
	if d2.header != d.header {
		t.Fatalf("same image: picked %s, its blocks are on %s", d2.header, d.header)
	}
}

func indexed(r *rig, worker string) int {
	for _, s := range r.router.Workers() {
		if fmt.Sprint(s.ID) == worker {
			return s.IndexedBlocks
		}
	}
	return 0
}

// TestPickerConformance: the gateway's subset is honoured (and an empty one is a 503), fallbacks follow
// the primary in the header and metadata, a bad body is the client's 400, requests the picker does not
// route continue untouched, FailOpen lets a request it cannot route go on, and the health services
// answer.
func TestPickerConformance(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Fallbacks = 1
	r := startRig(t, 2, cfg)
	const path = "/v1/chat/completions"
	ws := r.router.Workers()
	only := addrOf(ws[1].URL)

	for i := 0; i < 4; i++ {
		g := r.open(t, i%2 == 0)
		d := g.request(path, chat(longText(fmt.Sprint("subset", i), 20), false), 2, subsetOf(only))
		if primary, _, _ := strings.Cut(d.header, ","); primary != only {
			t.Fatalf("subset [%s]: picked %q", only, d.header)
		}
		g.cancel()
	}
	g := r.open(t, true)
	if d := g.request(path, chat("hello", false), 1, subsetOf("10.0.0.1:8000")); d.immediate == nil || d.immediate.GetStatus().GetCode() != 503 {
		t.Fatalf("a subset of unknown endpoints: %+v", d)
	}

	// Fallbacks: primary, then the other worker.
	testutil.Eventually(t, "the cancelled subset requests freed", func() bool { return r.router.ActiveRequests() == 0 })
	g = r.open(t, false)
	d := g.request(path, chat(longText("fallback", 20), false), 1, nil)
	eps := strings.Split(d.header, ",")
	if len(eps) != 2 || eps[0] == eps[1] || d.metadata != d.header {
		t.Fatalf("fallbacks: header %q, metadata %q", d.header, d.metadata)
	}
	// The gateway retried on the fallback and says so: the request's load moves there.
	primary, fallback := r.workerOf(t, eps[0]), r.workerOf(t, eps[1])
	if r.load(t, "kvroute_worker_active_requests", primary) != 1 {
		t.Fatal("fallbacks: the primary is not charged")
	}
	g.send(&extproc.ProcessingRequest{
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{DefaultNamespace: {Fields: map[string]*structpb.Value{
			ServedKey: structpb.NewStringValue(eps[1])}}}},
		Request: &extproc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extproc.HttpHeaders{Headers: hdrs(":status", "200")}}})
	if g.recv().GetResponseHeaders() == nil {
		t.Fatal("no response headers answer")
	}
	if r.load(t, "kvroute_worker_active_requests", primary) != 0 || r.load(t, "kvroute_worker_active_requests", fallback) != 1 || r.srv.Stats().Moved != 1 {
		t.Fatalf("served by the fallback: primary %v, fallback %v active, moved %d", r.load(t, "kvroute_worker_active_requests", primary),
			r.load(t, "kvroute_worker_active_requests", fallback), r.srv.Stats().Moved)
	}
	g.responseChunk([]byte("{}"), true)
	testutil.Eventually(t, "the moved request freed", func() bool { return r.load(t, "kvroute_worker_active_requests", fallback) == 0 })

	// A bad body is the client's error, whatever the failure mode.
	g = r.open(t, true)
	d = g.request(path, []byte(`{"model":`), 1, nil)
	if d.immediate == nil || d.immediate.GetStatus().GetCode() != 400 || !bytes.Contains(d.immediate.GetBody(), []byte(`"error"`)) {
		t.Fatalf("bad body: %+v", d.immediate)
	}

	// A GET the picker does not route: CONTINUE, no destination.
	g = r.open(t, false)
	g.send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{
		Headers: hdrs(":method", "GET", ":path", "/v1/models"), EndOfStream: true}}})
	if h := g.recv().GetRequestHeaders(); h == nil || h.GetResponse().GetHeaderMutation() != nil {
		t.Fatalf("GET /v1/models: %v", h)
	}

	// No workers: FailClose answers 503; FailOpen lets the request go on without a destination.
	for _, w := range ws {
		if err := r.router.RemoveWorker(w.ID); err != nil {
			t.Fatal(err)
		}
	}
	g = r.open(t, true)
	if d := g.request(path, chat("hello", false), 1, nil); d.immediate == nil || d.immediate.GetStatus().GetCode() != 503 {
		t.Fatalf("FailClose without workers: %+v", d)
	}
	r.srv.SetFailureMode(FailOpen) // as the pool's endpointPickerRef.failureMode changes
	g = r.open(t, true)
	if d := g.request(path, chat("hello", false), 1, nil); d.immediate != nil || d.header != "" || !bytes.Equal(d.body, chat("hello", false)) {
		t.Fatalf("FailOpen without workers: %+v", d)
	}

	hc := healthpb.NewHealthClient(r.conn)
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"liveness": healthpb.HealthCheckResponse_SERVING, "readiness": healthpb.HealthCheckResponse_NOT_SERVING,
		ServiceName: healthpb.HealthCheckResponse_NOT_SERVING} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != want {
			t.Fatalf("health %q: %v %v, want %v", svc, resp.GetStatus(), err, want)
		}
	}
}

// startPNGServer serves one 320×240 PNG at /cat.png (Range requests answered, as the size probe asks).
func startPNGServer(t testing.TB) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 320, 240))
	for y := 0; y < 240; y++ {
		for x := 0; x < 320; x++ {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), 7, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/cat.png", func(w http.ResponseWriter, req *http.Request) {
		http.ServeContent(w, req, "cat.png", time.Time{}, bytes.NewReader(buf.Bytes()))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestAddrMemo: the memo answers what addrOf parses, for URLs with and without a port and malformed
// ones, asked again or not, and stays bounded while workers keep coming under new URLs.
// subsetOf is the gateway's subset metadata naming eps.
func subsetOf(eps ...string) *corev3.Metadata {
	var vals []*structpb.Value
	for _, e := range eps {
		vals = append(vals, structpb.NewStringValue(e))
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{DefaultSubsetNamespace: {Fields: map[string]*structpb.Value{
		SubsetKey: structpb.NewListValue(&structpb.ListValue{Values: vals})}}}}
}

// TestSubsetFollowsTheFleet: the server's index of workers by address follows the fleet: a worker that
// joins is picked by a subset naming only its address, one that leaves makes that subset a 503, and a
// subset naming it beside a known worker routes to the known one.
func TestSubsetFollowsTheFleet(t *testing.T) {
	r := startRig(t, 2, DefaultConfig())
	const path = "/v1/chat/completions"
	const joiner = "127.0.0.1:9"
	ask := func(eps ...string) decision {
		g := r.open(t, false)
		defer g.cancel()
		return g.request(path, chat(longText("follow", 20), false), 1, subsetOf(eps...))
	}
	if d := ask(joiner); d.immediate == nil || d.immediate.GetStatus().GetCode() != 503 {
		t.Fatalf("a subset of an address no worker has: %+v", d)
	}
	before := r.srv.workers.Version()
	if err := r.router.AddWorker(registry.Spec{ID: 77, URL: "http://" + joiner}); err != nil {
		t.Fatal(err)
	}
	if r.srv.workers.Version() == before {
		t.Fatal("the fleet's version did not move when a worker joined")
	}
	if d := ask(joiner); d.header != joiner {
		t.Fatalf("a subset of the worker that joined: picked %q (%+v)", d.header, d.immediate)
	}
	if err := r.router.RemoveWorker(77); err != nil {
		t.Fatal(err)
	}
	if d := ask(joiner); d.immediate == nil || d.immediate.GetStatus().GetCode() != 503 {
		t.Fatalf("a subset of the worker that left: %+v", d)
	}
	known := addrOf(r.router.Workers()[0].URL)
	if d := ask(joiner, known); d.header != known {
		t.Fatalf("a subset of the worker that left and a known one: picked %q", d.header)
	}
	testutil.Eventually(t, "the subset requests freed", func() bool { return r.router.ActiveRequests() == 0 })
}

func TestAddrMemo(t *testing.T) {
	var a addrMemo
	urls := []string{"http://10.0.0.1:8000", "http://10.0.0.1", "://bad", "http://[::1]:9000/v1", "http://10.0.0.1:8000"}
	for range 2 {
		for _, u := range urls {
			if got, want := a.of(u), addrOf(u); got != want {
				t.Fatalf("%q: memo %q, addrOf %q", u, got, want)
			}
		}
	}
	for i := range maxAddrs + 10 {
		u := fmt.Sprintf("http://10.%d.%d.%d:8000", i>>16, (i>>8)&255, i&255)
		if got, want := a.of(u), addrOf(u); got != want {
			t.Fatalf("%q: memo %q, addrOf %q", u, got, want)
		}
	}
	if n := a.n.Load(); n > maxAddrs {
		t.Fatalf("the memo counts %d URLs, bound %d", n, maxAddrs)
	}
}

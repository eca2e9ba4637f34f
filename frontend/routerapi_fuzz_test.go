package frontend

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/registry"
)

// fuzzMethods are the methods a fuzz input picks from by its first byte.
var fuzzMethods = []string{"POST", "GET", "DELETE", "PUT"}

// serveRouterAPI runs one request through the router API's handler on an in-process RequestCtx (the
// same Handle the server calls) and returns the status, the body and the path as the handler saw it.
func serveRouterAPI(a *RouterAPI, method, path, session string, body []byte) (int, []byte, string, bool) {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	if session != "" {
		req.Header.Set("x-dynamo-session-id", session)
	}
	req.SetBody(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil)
	handled := a.Handle(&ctx)
	return ctx.Response.StatusCode(), append([]byte(nil), ctx.Response.Body()...), string(ctx.Path()), handled
}

// FuzzRouterAPI drives the standalone router API (/v1/route, /v1/route/{id}/free|prefill_done,
// /v1/overlap_scores with block_mm_infos, /v1/workers admin POST/GET/DELETE, /busy_threshold) with
// arbitrary methods, paths, session headers and bodies against a real router of four workers. Every
// answer is a 2xx JSON body or an OpenAI error whose code is the status, never a 500; the 503s are the
// router's own (no worker can take it); and no request stays booked once the routes it answered are
// freed.
func FuzzRouterAPI(f *testing.F) {
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(4))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Stop(); system.Shutdown() })
	a := &RouterAPI{R: r}
	base := []uint64{1, 2, 3, 4}
	for _, id := range base {
		if err := r.AddWorker(registry.Spec{ID: id, URL: fmt.Sprintf("http://127.0.0.1:%d", 9+id), DPSize: 2}); err != nil {
			f.Fatal(err)
		}
	}
	cfg0 := r.Config()

	seeds := []struct {
		method     byte
		path, sess string
		body       string
	}{
		{0, "/v1/route", "", `{"request_id":"a","tokens":[1,2,3,4,5,6,7,8]}`},
		{0, "/v1/route", "s1", `{"request_id":"b","block_hashes":[1,2],"isl":8,"priority":3,"strict_priority":1}`},
		{0, "/v1/route", "", `{"request_id":"c","tokens":[1,2,3,4],"worker_id":2,"dp_rank":1}`},
		{0, "/v1/route", "", `{"request_id":"d","tokens":[1,2,3,4],"router_config_override":{"overlap_score_weight":0.5,"router_temperature":1}}`},
		{0, "/v1/route", "", `{"request_id":"e","tokens":[10,20,151655,151655,151655,151655,30,40],"block_mm_infos":[{"mm_objects":[{"mm_hash":3429463218286832430,"offsets":[]}]},{"mm_objects":[{"mm_hash":1,"offsets":[[0,4]]}]}]}`},
		{0, "/v1/route", "", `{"request_id":"f","tokens":[1],"block_mm_infos":[null,{"mm_objects":[]}]}`},
		{0, "/v1/route", "", `{"request_id":"g","block_hashes":[1],"block_mm_infos":[{}]}`},
		{0, "/v1/route", "", `{"request_id":"i1","block_hashes":[1],"isl":4611686018427387904}`},
		{0, "/v1/route", "", `{"request_id":"i5","block_hashes":[1],"priority":1e308}`},
		{0, "/v1/route/a/free", "", ``},
		{0, "/v1/route/a/prefill_done", "", ``},
		{0, "/v1/overlap_scores", "", `{"tokens":[1,2,3,4],"lora_name":"l","cache_salt":"s"}`},
		{0, "/v1/overlap_scores", "", `{"block_hashes":[1,2,3]}`},
		{0, "/v1/overlap_scores", "", `{"tokens":[10,20,151655,151655],"block_mm_infos":[{"mm_objects":[{"mm_hash":7}]}]}`},
		{0, "/v1/overlap_scores", "", `{"tokens":[1]} x`},
		{0, "/v1/workers", "", `{"id":9,"url":"http://127.0.0.1:19","dp_size":2,"block_size":4}`},
		{0, "/v1/workers", "", `{"id":1,"block_sise":16}`},
		{1, "/v1/workers", "", ``},
		{1, "/v1/workers/3", "", ``},
		{2, "/v1/workers/3", "", ``},
		{2, "/v1/workers/abc", "", ``},
		{3, "/v1/workers", "", ``},
		{0, "/busy_threshold", "", `{"active_decode_blocks_threshold":0.5,"active_prefill_tokens_threshold":-1}`},
		{1, "/busy_threshold", "", ``},
		{0, "/busy_threshold", "", `{"active_prefill_tokens_threshold_frac":1e400}`},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.sess, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, m byte, path, session string, body []byte) {
		method := fuzzMethods[int(m)%len(fuzzMethods)]
		if strings.HasPrefix(path, "/v1/workers") && method == "POST" {
			// A registered worker's event endpoints are subscribed: only loopback ones are allowed here.
			if sp, err := registry.ParseJSON(body); err == nil && (!loopbackEndpoint(sp.Events) || !loopbackEndpoint(sp.Replay)) {
				return
			}
		}
		status, out, path, handled := serveRouterAPI(a, method, path, session, body)
		defer restoreRouterAPI(t, a, base, cfg0)
		if !handled {
			return
		}
		checkAnswer(t, method+" "+path, status, out)
		if status == fasthttp.StatusServiceUnavailable && path != "/v1/route" {
			t.Fatalf("%s %s: 503 %s", method, path, out)
		}
		if status == 200 && path == "/v1/route" && method == "POST" {
			var req routeRequest
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatalf("200 for a body that does not decode: %v", err)
			}
			if st, out, _, handled := serveRouterAPI(a, "POST", "/v1/route/"+url.PathEscape(req.RequestID)+"/free", "", nil); st != 200 || !handled {
				t.Fatalf("free %q after a 200 route: %d %s", req.RequestID, st, out)
			}
		}
		if n := r.ActiveRequests(); n != 0 {
			t.Fatalf("%s %s %q: %d requests still booked", method, path, body, n)
		}
	})
}

// checkAnswer asserts an edge answer's shape: a JSON 200, or an OpenAI error body whose code is its
// status, never a 500.
func checkAnswer(t *testing.T, what string, status int, out []byte) {
	t.Helper()
	known := []int{200, 400, 404, 405, 413, 503, StatusOverloaded}
	if !slices.Contains(known, status) {
		t.Fatalf("%s: status %d: %s", what, status, out)
	}
	if !json.Valid(out) {
		t.Fatalf("%s: %d with a body that is not JSON: %q", what, status, out)
	}
	if status == 200 {
		return
	}
	var e apiError
	if err := json.Unmarshal(out, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code != status {
		t.Fatalf("%s: %d is not an OpenAI error body: %s", what, status, out)
	}
}

// loopbackEndpoint reports whether a ZMQ endpoint is empty or on 127.0.0.1 (fuzzing connects to no
// other host).
func loopbackEndpoint(ep string) bool {
	return ep == "" || strings.HasPrefix(ep, "tcp://127.0.0.1:") || strings.HasPrefix(ep, "inproc://")
}

// restoreRouterAPI puts the router back as the fuzz target built it: the four base workers, no other,
// the first configuration, so that every input starts from the same state.
func restoreRouterAPI(t *testing.T, a *RouterAPI, base []uint64, cfg scoring.Config) {
	t.Helper()
	for _, w := range a.R.Workers() {
		if !slices.Contains(base, w.ID) {
			if err := a.R.RemoveWorker(w.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range base {
		if _, ok := a.R.Fleet.StatusOf(id); !ok {
			if err := a.R.AddWorker(registry.Spec{ID: id, URL: fmt.Sprintf("http://127.0.0.1:%d", 9+id), DPSize: 2}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.R.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

package frontend

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
)

func doReq(t *testing.T, c *http.Client, method, url, body string, hdr map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestAdminToken(t *testing.T) {
	base, _ := startRouterAPI(t, 4, ServerConfig{AdminToken: "s3cret"})
	c := http.DefaultClient
	bearer := map[string]string{"Authorization": "Bearer s3cret"}
	wrong := map[string]string{"Authorization": "Bearer nope"}
	lower := map[string]string{"Authorization": "bearer s3cret"} // the scheme is case-insensitive
	short := map[string]string{"Authorization": "Bearer"}
	tests := []struct {
		method, path, body string
		hdr                map[string]string
		status             int
	}{
		{"POST", "/v1/workers", `{"id":1}`, nil, 401},
		{"POST", "/v1/workers", `{"id":1}`, wrong, 401},
		{"POST", "/v1/workers", `{"id":1}`, bearer, 200},
		{"GET", "/v1/workers", "", nil, 200},
		{"DELETE", "/v1/workers/1", "", nil, 401},
		{"POST", "/busy_threshold", `{"active_prefill_tokens_threshold":5}`, nil, 401},
		{"POST", "/busy_threshold", `{"active_prefill_tokens_threshold":5}`, bearer, 200},
		{"GET", "/busy_threshold", "", nil, 200},
		{"POST", "/v1/overlap_scores", `{"tokens":[1,2,3,4]}`, nil, 401},
		{"POST", "/v1/overlap_scores", `{"tokens":[1,2,3,4]}`, bearer, 200},
		{"POST", "/v1/overlap_scores", `{"tokens":[1,2,3,4]}`, lower, 200},
		{"POST", "/v1/overlap_scores", `{"tokens":[1,2,3,4]}`, short, 401},
		{"POST", "/v1/route", `{"request_id":"r","tokens":[1,2,3,4]}`, nil, 401},
		{"DELETE", "/v1/workers/1", "", bearer, 200},
	}
	for _, tc := range tests {
		if got := doReq(t, c, tc.method, base+tc.path, tc.body, tc.hdr); got != tc.status {
			t.Errorf("%s %s (auth %v): %d, want %d", tc.method, tc.path, tc.hdr != nil, got, tc.status)
		}
	}
}

func TestHeaderLimit(t *testing.T) {
	base, _ := startRouterAPI(t, 4, ServerConfig{MaxHeaderBytes: 4096})
	// The server answers 431 and closes with the rest of the headers unread, which makes the kernel reset
	// the connection; the client can lose the answer to that reset, so a few attempts are allowed.
	got := 0
	for attempt := 0; attempt < 5 && got != 431; attempt++ {
		req, _ := http.NewRequest("GET", base+"/v1/workers", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 8000))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			got = resp.StatusCode
			resp.Body.Close()
		}
	}
	if got != 431 {
		t.Fatalf("big headers: %d, want 431", got)
	}
	if got := doReq(t, http.DefaultClient, "GET", base+"/v1/workers", "", nil); got != 200 {
		t.Fatalf("server stopped serving: %d", got)
	}
}

// blocker holds /block until released, to fill the concurrency limit; arrived counts held requests.
type blocker struct {
	release chan struct{}
	arrived chan struct{}
}

// Handle holds /block until release, and answers /stream with a streamed body whose first chunk goes out
// at once and whose end waits for release.
func (b *blocker) Handle(ctx *fasthttp.RequestCtx) bool {
	switch string(ctx.Path()) {
	case "/block":
		b.arrived <- struct{}{}
		<-b.release
		ctx.SetStatusCode(200)
	case "/stream":
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			_, _ = w.WriteString("data: first\n\n")
			_ = w.Flush()
			<-b.release
			_, _ = w.WriteString("data: [DONE]\n\n")
		})
	default:
		return false
	}
	return true
}

// TestConcurrencyLimit: POST calls past MaxConcurrent get 429, a stream counted until its last byte (its
// handler returned long before); probes, /metrics, reads and the admin API stay answered at the limit.
func TestConcurrencyLimit(t *testing.T) {
	b := &blocker{release: make(chan struct{}), arrived: make(chan struct{}, 2)}
	var once sync.Once
	release := func() { once.Do(func() { close(b.release) }) }
	base, _ := startRouterAPI(t, 4, ServerConfig{MaxConcurrent: 2}, b)
	t.Cleanup(release) // runs before the server's shutdown, which waits for the held requests
	done := make(chan int, 2)
	post := func(url string) int {
		resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
		if err != nil {
			return -1
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// One request held in its handler, one stream whose handler has returned while its body goes on.
	go func() { done <- post(base + "/block") }()
	select {
	case <-b.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the held request never reached the handler")
	}
	resp, err := http.Post(base+"/stream", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("data: first\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()

	if got := post(base + "/v1/route"); got != 429 {
		t.Fatalf("a third POST with a request and a stream in flight: %d, want 429", got)
	}
	for _, path := range []string{"/live", "/ready", "/health", "/version", "/metrics", "/v1/workers", "/busy_threshold"} {
		if got := doReq(t, http.DefaultClient, "GET", base+path, "", nil); got == 429 {
			t.Errorf("GET %s at the limit: 429", path)
		}
	}
	if got := doReq(t, http.DefaultClient, "POST", base+"/v1/workers", `{"id":"x"}`, nil); got == 429 {
		t.Error("the admin API at the limit: 429")
	}
	release()
	for i := 0; i < 2; i++ {
		if got := <-done; got != 200 {
			t.Fatalf("held request: %d", got)
		}
	}
	testutil.Eventually(t, "POST answered once the held requests ended", func() bool { return post(base+"/v1/route") != 429 })
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	base, _ := startRouterAPI(t, 4, ServerConfig{TLSCert: certFile, TLSKey: keyFile})
	pool := x509.NewCertPool()
	cert, _ := x509.ParseCertificate(der)
	pool.AddCert(cert)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if got := doReq(t, c, "GET", base+"/health", "", nil); got != 200 {
		t.Fatalf("https health: %d", got)
	}
	plain := strings.Replace(base, "https://", "http://", 1)
	resp, err := http.Get(plain + "/health")
	if err == nil && resp.StatusCode == 200 {
		t.Fatal("plain HTTP accepted on the TLS port")
	}
	if resp != nil {
		resp.Body.Close()
	}
}

// serveFrom runs one request through the server's handler as if it came from remote.
func serveFrom(s *Server, remote net.IP, method, path, body, auth string) int {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	if body != "" {
		req.SetBodyString(body)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: remote, Port: 40000}, nil)
	s.handle(&ctx)
	return ctx.Response.StatusCode()
}

// Without a token, the admin plane (fleet changes, busy thresholds, debug) and the router API answer
// only loopback clients; with a token, they need it from everyone.
func TestClosedAdminPlane(t *testing.T) {
	remote, loop := net.ParseIP("10.1.2.3"), net.ParseIP("127.0.0.1")
	calls := []struct {
		method, path, body string
		plane              plane
	}{
		{"POST", "/v1/workers", `{"id":7,"url":"http://127.0.0.1:9"}`, planeAdmin},
		{"DELETE", "/v1/workers/7", "", planeAdmin},
		{"POST", "/busy_threshold", `{"active_prefill_tokens_threshold":5}`, planeAdmin},
		{"GET", "/debug/pprof/", "", planeAdmin},
		{"GET", "/debug/goroutines", "", planeAdmin},
		{"POST", "/v1/route", `{"request_id":"r1","block_hashes":[1],"isl":4}`, planeRouter},
		{"POST", "/v1/route/r1/free", "", planeRouter},
		{"POST", "/v1/overlap_scores", `{"tokens":[1,2,3,4]}`, planeRouter},
		{"GET", "/v1/workers", "", planeData},
		{"GET", "/busy_threshold", "", planeData},
		{"GET", "/health", "", planeData},
	}
	t.Run("no tokens", func(t *testing.T) {
		srv, _ := startEdge(t, ServerConfig{})
		for _, c := range calls {
			got := serveFrom(srv, remote, c.method, c.path, c.body, "")
			if c.plane != planeData && got != 403 {
				t.Errorf("%s %s from %s: %d, want 403", c.method, c.path, remote, got)
			}
			if c.plane == planeData && got != 200 {
				t.Errorf("%s %s from %s: %d, want 200", c.method, c.path, remote, got)
			}
		}
		for _, c := range calls {
			if got := serveFrom(srv, loop, c.method, c.path, c.body, ""); got == 403 || got == 401 {
				t.Errorf("%s %s from loopback: %d", c.method, c.path, got)
			}
		}
		if got := serveFrom(srv, net.ParseIP("::1"), "POST", "/v1/overlap_scores", `{"tokens":[1]}`, ""); got != 200 {
			t.Errorf("overlap from ::1: %d", got)
		}
		// A same-host proxy relaying a remote client's request is not a local client.
		for _, h := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"} {
			var req fasthttp.Request
			req.Header.SetMethod("DELETE")
			req.SetRequestURI("/v1/workers/7")
			req.Header.Set(h, "10.9.9.9")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: loop, Port: 40000}, nil)
			srv.handle(&ctx)
			if got := ctx.Response.StatusCode(); got != 403 {
				t.Errorf("DELETE via a local proxy (%s): %d, want 403", h, got)
			}
		}
	})
	t.Run("tokens", func(t *testing.T) {
		srv, _ := startEdge(t, ServerConfig{AdminToken: "adm", RouterAPIToken: "rt"})
		for _, c := range calls {
			if c.plane == planeData {
				continue
			}
			right, wrong := "adm", "rt"
			if c.plane == planeRouter {
				right, wrong = "rt", "adm"
			}
			for _, ip := range []net.IP{remote, loop} {
				if got := serveFrom(srv, ip, c.method, c.path, c.body, ""); got != 401 {
					t.Errorf("%s %s from %s without token: %d, want 401", c.method, c.path, ip, got)
				}
				if got := serveFrom(srv, ip, c.method, c.path, c.body, wrong); got != 401 {
					t.Errorf("%s %s from %s with the other plane's token: %d, want 401", c.method, c.path, ip, got)
				}
			}
			if got := serveFrom(srv, remote, c.method, c.path, c.body, right); got == 401 || got == 403 {
				t.Errorf("%s %s from %s with its token: %d", c.method, c.path, remote, got)
			}
		}
	})
}

// The frontend refuses a worker it could not send requests to: no URL, or one that is not a plain
// http(s)://host:port.
func TestWorkerRegistrationNeedsURL(t *testing.T) {
	system := actors.NewSystem(nil)
	r, err := router.New(system, router.DefaultConfig(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(); system.Shutdown() })
	srv := NewServer(ServerConfig{}, &RouterAPI{R: r, RequireURL: true})
	for _, body := range []string{`{"id":90}`, `{"id":91,"url":"http://h\u00ff:1"}`, `{"id":92,"url":"http://127.0.0.1:0"}`, `{"id":93,"url":"ftp://127.0.0.1:21"}`} {
		if got := serveFrom(srv, net.ParseIP("127.0.0.1"), "POST", "/v1/workers", body, ""); got != 400 {
			t.Errorf("%s: %d, want 400", body, got)
		}
	}
	if got := serveFrom(srv, net.ParseIP("127.0.0.1"), "POST", "/v1/workers", `{"id":94,"url":"http://127.0.0.1:8000"}`, ""); got != 200 {
		t.Errorf("a valid worker: %d", got)
	}
	if len(r.Workers()) != 1 {
		t.Fatalf("registered: %+v", r.Workers())
	}
}

// panicker's handler panics, as a bug on some input would.
type panicker struct{}

func (panicker) Handle(ctx *fasthttp.RequestCtx) bool {
	if string(ctx.Path()) != "/panic" {
		return false
	}
	var m map[string]int
	m["boom"]++ // a nil map write
	return true
}

// TestHandlerPanicAnswered: a handler's panic is a 500 OpenAI error for that request and a count on
// /metrics; the process and its other requests go on (fasthttp would let the panic end the process).
func TestHandlerPanicAnswered(t *testing.T) {
	reg := prometheus.NewRegistry()
	base, _ := startRouterAPI(t, 4, ServerConfig{Registerer: reg, Gatherer: reg}, panicker{})
	code, b := call(t, "POST", base+"/panic", "{}")
	if code != 500 || b["error"] == nil {
		t.Fatalf("a panicking handler: %d %v", code, b)
	}
	if code, _ := call(t, "GET", base+"/v1/workers", ""); code != 200 {
		t.Fatalf("after the panic: %d", code)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if page := string(raw); !strings.Contains(page, "kvroute_http_panics_total 1") {
		t.Fatalf("/metrics lacks the panic:\n%s", page)
	}
}

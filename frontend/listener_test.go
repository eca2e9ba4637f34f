package frontend

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/netlimit"
	"github.com/kvroute/kvroute/internal/testutil"
)

// rawConn is one client connection driven by hand, so a test knows which connection a request uses.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// do sends a request on the connection (a write error is ignored: a refused connection may be closed
// already, its answer still waiting to be read) and reads the answer; body "" sends a GET.
func (c *rawConn) do(t *testing.T, path, body string) (*http.Response, []byte) {
	t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: kvroute\r\n\r\n"
	if body != "" {
		req = "POST " + path + " HTTP/1.1\r\nHost: kvroute\r\nContent-Type: application/json\r\nContent-Length: " +
			itoa(len(body)) + "\r\n\r\n" + body
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang fails the test instead of stalling it
	_, _ = c.Write([]byte(req))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: body: %v", path, err)
	}
	return resp, raw
}

func itoa(n int) string { return string(fasthttp.AppendUint(nil, n)) }

// errorType is the OpenAI error type of an error body.
func errorType(t *testing.T, raw []byte) string {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(raw, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI error body: %q", raw)
	}
	return e.Error.Type
}

// TestConnectionCap: at MaxConns open connections a new one takes the place of the connection idle
// longest (closed), and when every connection is in a request it is answered 503 (an OpenAI error,
// Retry-After, Connection: close) and closed; requests in progress are never cut, and both outcomes are
// counted.
func TestConnectionCap(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, addr := startEdge(t, ServerConfig{MaxConns: 4, Registerer: reg})
	idle := srv.idle.idle
	// busy starts a request whose body is still coming: the connection is in a request.
	busy := func() *rawConn {
		c := dialRaw(t, addr)
		_, _ = c.Write([]byte("POST /v1/overlap_scores HTTP/1.1\r\nHost: kvroute\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"tokens\":"))
		return c
	}
	var inRequest []*rawConn
	for range 3 {
		inRequest = append(inRequest, busy())
	}
	kept := dialRaw(t, addr)
	if resp, raw := kept.do(t, "/health", ""); resp.StatusCode != 200 {
		t.Fatalf("fourth connection: %d %s", resp.StatusCode, raw)
	}
	testutil.Eventually(t, "three connections in a request, one idle", func() bool { return idle() == 1 && srv.conns.Open() == 4 })

	// A fifth connection takes the idle one's place.
	fifth := dialRaw(t, addr)
	if resp, raw := fifth.do(t, "/health", ""); resp.StatusCode != 200 {
		t.Fatalf("fifth connection, one idle to make room: %d %s", resp.StatusCode, raw)
	}
	_ = kept.SetReadDeadline(time.Now().Add(testutil.DefaultWait))
	if _, err := kept.br.ReadByte(); err == nil {
		t.Fatal("the idle connection was not closed to make room")
	}

	// Every connection in a request: the next is refused.
	_, _ = fifth.Write([]byte("POST /v1/overlap_scores HTTP/1.1\r\nHost: kvroute\r\nContent-Length: 64\r\n\r\n{"))
	testutil.Eventually(t, "every connection in a request", func() bool { return idle() == 0 })
	over := dialRaw(t, addr)
	resp, raw := over.do(t, "/health", "")
	if resp.StatusCode != fasthttp.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Fatalf("a connection with every other in a request: %d, Retry-After %q, close %v; want 503, 1, true", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close)
	}
	if got := errorType(t, raw); got != "service_unavailable_error" {
		t.Fatalf("refusal: error type %q", got)
	}
	if _, err := over.br.ReadByte(); err == nil {
		t.Fatal("a refused connection stays open")
	}
	for name, want := range map[string]float64{"kvroute_http_connections_open": 4, "kvroute_http_connections_refused_total": 1,
		"kvroute_http_connections_evicted_total": 1, "kvroute_http_accept_errors_total": 0} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	// The requests in progress were not cut: each body completes and is answered.
	rest := strings.Repeat(" ", 64-len(`{"tokens":`)-len(`[1,2,3,4]}`)) + `[1,2,3,4]}`
	for i, c := range inRequest {
		_, _ = c.Write([]byte(rest))
		_ = c.SetReadDeadline(time.Now().Add(testutil.DefaultWait))
		r, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Fatalf("request %d in progress: %v", i, err)
		}
		_ = r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("request %d in progress: %d", i, r.StatusCode)
		}
	}
}

// gathered is the value of the unlabelled gauge or counter name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}

// TestMaxConnsDefault: unset, the bound is a quarter of the open-file limit (at least 64) and the write
// timeout a minute; negative removes either; fasthttp's own bound, which would answer in plain text
// first, stays above MaxConns.
func TestMaxConnsDefault(t *testing.T) {
	n := netlimit.OpenFiles()
	if n == 0 {
		t.Skip("open-file limit unreadable")
	}
	if got, want := (ServerConfig{}).withDefaults().MaxConns, max(n/4, 64); got != want {
		t.Fatalf("default MaxConns %d, want %d (open-file limit %d)", got, want, n)
	}
	if got := (ServerConfig{MaxConns: -1}).withDefaults().MaxConns; got != 0 {
		t.Fatalf("MaxConns -1 gives %d, want 0 (no bound)", got)
	}
	if got := (ServerConfig{}).withDefaults().WriteTimeout; got != time.Minute {
		t.Fatalf("default WriteTimeout %v, want 1m", got)
	}
	if got := (ServerConfig{WriteTimeout: -1}).withDefaults().WriteTimeout; got != 0 {
		t.Fatalf("WriteTimeout -1 gives %v, want 0 (none)", got)
	}
	srv := NewServer(ServerConfig{MaxConns: 1 << 20})
	if srv.srv.Concurrency < 1<<20 {
		t.Fatalf("fasthttp Concurrency %d under MaxConns %d", srv.srv.Concurrency, 1<<20)
	}
}

// TestOutOfDescriptors: when the process's descriptor table is full (held by files here; by client
// connections from many addresses, or by anything else, in life), the edge keeps accepting once
// descriptors are free again, a request that cannot dial its worker is answered 503 at once, and neither
// that request (passive health) nor a round of health checks takes the worker out of routing: the host's
// shortage is not the worker's fault. Before, fasthttp stopped serving for good at the first EMFILE from
// accept and every worker left routing.
//
// The open-file limit belongs to the whole process, so the test lowers it in a child process of its own.
func TestOutOfDescriptors(t *testing.T) {
	if testutil.Alone(t) {
		return
	}
	rl := syscall.Rlimit{Cur: 512, Max: 512}
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil || cur.Max < rl.Max {
		t.Skipf("open-file limit %+v: cannot set %d", cur, rl.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	st := startStack(t, stackOpts{workers: 1, speedup: 1e6, passiveHealth: true})
	addr := strings.TrimPrefix(st.base, "http://")
	worker := st.router.Workers()[0].ID
	// Accepted before the table fills. No request has gone to the worker, so the pool holds no idle
	// connection the request below could reuse instead of dialing.
	q := dialRaw(t, addr)
	if resp, raw := q.do(t, "/health", ""); resp.StatusCode != 200 {
		t.Fatalf("before: %d %s", resp.StatusCode, raw)
	}

	hog := testutil.FillDescriptors(t)
	// One descriptor freed and taken by a client's end of a new connection: the table is full and the
	// server's end waits in the backlog, where accept fails with EMFILE until descriptors are free.
	_ = hog[len(hog)-1].Close()
	hog = hog[:len(hog)-1]
	pending := dialRaw(t, addr)
	testutil.Eventually(t, "accept to fail", func() bool { return st.srv.conns.AcceptErrors() > 0 })
	resp, raw := q.do(t, "/v1/chat/completions", chatBody(st.name, "while the table is full", ""))
	if resp.StatusCode != fasthttp.StatusServiceUnavailable || !strings.Contains(string(raw), "could not open a connection") {
		t.Fatalf("request while the table is full: %d %s", resp.StatusCode, raw)
	}
	NewMonitor(st.router, st.pool, HealthConfig{Timeout: 5 * time.Second, FailThreshold: 1}, nil).CheckAll(context.Background())
	if s, _ := st.router.Fleet.StatusOf(worker); !s.Healthy {
		t.Fatalf("worker %d out of routing after the host ran out of descriptors: %s", worker, s.Unhealthy)
	}

	for _, f := range hog {
		_ = f.Close()
	}
	if resp, raw := pending.do(t, "/health", ""); resp.StatusCode != 200 {
		t.Fatalf("the connection that waited in the backlog: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := q.do(t, "/v1/chat/completions", chatBody(st.name, "after", "")); resp.StatusCode != 200 {
		t.Fatalf("after: %d %s", resp.StatusCode, raw)
	}
}

// sockBuf is a net.ListenConfig / net.Dialer Control setting a socket buffer (SO_SNDBUF or SO_RCVBUF) to
// size, which also turns off the kernel's autotuning of it.
func sockBuf(opt, size int) func(_, _ string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, size) }); err != nil {
			return err
		}
		return serr
	}
}

// TestStalledStreamFreed: a client that sends a streaming request and stops reading loses its
// connection once it has taken nothing for WriteTimeout, and its request is freed: no longer in flight
// on its worker, its worker stream closed. Before, the relay blocked on the full connection for as long
// as the client kept it open. Small socket buffers on both ends make a few hundred chunks fill them,
// whatever the host's autotuning would allow.
func TestStalledStreamFreed(t *testing.T) {
	st := startStack(t, stackOpts{workers: 1, speedup: 1e6})
	lc := net.ListenConfig{Control: sockBuf(syscall.SO_SNDBUF, 16<<10)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{MaxBodyBytes: 1 << 20, WriteTimeout: 200 * time.Millisecond}, st.api)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })

	d := net.Dialer{Timeout: 5 * time.Second, Control: sockBuf(syscall.SO_RCVBUF, 4<<10)}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := chatBody(st.name, "tell a long story", `,"stream":true,"max_tokens":20000`)
	_, _ = c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: kvroute\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(len(body)) + "\r\n\r\n" + body))
	_ = c.SetReadDeadline(time.Now().Add(testutil.DefaultWait))
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	// The client reads nothing more and keeps the connection.
	testutil.Eventually(t, "the stalled stream's request freed and its connection closed", func() bool {
		return srv.conns.WriteTimeouts() > 0 && st.router.ActiveRequests() == 0 && srv.conns.Open() == 0
	})
}

// TestIdleConnsOrder: the tracker evicts the connection idle longest, skips connections in a request,
// moves a connection back when it goes idle again and forgets it when it closes.
func TestIdleConnsOrder(t *testing.T) {
	var ic idleConns
	var conns [3]net.Conn
	var peers [3]net.Conn
	for i := range conns {
		conns[i], peers[i] = net.Pipe()
		t.Cleanup(func() { _ = conns[i].Close(); _ = peers[i].Close() })
		ic.connState(conns[i], fasthttp.StateNew)
	}
	a, b, c := conns[0], conns[1], conns[2]
	ic.connState(b, fasthttp.StateActive) // b in a request
	ic.connState(a, fasthttp.StateActive)
	ic.connState(a, fasthttp.StateIdle) // a idle again, after c
	if ic.idle() != 2 {
		t.Fatalf("%d idle, want 2 (a and c)", ic.idle())
	}
	if !ic.evict() {
		t.Fatal("nothing evicted")
	}
	if _, err := peers[2].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("c (idle longest) not closed: %v", err)
	}
	ic.connState(c, fasthttp.StateClosed)
	ic.connState(a, fasthttp.StateClosed)
	if ic.idle() != 0 || ic.evict() {
		t.Fatal("a closed connection is still listed")
	}
	ic.connState(b, fasthttp.StateClosed)
	if len(ic.nodes) != 0 {
		t.Fatalf("%d connections remembered after all closed", len(ic.nodes))
	}
}

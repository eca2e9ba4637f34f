package frontend

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/kvroute/kvroute/internal/netlimit"
	"github.com/kvroute/kvroute/internal/routine"
)

// Handler serves part of the URL space and reports whether it handled the request.
type Handler interface {
	Handle(ctx *fasthttp.RequestCtx) bool
}

// ServerConfig configures the HTTP edge.
type ServerConfig struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413. Default 32 MiB.
	MaxBodyBytes int
	// MaxBodyBytesInFlight bounds the buffers of all request bodies being read at once; a body that
	// would pass it gets 503 and its connection is closed. A body's buffer grows with the bytes that
	// arrived, never with the Content-Length a client declares. Default 256 MiB, at least MaxBodyBytes.
	MaxBodyBytesInFlight int
	// HeaderTimeout bounds the request line and headers, counted from their first byte. Default 10s.
	HeaderTimeout time.Duration
	// ReadTimeout bounds the body, counted from the end of the headers (so at most HeaderTimeout +
	// ReadTimeout per request, however slowly a client sends). It is also the keep-alive idle timeout.
	// Default 30s.
	ReadTimeout time.Duration
	// MaxConnsPerIP bounds the open connections of one client address; past it a connection gets 429
	// and is closed. Raise it when a proxy or gateway that funnels many clients fronts kvroute.
	// Default 1024; negative disables.
	MaxConnsPerIP int
	// MaxConns bounds the client connections open at once, from all addresses; at it a new connection
	// takes the place of the one idle longest, or, with every connection in a request, is answered 503
	// and closed (listener.go). Default a quarter of the process's open-file limit, the edge's share of
	// its descriptors (internal/netlimit); negative disables.
	MaxConns int
	// WriteTimeout bounds each write to a client, a MiB at a time: a client that takes no bytes of a
	// response for this long (a stream it stopped reading) loses its connection, and its request is
	// freed. Default 60s; negative disables.
	WriteTimeout time.Duration
	// Registerer, when set, gets the edge's own metrics (body bytes being read, budget refusals,
	// connections open and refused, write timeouts, accept errors).
	Registerer prometheus.Registerer
	// Gatherer serves /metrics; nil means the default Prometheus registry.
	Gatherer prometheus.Gatherer
	// MaxHeaderBytes bounds the request line plus headers; larger ones get 431. Default 64 KiB.
	MaxHeaderBytes int
	// MaxConcurrent bounds requests in flight; past it a request gets 429 at once rather than queueing
	// behind the others (the router's own queue, --router-queue-threshold, is where waiting belongs).
	// Counted: POST calls outside the admin plane (the OpenAI endpoints, tokenize, the router API), each
	// until its response's last byte is written, a stream's included. Probes, /metrics, reads and the
	// admin API are never refused by it: they are how an operator sees and mends a full server.
	// Default 16384.
	MaxConcurrent int
	// AdminToken, when set, is required as "Authorization: Bearer <token>" on every call that changes
	// the fleet or the router (worker registration and removal, POST /busy_threshold) and on debug
	// endpoints. Unset, those calls are answered only for loopback clients (403 for others).
	AdminToken string
	// RouterAPIToken, when set, is required as "Authorization: Bearer <token>" on the standalone
	// routing calls (/v1/route, /v1/route/{id}/..., /v1/overlap_scores), which book load on workers.
	// Unset, they are answered only for loopback clients (403 for others).
	RouterAPIToken string
	// TLSCert and TLSKey, when both set, make Serve speak HTTPS.
	TLSCert, TLSKey string
	// Probes serves /health, /live and /ready (probes.go); nil: bare 200s.
	Probes *Probes
	// AllowedOrigins are the browser origins allowed cross-origin calls (vLLM's --allowed-origins; "*"
	// allows any): their preflights are answered and their answers carry Access-Control-Allow-Origin.
	// Empty (the default): no CORS headers, and preflights get 405 as any OPTIONS.
	AllowedOrigins []string
}

// Server is the fasthttp edge: /health, /live, /metrics, then each mounted Handler in order, then 404.
type Server struct {
	srv      *fasthttp.Server
	cfg      ServerConfig
	handlers []Handler
	metrics  fasthttp.RequestHandler
	inflight atomic.Int64
	// budget is the process-wide bound on body bytes being read (MaxBodyBytesInFlight).
	budget            *netlimit.Budget
	bodyBudgetRefused atomic.Int64
	// panics counts handlers that panicked (recoverHandler).
	panics  atomic.Int64
	conns   netlimit.ConnStats
	idle    idleConns
	reclaim reclaimer
}

// NewServer returns a server over handlers.
func NewServer(cfg ServerConfig, handlers ...Handler) *Server {
	cfg = cfg.withDefaults()
	g := cfg.Gatherer
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	s := &Server{handlers: handlers, cfg: cfg}
	s.budget = netlimit.NewBudget(int64(cfg.MaxBodyBytesInFlight))
	if cfg.Registerer != nil {
		s.registerMetrics(cfg.Registerer)
	}
	s.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	s.srv = &fasthttp.Server{
		Handler: s.handle,
		Name:    "kvroute",
		// Bodies are streamed and read by readBody, which grows a buffer with the bytes that arrived
		// (fasthttp's own read allocates the declared Content-Length before the first byte) and enforces
		// MaxBodyBytes. In streaming mode fasthttp's limit only sets how much it reads before the
		// handler runs (min(limit, 8 KiB), waiting for all of it): one byte, so a large body is refused
		// at once and a slow one is never waited for outside readBody.
		StreamRequestBody:  true,
		MaxRequestBodySize: 1,
		// The header deadline runs from the first byte; at the end of the headers the body gets its
		// own, absolute deadline: a client that drips bytes cannot extend either.
		ReadTimeout: cfg.HeaderTimeout,
		IdleTimeout: cfg.ReadTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: cfg.ReadTimeout}
		},
		// "Expect: 100-continue" with a body over the limit is refused before the client sends it
		// (fasthttp would answer 100 and wait for the body).
		ExpectHandler: func(ctx *fasthttp.RequestCtx) int {
			if ctx.Request.Header.ContentLength() > cfg.MaxBodyBytes {
				writeError(ctx, errorf(ErrTooLarge, "request body larger than %d bytes", cfg.MaxBodyBytes))
				return fasthttp.StatusRequestEntityTooLarge
			}
			return fasthttp.StatusContinue
		},
		MaxConnsPerIP: cfg.MaxConnsPerIP,
		// The edge listener bounds the connections (MaxConns) and answers the ones past it; fasthttp's
		// own bound, which answers in plain text, is kept above it.
		Concurrency: max(cfg.MaxConns, fasthttp.DefaultConcurrency),
		ConnState: func(c net.Conn, st fasthttp.ConnState) {
			if s.idle.connState(c, st) {
				s.inflight.Add(-1) // the request it held ended with its response's last byte
			}
			s.reclaim.connState(c, st)
		},
		// Idle connection goroutines (and their stacks) end soon after a burst, before a reclaim.
		MaxIdleWorkerDuration: reclaimDelay / 2,
		ReadBufferSize:        cfg.MaxHeaderBytes,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		Logger:                quietLogger{},
		ErrorHandler:          s.readFailed,
	}
	return s
}

// withDefaults fills the unset fields of c with their documented defaults.
func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = 10 * time.Second
	}
	if c.MaxBodyBytesInFlight <= 0 {
		c.MaxBodyBytesInFlight = 256 << 20
	}
	c.MaxBodyBytesInFlight = max(c.MaxBodyBytesInFlight, c.MaxBodyBytes+bodyChunk)
	switch {
	case c.MaxConnsPerIP == 0:
		c.MaxConnsPerIP = 1024
	case c.MaxConnsPerIP < 0:
		c.MaxConnsPerIP = 0
	}
	switch {
	case c.WriteTimeout == 0:
		c.WriteTimeout = 60 * time.Second
	case c.WriteTimeout < 0:
		c.WriteTimeout = 0
	}
	switch {
	case c.MaxConns == 0:
		c.MaxConns = defaultMaxConns()
	case c.MaxConns < 0:
		c.MaxConns = 0
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 16384
	}
	return c
}

// readFailed answers a request fasthttp could not read, as an OpenAI error: too large a body or header,
// a deadline passed, or a malformed request (without the raw bytes fasthttp appends to its message,
// headers and tokens included).
func (s *Server) readFailed(ctx *fasthttp.RequestCtx, err error) {
	if err == fasthttp.ErrBodyTooLarge {
		writeError(ctx, errorf(ErrTooLarge, "request body larger than %d bytes", s.cfg.MaxBodyBytes))
		return
	}
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		writeError(ctx, errorf(ErrHeaderTooLarge, "request headers larger than %d bytes", s.cfg.MaxHeaderBytes))
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		writeError(ctx, errorf(ErrRequestTimeout, "request not received within its deadline"))
		return
	}
	msg := err.Error()
	if i := strings.Index(msg, ": buffer size="); i >= 0 {
		msg = msg[:i]
	}
	writeError(ctx, errorf(ErrBadRequest, "cannot parse request: %s", msg))
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	defer s.recoverHandler(ctx)
	if counted(ctx) {
		if n := s.inflight.Add(1); n > int64(s.cfg.MaxConcurrent) {
			s.inflight.Add(-1)
			writeError(ctx, errorf(ErrTooMany, "more than %d requests in flight", s.cfg.MaxConcurrent))
			return
		}
		// The connection holds the count until it is idle again or closes (its response written,
		// a streamed body included); where it is not tracked, until the handler returns.
		if !s.idle.hold(ctx.Conn()) {
			defer s.inflight.Add(-1)
		}
	}
	if s.cors(ctx) {
		return
	}
	if err := s.admit(ctx); err != nil {
		ctx.SetConnectionClose() // the body stays unread
		writeError(ctx, err)
		return
	}
	held, err := s.readBody(ctx)
	defer s.budget.Give(int64(held))
	if err != nil {
		writeError(ctx, err)
		return
	}
	switch string(ctx.Path()) {
	case "/health", "/live", "/ready", "/version":
		if s.cfg.Probes == nil || !s.cfg.Probes.Handle(ctx) {
			ctx.SetStatusCode(fasthttp.StatusOK)
		}
		return
	case "/metrics":
		s.metrics(ctx)
		return
	case "/debug/goroutines":
		if !ctx.IsGet() {
			methodNotAllowed(ctx, "GET", errorf(ErrMethod, "use GET for /debug/goroutines"))
			return
		}
		writeJSON(ctx, goroutinesView{Total: runtime.NumGoroutine(), Kinds: routine.Snapshot()})
		return
	}
	for _, h := range s.handlers {
		if h.Handle(ctx) {
			return
		}
	}
	writeError(ctx, errorf(ErrNotFound, "no route for %s %s", ctx.Method(), ctx.Path()))
}

// recoverHandler answers a request whose handler panicked with a 500 and logs the panic with its stack:
// fasthttp does not recover a handler's panic, and one request would otherwise end the process (and every
// request in flight with it). Counted as kvroute_http_panics_total.
func (s *Server) recoverHandler(ctx *fasthttp.RequestCtx) {
	r := recover()
	if r == nil {
		return
	}
	s.panics.Add(1)
	slog.Error("panic serving a request", "method", string(ctx.Method()), "path", string(ctx.Path()), "panic", fmt.Sprint(r),
		"stack", string(debug.Stack()))
	ctx.Response.Reset()
	ctx.SetConnectionClose()
	writeError(ctx, errors.New("internal error"))
}

// counted reports whether a request counts against MaxConcurrent: a POST outside the admin plane.
func counted(ctx *fasthttp.RequestCtx) bool {
	return ctx.IsPost() && planeOf(ctx) != planeAdmin
}

// plane is the part of the URL space a request belongs to, for access control.
type plane uint8

const (
	planeData   plane = iota // OpenAI endpoints, health, metrics, reads of fleet state
	planeAdmin               // changes the fleet or the router, or reads debug state
	planeRouter              // the standalone routing calls, which book load on workers
)

// planeOf classifies a request.
func planeOf(ctx *fasthttp.RequestCtx) plane {
	path := string(ctx.Path())
	switch {
	case strings.HasPrefix(path, "/v1/workers"), path == "/busy_threshold":
		if ctx.IsGet() || ctx.IsHead() {
			return planeData
		}
		return planeAdmin
	case strings.HasPrefix(path, "/debug/"):
		return planeAdmin
	case path == "/v1/route", strings.HasPrefix(path, "/v1/route/"), path == "/v1/overlap_scores":
		return planeRouter
	}
	return planeData
}

// admit applies the access rule of the request's plane: with its token configured, the bearer token;
// without, loopback clients only.
func (s *Server) admit(ctx *fasthttp.RequestCtx) error {
	var token, flag string
	switch planeOf(ctx) {
	case planeAdmin:
		token, flag = s.cfg.AdminToken, "--admin-token"
	case planeRouter:
		token, flag = s.cfg.RouterAPITokenOrAdmin(), "--router-api-token"
	default:
		return nil
	}
	if token != "" {
		if !bearerIs(ctx, token) {
			return errorf(ErrUnauthorized, "this endpoint needs the token set with %s (Authorization: Bearer ...)", flag)
		}
		return nil
	}
	if !localClient(ctx) {
		return errorf(ErrForbidden, "this endpoint answers only loopback clients unless %s is set", flag)
	}
	return nil
}

// localClient reports whether a request comes from this host itself: a loopback peer that is not a
// proxy relaying someone else's request (a request with forwarding headers is treated as remote). A
// proxy or mesh sidecar on the same host that adds no such header cannot be told apart: set the tokens
// there.
func localClient(ctx *fasthttp.RequestCtx) bool {
	if !ctx.RemoteIP().IsLoopback() {
		return false
	}
	h := &ctx.Request.Header
	return len(h.Peek("X-Forwarded-For")) == 0 && len(h.Peek("Forwarded")) == 0 && len(h.Peek("X-Real-Ip")) == 0
}

// RouterAPITokenOrAdmin is the token the router API needs: RouterAPIToken, else AdminToken (an
// operator who set only the admin token has not opened the router API to everyone).
func (c ServerConfig) RouterAPITokenOrAdmin() string {
	if c.RouterAPIToken != "" {
		return c.RouterAPIToken
	}
	return c.AdminToken
}

// bearerIs checks the bearer token in constant time; the scheme's name is case-insensitive (RFC 9110).
func bearerIs(ctx *fasthttp.RequestCtx, token string) bool {
	const scheme = "Bearer "
	got := ctx.Request.Header.Peek("Authorization")
	if len(got) < len(scheme) || !strings.EqualFold(string(got[:len(scheme)]), scheme) {
		return false
	}
	return subtle.ConstantTimeCompare(got[len(scheme):], []byte(token)) == 1
}

// AccessSummary says, for the startup log, who may call the admin and router APIs.
func (c ServerConfig) AccessSummary() (admin, routerAPI string) {
	admin, routerAPI = "loopback clients only (set --admin-token to open it to token holders)", "loopback clients only (set --router-api-token to open it to token holders)"
	if c.AdminToken != "" {
		admin = "bearer token (--admin-token)"
	}
	switch {
	case c.RouterAPIToken != "":
		routerAPI = "bearer token (--router-api-token)"
	case c.AdminToken != "":
		routerAPI = "bearer token (--admin-token)"
	}
	return admin, routerAPI
}

// goroutinesView is the answer of GET /debug/goroutines (admin plane): every goroutine of the process,
// and those started through the tracked helper by kind (routine.Snapshot).
type goroutinesView struct {
	Total int             `json:"total"`
	Kinds []routine.Count `json:"kinds"`
}

// registerMetrics registers the edge's own metrics with reg.
func (s *Server) registerMetrics(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvroute_http_body_bytes_reading",
			Help: "Bytes of buffer held by request bodies being read (bounded by --max-body-bytes-in-flight)."},
			func() float64 { return float64(s.budget.InUse()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvroute_http_panics_total",
			Help: "Requests whose handler panicked: answered 500, the panic logged with its stack (a bug to report)."},
			func() float64 { return float64(s.panics.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvroute_http_body_budget_refused_total",
			Help: "Requests refused with 503 because the request-body budget (--max-body-bytes-in-flight) was full."},
			func() float64 { return float64(s.bodyBudgetRefused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvroute_http_connections_open",
			Help: "Client connections open (bounded by --max-conns)."},
			func() float64 { return float64(s.conns.Open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvroute_http_connections_refused_total",
			Help: "Client connections answered 503 and closed because --max-conns were open."},
			func() float64 { return float64(s.conns.Refused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvroute_http_connections_evicted_total",
			Help: "Idle client connections closed to make room for a new one at --max-conns."},
			func() float64 { return float64(s.conns.Evicted()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvroute_http_write_timeouts_total",
			Help: "Writes to a client that took none of their bytes within --write-timeout (a client that stopped reading); each closed the connection."},
			func() float64 { return float64(s.conns.WriteTimeouts()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvroute_http_accept_errors_total",
			Help: "Errors accepting a client connection (EMFILE when the process is out of descriptors), each retried after a pause."},
			func() float64 { return float64(s.conns.AcceptErrors()) }),
	)
}

// Serve serves on ln until Shutdown, over TLS when TLSCert and TLSKey are set. At MaxConns open
// connections a new one takes the place of the one idle longest, or is refused when none is idle;
// accept errors are retried (listener.go), so Serve returns only once the listener is closed.
func (s *Server) Serve(ln net.Listener) error {
	tls := s.cfg.TLSCert != "" && s.cfg.TLSKey != ""
	ln = edgeListener(ln, s.cfg, tls, &s.conns, &s.idle)
	if tls {
		return s.srv.ServeTLS(ln, s.cfg.TLSCert, s.cfg.TLSKey)
	}
	return s.srv.Serve(ln)
}

// Config returns the server's configuration, defaults filled.
func (s *Server) Config() ServerConfig { return s.cfg }

// Shutdown stops accepting and waits for open requests.
func (s *Server) Shutdown() error {
	s.reclaim.stop()
	return s.srv.Shutdown()
}

// quietLogger drops fasthttp's per-connection error lines; the errors reach clients as OpenAI errors
// and metrics count them.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

package frontend

import (
	"crypto/subtle"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Handler serves part of the URL space and reports whether it handled the request.
type Handler interface {
	Handle(ctx *fasthttp.RequestCtx) bool
}

// ServerConfig configures the HTTP edge.
type ServerConfig struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413. Default 32 MiB.
	MaxBodyBytes int
	// ReadTimeout bounds reading one request. Default 30s.
	ReadTimeout time.Duration
	// Gatherer serves /metrics; nil means the default Prometheus registry.
	Gatherer prometheus.Gatherer
	// MaxHeaderBytes bounds the request line plus headers; larger ones get 431. Default 64 KiB.
	MaxHeaderBytes int
	// MaxConcurrent bounds requests in flight; past it a request gets 429 at once rather than queueing
	// behind the others (the router's own queue, --router-queue-threshold, is where waiting belongs).
	// Default 16384.
	MaxConcurrent int
	// AdminToken, when set, is required as "Authorization: Bearer <token>" on every call that changes
	// the fleet or the router (worker registration and removal, POST /busy_threshold) and on debug
	// endpoints. Default unset (open, as Dynamo's frontend admin API).
	AdminToken string
	// TLSCert and TLSKey, when both set, make Serve speak HTTPS.
	TLSCert, TLSKey string
	// Probes serves /health, /live and /ready (probes.go); nil: bare 200s.
	Probes *Probes
}

// Server is the fasthttp edge: /health, /live, /metrics, then each mounted Handler in order, then 404.
type Server struct {
	srv      *fasthttp.Server
	cfg      ServerConfig
	handlers []Handler
	metrics  fasthttp.RequestHandler
	inflight atomic.Int64
}

// NewServer returns a server over handlers.
func NewServer(cfg ServerConfig, handlers ...Handler) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 16384
	}
	g := cfg.Gatherer
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	s := &Server{handlers: handlers, cfg: cfg}
	s.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		Name:                  "kvroute",
		MaxRequestBodySize:    cfg.MaxBodyBytes,
		ReadTimeout:           cfg.ReadTimeout,
		ReadBufferSize:        cfg.MaxHeaderBytes,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		Logger:                quietLogger{},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			if err == fasthttp.ErrBodyTooLarge {
				writeError(ctx, errorf(ErrTooLarge, "request body larger than %d bytes", cfg.MaxBodyBytes))
				return
			}
			var small *fasthttp.ErrSmallBuffer
			if errors.As(err, &small) {
				writeError(ctx, errorf(ErrHeaderTooLarge, "request headers larger than %d bytes", cfg.MaxHeaderBytes))
				return
			}
			writeError(ctx, errorf(ErrBadRequest, "cannot parse request: %v", err))
		},
	}
	return s
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	if n := s.inflight.Add(1); n > int64(s.cfg.MaxConcurrent) {
		s.inflight.Add(-1)
		writeError(ctx, errorf(ErrTooMany, "more than %d requests in flight", s.cfg.MaxConcurrent))
		return
	}
	defer s.inflight.Add(-1)
	if s.cfg.AdminToken != "" && isAdmin(ctx) && !s.authorized(ctx) {
		writeError(ctx, errorf(ErrUnauthorized, "this endpoint needs the admin token (Authorization: Bearer ...)"))
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
	}
	for _, h := range s.handlers {
		if h.Handle(ctx) {
			return
		}
	}
	writeError(ctx, errorf(ErrNotFound, "no route for %s %s", ctx.Method(), ctx.Path()))
}

// isAdmin reports whether a request changes the fleet or the router, or reads debug state.
func isAdmin(ctx *fasthttp.RequestCtx) bool {
	path := string(ctx.Path())
	switch {
	case strings.HasPrefix(path, "/v1/workers"):
		return !ctx.IsGet()
	case path == "/busy_threshold":
		return !ctx.IsGet()
	case strings.HasPrefix(path, "/debug/"):
		return true
	}
	return false
}

// authorized checks the bearer token in constant time.
func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	got := ctx.Request.Header.Peek("Authorization")
	want := "Bearer " + s.cfg.AdminToken
	return subtle.ConstantTimeCompare(got, []byte(want)) == 1
}

// Serve serves on ln until Shutdown, over TLS when TLSCert and TLSKey are set.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.TLSCert != "" && s.cfg.TLSKey != "" {
		return s.srv.ServeTLS(ln, s.cfg.TLSCert, s.cfg.TLSKey)
	}
	return s.srv.Serve(ln)
}

// Shutdown stops accepting and waits for open requests.
func (s *Server) Shutdown() error { return s.srv.Shutdown() }

// quietLogger drops fasthttp's per-connection error lines; the errors reach clients as OpenAI errors
// and metrics count them.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

package frontend

import (
	"net"
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
}

// Server is the fasthttp edge: /health, /live, /metrics, then each mounted Handler in order, then 404.
type Server struct {
	srv      *fasthttp.Server
	handlers []Handler
	metrics  fasthttp.RequestHandler
}

// NewServer returns a server over handlers.
func NewServer(cfg ServerConfig, handlers ...Handler) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	g := cfg.Gatherer
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	s := &Server{handlers: handlers}
	s.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		Name:                  "kvroute",
		MaxRequestBodySize:    cfg.MaxBodyBytes,
		ReadTimeout:           cfg.ReadTimeout,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		Logger:                quietLogger{},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			if err == fasthttp.ErrBodyTooLarge {
				writeError(ctx, errorf(ErrTooLarge, "request body larger than %d bytes", cfg.MaxBodyBytes))
				return
			}
			writeError(ctx, errorf(ErrBadRequest, "cannot parse request: %v", err))
		},
	}
	return s
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/health", "/live":
		ctx.SetStatusCode(fasthttp.StatusOK)
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

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(ln) }

// Shutdown stops accepting and waits for open requests.
func (s *Server) Shutdown() error { return s.srv.Shutdown() }

// quietLogger drops fasthttp's per-connection error lines; the errors reach clients as OpenAI errors
// and metrics count them.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

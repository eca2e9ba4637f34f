package frontend

import (
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// PprofHandler serves Go's profiles under /debug/pprof/. It is an admin path (Server's admit): the admin
// token when one is set, else loopback clients only.
type PprofHandler struct{ h fasthttp.RequestHandler }

// NewPprofHandler returns the handler.
func NewPprofHandler() *PprofHandler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &PprofHandler{h: fasthttpadaptor.NewFastHTTPHandler(mux)}
}

// Handle serves /debug/pprof/* and reports whether ctx was one of them.
func (p *PprofHandler) Handle(ctx *fasthttp.RequestCtx) bool {
	if !strings.HasPrefix(string(ctx.Path()), "/debug/pprof/") {
		return false
	}
	p.h(ctx)
	return true
}

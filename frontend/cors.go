package frontend

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// corsMethods and corsMaxAge are what a preflight answer allows: every method the API serves, cached
// for ten minutes.
const (
	corsMethods = "GET, POST, DELETE, OPTIONS"
	corsMaxAge  = "600"
)

// corsOrigin returns the Access-Control-Allow-Origin value for the request's Origin under the allowed
// list ("*" allows every origin), or "" when the request is not cross-origin or not allowed.
func corsOrigin(allowed []string, origin []byte) string {
	if len(allowed) == 0 || len(origin) == 0 {
		return ""
	}
	for _, a := range allowed {
		if a == "*" {
			return "*"
		}
		if a == string(origin) {
			return a
		}
	}
	return ""
}

// cors applies --allowed-origins (vLLM's CORS flag) and reports whether it answered the request: a
// preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered 204 without reaching
// any handler or access check (browsers send no credentials on it); any other request from an allowed
// origin gets the Allow-Origin header on whatever answer follows.
func (s *Server) cors(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	allow := corsOrigin(s.cfg.AllowedOrigins, h.Peek("Origin"))
	if len(s.cfg.AllowedOrigins) > 0 {
		ctx.Response.Header.Set("Vary", "Origin")
	}
	preflight := ctx.IsOptions() && len(h.Peek("Access-Control-Request-Method")) > 0
	if allow == "" {
		if preflight && len(s.cfg.AllowedOrigins) > 0 {
			writeError(ctx, errorf(ErrForbidden, "origin %q is not in --allowed-origins", h.Peek("Origin")))
			return true
		}
		return false
	}
	ctx.Response.Header.Set("Access-Control-Allow-Origin", allow)
	if !preflight {
		ctx.Response.Header.Set("Access-Control-Expose-Headers", "X-Request-Id, x-kvroute-worker-id, x-kvroute-overlap-blocks")
		return false
	}
	ctx.Response.Header.Set("Access-Control-Allow-Methods", corsMethods)
	if req := h.Peek("Access-Control-Request-Headers"); len(req) > 0 {
		ctx.Response.Header.SetBytesV("Access-Control-Allow-Headers", req)
	}
	ctx.Response.Header.Set("Access-Control-Max-Age", corsMaxAge)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return true
}

// ParseOrigins reads --allowed-origins: vLLM's JSON list (["*"], ["https://a.example"]) or a comma
// list.
func ParseOrigins(v string) []string {
	v = strings.TrimSpace(v)
	v = strings.TrimPrefix(v, "[")
	v = strings.TrimSuffix(v, "]")
	var out []string
	for _, o := range strings.Split(v, ",") {
		o = strings.Trim(strings.TrimSpace(o), `"'`)
		if o != "" {
			out = append(out, o)
		}
	}
	return out
}

package frontend

import (
	"bytes"
	"errors"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/scoring"
)

// HeaderSource reads a request header by name, case-insensitively as HTTP does (the endpoint picker's
// view of the gateway's request headers).
type HeaderSource = headerSource

// ErrNotGenerate is the class of a Pick on a path that is not an OpenAI generate endpoint.
var ErrNotGenerate = errors.New("frontend: not a generate path")

// Picked is one request routed and not dispatched: the endpoint picker (frontend/epp) runs the request
// path's stages 1–7 through Pick, and a gateway then proxies the request to the chosen worker. The
// lifecycle stays here: FirstToken marks prefill completed, End frees the request and ends it (in-flight
// count, metrics, access log) — the same three calls as a request the frontend dispatches itself.
//
// A Picked is owned by one goroutine (the picker's stream); End is idempotent.
type Picked struct {
	a     *OpenAIAPI
	j     *job
	req   *router.RouteRequest
	ended bool
	// Route is the router's decision.
	Route router.RouteResult
	// Stream reports whether the client asked for a streamed answer.
	Stream bool
	// ID is the router's request id.
	ID string
}

// Body is the body the worker should get: the client's, with what the request path adds (the cache
// salt of nvext/X-Tenant-ID, the images' uuids when routed on images).
func (p *Picked) Body() []byte { return p.j.body }

// FirstToken records that the worker's first token arrived: prefill done, time to first token.
func (p *Picked) FirstToken() {
	if p.ended || p.j.firstAt != 0 {
		return
	}
	_ = p.a.R.PrefillDone(p.j.id)
	p.a.firstToken(p.j)
}

// Output reports the tokens generated so far (--router-track-output-blocks).
func (p *Picked) Output(tokens int) {
	if !p.ended {
		p.a.R.RecordOutput(p.j.id, tokens)
	}
}

// End frees the request in the router and ends it with the HTTP status the client got.
func (p *Picked) End(status int) {
	if p.ended {
		return
	}
	p.ended = true
	p.a.finish(p.j)
	p.a.end(p.j, status)
}

// Move charges the request to another worker (the gateway served it from a fallback endpoint): the
// router frees it on the picked worker and routes it again pinned to id, so the load lines stay true.
func (p *Picked) Move(id uint64) error {
	if p.ended || id == p.Route.Worker.WorkerID {
		return nil
	}
	p.a.finish(p.j)
	again := *p.req
	again.Exclude, again.Only, again.ReturnCosts = nil, nil, false
	again.Pin, again.PinRank = &scoring.WorkerKey{WorkerID: id}, false
	res, err := p.a.R.Route(p.j.ctx, &again)
	if err != nil {
		return mapRouteErr(err)
	}
	p.Route, p.j.route = res, res
	return nil
}

// PickOptions narrows one Pick.
type PickOptions struct {
	// Exclude lists workers the request must not go to.
	Exclude []uint64
	// Only, when not empty, lists the only workers the request may go to (the gateway's endpoint
	// subset).
	Only []uint64
	// ReturnCosts asks the router for every candidate's cost (the picker's fallback endpoints), or with
	// CostsTop > 0 the cheapest candidate of each of the CostsTop cheapest workers not busy.
	ReturnCosts bool
	CostsTop    int
}

// Pick runs the request path up to the routing decision for a request the caller forwards itself:
// parse + validate, chat template + tokenize, images, hash, route. path is the request's URL path (a
// query string is ignored); body is read and copied. A nil error means the request is routed and in
// flight: the caller must End it. A non-nil error has a class (ErrorResponse gives its status and body).
func (a *OpenAIAPI) Pick(path string, h HeaderSource, body []byte, opt PickOptions) (*Picked, error) {
	if i := bytes.IndexByte([]byte(path), '?'); i >= 0 {
		path = path[:i]
	}
	if a.PD.active() {
		// The prefill hop is the frontend's to make: a gateway forwards a request to one endpoint.
		return nil, errorf(ErrUnavailable, "disaggregated prefill/decode is served by kvroute frontend, not by a picker")
	}
	var ep endpoint
	switch path {
	case "/v1/chat/completions":
		ep = epChat
	case "/v1/completions":
		ep = epCompletion
	default:
		return nil, errorf(ErrNotGenerate, "%s is not an OpenAI generate endpoint", path)
	}
	var reqID string
	if v := h.Peek("X-Request-Id"); usableRequestID(string(v)) {
		reqID = string(v)
	}
	j, err := a.parse(h, body, ep, reqID)
	if err != nil {
		if a.Metrics != nil {
			status, _ := statusOf(err)
			a.Metrics.requests(ep, false, status)
		}
		return nil, err
	}
	j.returnRoute = j.returnRoute || opt.ReturnCosts
	j.costsTop = opt.CostsTop
	j.exclude, j.only = opt.Exclude, opt.Only
	a.begin(j)
	p := a.runRequestActor(j)
	if p.err != nil {
		status, _ := statusOf(p.err)
		a.end(j, status)
		return nil, p.err
	}
	j.route, j.routed = p.route, true
	return &Picked{a: a, j: j, req: p.req, Route: p.route, Stream: j.stream, ID: j.id}, nil
}

// ErrorResponse is err as the edge answers it: the HTTP status of its class and the OpenAI error body.
func ErrorResponse(err error) (status int, body []byte) {
	status, typ := statusOf(err)
	var param *string
	if p := openai.ParamOf(err); p != "" {
		param = &p
	}
	body, _ = json.Marshal(apiError{Error: apiErrorBody{Message: err.Error(), Type: typ, Param: param, Code: status}})
	return status, body
}

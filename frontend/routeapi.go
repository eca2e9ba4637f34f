package frontend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/sched"
)

// routeRequest is the body of POST /v1/route.
type routeRequest struct {
	RequestID   string   `json:"request_id"`
	Tokens      []uint32 `json:"tokens"`
	BlockHashes []uint64 `json:"block_hashes"`
	// BlockMMInfos is the legacy multimodal side channel with tokens (blockmm.go).
	BlockMMInfos []*blockMMInfo    `json:"block_mm_infos"`
	ISL          int               `json:"isl"`
	Priority     *float64          `json:"priority"`
	Strict       uint32            `json:"strict_priority"`
	WorkerID     *uint64           `json:"worker_id"`
	DPRank       *uint32           `json:"dp_rank"`
	LoraName     string            `json:"lora_name"`
	CacheSalt    string            `json:"cache_salt"` // the cache namespace the worker hashes with
	Override     *scoring.Override `json:"router_config_override"`
	// PolicyClass is the router policy class or family (the x-dynamo-meta-policy-class header when unset).
	PolicyClass string `json:"policy_class"`
}

type routeCandidate struct {
	WorkerID      uint64  `json:"worker_id"`
	DPRank        uint32  `json:"dp_rank"`
	OverlapBlocks uint32  `json:"overlap_blocks"`
	Cost          float64 `json:"cost"`
	Busy          bool    `json:"busy,omitempty"`
}

type routeResponse struct {
	WorkerID      uint64           `json:"worker_id"`
	DPRank        uint32           `json:"dp_rank"`
	OverlapBlocks uint32           `json:"overlap_blocks"`
	Cost          float64          `json:"cost"`
	CachedTokens  int              `json:"cached_tokens"`
	URL           string           `json:"url,omitempty"`
	Candidates    []routeCandidate `json:"candidates"`
}

// checkOverride validates a router_config_override against the router's configuration, as the
// router will apply it.
func (a *RouterAPI) checkOverride(o *scoring.Override) error {
	if o == nil {
		return nil
	}
	if _, err := a.R.Config().WithOverride(o); err != nil {
		return errorf(ErrBadRequest, "router_config_override: %v", err)
	}
	return nil
}

// checkPin refuses a pin to a worker that is not registered (404) or to a dp rank it does not have
// (400); a registered worker that cannot take the request is the router's answer (503).
func (a *RouterAPI) checkPin(id uint64, rank *uint32) error {
	return checkPin(a.R, id, rank)
}

func checkPin(r *router.Router, id uint64, rank *uint32) error {
	st, ok := r.Fleet.StatusOf(id)
	if !ok {
		return errorf(ErrNotFound, "worker %d is not registered", id)
	}
	if rank != nil && int64(*rank) >= int64(max(st.DPSize, 1)) {
		return errorf(ErrBadRequest, "worker %d has %d dp ranks, not rank %d", id, max(st.DPSize, 1), *rank)
	}
	return nil
}

// routeID reports whether id can be booked: an id that /v1/route/{id}/free cannot name (a '/', which
// the path splits on even percent-encoded, or a . or .. segment, which the path normalizes away) would
// stay booked on its worker for good.
func routeID(id string) bool {
	return usableRequestID(id) && !strings.Contains(id, "/") && id != "." && id != ".."
}

// maxRouteWait bounds how long a /v1/route call may wait in the router queue.
const maxRouteWait = 5 * time.Minute

// handleRoute serves the standalone routing endpoints; it reports whether the path was one of them.
func (a *RouterAPI) handleRoute(ctx *fasthttp.RequestCtx, path string) bool {
	switch {
	case path == "/v1/route":
		if !ctx.IsPost() {
			methodNotAllowed(ctx, "POST", errorf(ErrMethod, "%s %s: use POST", ctx.Method(), path))
			return true
		}
		a.route(ctx)
	case strings.HasPrefix(path, "/v1/route/"):
		rest := strings.TrimPrefix(path, "/v1/route/")
		id, action, ok := strings.Cut(rest, "/")
		if !ok || id == "" || (action != "prefill_done" && action != "free") {
			writeError(ctx, errorf(ErrNotFound, "no route for %s %s", ctx.Method(), path))
			return true
		}
		if !ctx.IsPost() {
			methodNotAllowed(ctx, "POST", errorf(ErrMethod, "%s %s: use POST", ctx.Method(), path))
			return true
		}
		var err error
		if action == "free" {
			err = a.R.Free(id)
		} else {
			err = a.R.PrefillDone(id)
		}
		if err != nil {
			writeError(ctx, mapRouteErr(err))
			return true
		}
		writeJSON(ctx, map[string]any{"request_id": id, "ok": true})
	default:
		return false
	}
	return true
}

func (a *RouterAPI) route(ctx *fasthttp.RequestCtx) {
	var req routeRequest
	if err := decodeBody(ctx, &req); err != nil {
		writeError(ctx, err)
		return
	}
	// Everything is validated before the router books the request on a worker.
	if err := a.checkRoute(&req); err != nil {
		writeError(ctx, err)
		return
	}
	rr, err := routeRequestOf(ctx, &req)
	if err != nil {
		writeError(ctx, err)
		return
	}
	// fasthttp's RequestCtx is a context that ends when the server shuts down; bound the queue wait too.
	cctx, cancel := context.WithTimeout(context.Background(), maxRouteWait)
	defer cancel()
	res, err := a.R.Route(cctx, rr)
	if err != nil {
		writeError(ctx, mapRouteErr(err))
		return
	}
	out := routeResponse{WorkerID: res.Worker.WorkerID, DPRank: res.Worker.DPRank, OverlapBlocks: res.OverlapBlocks,
		Cost: res.Cost, CachedTokens: res.CachedTokens, URL: res.Spec.URL, Candidates: make([]routeCandidate, len(res.Candidates))}
	for i, c := range res.Candidates {
		out.Candidates[i] = routeCandidate{WorkerID: c.Worker.WorkerID, DPRank: c.Worker.DPRank, OverlapBlocks: c.Overlap, Cost: c.Cost, Busy: c.Busy}
	}
	body, err := json.Marshal(out)
	if err != nil {
		// The caller never learns the route, so it must not stay booked.
		_ = a.R.Free(req.RequestID)
		writeError(ctx, fmt.Errorf("cannot encode the route: %w", err))
		return
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(body)
}

// checkRoute validates a route request (the query, request_id, isl, priority, the override and the pin)
// and turns a legacy block_mm_infos query into local block hashes.
func (a *RouterAPI) checkRoute(req *routeRequest) error {
	if err := checkQuery(req.Tokens, req.BlockHashes); err != nil {
		return err
	}
	switch {
	case req.RequestID == "":
		return errorf(ErrBadRequest, "missing field: request_id")
	case !routeID(req.RequestID):
		return errorf(ErrBadRequest, "request_id must be 1 to %d printable ASCII characters without '/' and not . or .. (it is a path segment of /v1/route/{id}/free)", maxRequestIDLen)
	case req.ISL < 0 || req.ISL > maxQueryTokens:
		return errorf(ErrBadRequest, "isl must be in [0, %d], got %d", maxQueryTokens, req.ISL)
	case req.Priority != nil && !openai.ValidPriorityJump(*req.Priority):
		return errorf(ErrBadRequest, "priority must be in [0, %g] seconds", openai.MaxPriorityJump)
	}
	if err := a.checkOverride(req.Override); err != nil {
		return err
	}
	if req.WorkerID != nil {
		if err := a.checkPin(*req.WorkerID, req.DPRank); err != nil {
			return err
		}
	}
	local, err := a.legacyMMHashes(req.Tokens, req.BlockMMInfos, req.LoraName, req.CacheSalt)
	if err != nil {
		return err
	}
	if local != nil {
		req.BlockHashes = local
		if req.ISL == 0 {
			req.ISL = len(req.Tokens)
		}
	}
	return nil
}

// routeRequestOf is the router's request for a checked route request, with the session and policy class
// from the headers when the body does not name them.
func routeRequestOf(ctx *fasthttp.RequestCtx, req *routeRequest) (*router.RouteRequest, error) {
	rr := &router.RouteRequest{ID: req.RequestID, Tokens: req.Tokens, Local: req.BlockHashes, ISL: req.ISL,
		Strict: req.Strict, LoraName: req.LoraName, CacheNamespace: req.CacheSalt, Override: req.Override, ReturnCosts: true}
	if req.Priority != nil {
		rr.Priority = *req.Priority
	}
	if v := ctx.Request.Header.Peek("x-dynamo-session-id"); len(v) > 0 { // --router-session-affinity-ttl-secs
		if len(v) > sched.MaxSessionIDBytes {
			return nil, errorf(ErrBadRequest, "header x-dynamo-session-id: longer than %d bytes", sched.MaxSessionIDBytes)
		}
		rr.Session = string(v)
	}
	rr.PolicyClass = req.PolicyClass
	if rr.PolicyClass == "" {
		rr.PolicyClass = string(ctx.Request.Header.Peek(PolicyClassHeader))
	}
	if req.WorkerID != nil {
		pin := scoring.WorkerKey{WorkerID: *req.WorkerID}
		if req.DPRank != nil {
			pin.DPRank, rr.PinRank = *req.DPRank, true
		}
		rr.Pin = &pin
	}
	return rr, nil
}

// mapRouteErr maps router and selection errors to their HTTP classes.
func mapRouteErr(err error) error {
	switch {
	case errors.Is(err, router.ErrUnknownRequest):
		return errorf(ErrNotFound, "%v", err)
	case errors.Is(err, router.ErrDuplicateRequest), errors.Is(err, router.ErrBadRequest), errors.Is(err, scoring.ErrNoTarget):
		return errorf(ErrBadRequest, "%v", err)
	case errors.Is(err, scoring.ErrBadConfig):
		return errorf(ErrBadRequest, "%v", err)
	case errors.Is(err, router.ErrNotReady), errors.Is(err, router.ErrShuttingDown):
		return errorf(ErrUnavailable, "%v", err)
	case errors.Is(err, scoring.ErrAllBusy):
		return errorf(ErrUnavailable, "all workers are busy: %v", err)
	case errors.Is(err, scoring.ErrNoWorkers):
		return errorf(ErrUnavailable, "no workers available: %v", err)
	case errors.Is(err, router.ErrQueueRejected):
		return errorf(ErrOverloaded, "%v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(ErrTimeout, "the request's deadline passed while it waited in the router queue")
	case errors.Is(err, context.Canceled):
		return errorf(ErrUnavailable, "request waited too long in the router queue")
	}
	return err
}

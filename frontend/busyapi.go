package frontend

import (
	"maps"
	"slices"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/scoring"
)

// busyThresholds is one model's busy thresholds: the body of POST /busy_threshold and its answer (as
// Dynamo's frontend: a POST names its model; a field left out keeps its value; kvroute also clears a
// threshold given a negative value).
type busyThresholds struct {
	Model                            string   `json:"model"`
	ActiveDecodeBlocksThreshold      *float64 `json:"active_decode_blocks_threshold"`
	ActivePrefillTokensThreshold     *float64 `json:"active_prefill_tokens_threshold"`
	ActivePrefillTokensThresholdFrac *float64 `json:"active_prefill_tokens_threshold_frac"`
}

// busyThresholdList is the answer of GET /busy_threshold: every model's thresholds, as Dynamo lists them.
type busyThresholdList struct {
	Thresholds []busyThresholds `json:"thresholds"`
}

func optPtr(o scoring.OptFloat) *float64 {
	if !o.Set {
		return nil
	}
	v := o.V
	return &v
}

func setOpt(o *scoring.OptFloat, v *float64) {
	switch {
	case v == nil:
	case *v < 0:
		*o = scoring.OptFloat{}
	default:
		*o = scoring.OptFloat{V: *v, Set: true}
	}
}

// busyThreshold serves /busy_threshold: GET lists every model's thresholds (GET ?model=name one
// model's); POST sets the named model's ("" or no model: the first model's) and answers them. A model
// not served here is 404.
func (a *RouterAPI) busyThreshold(ctx *fasthttp.RequestCtx) {
	switch {
	case ctx.IsGet():
		if m := ctx.QueryArgs().Peek("model"); m != nil {
			r := a.busyRouter(string(m))
			if r == nil {
				writeError(ctx, errorf(ErrNotFound, "model %q is not served here", m))
				return
			}
			writeJSON(ctx, thresholdsOf(a.nameOf(string(m)), r))
			return
		}
		list := busyThresholdList{Thresholds: []busyThresholds{thresholdsOf(a.Model, a.R)}}
		for _, name := range slices.Sorted(maps.Keys(a.Models)) {
			list.Thresholds = append(list.Thresholds, thresholdsOf(name, a.Models[name]))
		}
		writeJSON(ctx, list)
	case ctx.IsPost():
		var req busyThresholds
		if err := decodeBody(ctx, &req); err != nil {
			writeError(ctx, err)
			return
		}
		r := a.busyRouter(req.Model)
		if r == nil {
			writeError(ctx, errorf(ErrNotFound, "model %q is not served here", req.Model))
			return
		}
		cfg := r.Config()
		setOpt(&cfg.ActiveDecodeBlocksThreshold, req.ActiveDecodeBlocksThreshold)
		setOpt(&cfg.ActivePrefillTokensThreshold, req.ActivePrefillTokensThreshold)
		setOpt(&cfg.ActivePrefillTokensThresholdFrac, req.ActivePrefillTokensThresholdFrac)
		if err := r.SetConfig(cfg); err != nil {
			writeError(ctx, errorf(ErrBadRequest, "%v", err))
			return
		}
		writeJSON(ctx, thresholdsOf(a.nameOf(req.Model), r))
	default:
		methodNotAllowed(ctx, "GET, POST", errorf(ErrMethod, "%s /busy_threshold: use GET or POST", ctx.Method()))
	}
}

// busyRouter is the core of the named model: "" is R's; a name no model has is nil, unless R has no
// name (a standalone router, which serves whatever its callers name).
func (a *RouterAPI) busyRouter(model string) *router.Router {
	if r, ok := a.Models[model]; ok {
		return r
	}
	if model == "" || model == a.Model || a.Model == "" {
		return a.R
	}
	return nil
}

// nameOf is the name of the model busyRouter(model) resolves: "" is R's.
func (a *RouterAPI) nameOf(model string) string {
	if model == "" {
		return a.Model
	}
	return model
}

// thresholdsOf is r's busy thresholds under the model name.
func thresholdsOf(name string, r *router.Router) busyThresholds {
	cfg := r.Config()
	return busyThresholds{
		Model:                            name,
		ActiveDecodeBlocksThreshold:      optPtr(cfg.ActiveDecodeBlocksThreshold),
		ActivePrefillTokensThreshold:     optPtr(cfg.ActivePrefillTokensThreshold),
		ActivePrefillTokensThresholdFrac: optPtr(cfg.ActivePrefillTokensThresholdFrac),
	}
}

package frontend

import (
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/scoring"
)

// busyThresholds is the body of GET|POST /busy_threshold. A field left out of a
// POST keeps its value; a negative value clears the threshold.
type busyThresholds struct {
	Model                            string   `json:"model,omitempty"`
	ActiveDecodeBlocksThreshold      *float64 `json:"active_decode_blocks_threshold"`
	ActivePrefillTokensThreshold     *float64 `json:"active_prefill_tokens_threshold"`
	ActivePrefillTokensThresholdFrac *float64 `json:"active_prefill_tokens_threshold_frac"`
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

func (a *RouterAPI) busyThreshold(ctx *fasthttp.RequestCtx) {
	switch {
	case ctx.IsGet():
	case ctx.IsPost():
		var req busyThresholds
		if err := decodeBody(ctx, &req); err != nil {
			writeError(ctx, err)
			return
		}
		cfg := a.R.Config()
		setOpt(&cfg.ActiveDecodeBlocksThreshold, req.ActiveDecodeBlocksThreshold)
		setOpt(&cfg.ActivePrefillTokensThreshold, req.ActivePrefillTokensThreshold)
		setOpt(&cfg.ActivePrefillTokensThresholdFrac, req.ActivePrefillTokensThresholdFrac)
		if err := a.R.SetConfig(cfg); err != nil {
			writeError(ctx, errorf(ErrBadRequest, "%v", err))
			return
		}
	default:
		writeError(ctx, errorf(ErrMethod, "%s /busy_threshold: use GET or POST", ctx.Method()))
		return
	}
	cfg := a.R.Config()
	writeJSON(ctx, busyThresholds{
		ActiveDecodeBlocksThreshold:      optPtr(cfg.ActiveDecodeBlocksThreshold),
		ActivePrefillTokensThreshold:     optPtr(cfg.ActivePrefillTokensThreshold),
		ActivePrefillTokensThresholdFrac: optPtr(cfg.ActivePrefillTokensThresholdFrac),
	})
}

package frontend

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/actors/worker"
	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/registry"
)

// Disaggregated prefill/decode serving, as Dynamo and llm-d run it on vLLM (docs/router.md, "Disaggregated
// prefill/decode"). Workers registered with role=prefill join a second router core, the prefill core:
// same mode and cost, no active-block tracking (a prefill worker holds no decode). Decode and aggregated
// workers stay in the frontend's own core, the decode core. A request then takes two hops:
//
//  1. prefill core: a KV-aware decision (the prompt's cached prefix is where reuse pays);
//  2. bypass check: a short net-new prompt (ISL − the chosen prefill worker's cached tokens) is served
//     aggregated on the decode core instead (BypassPolicy);
//  3. prefill hop: the body with vLLM's kv_transfer_params {do_remote_decode: true, ...nulls},
//     max_tokens 1, stream false, no stream_options; its answer's kv_transfer_params are kept;
//  4. decode core: a load-only decision (overlap credit forced to 0, no prefill-token charge: the decode
//     worker pulls the prompt's KV instead of computing it);
//  5. decode hop: the client's own body plus the prefill answer's kv_transfer_params, streamed back by
//     the ordinary dispatch (first token → PrefillDone, end → Free, migration before the first byte).
//
// With no prefill worker registered the frontend is aggregated and none of this runs.

// Bypass policies (conditional prefill).
const (
	// BypassTokenCap (default): bypass below BypassBelowTokens net-new tokens, disaggregate from
	// DisaggAboveTokens on; in between, bypass while the decode fleet is roomy.
	BypassTokenCap = "token_cap"
	// BypassThresholdOnly bypasses below BypassBelowTokens and disaggregates everything else.
	BypassThresholdOnly = "threshold_only"
	// BypassAlways serves every request aggregated on the decode core (prefill workers idle).
	BypassAlways = "always_bypass"
	// BypassNever disaggregates every request.
	BypassNever = "never"
)

// DisaggConfig configures disaggregated serving.
type DisaggConfig struct {
	// DecodeFallback serves a request aggregated on the decode core when no prefill worker can take it
	// (none healthy, all busy, or its prefill hop failed past migration). Default false: the client
	// gets 503 (Dynamo's --decode-fallback).
	DecodeFallback bool
	// BypassPolicy is token_cap (default), threshold_only, always_bypass or never.
	BypassPolicy string
	// BypassBelowTokens: a prompt with fewer net-new tokens skips the prefill hop. Default 5000.
	BypassBelowTokens int
	// DisaggAboveTokens: a prompt with at least this many net-new tokens always takes the prefill hop
	// (token_cap). Default 16384.
	DisaggAboveTokens int
	// RoomyRatio (token_cap, between the two thresholds): the decode fleet is roomy, and the prompt is
	// bypassed, while the prefill tokens its workers already carry stay below RoomyRatio ×
	// DisaggAboveTokens per healthy decode worker. Default 0.5.
	RoomyRatio float64
}

// DefaultDisaggConfig returns Dynamo's conditional-prefill defaults, fallback off.
func DefaultDisaggConfig() DisaggConfig {
	return DisaggConfig{BypassPolicy: BypassTokenCap, BypassBelowTokens: 5000, DisaggAboveTokens: 16384, RoomyRatio: 0.5}
}

// Validate checks the fields.
func (c *DisaggConfig) Validate() error {
	switch c.BypassPolicy {
	case BypassTokenCap, BypassThresholdOnly, BypassAlways, BypassNever:
	case "threshold_regression", "regression_only", "random_bypass":
		return fmt.Errorf("frontend: conditional prefill policy %q needs Dynamo's prefill cost regression, which kvroute does not have (token_cap, threshold_only, always_bypass, never)", c.BypassPolicy)
	default:
		return fmt.Errorf("frontend: unknown conditional prefill policy %q (token_cap, threshold_only, always_bypass, never)", c.BypassPolicy)
	}
	if c.BypassBelowTokens < 0 || c.DisaggAboveTokens < 0 {
		return fmt.Errorf("frontend: conditional prefill thresholds %d and %d must not be negative", c.BypassBelowTokens, c.DisaggAboveTokens)
	}
	if !(c.RoomyRatio >= 0) {
		return fmt.Errorf("frontend: conditional prefill roomy ratio %v must not be negative", c.RoomyRatio)
	}
	return nil
}

// Disagg is the prefill side of a frontend: the prefill router core and the bypass policy.
type Disagg struct {
	Prefill *router.Router
	Cfg     DisaggConfig
	// workers counts the prefill workers registered: zero keeps the frontend aggregated.
	workers atomic.Int64
	// Counters of how requests were served (kvroute_disagg_requests_total, Collect).
	disaggregated, bypassed, fellBack atomic.Uint64
}

// NewDisagg wraps a prefill router core (built with TrackActiveBlocks off).
func NewDisagg(prefill *router.Router, cfg DisaggConfig) (*Disagg, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Disagg{Prefill: prefill, Cfg: cfg}, nil
}

// PrefillConfig is the prefill core's configuration derived from the frontend's: the same mode and
// cost, no active-block tracking (Dynamo's automatic prefill router).
func PrefillConfig(c scoring.Config) scoring.Config {
	c.TrackActiveBlocks = false
	c.WorkerType = scoring.WorkerPrefill
	return c
}

// AddWorker registers a prefill worker.
func (d *Disagg) AddWorker(spec registry.Spec) error {
	if err := d.Prefill.AddWorker(spec); err != nil {
		return err
	}
	d.workers.Add(1)
	return nil
}

// RemoveWorker unregisters a prefill worker.
func (d *Disagg) RemoveWorker(id uint64) error {
	if err := d.Prefill.RemoveWorker(id); err != nil {
		return err
	}
	d.workers.Add(-1)
	return nil
}

// active reports whether requests take the prefill hop at all.
func (d *Disagg) active() bool { return d != nil && d.workers.Load() > 0 }

// disaggDesc is kvroute_disagg_requests_total{serving}: how a frontend with prefill workers served its
// requests.
var disaggDesc = prometheus.NewDesc("kvroute_disagg_requests_total",
	"Requests of a frontend with prefill workers, by how they were served: disaggregated (prefill hop), bypassed (conditional prefill), fallback (no prefill worker, --decode-fallback).",
	[]string{"serving"}, nil)

// Describe implements prometheus.Collector.
func (d *Disagg) Describe(ch chan<- *prometheus.Desc) { ch <- disaggDesc }

// Collect implements prometheus.Collector.
func (d *Disagg) Collect(ch chan<- prometheus.Metric) {
	dis, by, fb := d.Counts()
	ch <- prometheus.MustNewConstMetric(disaggDesc, prometheus.CounterValue, float64(dis), servingDisaggregated)
	ch <- prometheus.MustNewConstMetric(disaggDesc, prometheus.CounterValue, float64(by), servingBypassed)
	ch <- prometheus.MustNewConstMetric(disaggDesc, prometheus.CounterValue, float64(fb), servingFallback)
}

var _ prometheus.Collector = (*Disagg)(nil)

// Counts returns how many requests were disaggregated, bypassed and served by decode fallback.
func (d *Disagg) Counts() (disaggregated, bypassed, fellBack uint64) {
	return d.disaggregated.Load(), d.bypassed.Load(), d.fellBack.Load()
}

// bypass decides whether a prompt with netNew tokens to compute (on the decode worker an aggregated
// decision picked) skips the prefill hop. decodePrefill is the prefill tokens the decode core's healthy workers carry and
// decodeWorkers their number; loads is called only when the policy needs them.
func (c *DisaggConfig) bypass(netNew int, loads func() (decodePrefill, decodeWorkers int)) bool {
	switch c.BypassPolicy {
	case BypassAlways:
		return true
	case BypassNever:
		return false
	case BypassThresholdOnly:
		return netNew < c.BypassBelowTokens
	}
	switch {
	case netNew < c.BypassBelowTokens:
		return true
	case netNew >= c.DisaggAboveTokens:
		return false
	}
	carried, n := loads()
	return n > 0 && float64(carried) < c.RoomyRatio*float64(c.DisaggAboveTokens)*float64(n)
}

// decodeLoads sums the prefill tokens the decode core's healthy workers carry.
func (a *OpenAIAPI) decodeLoads() (int, int) {
	carried, n := a.R.PrefillCarried()
	return int(carried), n
}

// Serving modes, in the x-kvroute-serving header of a frontend with prefill workers.
const (
	servingDisaggregated = "disaggregated"
	servingBypassed      = "bypassed"
	servingFallback      = "fallback"
)

// route is stage 6–7 of the request path: the decode core alone for an aggregated frontend. With prefill
// workers, the bypass check first: the decode core's own (aggregated, KV-aware) decision says how many
// prompt tokens its worker would have to compute (net-new: ISL − that worker's cached tokens); a request
// the policy bypasses keeps that decision. Otherwise the prefill core decides, and the request returns
// its prefill decision (pre != nil) and no decode decision yet: that one is made when the prefill hop has
// answered.
func (a *OpenAIAPI) route(j *job, rr *router.RouteRequest) (res router.RouteResult, pre *router.RouteResult, err error) {
	d := a.PD
	if !d.active() {
		res, err = a.R.Route(j.ctx, rr)
		return res, nil, err
	}
	if d.Cfg.BypassPolicy != BypassNever && j.pinPrefill == nil {
		if res, err = a.R.Route(j.ctx, rr); err != nil {
			return res, nil, err
		}
		if d.Cfg.bypass(max(res.ISL-res.CachedTokens, 0), a.decodeLoads) {
			d.bypassed.Add(1)
			j.serving = servingBypassed
			return res, nil, nil
		}
		_ = a.R.Free(rr.ID)
	}
	pr := *rr
	pr.Pin, pr.PinRank, pr.Exclude = nil, false, nil // x-dynamo-worker-instance-id names the decode worker
	if j.pinPrefill != nil {
		pr.Pin = &scoring.WorkerKey{WorkerID: *j.pinPrefill}
	}
	p, err := d.Prefill.Route(j.ctx, &pr)
	switch {
	case err == nil:
		return router.RouteResult{}, &p, nil
	case errors.Is(err, router.ErrBadRequest), errors.Is(err, scoring.ErrBadConfig), j.ctx.Err() != nil:
		return res, nil, err
	}
	return a.fallback(j, rr, err)
}

// fallback serves a request aggregated on the decode core when its prefill side failed (--decode-fallback),
// or answers 503.
func (a *OpenAIAPI) fallback(j *job, rr *router.RouteRequest, cause error) (router.RouteResult, *router.RouteResult, error) {
	if !a.PD.Cfg.DecodeFallback {
		return router.RouteResult{}, nil, errorf(ErrUnavailable, "no prefill worker can take the request: %v (--decode-fallback serves it aggregated)", cause)
	}
	a.PD.fellBack.Add(1)
	j.serving = servingFallback
	res, err := a.R.Route(j.ctx, rr)
	return res, nil, err
}

// The prefill request's kv_transfer_params: vLLM's NixlConnector handshake asking for remote decode.
var prefillKVParams = []byte(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// prefillBody rewrites the client's body into the prefill hop's, as vLLM's disaggregated proxy does:
// kv_transfer_params asking for remote decode, max_tokens 1 (max_completion_tokens 1 when given), not
// streamed, no stream_options.
func prefillBody(body []byte) ([]byte, error) {
	b, err := openai.SetField(body, "kv_transfer_params", prefillKVParams)
	if err == nil {
		b, err = openai.SetField(b, "max_tokens", []byte("1"))
	}
	if err == nil && openai.TopLevelField(b, "max_completion_tokens") != nil {
		b, err = openai.SetField(b, "max_completion_tokens", []byte("1"))
	}
	if err == nil {
		b, err = openai.SetField(b, "stream", []byte("false"))
	}
	if err == nil {
		b, err = openai.DeleteField(b, "stream_options")
	}
	return b, err
}

// errNoKVTransfer: the prefill worker answered without kv_transfer_params (not started with a KV
// connector): the decode side would have nothing to pull.
var errNoKVTransfer = errors.New("the prefill worker's answer has no kv_transfer_params (is it started with --kv-transfer-config?)")

// dispatchPD runs the prefill hop (with migration to other prefill workers before giving up), then
// routes the decode hop and hands it to the ordinary dispatch.
func (a *OpenAIAPI) dispatchPD(ctx *fasthttp.RequestCtx, j *job, p prepared) {
	d := a.PD
	pre := *p.prefill
	body, err := prefillBody(j.body)
	if err != nil {
		_ = d.Prefill.Free(j.id)
		a.fail(ctx, j, errorf(ErrBadRequest, "cannot build the prefill request: %v", err))
		return
	}
	var excluded []uint64
	var kt []byte
	for attempt := 0; ; attempt++ {
		var answered bool
		kt, answered, err = a.prefillHop(ctx, j, pre, body)
		_ = d.Prefill.Free(j.id)
		if answered {
			return
		}
		if err == nil {
			break
		}
		if j.ctx.Err() != nil {
			a.fail(ctx, j, errorf(ErrUnavailable, "prefill on worker %d: %v", pre.Worker.WorkerID, err))
			return
		}
		if a.Cfg.PassiveHealth && errors.Is(err, client.ErrConnect) {
			_ = d.Prefill.SetHealthy(pre.Worker.WorkerID, false, "passive: "+err.Error())
		}
		cause := fmt.Errorf("prefill on worker %d: %w", pre.Worker.WorkerID, err)
		if client.Retryable(err) && attempt < a.Cfg.MigrationLimit {
			if a.Metrics != nil {
				a.Metrics.migr.Inc()
			}
			excluded = append(excluded, pre.Worker.WorkerID)
			again := *p.req
			again.Pin, again.PinRank, again.Exclude = nil, false, excluded
			if j.pinPrefill != nil {
				again.Pin = &scoring.WorkerKey{WorkerID: *j.pinPrefill}
			}
			if pre, err = d.Prefill.Route(j.ctx, &again); err == nil {
				continue
			}
			cause = err
		}
		res, _, ferr := a.fallback(j, p.req, cause)
		if ferr != nil {
			a.fail(ctx, j, mapRouteErr(ferr))
			return
		}
		p.route, p.prefill = res, nil
		a.dispatch(ctx, j, p)
		return
	}
	d.disaggregated.Add(1)
	j.prefill, j.serving = pre, servingDisaggregated
	dr := *p.req
	dr.Override = decodeOverride
	res, err := a.R.Route(j.ctx, &dr)
	if err != nil {
		a.fail(ctx, j, mapRouteErr(err))
		return
	}
	if j.body, err = openai.SetField(j.body, "kv_transfer_params", kt); err != nil {
		a.finish(j)
		a.fail(ctx, j, errorf(ErrBadRequest, "cannot build the decode request: %v", err))
		return
	}
	p.req, p.route, p.prefill = &dr, res, nil
	a.dispatch(ctx, j, p)
}

// decodeOverride is the decode core's decision for a disaggregated request: load only (overlap credit
// 0, as Dynamo's decode router forces) and no prefill-token charge (the worker pulls the KV).
var decodeOverride = func() *scoring.Override {
	credit, track := 0.0, false
	return &scoring.Override{OverlapScoreCredit: &credit, TrackPrefillTokens: &track}
}()

// prefillHop sends the prefill request and returns the kv_transfer_params of its answer. answered is
// true when the worker refused the request itself (4xx): its answer went to the client.
func (a *OpenAIAPI) prefillHop(ctx *fasthttp.RequestCtx, j *job, pre router.RouteResult, body []byte) (kt []byte, answered bool, err error) {
	ep, err := a.Pool.Get(pre.Spec)
	if err != nil {
		return nil, false, err
	}
	hdr := [2]client.Header{{Key: "X-Request-Id", Value: j.reqID}}
	n := 1
	if pre.Spec.DPRanks() > 1 {
		hdr[1] = client.Header{Key: "X-data-parallel-rank", Value: strconv.FormatUint(uint64(pre.Worker.DPRank), 10)}
		n++
	}
	resp := new(client.Response)
	if err := ep.Do(j.ctx, &client.Request{Path: j.ep.path(), Body: body, Headers: hdr[:n]}, resp); err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 {
			j.prefill = pre
			prefillHeaders(ctx, j)
			ctx.SetStatusCode(ce.Status)
			ctx.Response.Header.SetContentType("application/json")
			ctx.SetBody(ce.Body)
			a.end(j, ce.Status)
			return nil, true, nil
		}
		return nil, false, err
	}
	_ = a.PD.Prefill.PrefillDone(j.id)
	if resp.Status >= 400 {
		j.prefill = pre
		prefillHeaders(ctx, j)
		ctx.SetStatusCode(resp.Status)
		ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
		ctx.SetBody(resp.Body)
		a.end(j, resp.Status)
		return nil, true, nil
	}
	raw := openai.TopLevelField(resp.Body, "kv_transfer_params")
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, false, errNoKVTransfer
	}
	return append([]byte(nil), raw...), false, nil
}

// prefillHeaders names the prefill worker of a disaggregated request, and how a request was served
// when the frontend has prefill workers.
func prefillHeaders(ctx *fasthttp.RequestCtx, j *job) {
	if j.serving != "" {
		ctx.Response.Header.Set("x-kvroute-serving", j.serving)
	}
	if j.serving != servingDisaggregated {
		return
	}
	ctx.Response.Header.Set("x-kvroute-prefill-worker-id", strconv.FormatUint(j.prefill.Worker.WorkerID, 10))
	ctx.Response.Header.Set("x-kvroute-prefill-overlap-blocks", strconv.FormatUint(uint64(j.prefill.OverlapBlocks), 10))
	if j.prefill.Spec.DPRanks() > 1 {
		ctx.Response.Header.Set("x-kvroute-prefill-dp-rank", strconv.FormatUint(uint64(j.prefill.Worker.DPRank), 10))
	}
}

// registerWorker adds a worker to the core its role names.
func registerWorker(r *router.Router, d *Disagg, spec registry.Spec) error {
	if d == nil {
		return r.AddWorker(spec) // one core (kvroute router): the role is recorded and shown only
	}
	if spec.RoleOf() == registry.RolePrefill {
		if _, ok := r.Fleet.Get(spec.ID); ok {
			return fmt.Errorf("%w: %d", worker.ErrDuplicate, spec.ID)
		}
		return d.AddWorker(spec)
	}
	if _, ok := d.Prefill.Fleet.Get(spec.ID); ok {
		return fmt.Errorf("%w: %d", worker.ErrDuplicate, spec.ID)
	}
	return r.AddWorker(spec)
}

// RegisterWorker adds a worker given on the command line to the core its role names (d may be nil).
func RegisterWorker(r *router.Router, d *Disagg, spec registry.Spec) error {
	return registerWorker(r, d, spec)
}

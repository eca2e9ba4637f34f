package router

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/scoring/policy"
)

type stage int

// Routing-overhead stages, in request-path order.
const (
	stageBlockHashing stage = iota
	stageSeqHashing
	stageFindMatches
	stageScheduling
	stageTotal
	// The frontend's own stages before routing (ObserveFrontend), timed into the same histograms' family.
	stageParse
	stageTokenize
	stageImages
	numStages
)

// FrontendStage names a stage of the OpenAI request path before the routing decision.
type FrontendStage int

// The frontend's stages: parse and validate the body; chat template and tokenization; the image stage
// (mm_hash, size probe, token count) from its start until the request actor has its result.
const (
	FrontendParse    = FrontendStage(stageParse)
	FrontendTokenize = FrontendStage(stageTokenize)
	FrontendImages   = FrontendStage(stageImages)
)

var stageMetric = [numStages]string{
	stageBlockHashing: "dynamo_router_overhead_block_hashing_ms",
	stageSeqHashing:   "dynamo_router_overhead_seq_hashing_ms",
	stageFindMatches:  "dynamo_router_overhead_indexer_find_matches_ms",
	stageScheduling:   "dynamo_router_overhead_scheduling_ms",
	stageTotal:        "dynamo_router_overhead_total_ms",
	stageParse:        "kvroute_frontend_overhead_parse_ms",
	stageTokenize:     "kvroute_frontend_overhead_tokenize_ms",
	stageImages:       "kvroute_frontend_overhead_images_ms",
}

// Metrics are the router core's Prometheus metrics, with Dynamo's names.
type Metrics struct {
	stages  [numStages]prometheus.Observer
	hitRate prometheus.Observer
	pending prometheus.Gauge
	// rejected counts requests a policy class turned away at its queue limits, by class and limit.
	rejected *prometheus.CounterVec
}

// overheadBuckets span 1 µs to 100 ms in milliseconds.
var overheadBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 100}

// NewMetrics registers the router metrics with reg (nil: a private registry, nothing exported).
// routerID labels the overhead histograms as Dynamo's router_id does.
func NewMetrics(reg prometheus.Registerer, routerID string) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{}
	for st := stage(0); st < numStages; st++ {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: stageMetric[st], Help: "Overhead of one request-path stage (routing, or the frontend's before it), in milliseconds.",
			Buckets: overheadBuckets,
		}, []string{"router_id"})
		reg.MustRegister(h)
		m.stages[st] = h.WithLabelValues(routerID)
	}
	hr := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "dynamo_component_router_kv_hit_rate", Help: "Predicted KV hit rate of each routing decision (overlap blocks / prompt blocks).",
		Buckets: []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
	})
	reg.MustRegister(hr)
	m.hitRate = hr
	pg := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dynamo_frontend_router_queue_pending_requests", Help: "Requests waiting in the router queue.",
	}, []string{"worker_type"})
	reg.MustRegister(pg)
	m.pending = pg.WithLabelValues("decode")
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvroute_router_queue_rejected_total", Help: "Requests rejected (HTTP 529) because their policy class's queue was at a limit.",
	}, []string{"policy_class", "limit"})
	reg.MustRegister(m.rejected)
	return m
}

// countRejected counts a queue rejection by class and limit kind (class names come from the policy
// document, so the label set is bounded).
func (m *Metrics) countRejected(err error) {
	var rej *policy.Rejection
	if errors.As(err, &rej) {
		m.rejected.WithLabelValues(rej.Class, rej.Kind).Inc()
	}
}

func (m *Metrics) observeStage(st stage, d time.Duration) {
	m.stages[st].Observe(float64(d.Nanoseconds()) / 1e6)
}

// ObserveFrontend records the duration of one of the frontend's stages beside the router's own.
func (m *Metrics) ObserveFrontend(st FrontendStage, d time.Duration) { m.observeStage(stage(st), d) }

func (m *Metrics) observeHitRate(v float64) { m.hitRate.Observe(v) }

func (m *Metrics) setPending(n int) { m.pending.Set(float64(n)) }

// loadCollector exports every worker rank's load at scrape time from the published snapshots, so the
// request path never updates per-worker gauges.
type loadCollector struct {
	s              *scheduler
	decode, pfTok  *prometheus.Desc
	requests, apps *prometheus.Desc
	approx         *prometheus.Desc
	// per policy class queue (--router-policy-config; one "default" class without it)
	clsReq, clsISL, clsCached *prometheus.Desc
	// the kvroute cost's learned fits (scoring.Calibrator, scoring.DecodeFit)
	alpha, gamma, decA, decB, meanOut, fitObs *prometheus.Desc
}

func newLoadCollector(s *scheduler) *loadCollector {
	labels := []string{"worker_id", "dp_rank", "worker_type"}
	return &loadCollector{
		s:        s,
		decode:   prometheus.NewDesc("dynamo_frontend_worker_active_decode_blocks", "Active decode blocks per worker rank.", labels, nil),
		pfTok:    prometheus.NewDesc("dynamo_frontend_worker_active_prefill_tokens", "Active prefill tokens per worker rank.", labels, nil),
		requests: prometheus.NewDesc("kvroute_worker_active_requests", "Sequences routed to a worker rank and not yet freed (a request with n > 1 counts n).", labels, nil),
		approx:   prometheus.NewDesc("kvroute_worker_events_degraded", "1 while a worker rank's KV events have stopped and its blocks are predicted from routing history.", labels, nil),
		apps:     prometheus.NewDesc("dynamo_component_kv_cache_events_applied", "KV cache events applied to the index.", []string{"status", "event_type"}, nil),
		clsReq:   prometheus.NewDesc("kvroute_router_queue_class_pending_requests", "Requests waiting in a policy class's queue.", []string{"policy_class"}, nil),
		clsISL:   prometheus.NewDesc("kvroute_router_queue_class_pending_isl_tokens", "Prompt tokens of the requests waiting in a policy class's queue.", []string{"policy_class"}, nil),
		clsCached: prometheus.NewDesc("kvroute_router_queue_class_pending_cached_tokens", "Cached prompt tokens (best eligible worker) of the requests waiting in a policy class's queue.",
			[]string{"policy_class"}, nil),
		alpha: prometheus.NewDesc("kvroute_router_prefill_seconds_per_token", "kvroute cost: learned prefill time per prompt token on an idle worker (α).", nil, nil),
		gamma: prometheus.NewDesc("kvroute_router_prefill_slowdown_per_block", "kvroute cost: learned prefill slowdown per active block (γ, the prior until the fit is trusted).", nil, nil),
		decA:  prometheus.NewDesc("kvroute_router_decode_seconds_per_token", "kvroute cost: learned time per generated token on a worker decoding nothing else (--router-decode-weight > 0).", nil, nil),
		decB: prometheus.NewDesc("kvroute_router_decode_seconds_per_token_block", "kvroute cost: learned extra time per generated token per context block decoded beside it (--router-decode-weight > 0).",
			nil, nil),
		meanOut: prometheus.NewDesc("kvroute_router_mean_output_tokens", "kvroute cost: the fleet's recent mean output length, for requests without an expected one (--router-decode-weight > 0).", nil, nil),
		fitObs:  prometheus.NewDesc("kvroute_router_calibration_observations_total", "kvroute cost: observations of each learned fit (prefill: first tokens; decode: ended streams).", []string{"fit"}, nil),
	}
}

func (c *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.decode
	ch <- c.pfTok
	ch <- c.requests
	ch <- c.apps
	ch <- c.approx
	ch <- c.clsReq
	ch <- c.clsISL
	ch <- c.clsCached
	ch <- c.alpha
	ch <- c.gamma
	ch <- c.decA
	ch <- c.decB
	ch <- c.meanOut
	ch <- c.fitObs
}

func (c *loadCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.s.loads() {
		snap := t.Load
		id, rank := strconv.FormatUint(t.Worker.WorkerID, 10), strconv.FormatUint(uint64(t.Worker.DPRank), 10)
		ch <- prometheus.MustNewConstMetric(c.decode, prometheus.GaugeValue, snap.ActiveDecodeBlocks, id, rank, "decode")
		ch <- prometheus.MustNewConstMetric(c.pfTok, prometheus.GaugeValue, float64(snap.ActivePrefillTokens), id, rank, "decode")
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.GaugeValue, float64(snap.ActiveRequests), id, rank, "decode")
		degraded := 0.0
		if t.Predicted {
			degraded = 1
		}
		ch <- prometheus.MustNewConstMetric(c.approx, prometheus.GaugeValue, degraded, id, rank, "decode")
	}
	for _, q := range c.s.classes() {
		ch <- prometheus.MustNewConstMetric(c.clsReq, prometheus.GaugeValue, float64(q.Requests), q.Class)
		ch <- prometheus.MustNewConstMetric(c.clsISL, prometheus.GaugeValue, float64(q.RawISLTokens), q.Class)
		ch <- prometheus.MustNewConstMetric(c.clsCached, prometheus.GaugeValue, float64(q.CachedTokens), q.Class)
	}
	alpha, _, gamma, n := c.s.calibration()
	a, b, dn, mean := c.s.decodeCalibration()
	for _, g := range []struct {
		d *prometheus.Desc
		v float64
	}{{c.alpha, alpha}, {c.gamma, gamma}, {c.decA, a}, {c.decB, b}, {c.meanOut, mean}} {
		ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, g.v)
	}
	ch <- prometheus.MustNewConstMetric(c.fitObs, prometheus.CounterValue, float64(n), "prefill")
	ch <- prometheus.MustNewConstMetric(c.fitObs, prometheus.CounterValue, float64(dn), "decode")
	ev := c.s.index.EventCounts()
	for _, e := range ev {
		ch <- prometheus.MustNewConstMetric(c.apps, prometheus.CounterValue, float64(e.Count), e.Status, e.Type)
	}
}

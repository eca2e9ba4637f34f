package frontend

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors/router"
)

// FrontendMetrics are the OpenAI edge's metrics under Dynamo's names and labels, so Dynamo's dashboards
// read them unchanged: dynamo_frontend_* carry the model label (requests_total also endpoint,
// request_type and status), dynamo_component_router_* the dynamo_namespace / dynamo_component /
// dynamo_endpoint triple. kvroute's own prediction check is kvroute_*. docs/metrics.md lists them all.
type FrontendMetrics struct {
	// byKind holds the requests counters of each endpoint × request type × status, resolved once:
	// WithLabelValues hashes the labels and takes the vector's lock, which the request path should not.
	byKind   [numEndpoints][2][2]prometheus.Counter
	inflight prometheus.Gauge
	queued   prometheus.Gauge
	ttft     prometheus.Observer
	itl      prometheus.Observer
	duration prometheus.Observer
	isl      prometheus.Observer
	osl      prometheus.Observer
	migr     prometheus.Counter
	// mediaRefused counts requests refused for their media: a URL the SSRF guard refused ("blocked"),
	// more images or pixels than --mm-max-images / --mm-max-total-pixels ("limits"), more image bytes
	// than one request downloads ("too_large", 413), no room among the image bytes in flight ("busy", 429).
	mediaRefused *prometheus.CounterVec

	// The embedded router's request view (dynamo_component_router_*).
	rReqs prometheus.Counter
	rTTFT prometheus.Observer
	rITL  prometheus.Observer
	rISL  prometheus.Observer
	rOSL  prometheus.Observer

	// Per worker rank, the last request's figures (dynamo_frontend_worker_last_*).
	lastTTFT, lastISL, lastITL *prometheus.GaugeVec

	predErr                 prometheus.Histogram
	cachedTok, predictedTok prometheus.Counter

	mu        sync.Mutex
	precision map[uint64]*precision
	precGauge *prometheus.GaugeVec

	// vecs are the model-labelled vectors, for ForModel.
	vecs *modelVecs
}

// modelVecs are the vectors whose children carry the model label.
type modelVecs struct {
	reqs                          *prometheus.CounterVec
	inflight, queued              *prometheus.GaugeVec
	ttft, itl, duration, isl, osl *prometheus.HistogramVec
	migr                          *prometheus.CounterVec
}

// ForModel returns the metrics of another model served by the same frontend: the dynamo_frontend_*
// series under its model label, everything else (router and per-worker series, the prediction check)
// shared.
func (m *FrontendMetrics) ForModel(name string) *FrontendMetrics {
	v := m.vecs
	o := &FrontendMetrics{
		inflight: v.inflight.WithLabelValues(name), queued: v.queued.WithLabelValues(name),
		ttft: v.ttft.WithLabelValues(name), itl: v.itl.WithLabelValues(name), duration: v.duration.WithLabelValues(name),
		isl: v.isl.WithLabelValues(name), osl: v.osl.WithLabelValues(name), migr: v.migr.WithLabelValues(name),
		mediaRefused: m.mediaRefused, rReqs: m.rReqs, rTTFT: m.rTTFT, rITL: m.rITL, rISL: m.rISL, rOSL: m.rOSL,
		lastTTFT: m.lastTTFT, lastISL: m.lastISL, lastITL: m.lastITL, predErr: m.predErr,
		cachedTok: m.cachedTok, predictedTok: m.predictedTok, precGauge: m.precGauge,
		precision: map[uint64]*precision{}, vecs: v,
	}
	o.resolveKinds(name)
	return o
}

// resolveKinds resolves the requests counters of every endpoint × request type × status.
func (m *FrontendMetrics) resolveKinds(model string) {
	for ep := range m.byKind {
		for st := range m.byKind[ep] {
			for ok := range m.byKind[ep][st] {
				m.byKind[ep][st][ok] = m.vecs.reqs.WithLabelValues(model, endpoint(ep).label(), requestType(st == 1), status(ok == 1))
			}
		}
	}
}

// precision counts, per worker, how often the predicted cached tokens matched what the worker reported;
// gauge is the worker's kvroute_worker_prediction_precision child.
type precision struct {
	hits, total float64
	gauge       prometheus.Gauge
}

// MetricLabels are the constant label values of the frontend's metrics.
type MetricLabels struct {
	// Model is the served model name (the model label). Default "".
	Model string
	// Namespace is Dynamo's namespace (--namespace), the dynamo_namespace label. Default "dynamo".
	Namespace string
}

// NewFrontendMetrics registers the metrics with reg (nil: private), model label "".
func NewFrontendMetrics(reg prometheus.Registerer) *FrontendMetrics {
	return NewFrontendMetricsWith(reg, MetricLabels{})
}

// NewFrontendMetricsWith registers the metrics with reg (nil: private) under the given labels.
func NewFrontendMetricsWith(reg prometheus.Registerer, l MetricLabels) *FrontendMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if l.Namespace == "" {
		l.Namespace = "dynamo"
	}
	latency := prometheus.ExponentialBuckets(0.001, 2, 16)
	itlBuckets := prometheus.ExponentialBuckets(0.0001, 2, 16)
	tokens := prometheus.ExponentialBuckets(16, 2, 14)
	model := []string{"model"}
	hist := func(name, help string, b []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b}, model)
	}
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dynamo_frontend_requests_total",
		Help: "LLM requests by endpoint, request type (stream, unary) and status (success, error)."},
		[]string{"model", "endpoint", "request_type", "status"})
	inflight := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dynamo_frontend_inflight_requests",
		Help: "Requests from the handler's start until the response is complete."}, model)
	queued := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dynamo_frontend_queued_requests",
		Help: "Requests from the handler's start until their first token (routing queue and prefill included)."}, model)
	ttft := hist("dynamo_frontend_time_to_first_token_seconds", "Time to first token as the client sees it.", latency)
	itl := hist("dynamo_frontend_inter_token_latency_seconds", "Time between streamed chunks.", itlBuckets)
	duration := hist("dynamo_frontend_request_duration_seconds", "Whole request duration.", latency)
	isl := hist("dynamo_frontend_input_sequence_tokens", "Prompt tokens per request.", tokens)
	osl := hist("dynamo_frontend_output_sequence_tokens", "Completion tokens per request.", tokens)
	migr := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dynamo_frontend_model_migration_total",
		Help: "Requests retried on another worker after a failure before the first byte."}, model)

	comp := []string{"dynamo_namespace", "dynamo_component", "dynamo_endpoint"}
	compVals := []string{l.Namespace, "router", "generate"}
	rReqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dynamo_component_router_requests_total",
		Help: "Requests routed by the embedded KV router."}, comp)
	rhist := func(name, help string, b []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b}, comp)
	}
	rTTFT := rhist("dynamo_component_router_time_to_first_token_seconds", "Time to first token of routed requests.", latency)
	rITL := rhist("dynamo_component_router_inter_token_latency_seconds", "Time between streamed chunks of routed requests.", itlBuckets)
	rISL := rhist("dynamo_component_router_input_sequence_tokens", "Prompt tokens of routed requests.", tokens)
	rOSL := rhist("dynamo_component_router_output_sequence_tokens", "Completion tokens of routed requests.", tokens)

	m := &FrontendMetrics{
		inflight: inflight.WithLabelValues(l.Model),
		queued:   queued.WithLabelValues(l.Model),
		ttft:     ttft.WithLabelValues(l.Model),
		itl:      itl.WithLabelValues(l.Model),
		duration: duration.WithLabelValues(l.Model),
		isl:      isl.WithLabelValues(l.Model),
		osl:      osl.WithLabelValues(l.Model),
		migr:     migr.WithLabelValues(l.Model),
		rReqs:    rReqs.WithLabelValues(compVals...),
		rTTFT:    rTTFT.WithLabelValues(compVals...),
		rITL:     rITL.WithLabelValues(compVals...),
		rISL:     rISL.WithLabelValues(compVals...),
		rOSL:     rOSL.WithLabelValues(compVals...),
		lastTTFT: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dynamo_frontend_worker_last_time_to_first_token_seconds",
			Help: "Time to first token of the last request a worker rank served."}, workerLabels),
		lastISL: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dynamo_frontend_worker_last_input_sequence_tokens",
			Help: "Prompt tokens of the last request a worker rank served."}, workerLabels),
		lastITL: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dynamo_frontend_worker_last_inter_token_latency_seconds",
			Help: "Mean inter-token latency of the last streamed request a worker rank served."}, workerLabels),
		predErr: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvroute_cached_tokens_prediction_error",
			Help:    "Worker-reported cached tokens minus the router's predicted cached tokens.",
			Buckets: []float64{-4096, -1024, -256, -64, -16, -1, 0, 1, 16, 64, 256, 1024, 4096}}),
		precGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_worker_prediction_precision",
			Help: "Fraction of a worker's requests whose predicted cached tokens matched the worker's report within one block."},
			[]string{"worker_id"}),
		mediaRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_media_refused_total",
			Help: "Chat requests refused for their media, by reason: blocked (SSRF guard, 400), limits (--mm-max-images, --mm-max-total-pixels, 400), too_large (--mm-max-request-image-bytes, 413), busy (--mm-image-bytes-in-flight or the pixels being decoded, 429)."},
			[]string{"reason"}),
		precision: map[uint64]*precision{},
		vecs: &modelVecs{reqs: reqs, inflight: inflight, queued: queued, ttft: ttft, itl: itl, duration: duration,
			isl: isl, osl: osl, migr: migr},
	}
	m.resolveKinds(l.Model)
	m.cachedTok = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_cached_tokens_total",
		Help: "Prompt tokens the workers reported served from their prefix cache (engine hit rate = rate of this / rate of dynamo_frontend_input_sequence_tokens_sum)."})
	m.predictedTok = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_predicted_cached_tokens_total",
		Help: "Prompt tokens the router predicted cached on the worker it chose, for requests whose usage came back."})
	m.mediaRefused.WithLabelValues("blocked")
	m.mediaRefused.WithLabelValues("limits")
	m.mediaRefused.WithLabelValues("too_large")
	m.mediaRefused.WithLabelValues("busy")
	reg.MustRegister(reqs, inflight, queued, ttft, itl, duration, isl, osl, migr, rReqs, rTTFT, rITL, rISL, rOSL,
		m.lastTTFT, m.lastISL, m.lastITL, m.predErr, m.precGauge, m.cachedTok, m.predictedTok, m.mediaRefused)
	return m
}

// workerLabels label the per-worker gauges as Dynamo's (worker_type is decode: workers are aggregated).
var workerLabels = []string{"worker_id", "dp_rank", "worker_type"}

// lastRequest records a finished request's figures for its worker rank.
func (m *FrontendMetrics) lastRequest(worker uint64, rank uint32, ttft time.Duration, promptTokens int, itl time.Duration) {
	id, r := strconv.FormatUint(worker, 10), strconv.FormatUint(uint64(rank), 10)
	if ttft > 0 {
		m.lastTTFT.WithLabelValues(id, r, "decode").Set(ttft.Seconds())
	}
	if promptTokens > 0 {
		m.lastISL.WithLabelValues(id, r, "decode").Set(float64(promptTokens))
	}
	if itl > 0 {
		m.lastITL.WithLabelValues(id, r, "decode").Set(itl.Seconds())
	}
}

// ModelCollector exports the served model's configuration as Dynamo's dynamo_frontend_model_* gauges,
// and each worker's health as kvroute_worker_healthy, read from the router at scrape time.
type ModelCollector struct {
	models                           []collectedModel
	migration                        int
	workers, blockSize, migr, blocks *prometheus.Desc
	// healthy is per worker; the event plane's per-worker metrics (gaps, degraded) are the fleet's own
	// collector (actors/worker).
	healthy *prometheus.Desc
}

// NewModelCollector returns the collector; register it with the frontend's registry.
func NewModelCollector(r *router.Router, model string, migrationLimit int) *ModelCollector {
	l := []string{"model"}
	return &ModelCollector{models: []collectedModel{{r, model}}, migration: migrationLimit,
		workers:   prometheus.NewDesc("dynamo_frontend_model_workers", "Workers serving the model.", l, nil),
		blockSize: prometheus.NewDesc("dynamo_frontend_model_kv_cache_block_size", "KV cache block size of the model's workers, in tokens.", l, nil),
		migr:      prometheus.NewDesc("dynamo_frontend_model_migration_limit", "Request migration limit.", l, nil),
		blocks:    prometheus.NewDesc("dynamo_frontend_model_total_kv_blocks", "Total KV blocks over the model's workers that report it.", l, nil),
		healthy: prometheus.NewDesc("kvroute_worker_healthy", "1 while a worker passes its health checks (it is routable), else 0.",
			[]string{"worker_id"}, nil),
	}
}

// collectedModel is one served model and its router core.
type collectedModel struct {
	r     *router.Router
	model string
}

// AddModel adds another served model (before the collector is registered).
func (c *ModelCollector) AddModel(r *router.Router, model string) {
	c.models = append(c.models, collectedModel{r, model})
}

// Describe implements prometheus.Collector.
func (c *ModelCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.workers
	ch <- c.blockSize
	ch <- c.migr
	ch <- c.blocks
	ch <- c.healthy
}

// Collect implements prometheus.Collector.
func (c *ModelCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cm := range c.models {
		c.collect(ch, cm.r, cm.model)
	}
}

func (c *ModelCollector) collect(ch chan<- prometheus.Metric, r *router.Router, model string) {
	ms := r.Fleet.Mirrors()
	total := 0
	for _, m := range ms {
		total += m.Spec.TotalKVBlocks
		st, ok := r.Fleet.StatusOf(m.Spec.ID)
		if !ok {
			continue
		}
		id := strconv.FormatUint(m.Spec.ID, 10)
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, float64(b2i(st.Healthy)), id)
	}
	ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(len(ms)), model)
	ch <- prometheus.MustNewConstMetric(c.blockSize, prometheus.GaugeValue, float64(r.BlockSize()), model)
	ch <- prometheus.MustNewConstMetric(c.migr, prometheus.GaugeValue, float64(c.migration), model)
	ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(total), model)
}

// label is the endpoint label Dynamo gives the endpoint.
var endpointLabels = [numEndpoints]string{"chat_completions", "completions", "responses", "embeddings", "score", "rerank"}

func (e endpoint) label() string { return endpointLabels[e] }

func requestType(stream bool) string {
	if stream {
		return "stream"
	}
	return "unary"
}

func status(ok bool) string {
	if ok {
		return "success"
	}
	return "error"
}

// requests counts one finished request; an HTTP status below 400 is a success.
func (m *FrontendMetrics) requests(ep endpoint, stream bool, httpStatus int) {
	m.byKind[ep][b2i(stream)][b2i(httpStatus < 400)].Inc()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// prediction records one comparison of predicted and reported cached tokens.
func (m *FrontendMetrics) prediction(worker uint64, predicted, reported, blockSize int) {
	diff := reported - predicted
	m.predErr.Observe(float64(diff))
	m.cachedTok.Add(float64(max(reported, 0)))
	m.predictedTok.Add(float64(max(predicted, 0)))
	m.mu.Lock()
	p := m.precision[worker]
	if p == nil {
		p = &precision{gauge: m.precGauge.WithLabelValues(strconv.FormatUint(worker, 10))}
		m.precision[worker] = p
	}
	p.total++
	if diff > -blockSize && diff < blockSize {
		p.hits++
	}
	v := p.hits / p.total
	g := p.gauge
	m.mu.Unlock()
	g.Set(v)
}

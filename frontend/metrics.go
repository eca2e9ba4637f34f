package frontend

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// FrontendMetrics are the OpenAI edge's metrics: Dynamo's frontend names where they exist
// (dynamo_frontend_*), kvroute's own for the prediction check.
type FrontendMetrics struct {
	reqs     *prometheus.CounterVec
	inflight prometheus.Gauge
	ttft     prometheus.Histogram
	itl      prometheus.Histogram
	duration prometheus.Histogram
	isl      prometheus.Histogram
	osl      prometheus.Histogram
	migr     prometheus.Counter
	predErr  prometheus.Histogram

	// byStatus caches the requests counter of each endpoint and status (100..599): WithLabelValues hashes
	// both labels and takes the vector's lock on every call, once per request.
	byStatus [2][500]atomic.Pointer[prometheus.Counter]

	mu        sync.Mutex
	precision map[uint64]*precision
	precGauge *prometheus.GaugeVec
}

// precision counts, per worker, how often the predicted cached tokens matched what the worker reported;
// gauge is the worker's kvroute_worker_prediction_precision child.
type precision struct {
	hits, total float64
	gauge       prometheus.Gauge
}

// NewFrontendMetrics registers the metrics with reg (nil: private).
func NewFrontendMetrics(reg prometheus.Registerer) *FrontendMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	latency := prometheus.ExponentialBuckets(0.001, 2, 16)
	tokens := prometheus.ExponentialBuckets(16, 2, 14)
	m := &FrontendMetrics{
		reqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dynamo_frontend_requests_total",
			Help: "Requests by endpoint and HTTP status."}, []string{"endpoint", "status"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "dynamo_frontend_inflight_requests", Help: "Requests in flight."}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dynamo_frontend_time_to_first_token_seconds",
			Help: "Time to first token as the client sees it.", Buckets: latency}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dynamo_frontend_inter_token_latency_seconds",
			Help: "Time between streamed chunks.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dynamo_frontend_request_duration_seconds",
			Help: "Whole request duration.", Buckets: latency}),
		isl: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dynamo_frontend_input_sequence_tokens",
			Help: "Prompt tokens per request.", Buckets: tokens}),
		osl: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dynamo_frontend_output_sequence_tokens",
			Help: "Completion tokens per request.", Buckets: tokens}),
		migr: prometheus.NewCounter(prometheus.CounterOpts{Name: "dynamo_frontend_model_migration_total",
			Help: "Requests retried on another worker after a failure before the first byte."}),
		predErr: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvroute_cached_tokens_prediction_error",
			Help:    "Worker-reported cached tokens minus the router's predicted cached tokens.",
			Buckets: []float64{-4096, -1024, -256, -64, -16, -1, 0, 1, 16, 64, 256, 1024, 4096}}),
		precGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_worker_prediction_precision",
			Help: "Fraction of a worker's requests whose predicted cached tokens matched the worker's report within one block."},
			[]string{"worker_id"}),
		precision: map[uint64]*precision{},
	}
	reg.MustRegister(m.reqs, m.inflight, m.ttft, m.itl, m.duration, m.isl, m.osl, m.migr, m.predErr, m.precGauge)
	return m
}

func (m *FrontendMetrics) requests(ep endpoint, status int) {
	if ep > epCompletion || status < 100 || status >= 600 {
		m.reqs.WithLabelValues(ep.path(), strconv.Itoa(status)).Inc()
		return
	}
	slot := &m.byStatus[ep][status-100]
	c := slot.Load()
	if c == nil {
		counter := m.reqs.WithLabelValues(ep.path(), strconv.Itoa(status))
		slot.Store(&counter)
		c = &counter
	}
	(*c).Inc()
}

// prediction records one comparison of predicted and reported cached tokens.
func (m *FrontendMetrics) prediction(worker uint64, predicted, reported, blockSize int) {
	diff := reported - predicted
	m.predErr.Observe(float64(diff))
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

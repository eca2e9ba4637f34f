package mocker

import (
	"math"
	"strconv"
	"sync/atomic"
)

// vLLM's bucket bounds (seconds) for vllm:time_to_first_token_seconds and vllm:e2e_request_latency_seconds.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	e2eBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// histogram is a lock-free Prometheus histogram: per-bucket counts (not cumulative), count and a float sum
// kept as bits.
type histogram struct {
	bounds []float64
	counts []atomic.Uint64
	count  atomic.Uint64
	sum    atomic.Uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.count.Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// serverMetrics are the per-rank request histograms the HTTP layer observes.
type serverMetrics struct {
	ttft    []*histogram
	e2e     []*histogram
	success []atomic.Uint64
}

func (m *serverMetrics) init(ranks int) {
	for range ranks {
		m.ttft = append(m.ttft, newHistogram(ttftBuckets))
		m.e2e = append(m.e2e, newHistogram(e2eBuckets))
	}
	m.success = make([]atomic.Uint64, ranks)
}

func (m *serverMetrics) observe(rank int, st StreamState) {
	if st.Err != nil || st.FirstToken.IsZero() {
		return
	}
	m.ttft[rank].observe(st.FirstToken.Sub(st.Start).Seconds())
	m.e2e[rank].observe(st.End.Sub(st.Start).Seconds())
	m.success[rank].Add(1)
}

// appendMetrics writes the Prometheus text exposition with vLLM's metric names. Counters carry the _total
// suffix, as Python's prometheus_client writes them.
func (w *Worker) appendMetrics(b []byte) []byte {
	model := w.model.Name
	labels := func(rank int) string {
		return `{engine="` + strconv.Itoa(rank) + `",model_name="` + model + `"}`
	}
	type series struct {
		name, help, typ string
		value           func(rank int, s Stats) float64
	}
	stats := make([]Stats, len(w.ranks))
	for i := range w.ranks {
		stats[i] = w.Stats(i)
	}
	all := []series{
		{"vllm:num_requests_running", "Number of requests in model execution batches.", "gauge", func(_ int, s Stats) float64 { return float64(s.Running) }},
		{"vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", func(_ int, s Stats) float64 { return float64(s.Waiting) }},
		{"vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge", func(_ int, s Stats) float64 { return s.KVUsage() }},
		{"vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", "counter", func(_ int, s Stats) float64 { return float64(s.PrefixQueries) }},
		{"vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", "counter", func(_ int, s Stats) float64 { return float64(s.PrefixHits) }},
		{"vllm:num_preemptions", "Cumulative number of preemption from the engine.", "counter", func(_ int, s Stats) float64 { return float64(s.Preemptions) }},
		{"vllm:prompt_tokens", "Number of prefill tokens processed.", "counter", func(_ int, s Stats) float64 { return float64(s.PromptTokens) }},
		{"vllm:generation_tokens", "Number of generation tokens processed.", "counter", func(_ int, s Stats) float64 { return float64(s.GenerationTokens) }},
		{"vllm:kv_events_published", "KV event batches published (kvroute mocker).", "counter", func(r int, _ Stats) float64 { return float64(w.ranks[r].publishedBatches.Load()) }},
	}
	for _, s := range all {
		b = append(b, "# HELP "+s.name+" "+s.help+"\n# TYPE "+s.name+" "+s.typ+"\n"...)
		suffix := ""
		if s.typ == "counter" {
			suffix = "_total"
		}
		for r := range w.ranks {
			b = append(b, s.name+suffix+labels(r)+" "...)
			b = appendFloat(b, s.value(r, stats[r]))
			b = append(b, '\n')
		}
	}
	b = append(b, "# HELP vllm:request_success Count of successfully processed requests.\n# TYPE vllm:request_success counter\n"...)
	for r := range w.ranks {
		b = append(b, `vllm:request_success_total{engine="`+strconv.Itoa(r)+`",finished_reason="length",model_name="`+model+`"} `...)
		b = appendFloat(b, float64(w.metrics.success[r].Load()))
		b = append(b, '\n')
	}
	b = appendHistogram(b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", w.metrics.ttft, model)
	b = appendHistogram(b, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", w.metrics.e2e, model)
	b = append(b, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n"...)
	for r := range w.ranks {
		b = append(b, `vllm:cache_config_info{block_size="`+strconv.Itoa(w.cfg.Engine.BlockSize)+
			`",cache_dtype="auto",enable_prefix_caching="True",engine="`+strconv.Itoa(r)+
			`",gpu_memory_utilization="0.9",num_gpu_blocks="`+strconv.Itoa(w.cfg.Engine.NumGPUBlocks)+
			`",prefix_caching_hash_algo="xxhash"} 1.0`+"\n"...)
	}
	b = w.mmx.appendMetrics(b, model) // mm transfer hook (mm_transfer.go)
	return b
}

func appendHistogram(b []byte, name, help string, hs []*histogram, model string) []byte {
	b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" histogram\n"...)
	for r, h := range hs {
		eng := strconv.Itoa(r)
		cum := uint64(0)
		for i, le := range h.bounds {
			cum += h.counts[i].Load()
			b = append(b, name+`_bucket{engine="`+eng+`",le="`...)
			b = appendFloat(b, le)
			b = append(b, `",model_name="`+model+`"} `...)
			b = appendFloat(b, float64(cum))
			b = append(b, '\n')
		}
		cum += h.counts[len(h.bounds)].Load()
		b = append(b, name+`_bucket{engine="`+eng+`",le="+Inf",model_name="`+model+`"} `...)
		b = appendFloat(b, float64(cum))
		b = append(b, "\n"+name+`_count{engine="`+eng+`",model_name="`+model+`"} `...)
		b = appendFloat(b, float64(h.count.Load()))
		b = append(b, "\n"+name+`_sum{engine="`+eng+`",model_name="`+model+`"} `...)
		b = appendFloat(b, math.Float64frombits(h.sum.Load()))
		b = append(b, '\n')
	}
	return b
}

// appendFloat writes v the way Python's prometheus_client does for whole numbers ("3.0").
func appendFloat(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
		return append(b, ".0"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

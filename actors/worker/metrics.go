package worker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the event-plane counters of every worker at scrape time, from the mirrors' atomics
// and the index's per-worker stats: nothing on the event path updates a metric.
type collector struct {
	f *Fleet

	batches, resets, dups, lost, gaps, rejected, badRank, otherTier, decodeErrs *prometheus.Desc
	degraded, unknownTopics, connects                                           *prometheus.Desc
}

// Collector returns a Prometheus collector of the fleet's event-plane metrics (per worker, labelled
// worker_id; unknown topics and bind connections fleet-wide).
func (f *Fleet) Collector() prometheus.Collector {
	w := []string{"worker_id"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, w, nil) }
	return &collector{
		f:          f,
		batches:    d("kvroute_worker_kv_event_batches_total", "KV event batches delivered for a worker."),
		resets:     d("kvroute_worker_kv_event_resets_total", "Engine restarts found on a worker's event streams (its rank's blocks dropped)."),
		dups:       d("kvroute_worker_kv_event_duplicates_total", "Batches of a worker dropped as already delivered."),
		lost:       d("kvroute_worker_kv_event_lost_total", "Sequence numbers of a worker never delivered (no replay, or beyond its buffer)."),
		gaps:       d("kvroute_worker_kv_event_gaps_total", "Sequence gaps on a worker's event streams."),
		rejected:   d("kvroute_worker_kv_rejected_stores_total", "BlockStored events of a worker rejected (parent block unknown)."),
		badRank:    d("kvroute_worker_kv_event_out_of_range_rank_total", "Batches of a worker naming a dp rank >= its dp_size (not indexed)."),
		otherTier:  d("kvroute_worker_kv_other_tier_events_total", "Stores and removals of a worker in a tier other than the device (not credited as device cache)."),
		decodeErrs: d("kvroute_worker_kv_event_decode_errors_total", "Malformed event messages of a worker."),
		degraded:   prometheus.NewDesc("kvroute_worker_kv_events_degraded", "1 while a worker is marked degraded (reason on /v1/workers).", w, nil),
		unknownTopics: prometheus.NewDesc("kvroute_kv_events_unknown_topic_total",
			"Messages on the bind sockets with a topic no worker is registered with (dropped).", nil, nil),
		connects: prometheus.NewDesc("kvroute_kv_events_bind_connections_total", "Publisher connections accepted on the bind sockets.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.batches, c.resets, c.dups, c.lost, c.gaps, c.rejected, c.badRank, c.otherTier,
		c.decodeErrs, c.degraded, c.unknownTopics, c.connects} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, id string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), id)
	}
	for _, st := range c.f.Status() {
		id := strconv.FormatUint(st.ID, 10)
		counter(c.batches, st.Batches, id)
		counter(c.resets, st.Resets, id)
		counter(c.dups, st.DuplicateBatches, id)
		counter(c.lost, st.LostBatches, id)
		counter(c.gaps, st.Gaps, id)
		counter(c.rejected, st.RejectedStores, id)
		counter(c.badRank, st.OutOfRangeRanks, id)
		counter(c.otherTier, st.OtherTierEvents, id)
		counter(c.decodeErrs, st.DecodeErrors, id)
		deg := 0.0
		if st.Degraded != "" {
			deg = 1
		}
		ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.GaugeValue, deg, id)
	}
	bs := c.f.BindStats()
	ch <- prometheus.MustNewConstMetric(c.unknownTopics, prometheus.CounterValue, float64(bs.UnknownTopics))
	ch <- prometheus.MustNewConstMetric(c.connects, prometheus.CounterValue, float64(bs.Connects))
}

package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/workers/natsplane"
)

// natsCollector exports the NATS planes' counters, read at scrape time: the event source (--event-plane
// nats), discovery (--discovery nats) and replica sync (--router-replica-sync), each while it runs.
type natsCollector struct{ p *natsPlane }

// natsStat is one exported counter or gauge of a plane's stats.
type natsStat[S any] struct {
	desc  *prometheus.Desc
	gauge bool
	get   func(*S) uint64
}

func natsCounter[S any](name, help string, get func(*S) uint64) natsStat[S] {
	return natsStat[S]{desc: prometheus.NewDesc(name, help, nil, nil), get: get}
}

func natsGauge[S any](name, help string, get func(*S) uint64) natsStat[S] {
	return natsStat[S]{desc: prometheus.NewDesc(name, help, nil, nil), gauge: true, get: get}
}

var (
	sourceStats = []natsStat[natsplane.SourceStats]{
		natsCounter("kvroute_nats_event_messages_total", "KV event messages received over NATS.", func(s *natsplane.SourceStats) uint64 { return s.Messages }),
		natsCounter("kvroute_nats_event_batches_total", "KV event batches delivered to the worker mirrors.", func(s *natsplane.SourceStats) uint64 { return s.Batches }),
		natsCounter("kvroute_nats_event_duplicates_total", "KV event batches at or below their rank's last sequence, skipped.", func(s *natsplane.SourceStats) uint64 { return s.Duplicates }),
		natsCounter("kvroute_nats_event_gaps_total", "Sequence jumps in a rank's KV events (lost upstream of the frontend).", func(s *natsplane.SourceStats) uint64 { return s.Gaps }),
		natsCounter("kvroute_nats_event_resets_total", "Engine restarts and relay epochs that cleared a rank's blocks.", func(s *natsplane.SourceStats) uint64 { return s.Resets }),
		natsCounter("kvroute_nats_event_bad_messages_total", "KV event messages that did not decode.", func(s *natsplane.SourceStats) uint64 { return s.BadMessages }),
		natsCounter("kvroute_nats_event_unknown_worker_total", "KV event batches of workers not in the fleet, dropped.", func(s *natsplane.SourceStats) uint64 { return s.UnknownWorker }),
		natsCounter("kvroute_nats_event_dropped_total", "KV event messages the NATS client dropped (slow consumer, core NATS).", func(s *natsplane.SourceStats) uint64 { return s.Dropped }),
		natsCounter("kvroute_nats_consumer_errors_total", "Errors of the durable stream's consumer (it recovers).", func(s *natsplane.SourceStats) uint64 { return s.ConsumeErrors }),
		natsCounter("kvroute_nats_consumer_restarts_total", "Durable stream consumers replaced after delivering nothing for 5 s while the stream held more.", func(s *natsplane.SourceStats) uint64 { return s.Restarts }),
		natsCounter("kvroute_nats_snapshots_written_total", "Index snapshots this frontend wrote to the object store.", func(s *natsplane.SourceStats) uint64 { return s.Snapshots }),
		natsCounter("kvroute_nats_snapshots_skipped_total", "Index snapshots skipped: the store held another frontend's near this one's position.", func(s *natsplane.SourceStats) uint64 { return s.SnapshotsSkipped }),
		natsGauge("kvroute_nats_snapshot_restored_entries", "Index entries restored from a snapshot at start.", func(s *natsplane.SourceStats) uint64 { return s.Restored }),
		natsGauge("kvroute_nats_stream_sequence", "The last durable stream sequence applied.", func(s *natsplane.SourceStats) uint64 { return s.StreamSeq }),
	}
	watcherStats = []natsStat[natsplane.WatcherStats]{
		natsCounter("kvroute_nats_discovery_added_total", "Workers added from the discovery bucket.", func(s *natsplane.WatcherStats) uint64 { return s.Added }),
		natsCounter("kvroute_nats_discovery_removed_total", "Workers removed: their registration was deleted.", func(s *natsplane.WatcherStats) uint64 { return s.Removed }),
		natsCounter("kvroute_nats_discovery_expired_total", "Workers removed: their registration expired.", func(s *natsplane.WatcherStats) uint64 { return s.Expired }),
		natsCounter("kvroute_nats_discovery_bad_entries_total", "Discovery records that did not parse.", func(s *natsplane.WatcherStats) uint64 { return s.BadEntries }),
		natsCounter("kvroute_nats_discovery_errors_total", "Discovered workers the frontend refused, and watch errors.", func(s *natsplane.WatcherStats) uint64 { return s.Errors }),
	}
	replicaStats = []natsStat[natsplane.ReplicaStats]{
		natsCounter("kvroute_replica_events_published_total", "Load events this frontend published to the other replicas.", func(s *natsplane.ReplicaStats) uint64 { return s.Published }),
		natsCounter("kvroute_replica_events_dropped_total", "Load events and lists not published: the queue was full or NATS refused them.", func(s *natsplane.ReplicaStats) uint64 { return s.Dropped }),
		natsGauge("kvroute_replica_queue_depth", "Load events and lists waiting to be published.", func(s *natsplane.ReplicaStats) uint64 { return uint64(s.QueueDepth) }),
		natsCounter("kvroute_replica_events_applied_total", "Other replicas' load events applied.", func(s *natsplane.ReplicaStats) uint64 { return s.Applied }),
		natsCounter("kvroute_replica_apply_errors_total", "Other replicas' messages that did not apply (unknown worker or request, bad message).", func(s *natsplane.ReplicaStats) uint64 { return s.ApplyErrors }),
		natsCounter("kvroute_replica_remote_dropped_total", "Other replicas' messages the NATS client dropped (applied too slowly).", func(s *natsplane.ReplicaStats) uint64 { return s.RemoteDropped }),
		natsCounter("kvroute_replica_lists_published_total", "Active-list messages this frontend published.", func(s *natsplane.ReplicaStats) uint64 { return s.Lists }),
		natsCounter("kvroute_replica_lists_applied_total", "Other replicas' active lists applied.", func(s *natsplane.ReplicaStats) uint64 { return s.Reconciled }),
		natsCounter("kvroute_replica_remote_freed_total", "Other replicas' requests freed because their lists lacked them (a lost Free) or they went silent.", func(s *natsplane.ReplicaStats) uint64 { return s.RemoteFreed }),
		natsCounter("kvroute_replica_routers_silent_total", "Replicas whose lists stopped for three of their intervals; what they were charged was freed.", func(s *natsplane.ReplicaStats) uint64 { return s.Silent }),
	}
)

func (c natsCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, sourceStats)
	describe(ch, watcherStats)
	describe(ch, replicaStats)
}

func (c natsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.p.src != nil {
		st := c.p.src.Stats()
		collect(ch, sourceStats, &st)
	}
	if c.p.watcher != nil {
		st := c.p.watcher.Stats()
		collect(ch, watcherStats, &st)
	}
	if c.p.replica != nil {
		st := c.p.replica.Stats()
		collect(ch, replicaStats, &st)
	}
}

func describe[S any](ch chan<- *prometheus.Desc, stats []natsStat[S]) {
	for _, s := range stats {
		ch <- s.desc
	}
}

func collect[S any](ch chan<- prometheus.Metric, stats []natsStat[S], st *S) {
	for _, s := range stats {
		kind := prometheus.CounterValue
		if s.gauge {
			kind = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(s.desc, kind, float64(s.get(st)))
	}
}

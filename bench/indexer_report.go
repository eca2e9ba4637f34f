package bench

import (
	"fmt"
	"strconv"
)

// IndexerResult is report.json's data for `kvroute bench indexer`.
type IndexerResult struct {
	Config   IndexerConfig `json:"config"`
	Trace    TraceStats    `json:"trace"`
	Workload struct {
		Queries         int64 `json:"queries"`
		Stores          int64 `json:"stores"`
		Removes         int64 `json:"removes"`
		QueryBlocks     int64 `json:"query_blocks"`
		StoredBlocks    int64 `json:"stored_blocks"`
		RemovedBlocks   int64 `json:"removed_blocks"`
		CapacityBlocks  int   `json:"capacity_blocks"`
		MaxWorkerBlocks int   `json:"max_worker_blocks"`
	} `json:"workload_per_copy"`
	Runs []*IndexerRun `json:"runs"`
	// Memory is what a dependent load costs on the machine that ran the bench (MeasureMemoryLatency), the
	// largest buffer the size of the index.
	Memory []MemoryLatency `json:"memory_latency,omitempty"`
	// Stalls is how often the host stopped a spinning thread, before and after the runs (MeasureStalls).
	Stalls []HostStalls `json:"host_stalls,omitempty"`
}

func runLabel(r *IndexerRun) string {
	if r.OfferedSeconds == 0 {
		return "unpaced"
	}
	return strconv.FormatFloat(r.OfferedSeconds, 'g', 4, 64) + " s"
}

// FillIndexerReport adds the tables and plots of an indexer bench to rep; loads (IndexMemoryLatencies,
// may be nil) puts the reads in units of the machine's cache misses, and stalls (MeasureStalls, may be
// nil) says how often the host stopped a thread meanwhile.
func FillIndexerReport(rep *Report, t *Trace, w *IndexerWorkload, runs []*IndexerRun, loads []MemoryLatency, stalls []HostStalls) {
	res := &IndexerResult{Config: w.cfg, Trace: t.Stats(), Runs: runs, Memory: loads, Stalls: stalls}
	res.Workload.Queries, res.Workload.Stores, res.Workload.Removes = w.Queries, w.Stores, w.Removes
	res.Workload.QueryBlocks, res.Workload.StoredBlocks, res.Workload.RemovedBlocks = w.QueryBlocks, w.StoredBlocks, w.RemovedBlocks
	res.Workload.CapacityBlocks, res.Workload.MaxWorkerBlocks = w.cfg.capacity(), w.MaxWorkerBlocks
	rep.Data = res

	rep.Tables = append(rep.Tables, Table{Title: "Workload", Columns: []string{"requests", "workers", "block size", "capacity (blocks/worker)", "queries", "store events", "remove events", "query blocks", "stored blocks", "removed blocks"},
		Rows: [][]string{{strconv.Itoa(len(t.Requests)), fmt.Sprintf("%d × %d", w.cfg.Workers, w.cfg.Duplicate), strconv.Itoa(w.cfg.BlockSize), strconv.Itoa(w.cfg.capacity()),
			FormatNum(float64(w.Queries * int64(w.cfg.Duplicate))), FormatNum(float64(w.Stores * int64(w.cfg.Duplicate))), FormatNum(float64(w.Removes * int64(w.cfg.Duplicate))),
			FormatNum(float64(w.QueryBlocks * int64(w.cfg.Duplicate))), FormatNum(float64(w.StoredBlocks * int64(w.cfg.Duplicate))), FormatNum(float64(w.RemovedBlocks * int64(w.cfg.Duplicate)))}}})

	// The headline: how long a read takes while the writes run, per offered rate, and what the index costs.
	head := Table{Title: "FindMatches latency while the writes run", Columns: []string{"duration", "offered stored blocks/s", "achieved event blocks/s", "p50 µs", "p99 µs", "p999 µs", "max µs", "quiescent p50/p99/p999 µs", "floor p50/p99/p999 µs", "cold floor p50/p99/p999 µs", "again p50/p99/p999 µs", "keeping up"}}
	rt := Table{Title: "Go runtime during the timed run", Columns: []string{"duration", "GC cycles", "GC CPU %", "GC pause total ms", "GC pause max µs", "of it stopping the world, max µs", "runnable→running p99 µs", "p999 µs", "page faults", "TLB shootdowns (machine)", "anonymous memory at end: MB in 2 MiB pages / MB", "index warming: views, µs a view, % of a core", "load average at end"}}
	mem := Table{Title: "Index memory", Columns: []string{"duration", "shards", "(block, worker) entries", "tree positions (Σ shards)", "live heap MB", "bytes per (block, worker)"}}
	for _, r := range runs {
		off, keep := "unpaced", "—"
		cold, again := triple(r.ColdFloorMicros), triple(r.AgainMicros)
		if r.OfferedSeconds > 0 {
			off = FormatNum(float64(r.StoredBlocks) / r.OfferedSeconds)
			keep = "yes"
			if !r.KeepingUp {
				keep = "no"
			}
		}
		head.Rows = append(head.Rows, []string{runLabel(r), off, FormatNum(r.EventBlocksPerSec), F(r.QueryMicros.P50, 1), F(r.QueryMicros.P99, 1), F(r.QueryMicros.P999, 1), F(r.QueryMicros.Max, 1),
			F(r.QuiescentMicros.P50, 1) + " / " + F(r.QuiescentMicros.P99, 1) + " / " + F(r.QuiescentMicros.P999, 1),
			F(r.FloorMicros.P50, 1) + " / " + F(r.FloorMicros.P99, 1) + " / " + F(r.FloorMicros.P999, 1), cold, again, keep})
		rt.Rows = append(rt.Rows, []string{runLabel(r), strconv.FormatUint(r.Runtime.GCCycles, 10), F(100*r.Runtime.GCCPUFraction, 1), F(r.Runtime.GCPauseMicros/1e3, 2),
			F(r.Runtime.GCPauseMaxMicros, 0), F(r.Runtime.GCStopMaxMicros, 0), F(r.Runtime.SchedP99Micros, 0), F(r.Runtime.SchedP999Micros, 0), faults(r.Runtime.PageFaults), faults(r.Runtime.TLBShootdowns), hugeShare(r.Runtime), warming(r.Warming), r.LoadAvg})
		mem.Rows = append(mem.Rows, []string{runLabel(r), strconv.Itoa(w.cfg.Shards), FormatNum(float64(r.IndexEntries)), FormatNum(float64(r.Positions)), F(float64(r.IndexBytes)/1e6, 1), F(r.BytesPerEntry, 1)})
	}
	rep.Tables = append([]Table{head, rt, mem}, rep.Tables...)
	if len(res.Memory) > 0 {
		rep.Tables = append(rep.Tables, memoryTable(res.Memory, runs))
	}
	if len(stalls) > 0 {
		rep.Tables = append(rep.Tables, stallTable(stalls))
	}

	tab := Table{Title: "Runs", Columns: []string{"duration", "elapsed s", "offered ops/s", "achieved ops/s", "offered blocks/s", "achieved blocks/s", "event blocks/s", "query p50 µs", "query p99 µs", "query p999 µs", "quiescent p50/p99 µs", "matches/query", "keeping up"}}
	var cdf []Series
	var offered, achieved, p99 Series
	offered.Name, achieved.Name, p99.Name = "achieved", "achieved", "query p99"
	for _, r := range runs {
		keep := "yes"
		if r.OfferedSeconds == 0 {
			keep = "—"
		} else if !r.KeepingUp {
			keep = "no"
		}
		off, offB := "—", "—"
		if r.OfferedSeconds > 0 {
			off, offB = FormatNum(r.OfferedOpsPerSec), FormatNum(r.OfferedBlocksPerSec)
			achieved.X = append(achieved.X, r.OfferedBlocksPerSec)
			achieved.Y = append(achieved.Y, r.BlocksPerSec)
			p99.X = append(p99.X, r.OfferedOpsPerSec)
			p99.Y = append(p99.Y, r.QueryMicros.P99)
		}
		tab.Rows = append(tab.Rows, []string{runLabel(r), F(r.ElapsedSeconds, 2), off, FormatNum(r.OpsPerSec), offB, FormatNum(r.BlocksPerSec), FormatNum(r.EventBlocksPerSec),
			F(r.QueryMicros.P50, 1), F(r.QueryMicros.P99, 1), F(r.QueryMicros.P999, 1), F(r.QuiescentMicros.P50, 1) + " / " + F(r.QuiescentMicros.P99, 1), F(r.MeanMatches, 1), keep})
		xs, ys := CDF(r.latencies, 400)
		cdf = append(cdf, Series{Name: runLabel(r), X: xs, Y: ys})
	}
	rep.Tables = append(rep.Tables, tab)
	rep.AddPlot("query_latency_cdf.svg", "FindMatches latency CDF per run", (&LinePlot{Title: "FindMatches latency CDF", XLabel: "latency (µs, log)", YLabel: "fraction of queries", LogX: true, Series: cdf}).SVG())
	if len(achieved.X) >= 2 {
		rep.AddPlot("sweep_throughput.svg", "Achieved vs offered block throughput", (&LinePlot{Title: "Achieved vs offered blocks/s", XLabel: "offered blocks/s", YLabel: "achieved blocks/s", LogX: true, LogY: true, Diagonal: true, Series: []Series{achieved}}).SVG())
		rep.AddPlot("sweep_latency.svg", "Query p99 vs offered rate", (&LinePlot{Title: "Query p99 vs offered ops/s", XLabel: "offered ops/s", YLabel: "p99 (µs)", LogX: true, Series: []Series{p99}}).SVG())
	}
}

// memoryTable is the machine's dependent-load latency at each measured size; the largest size's row also
// gives each run's read p99 as that many dependent loads.
func memoryTable(mem []MemoryLatency, runs []*IndexerRun) Table {
	tab := Table{Title: "One dependent load on this machine (pointer chase over random cache lines)", Columns: []string{"buffer MiB", "ns per load", "ns per load, 2 MiB pages", "read p99 in such loads, per run"}}
	for i, m := range mem {
		in := "—"
		if i == len(mem)-1 && m.Nanos > 0 {
			in = ""
			for k, r := range runs {
				if k > 0 {
					in += ", "
				}
				in += runLabel(r) + ": " + F(r.QueryMicros.P99*1e3/m.Nanos, 0)
			}
		}
		huge := "—"
		if m.HugeNanos > 0 {
			huge = F(m.HugeNanos, 1)
		}
		tab.Rows = append(tab.Rows, []string{F(float64(m.Bytes)/(1<<20), 0), F(m.Nanos, 1), huge, in})
	}
	return tab
}

// stallTable is MeasureStalls' counts.
func stallTable(stalls []HostStalls) Table {
	tab := Table{Title: "Host stalls (one thread spinning on the clock, nothing else running)", Columns: []string{"when", "seconds", "gaps > 5 µs /s", "> 10 µs /s", "> 50 µs /s", "> 1 ms /s", "longest µs", "time lost %"}}
	for _, s := range stalls {
		tab.Rows = append(tab.Rows, []string{s.When, F(s.Seconds, 2), F(s.Over5us, 0), F(s.Over10us, 0), F(s.Over50us, 0), F(s.Over1ms, 0), F(s.MaxMicros, 0), F(s.LostPercent, 2)})
	}
	return tab
}

// hugeShare formats the anonymous memory in 2 MiB pages against all of it at a run's end, "—" when
// unknown.
func hugeShare(r RuntimeStats) string {
	if r.AnonBytes <= 0 || r.AnonHugeBytes < 0 {
		return "—"
	}
	return fmt.Sprintf("%s / %s (%.0f %%)", F(float64(r.AnonHugeBytes)/1e6, 0), F(float64(r.AnonBytes)/1e6, 0), 100*float64(r.AnonHugeBytes)/float64(r.AnonBytes))
}

// warming is a run's warming cell: "—" when the warmer read nothing.
func warming(w Warming) string {
	if w.Views == 0 {
		return "—"
	}
	return fmt.Sprintf("%d, %s, %s", w.Views, F(w.MicrosPerView, 1), F(w.CorePercent, 2))
}

// faults formats a count of page faults or interrupts, "—" when unknown.
func faults(n int64) string {
	if n < 0 {
		return "—"
	}
	return FormatNum(float64(n))
}

// triple formats a summary's p50 / p99 / p999, or "—" when it has no samples.
func triple(s Summary) string {
	if s.Count == 0 {
		return "—"
	}
	return F(s.P50, 1) + " / " + F(s.P99, 1) + " / " + F(s.P999, 1)
}

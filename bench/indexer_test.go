package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors/indexer"
)

// synthTrace is a small conversation-like trace: 8 system prompts, sessions that grow turn by turn.
func synthTrace(n int) *Trace {
	t := &Trace{}
	next := uint64(1000)
	sessions := make([][]uint64, 24)
	for i := 0; i < n; i++ {
		s := i % len(sessions)
		if sessions[s] == nil || i%7 == 0 {
			sessions[s] = []uint64{uint64(s % 8)}
		}
		for k := 0; k < 1+i%3; k++ {
			sessions[s] = append(sessions[s], next)
			next++
		}
		ids := append([]uint64(nil), sessions[s]...)
		t.Requests = append(t.Requests, Request{Timestamp: int64(i * 10), InputLength: len(ids)*512 - 100, OutputLength: 10, HashIDs: ids})
	}
	return t
}

func TestIndexerBenchConsistent(t *testing.T) {
	cfg := DefaultIndexerConfig()
	cfg.Workers, cfg.Duplicate, cfg.BlockSize, cfg.CapacityBlocks, cfg.Shards, cfg.Replayers = 5, 2, 128, 40, 2, 3
	cfg.ColdMB, cfg.Again = 1, true
	tr := synthTrace(300)
	w, err := PrepareIndexer(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if w.Queries != 300 || w.Removes == 0 || w.RemovedBlocks == 0 || w.MaxWorkerBlocks > 40 {
		t.Fatalf("workload %+v: want 300 queries and evictions under a 40-block capacity", w)
	}
	for _, d := range []time.Duration{0, 150 * time.Millisecond} {
		run, err := w.RunIndexer(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		if run.Queries != 600 || run.QueryMicros.Count != 600 || run.Events != 2*w.Events {
			t.Fatalf("run %+v", run)
		}
		// Every store was accepted and every remove found its block: the index holds exactly what the
		// workers' LRUs hold.
		if int64(run.IndexEntries) != 2*w.HeldBlocks {
			t.Fatalf("index holds %d entries, workers hold %d", run.IndexEntries, 2*w.HeldBlocks)
		}
		// The floor is each request's fastest quiescent replay: never above the first replay's.
		if run.FloorMicros.Count != 300 || run.FloorMicros.Min > run.QuiescentMicros.Min || run.FloorMicros.P50 > run.QuiescentMicros.P50 {
			t.Fatalf("floor %+v, quiescent %+v", run.FloorMicros, run.QuiescentMicros)
		}
		if run.ColdFloorMicros.Count != 300 || run.ColdFloorMicros.Min <= 0 {
			t.Fatalf("cold floor %+v", run.ColdFloorMicros)
		}
		// Again: every query (each of the two duplicates') timed a second time.
		if run.AgainMicros.Count != 600 || run.AgainMicros.Min <= 0 {
			t.Fatalf("again %+v", run.AgainMicros)
		}
		if run.LoadAvg == "" && runtime.GOOS == "linux" {
			t.Fatal("no load average on linux")
		}
		// The anonymous memory at the run's end, which holds the index: read on linux, in huge pages at
		// most all of it.
		if rt := run.Runtime; runtime.GOOS == "linux" && (rt.AnonBytes <= 0 || rt.AnonHugeBytes < 0 || rt.AnonHugeBytes > rt.AnonBytes) {
			t.Fatalf("anonymous memory at the end %d bytes, %d in huge pages", rt.AnonBytes, rt.AnonHugeBytes)
		}
		if d > 0 && (run.ElapsedSeconds < d.Seconds()*0.9 || run.OfferedOpsPerSec <= 0) {
			t.Fatalf("paced run took %.3f s of %v", run.ElapsedSeconds, d)
		}
	}
	// Split stores chain correctly: the index ends identical. Without ColdMB there is no cold floor.
	cfg.MaxBatchBlocks, cfg.ColdMB, cfg.Again = 3, 0, false
	ws, err := PrepareIndexer(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run, err := ws.RunIndexer(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if run.ColdFloorMicros.Count != 0 || run.AgainMicros.Count != 0 {
		t.Fatalf("cold floor without ColdMB %+v, again without Again %+v", run.ColdFloorMicros, run.AgainMicros)
	}
	if ws.Stores <= w.Stores || ws.StoredBlocks != w.StoredBlocks || int64(run.IndexEntries) != 2*w.HeldBlocks {
		t.Fatalf("split stores: %d events (unsplit %d), %d entries, want %d", ws.Stores, w.Stores, run.IndexEntries, 2*w.HeldBlocks)
	}
	if _, err := PrepareIndexer(tr, IndexerConfig{Workers: 1, Duplicate: 1, Replayers: 1, BlockSize: 100, Blocks: DefaultBlocks()}); err == nil {
		t.Fatal("block size 100 does not divide 512")
	}
	if _, err := PrepareIndexer(tr, IndexerConfig{Workers: 1, Duplicate: 1, Replayers: 1, BlockSize: 64, ColdMB: -1, Blocks: DefaultBlocks()}); err == nil {
		t.Fatal("negative cold MiB accepted")
	}
}

func TestSweepDurations(t *testing.T) {
	got := SweepDurations(8*time.Second, time.Second, 4)
	want := []time.Duration{8 * time.Second, 4 * time.Second, 2 * time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sweep %v, want %v", got, want)
		}
	}
}

// TestReportFromKnownSamples: the report's numbers are the recorded samples' percentiles.
func TestReportFromKnownSamples(t *testing.T) {
	var lat []float64
	for i := 1; i <= 1000; i++ {
		lat = append(lat, float64(i))
	}
	run := &IndexerRun{OfferedSeconds: 2, ElapsedSeconds: 2, Queries: 1000, OpsPerSec: 500, latencies: lat}
	run.QueryMicros = Summarize(run.latencies)
	w := &IndexerWorkload{cfg: DefaultIndexerConfig()}
	rep := NewReport("indexer", []string{"--trace", "x"})
	mem := []MemoryLatency{{Bytes: 1 << 20, Nanos: 10}, {Bytes: 64 << 20, Nanos: 99, HugeNanos: 77}}
	stalls := []HostStalls{{When: "before", Seconds: 1, Over5us: 1900, Over10us: 1700, Over50us: 6, MaxMicros: 210, LostPercent: 2.5}}
	FillIndexerReport(rep, synthTrace(3), w, []*IndexerRun{run, run}, mem, stalls)
	// The headline: read latency while the writes run, then the full runs table.
	if head := rep.Tables[0]; head.Title != "FindMatches latency while the writes run" || head.Rows[0][3] != "500.0" || head.Rows[0][4] != "990.0" || head.Rows[0][5] != "999.0" {
		t.Fatalf("headline %q, p50/p99/p999 cells %v", head.Title, head.Rows[0][3:6])
	}
	var row []string
	for _, tab := range rep.Tables {
		if tab.Title == "Runs" {
			row = tab.Rows[0]
		}
	}
	if row == nil || row[7] != "500.0" || row[8] != "990.0" || row[9] != "999.0" {
		t.Fatalf("p50/p99/p999 cells %v", row)
	}
	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Data struct {
			Runs []struct {
				Q Summary `json:"query_us"`
			} `json:"runs"`
			Memory []MemoryLatency `json:"memory_latency"`
			Stalls []HostStalls    `json:"host_stalls"`
		} `json:"data"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if q := back.Data.Runs[0].Q; q.P50 != 500 || q.P99 != 990 || q.P999 != 999 || q.Mean != 500.5 {
		t.Fatalf("report.json summary %+v", q)
	}
	if len(back.Data.Memory) != 2 || back.Data.Memory[1] != mem[1] {
		t.Fatalf("report.json memory latency %+v", back.Data.Memory)
	}
	if len(back.Data.Stalls) != 1 || back.Data.Stalls[0] != stalls[0] {
		t.Fatalf("report.json host stalls %+v", back.Data.Stalls)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	// The p99 (990 µs) in loads of the largest buffer's 99 ns: 10,000.
	for _, want := range []string{"| 2 s |", "query_latency_cdf.svg", "sweep_throughput.svg", "| 1 | 10.0 | — | — |", "| 64 | 99.0 | 77.0 | 2 s: 10000, 2 s: 10000 |",
		"| before | 1.00 | 1900 | 1700 | 6 | 0 | 210 | 2.50 |"} {
		if !strings.Contains(string(md), want) {
			t.Fatalf("report.md lacks %q:\n%s", want, md)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "query_latency_cdf.svg"))
	if err != nil || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "polyline") {
		t.Fatalf("cdf plot: %v", err)
	}
}

// TestWarmingOf: the warming of a run is the difference of the warmer's counts over the run, per view and
// as a share of one core; a run without a warmer shows a dash.
func TestWarmingOf(t *testing.T) {
	a := indexer.WarmStats{Views: 10, Busy: time.Millisecond}
	b := indexer.WarmStats{Views: 410, Busy: 41 * time.Millisecond}
	w := warmingOf(a, b, 2*time.Second)
	if w.Views != 400 || w.MicrosPerView != 100 || w.CorePercent != 2 {
		t.Fatalf("warming %+v, want 400 views, 100 µs a view, 2 %% of a core", w)
	}
	if got := warming(w); got != "400, 100.0, 2.00" {
		t.Fatalf("cell %q", got)
	}
	if got := warming(warmingOf(a, a, time.Second)); got != "—" {
		t.Fatalf("no warming: cell %q, want a dash", got)
	}
}

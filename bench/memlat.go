package bench

import "github.com/kvroute/kvroute/internal/hugepage"

// MemoryLatency is what one dependent load costs on this machine: a pointer chase through a buffer of
// Bytes, one random cache line after another, each load's address taken from the one before it (what a
// tree walk whose path is not in the cache does). The index bench reports it beside its read latency,
// so that a p99 can be read as a count of misses on the machine that measured it: on the 2-vCPU VM
// of docs/benchmarks.md a miss into a buffer the size of the index costs 280–330 ns, about three times a
// bare-metal DRAM access.
type MemoryLatency struct {
	Bytes int64   `json:"bytes"`
	Nanos float64 `json:"ns_per_load"`
	// HugeNanos is the same chase through a buffer mapped with 2 MiB transparent huge pages (Linux, THP
	// not "never"; 0 where none could be had): what --huge-pages can give the index on this host.
	HugeNanos float64 `json:"ns_per_load_huge_pages,omitempty"`
}

// chaseLine is the stride of the chase: one cache line.
const chaseLine = hugepage.ChaseLine

// chaseSteps is how many dependent loads a measurement times.
const chaseSteps = 1 << 20

// MeasureMemoryLatency chases chaseSteps loads through a buffer of about bytes (at least two cache
// lines) laid out as one random cycle over its lines (Sattolo's algorithm, a fixed seed), after one
// lap or chaseSteps loads of warm-up, whichever is fewer, and returns the mean time per load.
func MeasureMemoryLatency(bytes int64) MemoryLatency {
	lines := max(int(bytes/chaseLine), 2)
	buf := make([]uint64, lines*chaseLine/8)
	return MemoryLatency{Bytes: int64(lines) * chaseLine, Nanos: hugepage.Chase(buf, chaseSteps)}
}

// MeasureHugeMemoryLatency is MeasureMemoryLatency through a buffer of 2 MiB pages (hugepage.Mapped),
// in HugeNanos; where the host has none, HugeNanos is 0.
func MeasureHugeMemoryLatency(bytes int64) MemoryLatency {
	lines := max(int(bytes/chaseLine), 2)
	m := MemoryLatency{Bytes: int64(lines) * chaseLine}
	raw, release, err := hugepage.Mapped(lines * chaseLine)
	if err != nil {
		return m
	}
	defer release()
	m.HugeNanos = hugepage.Chase(hugepage.Words(raw[:lines*chaseLine]), chaseSteps)
	return m
}

// IndexMemoryLatencies measures MeasureMemoryLatency at 1 MiB (cache), 32 MiB (a large last-level
// cache) and the largest live heap of the runs (the index), capped at 2 GiB; the largest also through
// 2 MiB pages (HugeNanos).
func IndexMemoryLatencies(runs []*IndexerRun) []MemoryLatency {
	var heap int64
	for _, r := range runs {
		heap = max(heap, r.IndexBytes)
	}
	sizes := []int64{1 << 20, 32 << 20}
	if heap = min(heap, 2<<30); heap > sizes[len(sizes)-1] {
		sizes = append(sizes, heap)
	}
	out := make([]MemoryLatency, len(sizes))
	for i, b := range sizes {
		out[i] = MeasureMemoryLatency(b)
	}
	out[len(out)-1].HugeNanos = MeasureHugeMemoryLatency(sizes[len(sizes)-1]).HugeNanos
	return out
}

package bench

import (
	"math/rand/v2"
	"time"
)

// MemoryLatency is what one dependent load costs on this machine: a pointer chase through a buffer of
// Bytes, one random cache line after another, each load's address taken from the one before it (what a
// tree walk whose path is not in the cache does). The index bench reports it beside its read latency,
// so that a p99 can be read as a count of misses on the machine that measured it: on the 2-vCPU VM
// of docs/benchmarks.md a miss into a buffer the size of the index costs 280–330 ns, about three times a
// bare-metal DRAM access.
type MemoryLatency struct {
	Bytes int64   `json:"bytes"`
	Nanos float64 `json:"ns_per_load"`
}

// chaseLine is the stride of the chase: one cache line.
const chaseLine = 64

// chaseSteps is how many dependent loads a measurement times.
const chaseSteps = 1 << 20

// MeasureMemoryLatency chases chaseSteps loads through a buffer of about bytes (at least two cache
// lines) laid out as one random cycle over its lines (Sattolo's algorithm, a fixed seed), after one
// lap or chaseSteps loads of warm-up, whichever is fewer, and returns the mean time per load.
func MeasureMemoryLatency(bytes int64) MemoryLatency {
	lines := max(int(bytes/chaseLine), 2)
	buf := chaseBuffer(lines)
	p := uint64(0)
	for range min(lines, chaseSteps) {
		p = buf[p]
	}
	start := time.Now()
	for range chaseSteps {
		p = buf[p]
	}
	el := time.Since(start)
	chaseSink = p
	return MemoryLatency{Bytes: int64(lines) * chaseLine, Nanos: float64(el.Nanoseconds()) / chaseSteps}
}

// chaseBuffer lays lines cache lines out as one random cycle: the first word of each line is the
// index (in words) of the next line's first word.
func chaseBuffer(lines int) []uint64 {
	const words = chaseLine / 8
	buf := make([]uint64, lines*words)
	order := make([]uint32, lines)
	for i := range order {
		order[i] = uint32(i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := lines - 1; i > 0; i-- { // Sattolo: a single cycle through every line
		j := rng.IntN(i)
		order[i], order[j] = order[j], order[i]
	}
	for i, l := range order {
		buf[int(l)*words] = uint64(order[(i+1)%lines]) * words
	}
	return buf
}

// chaseSink keeps the chase's result alive, so that the loads are not dropped.
var chaseSink uint64

// IndexMemoryLatencies measures MeasureMemoryLatency at 1 MiB (cache), 32 MiB (a large last-level
// cache) and the largest live heap of the runs (the index), capped at 2 GiB.
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
	return out
}

package bench

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
)

// RuntimeStats is what the Go runtime did to the process during a run: what, beside the code measured,
// can stretch a latency sample. Read from runtime/metrics before and after the run.
type RuntimeStats struct {
	// GCCycles is the number of completed GC cycles.
	GCCycles uint64 `json:"gc_cycles"`
	// GCPauseMicros is the total stop-the-world time, GCPauseMaxMicros the longest pause (the upper
	// bound of its histogram bucket), in µs.
	GCPauseMicros    float64 `json:"gc_pause_us"`
	GCPauseMaxMicros float64 `json:"gc_pause_max_us"`
	// GCStopMaxMicros is the longest wait of a GC's stop-the-world for every goroutine to stop (bucket
	// upper bound, µs), part of the pause: long ones come from code that does not reach a preemption
	// point, or from a vCPU the host did not run.
	GCStopMaxMicros float64 `json:"gc_stop_max_us"`
	// SchedP99Micros and SchedP999Micros are quantiles of the time goroutines spent runnable before they
	// ran (bucket upper bounds, µs): on a machine with more runnable threads than cores, the wait for a
	// core.
	SchedP99Micros  float64 `json:"sched_p99_us"`
	SchedP999Micros float64 `json:"sched_p999_us"`
	// GCCPUFraction is the share of the process's CPU time spent in GC (marking, assists, pauses).
	GCCPUFraction float64 `json:"gc_cpu_fraction"`
	// PageFaults is the process's minor page faults (getrusage): first touches of memory the heap took
	// from the OS. A growing index faults its new pages in as it writes them; on a VM that backs the guest
	// with small pages each costs microseconds, and in a process's first run of the index bench at 4 s
	// pacing they were most of the writers' CPU (docs/benchmarks.md).
	PageFaults int64 `json:"page_faults"`
	// TLBShootdowns is the machine's TLB shootdown interrupts (/proc/interrupts, every CPU, -1 when
	// unknown): a CPU that changes a mapping of the process (a page first read, then written; memory
	// given back) interrupts every other CPU running it, a query's core included. Counts other processes'
	// too, so compare runs on a quiet machine.
	TLBShootdowns int64 `json:"tlb_shootdowns"`
	// AnonBytes is the process's anonymous resident memory at the run's end, AnonHugeBytes the part of
	// it mapped by 2 MiB pages (/proc/self/smaps_rollup "Anonymous" and "AnonHugePages"; -1 when
	// unknown). With --huge-pages, what the advice kept: the runtime's scavenger hands freed heap back
	// 64 KiB at a time, and a huge page it takes part of is split into small pages for good (the 20 s run
	// ended with about a sixth of the heap in small pages on the machine of docs/benchmarks.md).
	AnonBytes     int64 `json:"anon_bytes"`
	AnonHugeBytes int64 `json:"anon_huge_bytes"`
}

var runtimeSamples = []string{
	"/gc/cycles/total:gc-cycles",
	"/sched/pauses/total/gc:seconds",
	"/sched/latencies:seconds",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/sched/pauses/stopping/gc:seconds",
}

// runtimeSnapshot is one read of runtimeSamples, and the process's minor page faults and the machine's
// TLB shootdowns then (-1: unknown).
type runtimeSnapshot struct {
	s      []metrics.Sample
	faults int64
	tlb    int64
	// anon and huge are /proc/self/smaps_rollup's anonymous resident bytes and the part in huge pages
	// (-1: unknown, or not read: atEnd reads them).
	anon, huge int64
}

func readRuntime() runtimeSnapshot {
	s := make([]metrics.Sample, len(runtimeSamples))
	for i, name := range runtimeSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	return runtimeSnapshot{s: s, faults: minorFaults(), tlb: tlbShootdowns(), anon: -1, huge: -1}
}

// atEnd adds the anonymous memory to the snapshot that ends a run: a state, not a difference, so the
// snapshot before the run does not read it (smaps_rollup walks the process's page tables).
func (sb runtimeSnapshot) atEnd() runtimeSnapshot {
	sb.anon, sb.huge = anonMemory()
	return sb
}

// anonMemory returns the process's anonymous resident bytes and the part of them in transparent huge
// pages, or -1, -1.
func anonMemory() (anon, huge int64) {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return -1, -1
	}
	return rollupBytes(b, "Anonymous:"), rollupBytes(b, "AnonHugePages:")
}

// rollupBytes reads the kB figure of the smaps_rollup line that starts with name, in bytes, or -1 when
// there is none.
func rollupBytes(rollup []byte, name string) int64 {
	f, ok := lineFields(rollup, name)
	if !ok || len(f) == 0 {
		return -1
	}
	kb, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return -1
	}
	return kb << 10
}

// lineFields returns the fields after name of the first line of a /proc file whose first field is
// name; ok is false when there is none.
func lineFields(proc []byte, name string) (fields []string, ok bool) {
	for line := range strings.Lines(string(proc)) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return f[1:], true
		}
	}
	return nil, false
}

// tlbShootdowns returns the TLB shootdown interrupts every CPU has taken so far (Linux's
// /proc/interrupts line "TLB:"), or -1.
func tlbShootdowns() int64 {
	b, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		return -1
	}
	return interruptCount(b, "TLB:")
}

// interruptCount sums the per-CPU counts of the /proc/interrupts line that starts with name, or -1 when
// there is none.
func interruptCount(procInterrupts []byte, name string) int64 {
	f, ok := lineFields(procInterrupts, name)
	if !ok {
		return -1
	}
	var n int64
	for _, x := range f {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			break // the description after the counts
		}
		n += v
	}
	return n
}

// minorFaults returns the process's minor page faults so far, or -1.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return int64(ru.Minflt)
}

// since returns what happened between snapshot sa and sb.
func (sb runtimeSnapshot) since(sa runtimeSnapshot) RuntimeStats {
	a, b := sa.s, sb.s
	r := RuntimeStats{PageFaults: -1, TLBShootdowns: -1, AnonBytes: sb.anon, AnonHugeBytes: sb.huge}
	if sa.faults >= 0 && sb.faults >= 0 {
		r.PageFaults = sb.faults - sa.faults
	}
	if sa.tlb >= 0 && sb.tlb >= 0 {
		r.TLBShootdowns = sb.tlb - sa.tlb
	}
	if a[0].Value.Kind() == metrics.KindUint64 {
		r.GCCycles = b[0].Value.Uint64() - a[0].Value.Uint64()
	}
	if a[1].Value.Kind() == metrics.KindFloat64Histogram {
		counts, buckets := histDelta(a[1].Value.Float64Histogram(), b[1].Value.Float64Histogram())
		for i, c := range counts {
			if c == 0 {
				continue
			}
			hi := bucketTop(buckets, i)
			r.GCPauseMicros += float64(c) * (buckets[i] + hi) / 2 * 1e6
			r.GCPauseMaxMicros = hi * 1e6
		}
	}
	if a[5].Value.Kind() == metrics.KindFloat64Histogram {
		counts, buckets := histDelta(a[5].Value.Float64Histogram(), b[5].Value.Float64Histogram())
		for i, c := range counts {
			if c != 0 {
				r.GCStopMaxMicros = bucketTop(buckets, i) * 1e6
			}
		}
	}
	if a[2].Value.Kind() == metrics.KindFloat64Histogram {
		counts, buckets := histDelta(a[2].Value.Float64Histogram(), b[2].Value.Float64Histogram())
		r.SchedP99Micros = histQuantile(counts, buckets, 0.99) * 1e6
		r.SchedP999Micros = histQuantile(counts, buckets, 0.999) * 1e6
	}
	if a[3].Value.Kind() == metrics.KindFloat64 && a[4].Value.Kind() == metrics.KindFloat64 {
		if total := b[4].Value.Float64() - a[4].Value.Float64(); total > 0 {
			r.GCCPUFraction = (b[3].Value.Float64() - a[3].Value.Float64()) / total
		}
	}
	return r
}

func histDelta(a, b *metrics.Float64Histogram) ([]uint64, []float64) {
	counts := make([]uint64, len(b.Counts))
	for i := range counts {
		counts[i] = b.Counts[i] - a.Counts[i]
	}
	return counts, b.Buckets
}

// bucketTop is the upper bound of bucket i (its lower bound when the bucket is unbounded above).
func bucketTop(buckets []float64, i int) float64 {
	if hi := buckets[i+1]; hi < 1e300 {
		return hi
	}
	return buckets[i]
}

// histQuantile returns the upper bound of the bucket holding quantile p.
func histQuantile(counts []uint64, buckets []float64, p float64) float64 {
	var n uint64
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := uint64(p * float64(n))
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen > rank {
			return bucketTop(buckets, i)
		}
	}
	return bucketTop(buckets, len(counts)-1)
}

package model

import (
	"syscall"
	"testing"
	"time"
)

// cpuTimer measures the process's CPU time, so benchmarks on a shared, loaded machine can report the work done
// per op apart from the time spent waiting for a core ("cpu-ns/op"; wall-clock ns/op is reported anyway).
type cpuTimer struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuTimer { return cpuTimer{start: processCPU()} }

// report adds cpu-ns/op to b and, when tokensPerOp > 0, tokens/cpu-s (the per-core throughput that the wall-clock
// tokens/s understates when other processes hold the cores).
func (c cpuTimer) report(b *testing.B, tokensPerOp int) {
	if b.N == 0 {
		return
	}
	cpu := float64(processCPU() - c.start)
	b.ReportMetric(cpu/float64(b.N), "cpu-ns/op")
	if tokensPerOp > 0 && cpu > 0 {
		b.ReportMetric(float64(tokensPerOp)*float64(b.N)/(cpu/1e9), "tokens/cpu-s")
	}
}

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

// report adds cpu-ns/op to b.
func (c cpuTimer) report(b *testing.B) {
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-c.start)/float64(b.N), "cpu-ns/op")
	}
}

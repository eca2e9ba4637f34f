package bench

import (
	"runtime"
	"testing"
)

func TestHistQuantile(t *testing.T) {
	buckets := []float64{0, 1, 2, 4, 1e301}
	tests := []struct {
		name   string
		counts []uint64
		p      float64
		want   float64
	}{
		{"empty", []uint64{0, 0, 0, 0}, 0.99, 0},
		{"all in the first bucket", []uint64{10, 0, 0, 0}, 0.99, 1},
		{"tail in the third", []uint64{98, 1, 1, 0}, 0.99, 4},
		{"p99 below the tail", []uint64{990, 9, 1, 0}, 0.99, 2},
		{"unbounded last bucket reports its lower bound", []uint64{0, 0, 0, 5}, 0.5, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := histQuantile(tc.counts, buckets, tc.p); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRuntimeSinceCountsGC forces two collections between snapshots and expects to see them.
func TestRuntimeSinceCountsGC(t *testing.T) {
	a := readRuntime()
	runtime.GC()
	runtime.GC()
	r := readRuntime().since(a)
	if r.GCCycles < 2 || r.GCPauseMicros <= 0 || r.GCPauseMaxMicros <= 0 {
		t.Fatalf("%+v", r)
	}
}

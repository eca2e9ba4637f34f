package bench

import (
	"testing"

	"github.com/kvroute/kvroute/internal/hugepage"
)

// TestMeasureMemoryLatency: the buffer is the requested size in whole lines (at least two), and a load
// takes a positive time.
func TestMeasureMemoryLatency(t *testing.T) {
	for _, tc := range []struct{ ask, want int64 }{{1, 2 * chaseLine}, {64 << 10, 64 << 10}, {100*chaseLine + 5, 100 * chaseLine}} {
		m := MeasureMemoryLatency(tc.ask)
		if m.Bytes != tc.want || m.Nanos <= 0 {
			t.Fatalf("MeasureMemoryLatency(%d) = %+v, want %d bytes and a positive time", tc.ask, m, tc.want)
		}
	}
	got := IndexMemoryLatencies([]*IndexerRun{{IndexBytes: 40 << 20}, {IndexBytes: 48 << 20}})
	if len(got) != 3 || got[0].Bytes != 1<<20 || got[1].Bytes != 32<<20 || got[2].Bytes != 48<<20 {
		t.Fatalf("IndexMemoryLatencies sizes %+v, want 1 MiB, 32 MiB and the largest heap", got)
	}
	if got := IndexMemoryLatencies([]*IndexerRun{{IndexBytes: 4 << 20}}); len(got) != 2 {
		t.Fatalf("an index under 32 MiB adds no size: %+v", got)
	}
}

// TestMeasureHugeMemoryLatency: on a host with transparent huge pages the chase runs through a mapping
// advised for them (hugepage.Mapped, TestMapped) and takes a positive time; elsewhere HugeNanos is 0.
func TestMeasureHugeMemoryLatency(t *testing.T) {
	m := MeasureHugeMemoryLatency(8 << 20)
	if m.Bytes != 8<<20 {
		t.Fatalf("MeasureHugeMemoryLatency(8 MiB) = %+v", m)
	}
	if _, err := hugepage.Mode(); err != nil {
		if m.HugeNanos != 0 {
			t.Fatalf("no THP here (%v), yet HugeNanos %v", err, m.HugeNanos)
		}
		t.Skip("no transparent huge pages here")
	}
	if m.HugeNanos <= 0 {
		t.Fatalf("THP available, HugeNanos %v", m.HugeNanos)
	}
}

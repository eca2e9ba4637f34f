package bench

import (
	"testing"
	"time"
)

// TestStallCounter: each gap is counted under every bound it exceeds, the lost time sums the gaps over 5
// µs, and the rates are per second of the time measured.
func TestStallCounter(t *testing.T) {
	var c stallCounter
	for _, g := range []time.Duration{100 * time.Nanosecond, 5 * time.Microsecond, 7 * time.Microsecond, 20 * time.Microsecond, 60 * time.Microsecond, 2 * time.Millisecond} {
		c.add(g)
	}
	got := c.result("before", 500*time.Millisecond)
	want := HostStalls{When: "before", Seconds: 0.5, Over5us: 8, Over10us: 6, Over50us: 4, Over1ms: 2, MaxMicros: 2000, LostPercent: 100 * 2087e-6 / 0.5}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got := c.result("after", 0); got != (HostStalls{When: "after"}) {
		t.Fatalf("no time measured: %+v", got)
	}
}

// TestMeasureStalls: the probe spins for at most the time asked, less its yields (on a loaded machine
// the yields can take most of it, so only the first slice is sure), and its counts are nested.
func TestMeasureStalls(t *testing.T) {
	s := MeasureStalls("before", 30*time.Millisecond)
	if s.When != "before" || s.Seconds < stallSlice.Seconds() || s.Seconds > 0.2 {
		t.Fatalf("measured %+v, want between one slice (%v) and 30 ms", s, stallSlice)
	}
	if s.Over5us < s.Over10us || s.Over10us < s.Over50us || s.Over50us < s.Over1ms || s.LostPercent < 0 || s.LostPercent > 100 {
		t.Fatalf("counts not nested: %+v", s)
	}
}

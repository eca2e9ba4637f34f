package bench

import (
	"runtime"
	"time"
)

// HostStalls is how often a thread that never blocks is stopped anyway: one goroutine, locked to its
// thread, reads the monotonic clock in a loop with nothing else running, and every gap between two
// consecutive reads is a time the thread did not run (an interrupt, the guest kernel running something
// else, or the host not running the vCPU). The index bench reports it beside its read latency: a query
// of a few µs that a 10–20 µs stall lands in is a slow query that no layout can shorten, and how many a
// host has varies by an order of magnitude from one machine (or hour) to the next (docs/benchmarks.md,
// "What the 20 s tail is not").
type HostStalls struct {
	// When names the measurement: "before" the runs, or "after" them.
	When    string  `json:"when"`
	Seconds float64 `json:"seconds"`
	// Per second: gaps over 5 µs, 10 µs, 50 µs and 1 ms.
	Over5us  float64 `json:"over_5us_per_s"`
	Over10us float64 `json:"over_10us_per_s"`
	Over50us float64 `json:"over_50us_per_s"`
	Over1ms  float64 `json:"over_1ms_per_s"`
	// MaxMicros is the longest gap.
	MaxMicros float64 `json:"max_us"`
	// LostPercent is the share of the time in gaps over 5 µs.
	LostPercent float64 `json:"lost_percent"`
}

// stallBounds are the gaps HostStalls counts, in its fields' order.
var stallBounds = [4]time.Duration{5 * time.Microsecond, 10 * time.Microsecond, 50 * time.Microsecond, time.Millisecond}

// stallCounter tallies gaps.
type stallCounter struct {
	over    [4]int
	lost    time.Duration
	longest time.Duration
}

func (c *stallCounter) add(gap time.Duration) {
	for i, b := range stallBounds {
		if gap > b {
			c.over[i]++
		}
	}
	if gap > stallBounds[0] {
		c.lost += gap
	}
	c.longest = max(c.longest, gap)
}

// result is the tally over elapsed.
func (c *stallCounter) result(when string, elapsed time.Duration) HostStalls {
	s := elapsed.Seconds()
	if s <= 0 {
		return HostStalls{When: when}
	}
	return HostStalls{When: when, Seconds: s, Over5us: float64(c.over[0]) / s, Over10us: float64(c.over[1]) / s, Over50us: float64(c.over[2]) / s,
		Over1ms: float64(c.over[3]) / s, MaxMicros: float64(c.longest) / 1e3, LostPercent: 100 * float64(c.lost) / float64(elapsed)}
}

// stallSlice is how long the probe spins between two yields to the Go scheduler: a goroutine that runs
// for 10 ms without one is preempted by the runtime (a signal and a trip through the scheduler, a
// stall of the probe's own making), so it yields first, outside any timed gap.
const stallSlice = time.Millisecond

// MeasureStalls spins for d on one locked thread and counts the gaps between consecutive clock reads.
// It collects garbage first so that no GC cycle runs beside it.
func MeasureStalls(when string, d time.Duration) HostStalls {
	runtime.GC()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var c stallCounter
	start := time.Now()
	prev, slice := time.Duration(0), time.Duration(0)
	var spun time.Duration // the time timed: d less the yields
	for {
		t := time.Since(start)
		c.add(t - prev)
		spun += t - prev
		prev = t
		if t >= d {
			break
		}
		if t-slice >= stallSlice {
			runtime.Gosched()
			prev = time.Since(start)
			slice = prev
		}
	}
	return c.result(when, spun)
}

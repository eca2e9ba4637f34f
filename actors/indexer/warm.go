package indexer

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/internal/routine"
)

var warmKind = routine.Named("indexer.warm")

// warmSlice is how many nodes a warming pass reads at a time (about 4 µs): a writer waits for the readers
// of a view to leave before it writes it, and a goroutine queued behind the warmer on its P waits for it
// to yield, so the pass leaves the gate and yields after each slice rather than holding either for a
// whole view (about 0.1 ms at 1,000 workers).
const warmSlice = 256

// warmLoop warms every shard's live view each period in which some query read it, until Stop.
func (x *Indexer) warmLoop(period time.Duration) {
	last := make([]int64, len(x.gates))
	routine.Every(x.warm, period, func() { x.warmPass(last) })
}

// warmPass warms the live view of every shard whose reads (gate.reads) moved from last, updates last, and
// returns how many it warmed.
func (x *Indexer) warmPass(last []int64) int {
	n := 0
	for i := range x.gates {
		g := &x.gates[i]
		if r := g.reads(); r != last[i] {
			last[i] = r
			x.sink += warmGate(g, &x.warmBusy)
			n++
		}
	}
	x.warmed.Add(uint64(n))
	return n
}

// warmGate reads the live view of one shard's gate (prefix.View.Warm), a slice at a time, and adds the
// time spent reading to *busy. It leaves the view without counting a read (gate.exit), so that its own
// passes do not keep it warming an idle index.
func warmGate(g *gate, busy *atomic.Int64) uint64 {
	var s uint64
	for lo := 0; ; lo += warmSlice {
		t0 := time.Now()
		v, k := g.enter(g.live.Load())
		n := v.Nodes()
		s += v.Warm(lo, lo+warmSlice)
		g.exit(k)
		busy.Add(int64(time.Since(t0)))
		if lo+warmSlice >= n {
			return s
		}
		runtime.Gosched()
	}
}

package scoring

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkApproxRecord: one op is one routed 8k-token prompt (512 blocks, a fresh chain each time)
// recorded on one of 16 workers round robin, plus the expiry sweep at the op's time (TTL 120 s, 10 ms
// between ops, so nothing expires within a run; each worker holds at most 65,536 blocks and is pruned to
// 80 % by the heap's expiry order when over).
func BenchmarkApproxRecord(b *testing.B) {
	a := NewApprox(ApproxConfig{TTL: 120 * time.Second, Capacity: 1 << 16, TargetRatio: 0.8})
	seq := make([]uint64, 512)
	now := time.Unix(0, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := range seq {
			seq[j] = uint64(i)<<20 | uint64(j)
		}
		now = now.Add(10 * time.Millisecond)
		a.Record(WorkerKey{WorkerID: uint64(i % 16)}, seq, now)
		a.Expire(now)
	}
}

// BenchmarkApproxExpireIdle: the tick's expiry sweep over W workers that declared a capacity and hold
// no predicted block (a router on KV events, none degraded), one of them holding blocks.
func BenchmarkApproxExpireIdle(b *testing.B) {
	for _, w := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			a := NewApprox(ApproxConfig{TTL: time.Hour, Capacity: 1 << 16, TargetRatio: 0.8})
			for id := range w {
				a.SetCapacity(WorkerKey{WorkerID: uint64(id)}, 4096)
			}
			now := time.Unix(0, 0)
			a.Record(WorkerKey{WorkerID: 7}, []uint64{1, 2, 3}, now)
			b.ResetTimer()
			for range b.N {
				if out := a.Expire(now); len(out) != 0 {
					b.Fatal("expired before the TTL")
				}
			}
		})
	}
}

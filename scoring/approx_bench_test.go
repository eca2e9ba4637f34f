package scoring

import (
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

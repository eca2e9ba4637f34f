package queue

import (
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// BenchmarkPushPop: one op is one Push plus one Pop on a queue holding N waiting requests (steady depth).
func BenchmarkPushPop(b *testing.B) {
	for _, p := range []scoring.QueuePolicy{scoring.QueueFCFS, scoring.QueueWSPT} {
		for _, n := range []int{16, 1024, 65536} {
			b.Run(string(p)+"/N="+strconv.Itoa(n), func(b *testing.B) {
				q, _ := New[uint64](p, epoch)
				for i := range n {
					q.Push(Key{Arrival: epoch.Add(time.Duration(i) * time.Millisecond), ISL: 1000 + i%4096, Strict: uint32(i % 3)}, uint64(i))
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					q.Push(Key{Arrival: epoch.Add(time.Duration(n+i) * time.Millisecond), ISL: 1000 + i%4096, Strict: uint32(i % 3)}, uint64(i))
					q.Pop()
				}
			})
		}
	}
}

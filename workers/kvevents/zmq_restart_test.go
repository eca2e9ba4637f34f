package kvevents

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestLongReplayCutShortIsCompleted: a replay of thousands of batches to a slow consumer overflows the
// ROUTER's send HWM (ZMQ's default 1000, which vLLM keeps), which drops a stretch of the answer or its
// tail silently. The subscriber asks again from the first missing seq; nothing is lost.
func TestLongReplayCutShortIsCompleted(t *testing.T) {
	p, _ := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*"})
	const n = 4000
	big := make([]uint32, 1024) // ~3 KB per batch: the kernel's socket buffers do not absorb the answer
	for i := range big {
		big[i] = uint32(1000 + i)
	}
	for i := uint64(0); i < n; i++ {
		b := testBatch(i)
		b.Events[0].TokenIDs = big
		if err := p.Publish(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the ring filled", func() bool { return p.Stats().Published == n })
	var col collector
	var slow atomic.Bool
	s, err := NewSubscriber(fastConfig(p.Addr(), p.ReplayAddr()), Handler{OnReset: col.onReset,
		OnBatch: func(seq uint64, b *Batch) {
			col.onBatch(seq, b)
			if slow.CompareAndSwap(false, true) {
				<-time.After(300 * time.Millisecond) // a slow consumer, while the answer piles up
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, s.Run)
	// The first live batch tells a fresh subscriber that it has to replay (if the connect did not).
	pump(t, p, n, 0, "the whole ring", func() bool { return col.count() >= n+1 })
	seqs, ids, _ := col.snapshot()
	checkContiguous(t, seqs, ids, 0, 0)
	st := s.Stats()
	if st.Lost != 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("stats %+v", st)
}

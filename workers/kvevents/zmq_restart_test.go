package kvevents

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
)

// gatedCollector is a collector whose handler can be held on one seq, as a subscriber goroutine busy
// elsewhere (a replay waiting out a dead engine) leaves live batches queued in the SUB socket.
type gatedCollector struct {
	collector
	holdSeq atomic.Int64 // -1: never hold
	held    chan struct{}
	release chan struct{}
}

func newGatedCollector() *gatedCollector {
	g := &gatedCollector{held: make(chan struct{}), release: make(chan struct{})}
	g.holdSeq.Store(-1)
	return g
}

func (g *gatedCollector) handler() Handler {
	return Handler{OnReset: g.onReset, OnBatch: func(seq uint64, b *Batch) {
		g.onBatch(seq, b)
		if int64(seq) == g.holdSeq.Swap(-1) {
			close(g.held)
			<-g.release
		}
	}}
}

// TestOldEngineLeftoversDropped: batches the old engine sent before it died are still queued in the SUB
// socket when the restart is found (by the digest check of an ambiguous seq). None of them may reach the
// consumer after the reset: not the one that triggered the check when its seq lies beyond the new
// engine's (the sequence rules took it for the batch after a gap), and not a later one whose seq equals
// the new engine's last+1 (in order, so nothing would ever check it). Either puts the old engine's
// blocks on top of the new engine's.
func TestOldEngineLeftoversDropped(t *testing.T) {
	tests := []struct {
		name string
		// ahead is how far the new engine's last seq is from the trigger's (the old engine's batch
		// next+2, after a gap at next+1) when the subscriber reads on.
		ahead int
	}{
		{"trigger beyond the new engine", -5},
		{"leftover at the new engine's last+1", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var skip atomic.Int64
			skip.Store(-1)
			p1, stop1 := startPublisher(t, PublisherConfig{
				Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*",
				SkipSend: func(seq uint64) bool { return int64(seq) == skip.Load() },
			})
			addr, replay := p1.Addr(), p1.ReplayAddr()
			col := newGatedCollector()
			s, err := NewSubscriber(fastConfig(addr, replay), col.handler())
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(t, s.Run)
			next := pump(t, p1, 0, 0, "10 batches", func() bool { return col.count() >= 10 })
			testutil.Within(t, testTimeout, "the pumped batches", func() bool { return col.count() == int(next) })

			// The handler holds on batch next while the old engine sends next+2..next+4 (next+1 is
			// lost: a gap) and dies.
			col.holdSeq.Store(int64(next))
			skip.Store(int64(next + 1))
			for i := next; i <= next+4; i++ {
				if err := p1.Publish(context.Background(), testBatch(i)); err != nil {
					t.Fatal(err)
				}
			}
			<-col.held
			testutil.Within(t, testTimeout, "the old engine's batches", func() bool { return p1.Stats().Published == next+5 })
			stop1()

			// The new engine publishes up to next+2+ahead while the subscriber is held.
			const base2 = 1 << 20
			newNext := uint64(int(next) + 3 + tc.ahead)
			port := addr[strings.LastIndex(addr, ":")+1:]
			p2, _ := startPublisher(t, PublisherConfig{Endpoint: "tcp://*:" + port, ReplayEndpoint: replay})
			for i := uint64(0); i < newNext; i++ {
				if err := p2.Publish(context.Background(), testBatch(base2+i)); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Within(t, testTimeout, "the new engine's batches", func() bool { return p2.Stats().Published == newNext })
			close(col.release)
			// Nothing more until the restart is handled, so the new engine's last stays where it is.
			testutil.Within(t, testTimeout, "the reset and the replay of the new engine", func() bool {
				seqs, _, resets := col.snapshot()
				return len(resets) > 0 && len(seqs) >= resets[0]+int(newNext)
			})

			pump(t, p2, newNext, base2, "the new engine's batches", func() bool {
				seqs, _, resets := col.snapshot()
				return len(seqs) >= resets[len(resets)-1]+int(newNext)+10
			})
			seqs, ids, resets := col.snapshot()
			checkContiguous(t, seqs[:resets[0]], ids[:resets[0]], 0, 0)
			checkContiguous(t, seqs[resets[len(resets)-1]:], ids[resets[len(resets)-1]:], 0, base2)
			if st := s.Stats(); len(resets) != 1 || st.Resets != 1 {
				t.Fatalf("resets at %v, stats %+v", resets, st)
			}
		})
	}
}

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
	testutil.Within(t, testTimeout, "the ring filled", func() bool { return p.Stats().Published == n })
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

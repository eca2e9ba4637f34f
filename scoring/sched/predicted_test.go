package sched

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// chainOfLen is a prompt of n blocks whose first `shared` blocks are shared with every other prompt of
// the same family (chain hashes name whole prefixes, so a shared prefix has the same hashes).
func chainOfLen(family uint64, shared, n int) []uint64 {
	local := make([]uint64, n)
	for i := range local {
		local[i] = uint64(i+1) * 1000003
		if i >= shared {
			local[i] ^= family << 32
		}
	}
	return scoring.ChainHashes(nil, local)
}

func predictedOverlap(p *predicted, chain []uint64, floor uint32, k scoring.WorkerKey) uint32 {
	var dst []prefix.Score
	for _, s := range p.scores(chain, floor, &dst) {
		if s.Worker == prefix.WorkerKey(k) {
			return s.Blocks
		}
	}
	return 0
}

// TestPredictedMarks: an exact repeat is credited in full, a grown prefix to within the stride, a
// prefix the chosen worker already held adds no marks, the latest decision of a prefix wins, the floor
// cuts the walk, and marks go at the TTL, with their worker, and beyond the bound.
func TestPredictedMarks(t *testing.T) {
	now := time.Unix(100, 0)
	w1, w2 := scoring.WorkerKey{WorkerID: 1}, scoring.WorkerKey{WorkerID: 2}
	p := newPredicted(5 * time.Second)
	a := chainOfLen(1, 10, 37)
	p.record(now, w1, a, 0)
	if got := predictedOverlap(p, a, 0, w1); got != 37 {
		t.Fatalf("exact repeat: %d blocks, want 37", got)
	}
	if got := len(p.marks); got != 37/predictStride+1 {
		t.Fatalf("%d marks for 37 new blocks, want %d", got, 37/predictStride+1)
	}
	// An agent's next turn: a's 37 blocks and 20 more. Credited to the last stride mark inside a (block 32).
	grown := chainOfLen(1, 10, 57)
	if got := predictedOverlap(p, grown, 0, w1); got != 32 {
		t.Fatalf("grown prefix: %d blocks, want 32", got)
	}
	// The floor (what the primary index already gives someone) stops the walk: nothing longer than 32.
	if got := predictedOverlap(p, grown, 32, w1); got != 0 {
		t.Fatalf("floor 32: %d blocks, want none", got)
	}
	// Another family shares only a's first 10 blocks: the mark at block 7.
	if got := predictedOverlap(p, chainOfLen(2, 10, 30), 0, w1); got != 8 {
		t.Fatalf("shared 10 blocks: %d, want 8", got)
	}
	// Sent again to worker 2, which held 16 of it: marks only beyond 16, and the repeat now names worker 2
	// at the end while the earlier marks below still name worker 1.
	before := len(p.fifo)
	p.record(now.Add(time.Second), w2, a, 16)
	if got := len(p.fifo) - before; got != 3 { // blocks 24, 32 and the last (37)
		t.Fatalf("%d marks beyond 16 held blocks, want 3", got)
	}
	if got := predictedOverlap(p, a, 0, w2); got != 37 {
		t.Fatalf("latest decision: worker 2 %d blocks, want 37", got)
	}
	// The exact repeat names its latest worker only; a prompt sharing a's first 20 blocks finds worker 1's
	// older marks below worker 2's.
	if got := predictedOverlap(p, a[:20], 0, w1); got != 16 {
		t.Fatalf("worker 1 keeps its older marks below: %d, want 16", got)
	}
	p.record(now, w1, a, 37) // fully held: nothing to remember
	// TTL: worker 1's marks expire at 105 s, worker 2's at 106 s.
	p.expireDue(now.Add(5 * time.Second))
	if got := predictedOverlap(p, a, 0, w1); got != 0 {
		t.Fatalf("after the TTL worker 1 still predicted %d blocks", got)
	}
	if got := predictedOverlap(p, a, 0, w2); got != 37 {
		t.Fatalf("worker 2's renewed marks expired early: %d", got)
	}
	p.removeWorker(w2)
	if got := predictedOverlap(p, a, 0, w2); got != 0 {
		t.Fatalf("the removed worker 2 still predicted %d blocks", got)
	}
	p.record(now.Add(2*time.Second), w2, a[:24], 0) // worker 2 back: its new marks count, not its old
	if got := predictedOverlap(p, a, 0, w2); got != 24 {
		t.Fatalf("worker 2 back: %d predicted, want 24 (its new decision's)", got)
	}
	p.expireDue(now.Add(time.Hour))
	if len(p.fifo) != 0 || p.head != 0 {
		t.Fatalf("fifo %d/%d after everything expired", p.head, len(p.fifo))
	}
	// The bound: the oldest marks go first.
	for i := range predictMaxMarks + 100 {
		p.record(now, w1, []uint64{uint64(i) + 1}, 0)
	}
	if len(p.marks) > predictMaxMarks || len(p.fifo)-p.head > predictMaxMarks {
		t.Fatalf("%d marks, %d queued: over the bound %d", len(p.marks), len(p.fifo)-p.head, predictMaxMarks)
	}
	if _, ok := p.marks[1]; ok {
		t.Fatal("the oldest mark survived the bound")
	}
	p.setTTL(0)
	if p.on() || predictedOverlap(p, a, 0, w1) != 0 {
		t.Fatal("off still predicts")
	}
}

// BenchmarkPredicted is predict-on-route's cost per decision of an 8k-token prompt (512 blocks of 16) in
// its worst case: nothing of it is cached anywhere, so the query walks every mark down to block 0 and
// the decision records a mark every predictStride blocks; the map holds a 5 s TTL's worth of such
// decisions at 1,000 per second.
func BenchmarkPredicted(b *testing.B) {
	p := newPredicted(5 * time.Second)
	now := time.Unix(0, 0)
	chains := make([][]uint64, 1024)
	for i := range chains {
		chains[i] = chainOfLen(uint64(i+1), 0, 512)
	}
	var dst []prefix.Score
	k := scoring.WorkerKey{WorkerID: 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Millisecond)
		p.expireDue(now)
		c := chains[i%len(chains)]
		p.scores(c, 0, &dst)
		p.record(now, k, c, 0)
	}
}

// TestPredictedSearchEnds: a grown prefix whose galloping search stops less than two strides below its
// last block (a 20-block turn grown to 30) used to loop forever holding the scheduler's lock: the
// bisection's midpoint rounded down to lo, a hit, so lo never moved.
func TestPredictedSearchEnds(t *testing.T) {
	p := newPredicted(5 * time.Second)
	w := scoring.WorkerKey{WorkerID: 1}
	p.record(time.Unix(100, 0), w, chainOfLen(1, 20, 20), 0) // marks at blocks 7, 15 and 19
	done := make(chan uint32, 1)
	go func() { done <- predictedOverlap(p, chainOfLen(1, 20, 30), 0, w) }()
	select {
	case got := <-done:
		if got != 16 {
			t.Fatalf("grown 20 → 30 blocks: %d predicted, want 16 (the last stride mark inside the 20)", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the predicted search did not end")
	}
}

// TestPredictedQueryTerminates: random decisions and queries over chains sharing prefixes of every
// length; every query returns (a search that loops would hang the test), and every score it reports
// is a live mark: the worker the latest decision sent that prefix to, at that length.
func TestPredictedQueryTerminates(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	p := newPredicted(5 * time.Second)
	now := time.Unix(0, 0)
	chains := make([][]uint64, 12)
	for i := range chains {
		chains[i] = chainOfLen(uint64(i%3+1), rng.IntN(40), 1+rng.IntN(80))
	}
	var dst []prefix.Score
	for step := range 4000 {
		now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		p.expireDue(now)
		c := chains[rng.IntN(len(chains))]
		c = c[:1+rng.IntN(len(c))]
		floor := uint32(rng.IntN(len(c) + 1))
		for _, s := range p.scores(c, floor, &dst) {
			m, ok := p.marks[c[s.Blocks-1]]
			if !ok || prefix.WorkerKey(m.worker) != s.Worker || s.Blocks <= floor {
				t.Fatalf("step %d: score %+v (floor %d) is not a live mark", step, s, floor)
			}
		}
		p.record(now, scoring.WorkerKey{WorkerID: uint64(rng.IntN(4))}, c, rng.IntN(len(c)+1))
	}
}

// TestPredictedRemovalAsDeleting: removing a worker rank outdates its marks where it used to delete
// them (a pass over every mark): random decisions, expiries, removals and ranks coming back, with the
// clock moving on; every query's scores equal those of an index that deletes a removed rank's marks at
// once, and the removals are forgotten once no older mark is left.
func TestPredictedRemovalAsDeleting(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 14))
	lazy, eager := newPredicted(2*time.Second), newPredicted(2*time.Second)
	now := time.Unix(0, 0)
	chains := make([][]uint64, 16)
	for i := range chains {
		chains[i] = chainOfLen(uint64(i%4+1), rng.IntN(30), 1+rng.IntN(60))
	}
	removals := 0
	var dl, de []prefix.Score
	for step := range 20_000 {
		now = now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
		lazy.expireDue(now)
		eager.expireDue(now)
		switch op := rng.IntN(10); {
		case op < 6:
			c := chains[rng.IntN(len(chains))]
			c, k, held := c[:1+rng.IntN(len(c))], scoring.WorkerKey{WorkerID: uint64(rng.IntN(5)), DPRank: uint32(rng.IntN(2))}, rng.IntN(20)
			lazy.record(now, k, c, held)
			eager.record(now, k, c, held)
		case op < 7:
			k := scoring.WorkerKey{WorkerID: uint64(rng.IntN(5)), DPRank: uint32(rng.IntN(2))}
			lazy.removeWorker(k)
			for h, m := range eager.marks { // what removing used to do
				if m.worker == k {
					delete(eager.marks, h)
				}
			}
			removals++
		default:
			c := chains[rng.IntN(len(chains))]
			c = c[:1+rng.IntN(len(c))]
			floor := uint32(rng.IntN(len(c) + 1))
			got, want := lazy.scores(c, floor, &dl), eager.scores(c, floor, &de)
			if len(got) != len(want) {
				t.Fatalf("step %d: %v, deleting at once gives %v", step, got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("step %d: %v, deleting at once gives %v", step, got, want)
				}
			}
		}
		if len(lazy.removed) > len(lazy.gone) || len(lazy.gone) > removals {
			t.Fatalf("step %d: %d removals remembered, %d listed", step, len(lazy.removed), len(lazy.gone))
		}
	}
	lazy.expireDue(now.Add(time.Hour))
	if len(lazy.removed) != 0 || len(lazy.gone) != 0 || len(lazy.marks) != 0 {
		t.Fatalf("everything expired: %d removals remembered, %d listed, %d marks", len(lazy.removed), len(lazy.gone), len(lazy.marks))
	}
	if removals == 0 {
		t.Fatal("no removal")
	}
}

// BenchmarkPredictedWorkerLeaving: a worker rank of 1,024 leaving while recent decisions hold 262,144
// marks (a busy fleet's TTL's worth), its decisions made again after.
func BenchmarkPredictedWorkerLeaving(b *testing.B) {
	p := newPredicted(time.Hour)
	now := time.Unix(0, 0)
	for i := range 1 << 18 {
		p.record(now, scoring.WorkerKey{WorkerID: uint64(i % 1024)}, []uint64{uint64(i) + 1}, 0)
	}
	var leave time.Duration
	b.ResetTimer()
	for i := range b.N {
		k := scoring.WorkerKey{WorkerID: uint64(i*7919) % 1024}
		t0 := time.Now()
		p.removeWorker(k)
		leave += time.Since(t0)
		p.record(now, k, []uint64{uint64(i) + 1<<40}, 0)
	}
	b.ReportMetric(float64(leave.Nanoseconds())/float64(b.N)/1e3, "leave-us")
}

package scoring

import (
	"slices"
	"testing"
	"time"
)

func TestApproxTTL(t *testing.T) {
	t0 := time.Unix(5000, 0)
	a := NewApprox(ApproxConfig{TTL: 10 * time.Second, Capacity: 100, TargetRatio: 0.8})
	w1, w2 := WorkerKey{WorkerID: 1}, WorkerKey{WorkerID: 2, DPRank: 1}
	a.Record(w1, []uint64{1, 2, 3, 4}, t0)
	a.Record(w2, []uint64{1, 2}, t0.Add(2*time.Second))
	a.Record(w1, []uint64{1, 2}, t0.Add(5*time.Second)) // refresh the prefix only

	if next, ok := a.NextExpiry(); !ok || !next.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("next expiry %v %v", next, ok)
	}
	if got := a.Expire(t0.Add(9 * time.Second)); len(got) != 0 {
		t.Fatalf("early expiry %v", got)
	}
	got := a.Expire(t0.Add(12 * time.Second))
	want := []Removal{{Worker: w1, Hashes: []uint64{4, 3}}, {Worker: w2, Hashes: []uint64{2, 1}}}
	if !slices.EqualFunc(got, want, func(x, y Removal) bool { return x.Worker == y.Worker && slices.Equal(x.Hashes, y.Hashes) }) {
		t.Fatalf("expired %v, want %v", got, want)
	}
	got = a.Expire(t0.Add(15 * time.Second))
	if len(got) != 1 || !slices.Equal(got[0].Hashes, []uint64{2, 1}) || a.Len(w1) != 0 {
		t.Fatalf("second expiry %v", got)
	}
	if _, ok := a.NextExpiry(); ok {
		t.Fatal("nothing should remain")
	}
}

func TestApproxCapacity(t *testing.T) {
	t0 := time.Unix(5000, 0)
	a := NewApprox(ApproxConfig{TTL: time.Minute, Capacity: 1 << 20, TargetRatio: 0.5})
	w := WorkerKey{WorkerID: 7}
	a.SetCapacity(w, 6)
	if from, ev := a.Record(w, []uint64{10, 11, 12, 13}, t0); len(ev) != 0 || from != 0 {
		t.Fatalf("under capacity evicted %v from %d", ev, from)
	}
	if from, _ := a.Record(w, []uint64{10, 11, 14}, t0.Add(time.Second/2)); from != 2 {
		t.Fatalf("held prefix %d, want 2", from)
	}
	a.Expire(t0) // nothing due
	// 5 + 3 = 8 > 6: prune to 3, oldest first, leaf side first.
	_, ev := a.Record(w, []uint64{20, 21, 22}, t0.Add(time.Second))
	if !slices.Equal(ev, []uint64{13, 12, 14, 11, 10}) || a.Len(w) != 3 {
		t.Fatalf("evicted %v, len %d", ev, a.Len(w))
	}
	// Many refreshes keep the lazy heap bounded.
	for i := range 1000 {
		a.Record(w, []uint64{20, 21, 22}, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := len(a.workers[w].heap); n > 2*3+64+3 {
		t.Fatalf("heap grew to %d", n)
	}
}

// TestApproxHeldAsTheHeaps: after random records (some evicting over capacity), expiries, capacity
// changes and removals, the workers Expire reads (held) are exactly those whose heap holds anything, and
// every block recorded and not yet expired, evicted or removed is still held.
func TestApproxHeldAsTheHeaps(t *testing.T) {
	a := NewApprox(ApproxConfig{TTL: 2 * time.Second, Capacity: 40, TargetRatio: 0.8})
	now := time.Unix(0, 0)
	seed := uint64(1)
	next := func(n uint64) uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return (seed >> 33) % n }
	for step := range 5000 {
		w := WorkerKey{WorkerID: next(6)}
		switch next(10) {
		case 0, 1, 2, 3:
			seq := make([]uint64, 1+next(30))
			for i := range seq {
				seq[i] = next(200)
			}
			a.Record(w, seq, now)
		case 4:
			a.SetCapacity(w, int(next(60)))
		case 5:
			a.RemoveWorker(w)
		default:
			now = now.Add(time.Duration(next(600)) * time.Millisecond)
			a.Expire(now)
		}
		for k, aw := range a.workers {
			if _, ok := a.held[k]; (len(aw.heap) > 0) && !ok {
				t.Fatalf("step %d: worker %v holds %d heap entries and is not listed for expiry", step, k, len(aw.heap))
			}
		}
		for k, aw := range a.held {
			if a.workers[k] != aw {
				t.Fatalf("step %d: worker %v is listed for expiry and not known", step, k)
			}
		}
	}
	a.Expire(now.Add(time.Hour))
	for k, aw := range a.workers {
		if len(aw.blocks) != 0 || len(aw.heap) != 0 {
			t.Fatalf("worker %v holds %d blocks after every TTL passed", k, len(aw.blocks))
		}
	}
	if len(a.held) != 0 {
		t.Fatalf("%d workers listed for expiry with nothing held", len(a.held))
	}
}

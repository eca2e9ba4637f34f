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

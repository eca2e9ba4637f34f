package bench

import (
	"slices"
	"testing"
)

func TestOracles(t *testing.T) {
	// Engine block = trace block = 4 tokens, so hits are easy to count by hand.
	o := Oracle{Blocks: Blocks{BlockSize: 4, Vocab: 100, Seed: 1}, BlockSize: 4}
	tr := &Trace{Requests: []Request{
		{InputLength: 12, HashIDs: []uint64{1, 2, 3}}, // 0 hits
		{InputLength: 8, HashIDs: []uint64{4, 5}},     // 0 hits
		{InputLength: 10, HashIDs: []uint64{1, 2, 6}}, // unbounded: 2 blocks (8 tokens); last block partial
		{InputLength: 8, HashIDs: []uint64{1, 2}},     // unbounded 2 blocks
	}}
	u, err := o.UnboundedHitRate(tr)
	if err != nil {
		t.Fatal(err)
	}
	// prompt tokens 12+8+10+8 = 38; hits 8+8 = 16.
	if u.PromptTokens != 38 || u.HitTokens != 16 {
		t.Fatalf("unbounded %+v", u)
	}
	// A 3-block pool:
	p, err := o.PooledHitRate(tr, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Request 1 → {1,2,3}. Request 2 → touch 5,4 → evict 3,2 (oldest, leaf first) → {1,4,5}.
	// Request 3 → hit 1 (4 tokens); touch 6(partial: not a full block, skipped),2,1 → {1,2,4,5} → evict 5 → {1,2,4}.
	// Request 4 → hit 1,2 (8 tokens).
	if p.HitTokens != 12 {
		t.Fatalf("pooled %+v, want 12 hit tokens", p)
	}
	if _, err := o.PooledHitRate(tr, 0); err == nil {
		t.Fatal("zero capacity accepted")
	}

	// Placed: every request on one worker is the pooled oracle of that worker's capacity.
	one, err := o.PlacedHitRate(tr, []int{0, 0, 0, 0}, 3)
	if err != nil || one.HitTokens != p.HitTokens || one.PromptTokens != p.PromptTokens || one.Name != "placed" {
		t.Fatalf("placed on one worker %+v (%v), pooled %+v", one, err, p)
	}
	// Requests 1 and 3 on worker 0, 2 and 4 on worker 1 (3 blocks each, nothing evicted): request 3 hits
	// 1,2 (8 tokens) on worker 0; request 4 finds nothing of chain 1 on worker 1.
	split, err := o.PlacedHitRate(tr, []int{0, 1, 0, 1}, 3)
	if err != nil || split.HitTokens != 8 || split.PromptTokens != 38 {
		t.Fatalf("placed on two workers %+v (%v)", split, err)
	}
	// Request 1 not served: request 3 misses what it would have cached (its prompt tokens still count),
	// and request 4 hits what request 3 computed: 8 tokens.
	lost, err := o.PlacedHitRate(tr, []int{-1, 1, 0, 0}, 3)
	if err != nil || lost.HitTokens != 8 || lost.PromptTokens != 38 || lost.Requests != 4 {
		t.Fatalf("placed with an unserved request %+v (%v)", lost, err)
	}
	if _, err := o.PlacedHitRate(tr, []int{0, 0}, 3); err == nil {
		t.Fatal("placements of the wrong length accepted")
	}
	if _, err := o.PlacedHitRate(tr, []int{0, 0, 0, 0}, 0); err == nil {
		t.Fatal("zero capacity accepted for the placed oracle")
	}
}

func TestLRULeafFirst(t *testing.T) {
	l := newLRU(3)
	for _, k := range []uint64{3, 2, 1} { // chain 1→2→3, touched leaf first
		l.Touch(k)
	}
	l.Touch(9)
	if ev := l.EvictOver(nil); !slices.Equal(ev, []uint64{3}) {
		t.Fatalf("evicted %v, want the leaf 3", ev)
	}
	if l.Touch(1) || !l.Has(2) || l.Len() != 3 {
		t.Fatal("touch of a held key inserted it")
	}
	l.capacity = 0
	if ev := l.EvictOver(nil); !slices.Equal(ev, []uint64{2, 9, 1}) {
		t.Fatalf("evicted %v", ev)
	}
	l.Touch(5) // reuses a freed node
	if len(l.nodes) != 4 || l.Len() != 1 {
		t.Fatalf("nodes %d len %d", len(l.nodes), l.Len())
	}
}

func TestSummaryKnownSamples(t *testing.T) {
	var s []float64
	for i := 100; i >= 1; i-- {
		s = append(s, float64(i))
	}
	got := Summarize(s)
	want := Summary{Count: 100, Mean: 50.5, Min: 1, P50: 50, P90: 90, P99: 99, P999: 100, Max: 100}
	if got != want {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	if Percentile(nil, 0.5) != 0 || Percentile([]float64{7}, 0.999) != 7 || Percentile([]float64{1, 2}, 0) != 1 {
		t.Fatal("edge percentiles")
	}
	xs, ys := CDF([]float64{1, 2, 3, 4}, 2)
	if xs[len(xs)-1] != 4 || ys[len(ys)-1] != 1 || ys[0] != 0.25 {
		t.Fatalf("cdf %v %v", xs, ys)
	}
}

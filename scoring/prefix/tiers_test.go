package prefix

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// tierScores returns each worker's (device, host, disk) overlap.
func tierScores(ix *Index, q []uint64) map[WorkerKey][3]uint32 {
	out := map[WorkerKey][3]uint32{}
	for _, s := range ix.FindMatches(q, nil) {
		if _, dup := out[s.Worker]; dup {
			panic("worker scored twice")
		}
		out[s.Worker] = [3]uint32{s.Blocks, s.Host, s.Disk}
	}
	return out
}

func TestTiers(t *testing.T) {
	w1, w2 := wk(1), wk(2)
	storeT := func(w WorkerKey, tier Tier, parent uint64, hasParent bool, bs []Block) op {
		return func(ix *Index) error { return ix.StoreTier(w, tier, parent, hasParent, bs) }
	}
	removeT := func(w WorkerKey, tier Tier, ehs ...uint64) op {
		return func(ix *Index) error { return ix.RemoveTier(w, tier, ehs) }
	}
	tests := []struct {
		name string
		ops  []op
		errs []error
		want map[WorkerKey][3]uint32
		size int // device entries
	}{
		{
			name: "a host block is not device overlap",
			ops:  []op{storeT(w1, TierHost, 0, false, blocks(10, 100, 4))},
			errs: []error{nil},
			want: map[WorkerKey][3]uint32{w1: {0, 4, 0}},
		},
		{
			name: "the device prefix continues on host, then on disk",
			ops: []op{
				store(w1, 0, false, blocks(10, 100, 2)),
				storeT(w1, TierHost, 101, true, blocks(12, 102, 2)),
				storeT(w1, TierDisk, 103, true, blocks(14, 104, 3)),
				store(w2, 0, false, blocks(10, 100, 5)),
			},
			errs: []error{nil, nil, nil, nil},
			want: map[WorkerKey][3]uint32{w1: {2, 2, 3}, w2: {5, 0, 0}},
			size: 7,
		},
		{
			name: "offloaded then evicted from the device: host keeps the prefix, the device loses it",
			ops: []op{
				store(w1, 0, false, blocks(10, 100, 4)),
				storeT(w1, TierHost, 0, false, blocks(10, 100, 4)),
				remove(w1, 102, 103),
			},
			errs: []error{nil, nil, nil},
			want: map[WorkerKey][3]uint32{w1: {2, 2, 0}},
			size: 2,
		},
		{
			name: "evicted from host: the device copy stays",
			ops: []op{
				store(w1, 0, false, blocks(10, 100, 4)),
				storeT(w1, TierHost, 0, false, blocks(10, 100, 4)),
				removeT(w1, TierHost, 100, 101, 102, 103),
			},
			errs: []error{nil, nil, nil},
			want: map[WorkerKey][3]uint32{w1: {4, 0, 0}},
			size: 4,
		},
		{
			name: "a host store under a device parent; removing a block the tier does not hold",
			ops: []op{
				store(w1, 0, false, blocks(10, 100, 2)),
				storeT(w1, TierHost, 101, true, blocks(12, 102, 1)),
				removeT(w1, TierDisk, 100),
				removeT(w1, TierHost, 555),
				storeT(w1, TierHost, 999, true, blocks(13, 103, 1)),
			},
			errs: []error{nil, nil, ErrBlockNotFound, ErrBlockNotFound, ErrParentNotFound},
			want: map[WorkerKey][3]uint32{w1: {2, 1, 0}},
			size: 2,
		},
		{
			name: "a disk tier created after host contains it",
			ops: []op{
				storeT(w1, TierHost, 0, false, blocks(10, 100, 3)),
				storeT(w1, TierDisk, 102, true, blocks(13, 103, 2)),
				store(w2, 0, false, blocks(10, 100, 1)),
			},
			errs: []error{nil, nil, nil},
			want: map[WorkerKey][3]uint32{w1: {0, 3, 2}, w2: {1, 0, 0}},
			size: 1,
		},
		{
			name: "clearing a worker clears every tier",
			ops: []op{
				store(w1, 0, false, blocks(10, 100, 2)),
				storeT(w1, TierHost, 101, true, blocks(12, 102, 2)),
				store(w2, 0, false, blocks(10, 100, 1)),
				clearW(1),
			},
			errs: []error{nil, nil, nil, nil},
			want: map[WorkerKey][3]uint32{w2: {1, 0, 0}},
			size: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := New()
			for i, o := range tc.ops {
				if err := o(ix); !errors.Is(err, tc.errs[i]) || (err == nil) != (tc.errs[i] == nil) {
					t.Fatalf("op %d: error %v, want %v", i, err, tc.errs[i])
				}
			}
			if got := tierScores(ix, seq(10, 8)); !mapsEqual(got, tc.want) {
				t.Fatalf("scores %v, want %v", got, tc.want)
			}
			if ix.Size() != tc.size {
				t.Fatalf("size %d, want %d", ix.Size(), tc.size)
			}
			if err := checkInvariants(ix); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestTiersRandomAgainstReference applies random stores and removals on every tier (on the device only
// for every third seed), clears and worker removals to the index and to refIndex, where each (worker,
// tier) is a worker of its own, and compares errors, device sizes, per-tier block counts and every
// worker's device, host and disk overlap. A View attached to the index, synced at random points, must
// then answer every query as the index does.
func TestTiersRandomAgainstReference(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runTiersRandom(t, seed, 1500) })
	}
}

func runTiersRandom(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	alpha := 3
	if seed >= 3 {
		alpha = 12
	}
	var keys []WorkerKey
	ids := uint64(3)
	if seed >= 4 {
		ids, ops = 160, ops/5 // 320 device slots and their lower ones: worker sets spill past the inline words
	}
	for id := range ids {
		for rank := range uint32(2) {
			keys = append(keys, WorkerKey{WorkerID: id + 1, DPRank: rank})
		}
	}
	// The reference holds (worker, tier) as worker id*4+tier.
	rk := func(w WorkerKey, tier Tier) WorkerKey {
		return WorkerKey{WorkerID: w.WorkerID*4 + uint64(tier), DPRank: w.DPRank}
	}
	ix, ref := New(), newRef()
	var view *View
	deviceOnly := seed%3 == 0
	held := func(k WorkerKey) []uint64 {
		var out []uint64
		for eh := range ref.handles[k] {
			out = append(out, eh)
		}
		slices.Sort(out)
		return out
	}
	for op := range ops {
		w := keys[rng.IntN(len(keys))]
		tier := Tier(0)
		switch x := rng.IntN(10); {
		case deviceOnly:
		case x >= 8:
			tier = TierDisk
		case x >= 5:
			tier = TierHost
		}
		if view == nil && op == ops/10 {
			view = ix.NewView() // attached to a non-empty index
		}
		k := rk(w, tier)
		var got, want error
		var desc string
		switch r := rng.IntN(200); {
		case r < 120:
			var parent uint64
			hasParent := false
			cur := ref.root
			if h := held(k); len(h) > 0 && rng.IntN(10) < 6 {
				parent, hasParent = h[rng.IntN(len(h))], true
				cur = ref.handles[k][parent].node
			} else if rng.IntN(10) == 0 {
				parent, hasParent = rng.Uint64(), true
			}
			path := cur.path
			var bs []Block
			for range 1 + rng.IntN(6) {
				local := uint64(1 + rng.IntN(alpha))
				if cur != nil {
					cur = cur.kids[local]
				}
				path = mix(path ^ local)
				bs = append(bs, Block{EngineHash: mix(path ^ w.WorkerID), LocalHash: local})
			}
			desc = fmt.Sprintf("store %v %v parent %#x/%v %v", w, tier, parent, hasParent, bs)
			got, want = ix.StoreTier(w, tier, parent, hasParent, bs), ref.store(k, parent, hasParent, bs)
		case r < 196:
			var ehs []uint64
			h := held(k)
			for range 1 + rng.IntN(4) {
				if len(h) > 0 && rng.IntN(100) < 85 {
					ehs = append(ehs, h[rng.IntN(len(h))])
				} else {
					ehs = append(ehs, rng.Uint64())
				}
			}
			desc = fmt.Sprintf("remove %v %v %x", w, tier, ehs)
			got, want = ix.RemoveTier(w, tier, ehs), ref.remove(k, ehs)
		case r < 199:
			desc = fmt.Sprintf("clear %d", w.WorkerID)
			ix.ClearWorker(w.WorkerID)
			for tr := range numTiers {
				ref.clear(rk(w, tr).WorkerID, false)
			}
		default:
			desc = fmt.Sprintf("remove-worker %d", w.WorkerID)
			ix.RemoveWorker(w.WorkerID)
			for tr := range numTiers {
				ref.clear(rk(w, tr).WorkerID, true)
			}
		}
		if !sameClass(got, want) {
			t.Fatalf("op %d %s: error %v, want class %v", op, desc, got, want)
		}
		if err := checkInvariants(ix); err != nil {
			t.Fatalf("op %d %s: invariant: %v", op, desc, err)
		}
		devSize := 0
		for _, w := range keys {
			devSize += len(ref.handles[rk(w, TierDevice)])
			union := map[uint64]bool{}
			for tr := range numTiers {
				for eh := range ref.handles[rk(w, tr)] {
					union[eh] = true
				}
			}
			if got := ix.WorkerBlocks(w); got != len(ref.handles[rk(w, TierDevice)]) {
				t.Fatalf("op %d %s: worker %v device blocks %d, want %d", op, desc, w, got, len(ref.handles[rk(w, TierDevice)]))
			}
			if got := ix.TierBlocks(w, TierDisk); got != len(union) {
				t.Fatalf("op %d %s: worker %v blocks on any tier %d, want %d", op, desc, w, got, len(union))
			}
		}
		if ix.Size() != devSize {
			t.Fatalf("op %d %s: size %d, want %d", op, desc, ix.Size(), devSize)
		}
		for range 4 {
			var q []uint64
			for x := ref.root; len(x.kids) > 0 && rng.IntN(8) != 0; {
				k := x.randomChild(rng)
				q = append(q, k)
				x = x.kids[k]
			}
			if got, want := tierScores(ix, q), refTierScores(ref, q, keys, rk); !mapsEqual(got, want) {
				t.Fatalf("op %d %s: query %v: %v, want %v", op, desc, q, got, want)
			}
		}
		if view != nil && rng.IntN(4) == 0 {
			ix.Sync(view)
			for range 8 {
				var q []uint64
				for x := ref.root; len(x.kids) > 0 && rng.IntN(8) != 0; {
					k := x.randomChild(rng)
					q = append(q, k)
					x = x.kids[k]
				}
				got, want := view.FindMatches(q, nil), ix.FindMatches(q, nil)
				sortScores(got)
				sortScores(want)
				if !slices.Equal(got, want) {
					t.Fatalf("op %d %s: view answers %v to %v, index %v", op, desc, got, q, want)
				}
				if got := matchScores(view, q); !slices.Equal(got, want) {
					t.Fatalf("op %d %s: view's Match answers %v to %v, index %v", op, desc, got, q, want)
				}
			}
		}
	}
}

// refTierScores computes each worker's device, host and disk overlap from the reference's per-tier
// workers.
func refTierScores(ref *refIndex, q []uint64, keys []WorkerKey, rk func(WorkerKey, Tier) WorkerKey) map[WorkerKey][3]uint32 {
	var path []*refNode
	for x := ref.root; len(path) < len(q); {
		if x = x.kids[q[len(path)]]; x == nil {
			break
		}
		path = append(path, x)
	}
	out := map[WorkerKey][3]uint32{}
	for _, w := range keys {
		var reach [numTiers]uint32 // prefix held on this tier or a faster one
		for tr := range numTiers {
			d := 0
			for d < len(path) {
				ok := false
				for u := TierDevice; u <= tr; u++ {
					ok = ok || path[d].workers[rk(w, u)]
				}
				if !ok {
					break
				}
				d++
			}
			reach[tr] = uint32(d)
		}
		if reach[TierDisk] > 0 {
			out[w] = [3]uint32{reach[0], reach[1] - reach[0], reach[2] - reach[1]}
		}
	}
	return out
}

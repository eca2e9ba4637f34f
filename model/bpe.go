package model

import (
	"container/heap"
	"hash/maphash"
	"math"
	"sync/atomic"
)

// noMerge is the rank word of a pair that has no merge rule; it compares greater than every real rule.
const noMerge = math.MaxUint64

// mergeTable maps a pair of symbol ids to rank<<32 | merged id. It is an open-addressing table with linear
// probing over a power-of-two array: the merge loop does one lookup per pair and per merge, and this is the
// hottest data structure of the tokenizer, so it avoids the Go map's hashing and bucket indirection.
type mergeTable struct {
	keys []uint64 // a<<32 | b, or emptyKey
	vals []uint64
	mask uint64
}

const emptyKey = math.MaxUint64

func newMergeTable(n int) *mergeTable {
	size := 1
	for size < n*2 {
		size <<= 1
	}
	m := &mergeTable{keys: make([]uint64, size), vals: make([]uint64, size), mask: uint64(size - 1)}
	for i := range m.keys {
		m.keys[i] = emptyKey
	}
	return m
}

func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}

// put keeps the first (lowest-rank) rule for a pair, as HF does when a merges list repeats a pair.
func (m *mergeTable) put(a, b uint32, v uint64) {
	k := uint64(a)<<32 | uint64(b)
	for i := mix(k) & m.mask; ; i = (i + 1) & m.mask {
		switch m.keys[i] {
		case emptyKey:
			m.keys[i], m.vals[i] = k, v
			return
		case k:
			return
		}
	}
}

func (m *mergeTable) get(a, b uint32) uint64 {
	k := uint64(a)<<32 | uint64(b)
	for i := mix(k) & m.mask; ; i = (i + 1) & m.mask {
		switch m.keys[i] {
		case k:
			return m.vals[i]
		case emptyKey:
			return noMerge
		}
	}
}

// smallWord is the longest symbol sequence merged with the array scan; longer ones use the heap.
const smallWord = 48

// merge applies the merge rules to syms (ids) in place and returns the result: always the lowest-ranked pair
// first, the leftmost of equal pairs first, as HF tokenizers and the reference JS port do.
func (m *mergeTable) merge(syms []uint32) []uint32 {
	if len(syms) < 2 {
		return syms
	}
	if len(syms) > smallWord {
		return m.mergeHeap(syms)
	}
	var buf [smallWord]uint64
	ranks := buf[:len(syms)-1]
	for i := range ranks {
		ranks[i] = m.get(syms[i], syms[i+1])
	}
	for {
		best, k := uint64(noMerge), -1
		for i, r := range ranks {
			if r < best {
				best, k = r, i
			}
		}
		if k < 0 {
			return syms
		}
		syms[k] = uint32(best)
		copy(syms[k+1:], syms[k+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[k:], ranks[k+1:])
		ranks = ranks[:len(ranks)-1]
		if k > 0 {
			ranks[k-1] = m.get(syms[k-1], syms[k])
		}
		if k < len(ranks) {
			ranks[k] = m.get(syms[k], syms[k+1])
		}
	}
}

// mergeHeap is merge for long words (a CJK sentence is one word; SentencePiece-style models have no
// pre-tokenizer at all): a doubly linked list over the original positions and a heap keyed by rank, then position.
func (m *mergeTable) mergeHeap(syms []uint32) []uint32 {
	n := len(syms)
	prev := make([]int32, n)
	next := make([]int32, n)
	for i := range n {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	h := make(pairHeap, 0, n)
	for i := 0; i < n-1; i++ {
		if r := m.get(syms[i], syms[i+1]); r != noMerge {
			h = append(h, pairItem{key: r>>32<<32 | uint64(i)})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		it := heap.Pop(&h).(pairItem)
		pos := int32(it.key & 0xffffffff)
		rank := it.key >> 32
		nx := next[pos]
		if syms[pos] == deadSym || nx < 0 {
			continue
		}
		r := m.get(syms[pos], syms[nx])
		if r == noMerge || r>>32 != rank {
			continue // stale: a neighbor changed since this pair was pushed
		}
		syms[pos] = uint32(r)
		syms[nx] = deadSym
		nn := next[nx]
		next[pos] = nn
		if nn >= 0 {
			prev[nn] = pos
			if r2 := m.get(syms[pos], syms[nn]); r2 != noMerge {
				heap.Push(&h, pairItem{key: r2>>32<<32 | uint64(pos)})
			}
		}
		if p := prev[pos]; p >= 0 {
			if r2 := m.get(syms[p], syms[pos]); r2 != noMerge {
				heap.Push(&h, pairItem{key: r2>>32<<32 | uint64(p)})
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

// deadSym marks a merged-away position in mergeHeap; no vocabulary has 2^32-1 ids.
const deadSym = math.MaxUint32

type pairItem struct{ key uint64 } // rank<<32 | position

type pairHeap []pairItem

func (h pairHeap) Len() int           { return len(h) }
func (h pairHeap) Less(i, j int) bool { return h[i].key < h[j].key }
func (h pairHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)        { *h = append(*h, x.(pairItem)) }
func (h *pairHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// wordCache remembers the ids of recently seen words. It is direct-mapped: one slot per hash, the newest word wins.
// Slots hold immutable entries behind atomic pointers, so readers on any goroutine never lock and a lost race
// only costs a recomputation. Memory is bounded by the slot count times the longest cached word.
type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[wordEntry]
	mask  uint64
}

type wordEntry struct {
	word string
	ids  []uint32
}

// maxCachedWord bounds the word length (bytes) worth caching; longer words are rare and merge fast enough.
const maxCachedWord = 64

func newWordCache(slots int) *wordCache {
	return &wordCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[wordEntry], slots), mask: uint64(slots - 1)}
}

func (c *wordCache) slot(word string) *atomic.Pointer[wordEntry] {
	return &c.slots[maphash.String(c.seed, word)&c.mask]
}

// reset empties the cache (benchmarks of the cold path).
func (c *wordCache) reset() {
	for i := range c.slots {
		c.slots[i].Store(nil)
	}
}

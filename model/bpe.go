package model

import (
	"hash/maphash"
	"math"
	"strings"
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
func (m *mergeTable) merge(syms []uint32, hs *heapScratch) []uint32 {
	if len(syms) < 2 {
		return syms
	}
	if len(syms) > smallWord {
		return m.mergeHeap(syms, hs)
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
func (m *mergeTable) mergeHeap(syms []uint32, hs *heapScratch) []uint32 {
	n := len(syms)
	hs.prev = slicesGrow(hs.prev, n)
	hs.next = slicesGrow(hs.next, n)
	prev, next := hs.prev, hs.next
	for i := range n {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	h := hs.heap[:0]
	for i := 0; i < n-1; i++ {
		if r := m.get(syms[i], syms[i+1]); r != noMerge {
			h = append(h, r>>32<<32|uint64(i))
		}
	}
	h.init()
	for len(h) > 0 {
		key := h.pop()
		pos := int32(key & 0xffffffff)
		rank := key >> 32
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
				h.push(r2>>32<<32 | uint64(pos))
			}
		}
		if p := prev[pos]; p >= 0 {
			if r2 := m.get(syms[p], syms[pos]); r2 != noMerge {
				h.push(r2>>32<<32 | uint64(p))
			}
		}
	}
	hs.heap = h[:0]
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

// heapScratch is mergeHeap's reusable memory (pooled with the other encode buffers).
type heapScratch struct {
	prev, next []int32
	heap       pairHeap
}

func slicesGrow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n, n+n/4)
	}
	return s[:n]
}

// deadSym marks a merged-away position in mergeHeap; no vocabulary has 2^32-1 ids.
const deadSym = math.MaxUint32

// pairHeap is a binary min-heap of rank<<32 | position keys (hand-written: container/heap boxes every element).
type pairHeap []uint64

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(k uint64) {
	*h = append(*h, k)
	a := *h
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *pairHeap) pop() uint64 {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	*h = a[:last]
	if last > 0 {
		(*h).down(0)
	}
	return top
}

func (h pairHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r] < h[l] {
			m = r
		}
		if h[i] <= h[m] {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// wordCache remembers the ids of recently seen words. It is two-way set associative: a word lives in one of the
// two slots of its set, a new word takes the first slot and pushes the previous occupant to the second. Slots hold
// immutable entries behind atomic pointers, so readers on any goroutine never lock and a lost race only costs a
// recomputation. Memory is bounded by the slot count times the longest cached word.
type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[wordEntry]
	mask  uint64 // of the set index (slots/2 - 1)
}

type wordEntry struct {
	word string
	ids  []uint32
}

// maxCachedWord bounds the word length (bytes) worth caching. A CJK sentence is one word of a few hundred bytes,
// so the bound is not small; longer words are rare.
const maxCachedWord = 160

func newWordCache(slots int) *wordCache {
	return &wordCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[wordEntry], slots), mask: uint64(slots/2 - 1)}
}

func (c *wordCache) set(word string) int {
	return int(maphash.String(c.seed, word)&c.mask) * 2
}

func (c *wordCache) get(word string) ([]uint32, bool) {
	i := c.set(word)
	if e := c.slots[i].Load(); e != nil && e.word == word {
		return e.ids, true
	}
	if e := c.slots[i+1].Load(); e != nil && e.word == word {
		return e.ids, true
	}
	return nil, false
}

// put copies word and ids (both usually point into caller buffers).
func (c *wordCache) put(word string, ids []uint32) {
	i := c.set(word)
	e := &wordEntry{word: strings.Clone(word), ids: append([]uint32(nil), ids...)}
	if old := c.slots[i].Swap(e); old != nil {
		c.slots[i+1].Store(old)
	}
}

// reset empties the cache (benchmarks of the cold path).
func (c *wordCache) reset() {
	for i := range c.slots {
		c.slots[i].Store(nil)
	}
}

package prefix

import (
	"math/bits"
	"slices"
)

// Group is an overlap shared by several worker slots of one view: every slot Word*64+b, for each bit b
// set in Set, holds the query's first Blocks blocks on its device.
type Group struct {
	Set    uint64
	Word   uint32
	Blocks uint32
}

// Matches is a query's answer as the walk finds it (View.Match): groups of worker slots with equal
// overlap, one per bitset word where workers drop out of the path, and each view's worker keys. A query
// at 1,000 workers writes some tens of Groups where FindMatches writes a 32-byte Score per worker (about
// 1,000), inside the views; a caller that maps slots to its own rows (scoring/sched caches that map per
// keys table) never reads a worker key either. Scores holds overlaps given per worker: those of views
// where some worker holds lower-tier blocks, and those of indexes that answer in Scores.
//
// The keys tables are immutable (a reused slot gets a new table), so Matches stays valid after the
// views are left and while their index is written. A Matches is reused with Reset; it is not safe for
// concurrent use.
type Matches struct {
	Scores []Score
	groups []Group
	parts  []part
	sets   scratch
}

// scratch holds a walk's sets of worker slots for views of more slots than the walk's stack buffers
// (2,048): a Matches keeps them from one query to the next, so that Match allocates nothing however
// large the fleet. Without them a query of a view of 5,000 slots allocated its active set each time,
// and fresh heap pages came with it (docs/benchmarks.md, "Page faults inside a read").
type scratch struct {
	active, first []uint64
	depth         []uint32
}

// words returns the active and first sets of n words each, reusing s's.
func (s *scratch) words(n int) (active, first []uint64) {
	if cap(s.active) < n {
		s.active, s.first = make([]uint64, n), make([]uint64, n)
	}
	return s.active[:n], s.first[:n]
}

// depths returns n prefix lengths, zero as a new array's, reusing s's.
func (s *scratch) depths(n int) []uint32 {
	if cap(s.depth) < n {
		s.depth = make([]uint32, n)
	}
	clear(s.depth[:n])
	return s.depth[:n]
}

// part is one view's groups, groups[previous part's end:end], and that view's worker keys by slot.
type part struct {
	keys []WorkerKey
	end  int
}

// Reset empties m, keeping its buffers.
func (m *Matches) Reset() {
	m.Scores, m.groups, m.parts = m.Scores[:0], m.groups[:0], m.parts[:0]
}

// Parts returns the number of views whose groups m holds.
func (m *Matches) Parts() int { return len(m.parts) }

// Part returns view i's worker keys by slot and its groups.
func (m *Matches) Part(i int) (keys []WorkerKey, groups []Group) {
	start := 0
	if i > 0 {
		start = m.parts[i-1].end
	}
	return m.parts[i].keys, m.groups[start:m.parts[i].end]
}

// Len returns the number of workers m gives an overlap for.
func (m *Matches) Len() int {
	n := len(m.Scores)
	for i := range m.groups {
		n += bits.OnesCount64(m.groups[i].Set)
	}
	return n
}

// Most returns the largest device overlap in m and whether some worker's prefix continues on a host or
// disk tier.
func (m *Matches) Most() (most uint32, tiered bool) {
	most, tiered = MostOf(m.Scores)
	for i := range m.groups {
		most = max(most, m.groups[i].Blocks)
	}
	return most, tiered
}

// MostOf returns the largest device overlap in scores and whether some worker's prefix continues on a
// host or disk tier.
func MostOf(scores []Score) (most uint32, tiered bool) {
	var lower uint32
	for i := range scores {
		most = max(most, scores[i].Blocks)
		lower |= scores[i].Host | scores[i].Disk
	}
	return most, lower != 0
}

// Clone returns a copy of m's answer (its groups, the views' keys tables it names, and its Scores; not
// its walk's scratch) that stays as it is while m is reset and reused: a queued request keeps its
// overlap so, some tens of Groups where Scores would be one per worker.
func (m *Matches) Clone() *Matches {
	return &Matches{Scores: slices.Clone(m.Scores), groups: slices.Clone(m.groups), parts: slices.Clone(m.parts)}
}

// AppendScores appends to out a Score per worker of m: the groups' in the order their walks found them,
// view by view, then m.Scores. It is what FindMatches of every view would have appended, in another
// order when some views were tiered.
func (m *Matches) AppendScores(out []Score) []Score {
	out = slices.Grow(out, m.Len())
	for i := range m.parts {
		keys, groups := m.Part(i)
		for _, g := range groups {
			out = emit(out, keys[g.Word<<6:], g.Set, g.Blocks)
		}
	}
	return append(out, m.Scores...)
}

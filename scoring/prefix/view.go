package prefix

import (
	"math/bits"
	"slices"
	"unsafe"
)

// View is the part of an index that queries read: the tree's nodes and, per worker slot, its key and
// tier. An Index embeds its own View; NewView makes a second one that Sync brings up to date, so that an
// owner can let queries read one while it writes the other (actors/indexer's shards do, so that reads
// never wait for writes). A View copies only what queries read (runs, children, worker sets): the
// handles, block ids and engine hashes stay in the Index.
type View struct {
	nodes []node      // by node index; nodes[rootNode] is the root
	keys  []WorkerKey // by slot, dense so that emitting scores touches one array; shared with the index, immutable
	tiers []slotTier  // by slot
	words int         // bitset words that cover every slot ever used
	lower int         // live lower-tier slots: FindMatches takes the device-only path while 0
}

// NewView returns a copy of ix's view and starts recording the nodes ix writes, for Sync. An index keeps
// one such view: Sync consumes the record.
func (ix *Index) NewView() *View {
	v := &View{}
	ix.track = true
	for n := range ix.nodes {
		ix.touch(uint32(n))
	}
	ix.slotsDirty = true
	ix.Sync(v)
	return v
}

// Sync copies into v what ix changed since the last Sync: afterwards v answers every query as ix does.
// No query may read v meanwhile. Cost: the changed parts of the runs, and the child and worker sets, of
// the nodes written; not the index.
func (ix *Index) Sync(v *View) {
	ix.Seal()
	if len(v.nodes) < len(ix.nodes) {
		v.nodes = append(v.nodes, make([]node, len(ix.nodes)-len(v.nodes))...)
	}
	for _, n := range ix.dirty {
		src := &ix.nodes[n]
		src.dirty = false
		syncNode(&v.nodes[n], src)
		src.synced = uint32(len(src.hashes))
	}
	// Child tables copied whole above already hold their logged changes.
	for _, op := range ix.kidLog {
		if src := &ix.nodes[op.node]; src.kids.table && !src.kidsFull {
			if d := &v.nodes[op.node].kids; op.del {
				d.remove(op.hash)
			} else {
				d.add(op.hash, op.child)
			}
		}
	}
	for _, n := range ix.dirty {
		ix.nodes[n].kidsFull = false
	}
	ix.kidLog = ix.kidLog[:0]
	ix.dirty = ix.dirty[:0]
	if ix.slotsDirty {
		v.keys = ix.keys // immutable but for appends past every holder's end (newSlot)
		v.tiers = append(v.tiers[:0], ix.tiers...)
		ix.slotsDirty = false
	}
	v.words, v.lower = ix.words, ix.lower
}

// syncNode makes the view's copy d of a node answer queries as the index's src does, writing only the
// words that differ: a line Sync leaves alone stays valid in the caches of the readers' cores, where a
// line it writes (even with the value it held) moves to the writer's core, and the next query that reads
// it waits for the transfer. A shared node that a new worker joins, the one every query reads first, then
// loses one line to a Sync instead of all of them (its node, and at 10,000 workers its worker set's 600
// bytes past the inline words).
func syncNode(d, src *node) {
	// A run mostly grows at its end (a conversation's next turn): copy what changed.
	if k := len(src.hashes); k > cap(d.hashes) || cap(d.hashes) > cap(src.hashes) {
		// The copy keeps the index's capacity: spare room while the run grows, none once sealed.
		h := make([]uint64, k, cap(src.hashes))
		copy(h, src.hashes)
		d.hashes = h
	} else {
		syncSlice(&d.hashes, src.hashes, int(src.synced))
	}
	for i, w := range src.workers.inl {
		setIf(&d.workers.inl[i], w)
	}
	syncSlice(&d.workers.ext, src.workers.ext, 0)
	// A table's changes are replayed from the log (Sync) unless it was replaced (kidsFull); the rest is
	// copied, a table slot for slot.
	if !src.kids.table || src.kidsFull || !d.kids.table {
		setIf(&d.kids.first, src.kids.first)
		setIf(&d.kids.n, src.kids.n)
		setIf(&d.kids.table, src.kids.table)
		syncSlice(&d.kids.rest, src.kids.rest, 0)
	}
	// Whole chunks inside the part of the run the view already had are unchanged too.
	syncSlice(&d.sums, src.sums, min(len(d.sums), len(src.sums), wholeChunks(src.start, int(src.synced))))
	setIf(&d.parent, src.parent)
	setIf(&d.live, src.live)
	setIf(&d.start, src.start)
	setIf(&d.head, src.head)
	setIf(&d.tail, src.tail)
	setIf(&d.edges, src.edges)
}

// setIf sets *p to v unless it holds v already (syncNode).
func setIf[T comparable](p *T, v T) {
	if *p != v {
		*p = v
	}
}

// syncSlice makes *d equal src, whose first from elements it holds already, writing only the elements
// and the header that differ; it reallocates when *d lacks the room.
func syncSlice[S ~[]T, T comparable](d *S, src S, from int) {
	s := *d
	if cap(s) < len(src) {
		*d = append(s[:from:from], src[from:]...)
		return
	}
	s = s[:len(src)]
	for i := from; i < len(src); i++ {
		setIf(&s[i], src[i])
	}
	if len(*d) != len(s) || unsafe.SliceData(*d) != unsafe.SliceData(s) {
		*d = s
	}
}

// Nodes returns how many nodes v has (Warm's range).
func (v *View) Nodes() int { return len(v.nodes) }

// Warm reads what a query reads at nodes [lo, hi) of v: a word of every cache line of the nodes, their
// chunk sums, their worker sets' words past the inline ones (an allocation of their own, which a walk
// reads at every node it enters with slots there active) and their child tables; not the runs, which a
// query reads only where it leaves one (warming their tails too did not move the p99:
// docs/benchmarks.md). It returns their sum, so that the loads are kept, and writes nothing: it is a
// reader like FindMatches, and in a node it skips the words that Sync writes in the index's own view
// while readers are in it (warmSkip). Reading the live view every few milliseconds keeps the paths
// queries walk in the last-level cache, with the page-table entries that map them, while the writes
// stream through the rest of the index: on the conversation trace at 1,000 workers they are about
// 7,400 nodes a shard (1.5 MB), and a pass over a view takes 90–152 µs (actors/indexer's doc has the
// figures). The nodes are read as words, a line after another, rather than field by field: a pass
// reading ten fields a node kept less of the read p99's gain under writes (docs/benchmarks.md).
func (v *View) Warm(lo, hi int) uint64 {
	hi = min(hi, len(v.nodes))
	if lo >= hi {
		return 0
	}
	nodes := v.nodes[lo:hi]
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&nodes[0])), len(nodes)*nodeWords)
	var s uint64
	for i := 0; i < len(words); i += cacheLine / 8 {
		if k := i % nodeWords; k == warmSkip || k == warmSkip+1 {
			s += words[i+2] // the same line: i is a line's first word (a slice of whole lines of nodes)
			continue
		}
		s += words[i]
	}
	for i := range nodes {
		nd := &nodes[i]
		s += warmWords(nd.sums) + warmWords(nd.workers.ext)
		if nd.kids.table {
			for j := 0; j < len(nd.kids.rest); j += cacheLine / int(unsafe.Sizeof(kid{})) {
				s += nd.kids.rest[j].hash
			}
		}
	}
	return s
}

// warmWords reads a word of every cache line of w (Warm's chunk sums and worker-set words) and returns
// their sum.
func warmWords(w []uint64) uint64 {
	var s uint64
	for j := 0; j < len(w); j += cacheLine / 8 {
		s += w[j]
	}
	return s
}

// cacheLine is a cache line's size in bytes: Warm reads one word of each line.
const cacheLine = 64

// nodeWords is a node's size in words.
const nodeWords = int(unsafe.Sizeof(node{}) / 8)

// warmSkip is the first of the two words of a node that hold the fields Sync writes in the index's own
// nodes while queries read them (dirty and kidsFull, with parent, live and edges; synced, with start),
// which Warm must not read; the word two after each is in the same cache line.
const warmSkip = int(unsafe.Offsetof(node{}.parent) / 8)

// FindMatches appends to out, for every (worker, dp_rank) holding at least the first block of the query,
// the number of consecutive query blocks from the start that it holds. localHashes are the query's local
// block hashes. It does not modify the view and allocates nothing when out has room (for up to 2,048
// worker slots), so concurrent calls are safe while no writer runs.
func (v *View) FindMatches(localHashes []uint64, out []Score) []Score {
	var q Query
	q.Reset(localHashes)
	return v.FindMatchesQuery(&q, out)
}

// FindMatchesQuery is FindMatches of a prepared query; the chunk sums it computes stay in q for the next
// view (the other shards of a sharded index).
func (v *View) FindMatchesQuery(q *Query, out []Score) []Score {
	if len(q.hashes) == 0 {
		return out
	}
	if v.lower > 0 {
		return v.findTiered(q, out, nil)
	}
	return v.walk(q, out, nil)
}

// Match adds to m what FindMatchesQuery would append as Scores: the view's answer in groups of slots
// that hold the same overlap, with the view's worker keys (immutable, so m stays valid after the caller
// leaves the view). A view where some worker holds lower-tier blocks adds Scores instead. Once m has
// grown it allocates nothing, however many worker slots the view has: the walk's sets of slots past
// its stack buffers' 2,048 are m's.
func (v *View) Match(q *Query, m *Matches) {
	if len(q.hashes) == 0 {
		return
	}
	if v.lower > 0 {
		m.Scores = v.findTiered(q, m.Scores, &m.sets)
		return
	}
	v.walk(q, nil, m)
	m.parts = append(m.parts, part{keys: v.keys, end: len(m.groups)})
}

// walk is the device-only query: it appends a Score per worker to out, or, when m is not nil, a Group per
// bitset word and depth to m (out is then left alone).
func (v *View) walk(q *Query, out []Score, m *Matches) []Score {
	qh := q.hashes
	c, ok := v.nodes[rootNode].child(qh[0])
	if !ok {
		return out
	}
	var buf [32]uint64
	var active []uint64
	switch {
	case v.words <= len(buf):
		active = buf[:v.words]
	case m != nil:
		active, _ = m.sets.words(v.words)
	default:
		active = make([]uint64, v.words)
	}
	nd := &v.nodes[c]
	keys := v.keys
	total := 0
	for i := range active {
		active[i] = nd.workers.word(i)
		total += bits.OnesCount64(active[i])
	}
	if m == nil {
		out = slices.Grow(out, total) // every worker of the first node gets one Score: emit needs the room
	}
	depth := 0
	for {
		r := matchRun(nd, q)
		depth = int(nd.start) + r
		if r < len(nd.hashes) || depth == len(qh) {
			break
		}
		if c, ok = nd.child(qh[depth]); !ok {
			break
		}
		nd = &v.nodes[c]
		// Workers absent from the child drop out here; a worker can also be absent from a node and present
		// below it (removed from a middle block), so intersect rather than replace.
		cw := &nd.workers
		alive := uint64(0)
		for i, a := range active {
			if a == 0 {
				continue // nothing to drop or keep: the child's word (past the inline ones, a line elsewhere) is not read
			}
			x := cw.word(i)
			if d := a &^ x; d != 0 {
				if m != nil {
					m.groups = append(m.groups, Group{Set: d, Word: uint32(i), Blocks: uint32(depth)})
				} else {
					out = emit(out, keys[i<<6:], d, uint32(depth))
				}
			}
			active[i] = a & x
			alive |= a & x
		}
		if alive == 0 {
			return out
		}
	}
	for i, a := range active {
		if a == 0 {
			continue
		}
		if m != nil {
			m.groups = append(m.groups, Group{Set: a, Word: uint32(i), Blocks: uint32(depth)})
		} else {
			out = emit(out, keys[i<<6:], a, uint32(depth))
		}
	}
	return out
}

// emitKernel selects the vector emit where the CPU has it; tests switch it off to compare.
var emitKernel = haveEmitKernel

// emitKernelMin is the fewest Scores emit writes with the kernel: a call costs 25–40 ns before its first
// Score (the scalar loop 12–20 ns for one), so a staircase of single dropouts stays scalar. A variable
// so that tests can send every set through the kernel.
var emitKernelMin = 8

// emit appends a Score of depth blocks for every slot in the word set, whose keys start at keys[0]; out
// has room for them. With AVX-512 (emit_amd64.s) four slots take one masked load, a compress, two
// permutes and two masked stores: a query emitting a thousand Scores spent a quarter of its CPU in the
// scalar loop, 1.7–1.9 ns a Score in BenchmarkEmit, the kernel 0.66–0.85 ns. Without AVX-512, an AVX2
// kernel writes a Score a step (0.90 ns against the scalar loop's 2.09 on a Zen 3). The scalar loop is not
// inlined, and has no call inside, so that it keeps everything in registers: compiled inside the walk,
// it reloaded the walk's variables on every Score, and BSF (which on AMD also reads its result register)
// was given the register of the key loaded the Score before, chaining the loads.
//
//go:noinline
func emit(out []Score, keys []WorkerKey, set uint64, depth uint32) []Score {
	n, k := len(out), bits.OnesCount64(set)
	out = out[:n+k]
	if emitKernel && k >= emitKernelMin {
		_ = keys[63-bits.LeadingZeros64(set)]
		emitVector(&out[n], &keys[0], set, depth)
		return out
	}
	for j := n; j < len(out); j++ {
		out[j] = Score{Worker: keys[bits.TrailingZeros64(set)&63], Blocks: depth}
		set &= set - 1
	}
	return out
}

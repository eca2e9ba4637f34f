package prefix

import "math/bits"

// rootNode is the index of the root in Index.nodes; its run is empty and it is never freed.
const rootNode uint32 = 0

// noBlock stands for the root as a block position (a store without parent starts there).
const noBlock = ^uint32(0)

// maxInlineKids is how many children a node keeps in a slice, searched linearly, before it switches to a
// map. Most nodes have one or two children; the root and popular system prompts have many.
const maxInlineKids = 8

// bitset is a set of worker slots. Words past its length are zero, so nodes only grow their set when a
// high slot joins them.
type bitset []uint64

func (b bitset) has(slot uint32) bool {
	w := int(slot >> 6)
	return w < len(b) && b[w]&(1<<(slot&63)) != 0
}

func (b *bitset) set(slot uint32) {
	w := int(slot >> 6)
	for len(*b) <= w {
		*b = append(*b, 0)
	}
	(*b)[w] |= 1 << (slot & 63)
}

func (b bitset) unset(slot uint32) {
	if w := int(slot >> 6); w < len(b) {
		b[w] &^= 1 << (slot & 63)
	}
}

func (b bitset) empty() bool {
	for _, w := range b {
		if w != 0 {
			return false
		}
	}
	return true
}

func (b bitset) equal(o bitset) bool {
	if len(b) < len(o) {
		b, o = o, b
	}
	for i, w := range b {
		var v uint64
		if i < len(o) {
			v = o[i]
		}
		if w != v {
			return false
		}
	}
	return true
}

// andNot removes every member of o.
func (b bitset) andNot(o bitset) {
	for i := range min(len(b), len(o)) {
		b[i] &^= o[i]
	}
}

// each calls fn for every member in increasing order.
func (b bitset) each(fn func(slot uint32)) {
	for i, w := range b {
		for w != 0 {
			fn(uint32(i<<6 + bits.TrailingZeros64(w)))
			w &= w - 1
		}
	}
}

// inlineWords is how many words of a node's worker set live inside the node: slots 0..255 need no
// pointer chase on the query path.
const inlineWords = 4

// wset is a node's worker set: the first inlineWords words inline, the rest (slots 256 and up) behind a
// slice that stays nil for smaller fleets.
type wset struct {
	inl [inlineWords]uint64
	ext bitset
}

// word returns word i of the set.
func (s *wset) word(i int) uint64 {
	if i < inlineWords {
		return s.inl[i]
	}
	if j := i - inlineWords; j < len(s.ext) {
		return s.ext[j]
	}
	return 0
}

func (s *wset) has(slot uint32) bool {
	if i := int(slot >> 6); i < inlineWords {
		return s.inl[i]&(1<<(slot&63)) != 0
	}
	return s.ext.has(slot - inlineWords*64)
}

func (s *wset) set(slot uint32) {
	if i := int(slot >> 6); i < inlineWords {
		s.inl[i] |= 1 << (slot & 63)
		return
	}
	s.ext.set(slot - inlineWords*64)
}

func (s *wset) unset(slot uint32) {
	if i := int(slot >> 6); i < inlineWords {
		s.inl[i] &^= 1 << (slot & 63)
		return
	}
	s.ext.unset(slot - inlineWords*64)
}

func (s *wset) empty() bool {
	return s.inl == [inlineWords]uint64{} && s.ext.empty()
}

// only reports whether slot is the single member.
func (s *wset) only(slot uint32) bool {
	n := 0
	for _, w := range s.inl {
		n += bits.OnesCount64(w)
	}
	for _, w := range s.ext {
		n += bits.OnesCount64(w)
	}
	return n == 1 && s.has(slot)
}

func (s *wset) equal(o *wset) bool {
	return s.inl == o.inl && s.ext.equal(o.ext)
}

func (s *wset) clone() wset {
	return wset{inl: s.inl, ext: append(bitset(nil), s.ext...)}
}

// andNot removes every member of mask.
func (s *wset) andNot(mask bitset) {
	for i := range min(inlineWords, len(mask)) {
		s.inl[i] &^= mask[i]
	}
	if len(mask) > inlineWords {
		s.ext.andNot(mask[inlineWords:])
	}
}

// andNotAny is andNot, reporting whether it took a member out.
func (s *wset) andNotAny(mask bitset) bool {
	var hit uint64
	for i := range min(inlineWords, len(mask)) {
		hit |= s.inl[i] & mask[i]
		s.inl[i] &^= mask[i]
	}
	for i := range min(len(s.ext), max(len(mask)-inlineWords, 0)) {
		hit |= s.ext[i] & mask[inlineWords+i]
		s.ext[i] &^= mask[inlineWords+i]
	}
	return hit != 0
}

// bits returns the set as a plain bitset (a copy).
func (s *wset) bits() bitset {
	b := make(bitset, inlineWords+len(s.ext))
	copy(b, s.inl[:])
	copy(b[inlineWords:], s.ext)
	return b
}

// each calls fn for every member in increasing order.
func (s *wset) each(fn func(slot uint32)) {
	bitset(s.inl[:]).each(fn)
	s.ext.each(func(slot uint32) { fn(slot + inlineWords*64) })
}

// kid is a child reference: the first local hash of the child's run and the child's index.
type kid struct {
	hash uint64
	node uint32
}

// children is a node's child set. The first child is inline (most nodes have at most one, and the query
// path then touches nothing outside the node), up to maxInlineKids in a slice, more in an
// open-addressing table kept in the same slice (the end of a shared system prompt, where every
// conversation branches, has thousands). The table is one array of slots, so a lookup reads the slot
// its hash lands on and the few after it: a Go map read its header, directory, table and group first,
// four dependent loads, each a cache and TLB miss on a query whose path went cold (docs/benchmarks.md,
// "What a cold read costs").
type children struct {
	first kid
	rest  []kid  // children 2..n; in a table, its slots (a power of two; node 0, the root, marks a free one)
	n     uint32 // children
	table bool   // rest is a table and first is unused
}

// minKidTable is a new table's size: the ninth child finds it under half full.
const minKidTable = 32

// kidHome is hash h's first slot in a table of 2^k slots (a multiply-shift: the local hashes are already
// uniform, the multiply only spreads any structure in them over the top bits).
func kidHome(h uint64, k int) int { return int((h * 0x9e3779b97f4a7c15) >> (64 - k)) }

// slot returns the table slot holding h, or the free slot that ends h's probe run, and whether h is
// there.
func (c *children) slot(h uint64) (int, bool) {
	mask := len(c.rest) - 1
	for i := kidHome(h, bits.TrailingZeros(uint(len(c.rest)))); ; i = (i + 1) & mask {
		if s := &c.rest[i]; s.node == 0 || s.hash == h {
			return i, s.node != 0
		}
	}
}

func (c *children) get(h uint64) (uint32, bool) {
	if c.table {
		i, ok := c.slot(h)
		return c.rest[i].node, ok
	}
	if c.n == 0 {
		return 0, false
	}
	if c.first.hash == h {
		return c.first.node, true
	}
	for _, k := range c.rest {
		if k.hash == h {
			return k.node, true
		}
	}
	return 0, false
}

func (c *children) len() int { return int(c.n) }

// add adds child k under hash h, or replaces the child under h in a table.
func (c *children) add(h uint64, k uint32) {
	switch {
	case c.table:
		c.put(h, k)
	case c.n == 0:
		c.first, c.n = kid{h, k}, 1
	case c.n < maxInlineKids:
		c.rest = append(c.rest, kid{h, k})
		c.n++
	default:
		t := children{table: true, rest: make([]kid, minKidTable)}
		c.each(func(x kid) { t.put(x.hash, x.node) })
		t.put(h, k)
		*c = t
	}
}

// put sets h's child in a table, doubling it first when it would be more than three quarters full.
func (c *children) put(h uint64, node uint32) {
	if 4*(int(c.n)+1) > 3*len(c.rest) {
		old := c.rest
		c.rest, c.n = make([]kid, 2*len(old)), 0
		writeFirst(c.rest) // slot probes (reads) before put writes
		for _, s := range old {
			if s.node != 0 {
				c.put(s.hash, s.node)
			}
		}
	}
	i, ok := c.slot(h)
	if !ok {
		c.n++
	}
	c.rest[i] = kid{h, node}
}

func (c *children) remove(h uint64) {
	if c.table {
		c.drop(h)
		return
	}
	if c.n == 0 {
		return
	}
	if c.first.hash == h {
		if len(c.rest) > 0 {
			c.first = c.rest[len(c.rest)-1]
			c.rest = c.rest[:len(c.rest)-1]
		}
		c.n--
		return
	}
	for i, k := range c.rest {
		if k.hash == h {
			last := len(c.rest) - 1
			c.rest[i] = c.rest[last]
			c.rest = c.rest[:last]
			c.n--
			return
		}
	}
}

// drop removes h from a table by backward shift: the slots after it that probed past it move up, so
// that no lookup meets a hole before its key.
func (c *children) drop(h uint64) {
	i, ok := c.slot(h)
	if !ok {
		return
	}
	k := bits.TrailingZeros(uint(len(c.rest)))
	mask := len(c.rest) - 1
	for j := (i + 1) & mask; c.rest[j].node != 0; j = (j + 1) & mask {
		if s := c.rest[j]; !probeStays(i, kidHome(s.hash, k), j) {
			c.rest[i] = s
			i = j
		}
	}
	c.rest[i] = kid{}
	c.n--
}

func (c *children) each(fn func(kid)) {
	if c.table {
		for _, s := range c.rest {
			if s.node != 0 {
				fn(s)
			}
		}
		return
	}
	if c.n > 0 {
		fn(c.first)
	}
	for _, k := range c.rest {
		fn(k)
	}
}

// node is a run of consecutive block positions that all hold the same workers. Runs split when a store
// branches inside them or when a worker joins or leaves part of them, and merge back with their only
// child when both hold the same workers, so a query compares hashes sequentially and does a child lookup
// and a worker-set intersection only where the set of workers changes or the tree branches. The fields
// the query reads come first and, up to 256 workers, need no pointer chase except to the run.
type node struct {
	hashes  []uint64 // local hashes of the run, in chain order; empty only for the root
	kids    children
	workers wset     // worker slots present at every position of the run
	ids     []uint32 // block id of each position; ids survive splits and merges
	parent  uint32   // index of the parent node
	live    bool     // false once freed
	dirty   bool     // written since the last Sync (Index.dirty holds it)
	// edges: head and tail hold the sums of the run's unaligned ends (chunks.go), computed by the last
	// Seal; cleared whenever the node is written.
	edges bool
	// kidsFull: the child set was replaced since the last Sync (Sync copies it whole rather than replaying
	// Index.kidLog).
	kidsFull bool
	synced   uint32 // leading hashes of the run that the synced View holds unchanged: Sync copies the rest
	// start is the depth of the run's first position (blocks above it on the path from the root); it
	// never changes for a position, so chunk sums survive splits and merges.
	start uint32
	// sums holds the chunk sums (chunks.go) of the chunks that lie whole inside the run, in order; a
	// prefix of them when the run changed since the last Seal (FindMatches compares the rest hash by hash).
	sums []uint64
	// head and tail are the partial chunk sums of the run's positions before its first whole chunk (but
	// its first position) and after its last; valid while edges.
	head, tail uint64
}

func (n *node) child(h uint64) (uint32, bool) { return n.kids.get(h) }
func (n *node) numKids() int                  { return n.kids.len() }

// addKid adds child c under its first hash h to node n.
func (ix *Index) addKid(n uint32, h uint64, c uint32) {
	nd := &ix.nodes[n]
	inline := !nd.kids.table
	nd.kids.add(h, c)
	ix.kidChanged(n, inline, kidOp{node: n, hash: h, child: c})
}

// removeKid removes the child with first hash h from node n.
func (ix *Index) removeKid(n uint32, h uint64) {
	nd := &ix.nodes[n]
	inline := !nd.kids.table
	nd.kids.remove(h)
	ix.kidChanged(n, inline, kidOp{node: n, hash: h, del: true})
}

// kidChanged records a child-set change of node n for Sync: a child table (a node with many children,
// such as the end of a shared system prompt where every conversation branches) is updated in the view by
// the logged change, not copied whole; an inline set is copied whole.
func (ix *Index) kidChanged(n uint32, wasInline bool, op kidOp) {
	ix.touch(n)
	nd := &ix.nodes[n]
	switch {
	case !ix.track || !nd.kids.table || nd.kidsFull:
	case wasInline:
		nd.kidsFull = true // just became a table
	default:
		ix.kidLog = append(ix.kidLog, op)
	}
}

// kidOp is one logged change of a child table.
type kidOp struct {
	node  uint32
	child uint32
	hash  uint64
	del   bool
}

// eachKid calls fn for every child index.
func (n *node) eachKid(fn func(c uint32)) { n.kids.each(func(k kid) { fn(k.node) }) }

// loc is where a block id currently sits.
type loc struct {
	node uint32
	off  uint32
}

// newNode returns the index of a fresh live node. A freed node's run buffers are reused, so the
// split-and-merge churn of removals does not allocate.
func (ix *Index) newNode(parent uint32) uint32 {
	var n uint32
	if k := len(ix.freeNodes); k > 0 {
		n = ix.freeNodes[k-1]
		ix.freeNodes = ix.freeNodes[:k-1]
	} else {
		n = uint32(len(ix.nodes))
		ix.nodes = append(ix.nodes, node{})
	}
	nd := &ix.nodes[n]
	pd := &ix.nodes[parent]
	nd.parent = parent
	nd.start = pd.start + uint32(len(pd.hashes))
	nd.live = true
	nd.kidsFull = true
	ix.touch(n)
	return n
}

// touch records that node n's query fields (run, children, workers) changed, for the next Sync.
func (ix *Index) touch(n uint32) {
	nd := &ix.nodes[n]
	nd.edges = false // the run may change: its edge sums wait for the next Seal
	if ix.track && !nd.dirty {
		nd.dirty = true
		ix.dirty = append(ix.dirty, n)
	}
}

// maxPooledRun bounds the run buffers a freed node keeps for reuse.
const maxPooledRun = 256

func (ix *Index) freeNode(n uint32) {
	nd := &ix.nodes[n]
	keep := node{dirty: nd.dirty}
	if cap(nd.hashes) <= maxPooledRun {
		keep.hashes, keep.ids, keep.sums = nd.hashes[:0], nd.ids[:0], nd.sums[:0]
	}
	*nd = keep
	ix.freeNodes = append(ix.freeNodes, n)
}

func (ix *Index) newID(n uint32, off int) uint32 {
	l := loc{node: n, off: uint32(off)}
	if k := len(ix.freeIDs); k > 0 {
		id := ix.freeIDs[k-1]
		ix.freeIDs = ix.freeIDs[:k-1]
		ix.locs[id] = l
		return id
	}
	ix.locs = append(ix.locs, l)
	return uint32(len(ix.locs) - 1)
}

// locate returns the node and offset of a block id; the root is (rootNode, -1).
func (ix *Index) locate(id uint32) (uint32, int) {
	if id == noBlock {
		return rootNode, -1
	}
	l := ix.locs[id]
	return l.node, int(l.off)
}

// appendPos adds one position at the end of node n's run.
func (ix *Index) appendPos(n uint32, h uint64) uint32 {
	ix.touch(n)
	nd := &ix.nodes[n]
	id := ix.newID(n, len(nd.hashes))
	nd.hashes = append(nd.hashes, h)
	nd.ids = append(nd.ids, id)
	return id
}

// split cuts node n before offset at (0 < at < run length). n keeps the head and its index, so its parent
// is untouched; the tail becomes n's only child and takes over n's children (and the sums of its whole
// chunks). Cost: the tail's length plus its number of children.
func (ix *Index) split(n uint32, at int) uint32 {
	t := ix.newNode(n)
	nd, td := &ix.nodes[n], &ix.nodes[t]
	td.start = nd.start + uint32(at)
	td.hashes = append(td.hashes[:0], nd.hashes[at:]...)
	td.ids = append(td.ids[:0], nd.ids[at:]...)
	if skip := int(firstChunk(td.start) - firstChunk(nd.start)); skip < len(nd.sums) {
		td.sums = append(td.sums[:0], nd.sums[skip:]...)
	}
	nd.sums = nd.sums[:min(len(nd.sums), wholeChunks(nd.start, at))]
	td.workers = nd.workers.clone()
	td.kids = nd.kids
	nd.kids = children{}
	nd.kids.add(td.hashes[0], t)
	td.kidsFull, nd.kidsFull = true, true
	td.eachKid(func(c uint32) { ix.nodes[c].parent = t })
	for j, id := range td.ids {
		ix.locs[id] = loc{node: t, off: uint32(j)}
	}
	nd.hashes, nd.ids = clip(nd.hashes, at), clip(nd.ids, at)
	nd.synced = min(nd.synced, uint32(at))
	ix.touch(n)
	return t
}

// reserve makes room in fresh node n's run for the k blocks a store is about to append: once a store
// branches off into a new node, every block after it is new too. Runs sized by append kept up to half
// their room spare (2.5 B per (block, worker) on the conversation trace, with the view's copy).
func (ix *Index) reserve(n uint32, k int) {
	if nd := &ix.nodes[n]; cap(nd.hashes) < k {
		nd.hashes, nd.ids = make([]uint64, 0, k), make([]uint32, 0, k)
		if c := wholeChunks(nd.start, k); cap(nd.sums) < c {
			nd.sums = make([]uint64, 0, c)
		}
	}
}

// clip truncates s to n and gives back the capacity when more than half of it would be wasted.
func clip[T any](s []T, n int) []T {
	if cap(s) > 64 && cap(s) > 4*n {
		return append([]T(nil), s[:n]...)
	}
	return s[:n]
}

// tryMerge absorbs the only child of n into n when both hold the same workers, undoing splits that no
// longer separate anything. Cost: the child's length plus its number of children.
func (ix *Index) tryMerge(n uint32) bool {
	nd := &ix.nodes[n]
	if n == rootNode || !nd.live || nd.numKids() != 1 {
		return false
	}
	var c uint32
	nd.eachKid(func(k uint32) { c = k })
	cd := &ix.nodes[c]
	if !nd.workers.equal(&cd.workers) {
		return false
	}
	base := len(nd.hashes)
	nd.hashes = append(nd.hashes, cd.hashes...)
	nd.ids = append(nd.ids, cd.ids...)
	mergeSums(nd, base, cd)
	for j, id := range cd.ids {
		ix.locs[id] = loc{node: n, off: uint32(base + j)}
	}
	nd.kids = cd.kids
	nd.kidsFull = true
	nd.eachKid(func(k uint32) { ix.nodes[k].parent = n })
	ix.freeNode(c)
	ix.touch(n)
	return true
}

func trailingZeros(x uint64) int { return bits.TrailingZeros64(x) }

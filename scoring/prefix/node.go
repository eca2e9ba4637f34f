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

// only reports whether slot is the single member.
func (b bitset) only(slot uint32) bool {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n == 1 && b.has(slot)
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

// kid is an inline child reference: the first local hash of the child's run and the child's index.
type kid struct {
	hash uint64
	node uint32
}

// node is a run of consecutive block positions that all hold the same workers. Runs split when a store
// branches inside them or when a worker joins or leaves part of them, and merge back with their only
// child when both hold the same workers, so a query compares hashes sequentially and does a child lookup
// and a worker-set intersection only where the set of workers changes or the tree branches.
type node struct {
	hashes  []uint64          // local hashes of the run, in chain order; empty only for the root
	ids     []uint32          // block id of each position; ids survive splits and merges
	ehs     []uint64          // engine hash of the store that created each position: the fast path to a handle
	workers bitset            // worker slots present at every position of the run
	parent  uint32            // index of the parent node
	kids    []kid             // children while there are at most maxInlineKids
	kidMap  map[uint64]uint32 // children by first local hash once there are more; kids is then nil
	live    bool              // false once freed
}

func (n *node) child(h uint64) (uint32, bool) {
	if n.kidMap != nil {
		c, ok := n.kidMap[h]
		return c, ok
	}
	for _, k := range n.kids {
		if k.hash == h {
			return k.node, true
		}
	}
	return 0, false
}

func (n *node) numKids() int {
	if n.kidMap != nil {
		return len(n.kidMap)
	}
	return len(n.kids)
}

func (n *node) addKid(h uint64, c uint32) {
	if n.kidMap != nil {
		n.kidMap[h] = c
		return
	}
	if len(n.kids) < maxInlineKids {
		n.kids = append(n.kids, kid{h, c})
		return
	}
	n.kidMap = make(map[uint64]uint32, 2*maxInlineKids)
	for _, k := range n.kids {
		n.kidMap[k.hash] = k.node
	}
	n.kidMap[h] = c
	n.kids = nil
}

func (n *node) removeKid(h uint64) {
	if n.kidMap != nil {
		delete(n.kidMap, h)
		return
	}
	for i, k := range n.kids {
		if k.hash == h {
			last := len(n.kids) - 1
			n.kids[i] = n.kids[last]
			n.kids = n.kids[:last]
			return
		}
	}
}

// eachKid calls fn for every child index.
func (n *node) eachKid(fn func(c uint32)) {
	if n.kidMap != nil {
		for _, c := range n.kidMap {
			fn(c)
		}
		return
	}
	for _, k := range n.kids {
		fn(k.node)
	}
}

// loc is where a block id currently sits.
type loc struct {
	node uint32
	off  uint32
}

// newNode returns the index of a fresh live node.
func (ix *Index) newNode(parent uint32) uint32 {
	var n uint32
	if k := len(ix.freeNodes); k > 0 {
		n = ix.freeNodes[k-1]
		ix.freeNodes = ix.freeNodes[:k-1]
		ix.nodes[n] = node{}
	} else {
		n = uint32(len(ix.nodes))
		ix.nodes = append(ix.nodes, node{})
	}
	nd := &ix.nodes[n]
	nd.parent = parent
	nd.live = true
	return n
}

func (ix *Index) freeNode(n uint32) {
	ix.nodes[n] = node{}
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
func (ix *Index) appendPos(n uint32, h, eh uint64) uint32 {
	nd := &ix.nodes[n]
	id := ix.newID(n, len(nd.hashes))
	nd.hashes = append(nd.hashes, h)
	nd.ids = append(nd.ids, id)
	nd.ehs = append(nd.ehs, eh)
	return id
}

// split cuts node n before offset at (0 < at < run length). n keeps the head and its index, so its parent
// is untouched; the tail becomes n's only child and takes over n's children. Cost: the tail's length plus
// its number of children.
func (ix *Index) split(n uint32, at int) uint32 {
	t := ix.newNode(n)
	nd, td := &ix.nodes[n], &ix.nodes[t]
	td.hashes = append([]uint64(nil), nd.hashes[at:]...)
	td.ids = append([]uint32(nil), nd.ids[at:]...)
	td.ehs = append([]uint64(nil), nd.ehs[at:]...)
	td.workers = append(bitset(nil), nd.workers...)
	td.kids, td.kidMap = nd.kids, nd.kidMap
	nd.kids, nd.kidMap = make([]kid, 1, 2), nil
	nd.kids[0] = kid{hash: td.hashes[0], node: t}
	td.eachKid(func(c uint32) { ix.nodes[c].parent = t })
	for j, id := range td.ids {
		ix.locs[id] = loc{node: t, off: uint32(j)}
	}
	nd.hashes, nd.ids, nd.ehs = clip(nd.hashes, at), clip(nd.ids, at), clip(nd.ehs, at)
	return t
}

// clip truncates s to n and gives back the capacity when more than half of it would be wasted.
func clip[T any](s []T, n int) []T {
	if cap(s) > 16 && cap(s) > 2*n {
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
	if !nd.workers.equal(cd.workers) {
		return false
	}
	base := len(nd.hashes)
	nd.hashes = append(nd.hashes, cd.hashes...)
	nd.ids = append(nd.ids, cd.ids...)
	nd.ehs = append(nd.ehs, cd.ehs...)
	for j, id := range cd.ids {
		ix.locs[id] = loc{node: n, off: uint32(base + j)}
	}
	nd.kids, nd.kidMap = cd.kids, cd.kidMap
	nd.eachKid(func(k uint32) { ix.nodes[k].parent = n })
	ix.freeNode(c)
	return true
}

func trailingZeros(x uint64) int { return bits.TrailingZeros64(x) }

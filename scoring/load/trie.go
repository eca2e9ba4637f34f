package load

import "slices"

// chainTrie is the union of the active prompt chains of one worker, as a compressed trie.
//
// A chain is a request's tracked block keys (scoring.ChainHashes or SequenceHashes). Each key identifies
// its block together with every block before it, so two chains that agree at position k agree on every
// position before it: the set of active chains is a tree, and one request's blocks already active on the worker are always a prefix of its chain. The trie
// stores each shared run of blocks once, on an edge, with the number of chains through it:
//
//   - the number of unique active blocks is the sum of the edge lengths, kept as a counter;
//   - adding or freeing a request walks one root path: O(branch points on the path), not O(blocks);
//   - the projection of a candidate request (its blocks not active here) is one walk down its chain.
//
// Within an edge the first disagreeing position is found by binary search, which the chain property makes
// exact. Every chain ends at a node (an insert that ends inside an edge splits it there), and a node that
// no chain ends at and that has a single child is merged with it, so the trie has at most two nodes per
// active chain. Freeing walks up from the node the chain ended at, so a request keeps a pointer, not its
// hashes. Nodes no chain ends at are never pointed to from outside, which is what makes merging safe.
type chainTrie struct {
	root   chainNode
	unique int // sum of the edge lengths of every node
}

// chainNode is one edge of the trie (the hashes from its parent down to it) and the node at its end.
type chainNode struct {
	key    uint64   // edge[0]: the child's key in its parent
	edge   []uint64 // the hashes of the edge; never written once set (splits share the array)
	count  int32    // chains through or ending at this node
	slot   int32    // index in parent.kids
	parent *chainNode
	kids   []*chainNode
	idx    map[uint64]*chainNode // key → kid, once kids outgrow a linear scan
}

// linearKids is the fan-out up to which a node finds a kid by scanning kids.
const linearKids = 8

func (n *chainNode) child(key uint64) *chainNode {
	if n.idx != nil {
		return n.idx[key]
	}
	for _, k := range n.kids {
		if k.key == key {
			return k
		}
	}
	return nil
}

func (n *chainNode) addKid(k *chainNode) {
	k.parent, k.slot = n, int32(len(n.kids))
	n.kids = append(n.kids, k)
	switch {
	case n.idx != nil:
		n.idx[k.key] = k
	case len(n.kids) > linearKids:
		n.idx = make(map[uint64]*chainNode, 2*len(n.kids))
		for _, kk := range n.kids {
			n.idx[kk.key] = kk
		}
	}
}

func (n *chainNode) dropKid(k *chainNode) {
	last := n.kids[len(n.kids)-1]
	n.kids[k.slot], last.slot = last, k.slot
	n.kids[len(n.kids)-1] = nil
	n.kids = n.kids[:len(n.kids)-1]
	if n.idx != nil {
		delete(n.idx, k.key)
	}
	k.parent = nil
}

// replaceKid puts k in old's place (same key).
func (n *chainNode) replaceKid(old, k *chainNode) {
	k.parent, k.slot = n, old.slot
	n.kids[old.slot] = k
	if n.idx != nil {
		n.idx[k.key] = k
	}
}

// common returns how many leading positions of edge and q agree, given that the first does (the key).
func common(edge, q []uint64) int {
	hi := min(len(edge), len(q))
	if edge[hi-1] == q[hi-1] {
		return hi
	}
	lo := 1 // edge[lo-1] == q[lo-1] and edge[hi-1] != q[hi-1]
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if edge[mid-1] == q[mid-1] {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// insert adds one chain (copying the part not yet in the trie) and returns the node it ends at, nil for
// an empty chain.
func (t *chainTrie) insert(h []uint64) *chainNode {
	n := &t.root
	for pos := 0; pos < len(h); {
		c := n.child(h[pos])
		if c == nil {
			leaf := &chainNode{key: h[pos], edge: slices.Clone(h[pos:]), count: 1}
			n.addKid(leaf)
			t.unique += len(leaf.edge)
			return leaf
		}
		m := common(c.edge, h[pos:])
		if m < len(c.edge) {
			c = t.split(c, m)
		}
		c.count++
		pos += m
		n = c
	}
	if n == &t.root {
		return nil
	}
	return n
}

// split cuts c's edge after m hashes and returns the new upper node; c keeps the lower part, so chains
// that end at c still do.
func (t *chainTrie) split(c *chainNode, m int) *chainNode {
	up := &chainNode{key: c.key, edge: c.edge[:m:m], count: c.count}
	c.parent.replaceKid(c, up)
	c.edge = c.edge[m:]
	c.key = c.edge[0]
	up.addKid(c)
	return up
}

// release removes one chain that insert ended at end.
func (t *chainTrie) release(end *chainNode) {
	if end == nil {
		return
	}
	var cut *chainNode // parent of the topmost removed node
	for n := end; n != &t.root; {
		p := n.parent
		n.count--
		if n.count == 0 {
			t.unique -= len(n.edge)
			p.dropKid(n)
			cut = p
		}
		n = p
	}
	switch {
	case end.count > 0:
		t.mergeDown(end)
	case cut != nil && cut != &t.root:
		t.mergeDown(cut)
	}
}

// mergeDown folds n into its only kid when no chain ends at n (the kid carries every chain through n).
// The kid survives, so pointers to nodes chains end at stay valid.
func (t *chainTrie) mergeDown(n *chainNode) {
	if len(n.kids) != 1 || n.kids[0].count != n.count {
		return
	}
	k := n.kids[0]
	edge := make([]uint64, 0, len(n.edge)+len(k.edge))
	k.edge = append(append(edge, n.edge...), k.edge...)
	k.key = n.key
	n.parent.replaceKid(n, k)
	n.kids, n.parent = nil, nil
}

// sharedPrefix returns how many leading hashes of q are active and how many chains hold all of them.
func (t *chainTrie) sharedPrefix(q []uint64) (int, int32) {
	n, pos := &t.root, 0
	var count int32
	for pos < len(q) {
		c := n.child(q[pos])
		if c == nil {
			break
		}
		m := common(c.edge, q[pos:])
		pos, count = pos+m, c.count
		if m < len(c.edge) {
			break
		}
		n = c
	}
	return pos, count
}

// activePrefix returns how many leading hashes of q are active (on some chain of the trie).
func (t *chainTrie) activePrefix(q []uint64) int {
	n, pos := &t.root, 0
	for pos < len(q) {
		c := n.child(q[pos])
		if c == nil {
			break
		}
		m := common(c.edge, q[pos:])
		pos += m
		if m < len(c.edge) {
			break
		}
		n = c
	}
	return pos
}

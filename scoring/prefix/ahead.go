package prefix

// Ahead walks a view's path for a query one node per Step, taking every run as matched whole, so that a
// caller about to query several views (the shards of actors/indexer) can step all their walks in turn
// first: each walk is a chain of dependent loads (node, child set, next node), and stepped in turn the
// chains' cache misses overlap instead of following one another. FindMatchesQuery then finds the path
// in the cache. A step reads what the walk reads at a node (the node, its child set, the start of its
// run or its chunk sums) and writes only the Ahead. The zero value is done; Reset starts it.
type Ahead struct {
	v     *View
	node  uint32
	steps uint32
	sink  uint64 // the loads' results, so that they are not dropped
}

// aheadSteps bounds the nodes an Ahead visits: the first levels of a path are the ones every query
// misses on (the long paths of a few conversations are left to the walk).
const aheadSteps = 8

// Reset starts a walk of v for q at the root.
func (a *Ahead) Reset(v *View, q *Query) {
	*a = Ahead{v: v}
	if len(q.hashes) == 0 {
		a.v = nil
	}
}

// Step visits the next node of the path and reports whether there was one.
func (a *Ahead) Step(q *Query) bool {
	if a.v == nil {
		return false
	}
	nd := &a.v.nodes[a.node]
	depth := int(nd.start) + len(nd.hashes)
	if depth >= len(q.hashes) || a.steps >= aheadSteps {
		a.v = nil
		return false
	}
	c, ok := nd.child(q.hashes[depth])
	if !ok {
		a.v = nil
		return false
	}
	a.node, a.steps = c, a.steps+1
	cd := &a.v.nodes[c]
	if len(cd.sums) > 0 {
		a.sink += cd.sums[0]
	}
	if len(cd.hashes) > 1 {
		a.sink += cd.hashes[1]
	}
	return true
}

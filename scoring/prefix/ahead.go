package prefix

// Ahead walks a view's path for a query one node per Step, taking every run as matched whole, so that a
// caller about to query several views (the shards of actors/indexer) can step all their walks in turn
// first: each walk is a chain of dependent loads (node, child set, next node), and stepped in turn the
// chains' cache misses overlap instead of following one another. FindMatchesQuery then finds the path
// in the cache. A step reads what the walk reads at a node (the node, its child set) and prefetches the
// start of the next node's run and chunk sums (touch2: on amd64 a prefetch, which retires without
// waiting for its line, where a load held the steps behind it until its miss was served; the cold floor's
// p99 15.6 against 18.3 µs, five pairs). Finding the path's nodes at once instead, by looking the query's
// chunks up in a table of each node's first chunk, was slower under writes in four forms: the lookups'
// and nodes' extra lines cost more than the chain they shortened (docs/benchmarks.md, "Path hints"). It
// writes only the Ahead. The zero value is done; Reset starts it.
type Ahead struct {
	v     *View
	node  uint32
	steps uint32
	sink  uint64 // touch2's results, so that loads made for it are not dropped
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
	sums, run := &a.sink, &a.sink
	if len(cd.sums) > 0 {
		sums = &cd.sums[0]
	}
	if len(cd.hashes) > 1 {
		run = &cd.hashes[1]
	}
	a.sink += touch2(sums, run)
	return true
}

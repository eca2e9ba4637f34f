package prefix

import "slices"

// DumpEntry is one single-block store of a dump: replaying the entries in order with
// Store(e.Worker, e.Parent, e.HasParent, []Block{e.Block}) rebuilds the index.
type DumpEntry struct {
	Worker    WorkerKey
	Parent    uint64 // engine hash of the parent block, held by Worker; meaningful when HasParent
	HasParent bool
	Block     Block
}

// Dump emits the index as single-block stores in breadth-first order, parents before children, one entry
// per reference (an engine hash stored twice is emitted twice), children in local-hash order so that equal
// indexes dump equally. Replaying the entries into a fresh index gives the same matches, sizes and worker
// blocks, with two exceptions it returns as skipped: blocks a worker holds below a block it no longer holds
// (after a removal in the middle of a chain) cannot be expressed as stores under a parent the worker holds,
// and are never matched anyway (Dynamo's dump drops them too); known workers without blocks emit nothing.
// Dump carries device blocks only (lower-tier blocks are not replayed). Dump allocates and is meant for
// snapshots and resync, not the hot path.
func (ix *Index) Dump(fn func(DumpEntry)) (skipped int) {
	type item struct {
		n    uint32
		emit bitset // workers whose blocks above n were all emitted
	}
	// Lower-tier slots are unions that replay from the device stores plus the lower-tier stores; a dump
	// carries the device tier only.
	var lower bitset
	for s, ws := range ix.workers {
		if ws != nil && ix.tiers[s].tier != TierDevice {
			lower.set(uint32(s))
		}
	}
	// Handles by block id, per worker slot: the tree does not say which engine hash names a block.
	byID := make(map[uint32]map[uint32][]handle)
	handles := func(slot, id uint32) []handle {
		m := byID[slot]
		if m == nil {
			m = ix.handlesOf(slot)
			byID[slot] = m
		}
		return m[id]
	}
	var queue []item
	enqueueKids := func(n uint32, emit bitset) {
		nd := &ix.nodes[n]
		var kids []kid
		nd.kids.each(func(k kid) { kids = append(kids, k) })
		slices.SortFunc(kids, func(a, b kid) int {
			if a.hash < b.hash {
				return -1
			}
			if a.hash > b.hash {
				return 1
			}
			return 0
		})
		for _, k := range kids {
			queue = append(queue, item{n: k.node, emit: emit})
		}
	}
	enqueueKids(rootNode, nil)
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		nd := &ix.nodes[it.n]
		emit := nd.workers.bits()
		emit.andNot(lower)
		if nd.parent != rootNode {
			for i := range emit {
				if i < len(it.emit) {
					emit[i] &= it.emit[i]
				} else {
					emit[i] = 0
				}
			}
		}
		nd.workers.each(func(slot uint32) {
			if emit.has(slot) || lower.has(slot) {
				return
			}
			for _, id := range nd.ids {
				skipped += len(handles(slot, id))
			}
		})
		emit.each(func(slot uint32) {
			key := ix.workers[slot].key
			for j, id := range nd.ids {
				e := DumpEntry{Worker: key, Block: Block{LocalHash: nd.hashes[j]}}
				switch {
				case j > 0:
					e.Parent, e.HasParent = handles(slot, nd.ids[j-1])[0].eh, true
				case nd.parent != rootNode:
					pd := &ix.nodes[nd.parent]
					e.Parent, e.HasParent = handles(slot, pd.ids[len(pd.ids)-1])[0].eh, true
				}
				for _, h := range handles(slot, id) {
					e.Block.EngineHash = h.eh
					for range h.count {
						fn(e)
					}
				}
			}
		})
		enqueueKids(it.n, emit)
	}
	return skipped
}

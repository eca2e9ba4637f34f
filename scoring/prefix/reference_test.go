package prefix

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
)

// refIndex is the obviously-correct model the index is checked against: one map-based node per block,
// worker sets as maps, handles as maps, every rule applied literally.
type refIndex struct {
	root    *refNode
	handles map[WorkerKey]map[uint64]*refHandle
}

type refNode struct {
	kids    map[uint64]*refNode
	workers map[WorkerKey]bool
	parent  *refNode
	local   uint64
	path    uint64 // hash of the local hashes from the root: lets tests derive engine hashes
}

type refHandle struct {
	node  *refNode
	count int
}

func newRef() *refIndex {
	return &refIndex{root: newRefNode(nil, 0), handles: map[WorkerKey]map[uint64]*refHandle{}}
}

// randomChild draws the local hash of one of n's children (n has some), from them in sorted order so that
// a seed replays the same draws.
func (n *refNode) randomChild(rng *rand.Rand) uint64 {
	ks := make([]uint64, 0, len(n.kids))
	for k := range n.kids {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks[rng.IntN(len(ks))]
}

func newRefNode(parent *refNode, local uint64) *refNode {
	n := &refNode{kids: map[uint64]*refNode{}, workers: map[WorkerKey]bool{}, parent: parent, local: local}
	if parent != nil {
		n.path = mix(parent.path ^ local)
	}
	return n
}

func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

func (r *refIndex) store(w WorkerKey, parent uint64, hasParent bool, blocks []Block) error {
	cur := r.root
	if hasParent {
		h, ok := r.handles[w][parent]
		if !ok {
			return ErrParentNotFound
		}
		cur = h.node
	}
	if r.handles[w] == nil {
		r.handles[w] = map[uint64]*refHandle{}
	}
	hs := r.handles[w]
	for _, b := range blocks {
		child := cur.kids[b.LocalHash]
		h, held := hs[b.EngineHash]
		if held && h.node != child {
			return ErrInvalidBlockSequence
		}
		if child == nil {
			child = newRefNode(cur, b.LocalHash)
			cur.kids[b.LocalHash] = child
		}
		if held {
			h.count++
		} else {
			hs[b.EngineHash] = &refHandle{node: child, count: 1}
		}
		child.workers[w] = true
		cur = child
	}
	return nil
}

func (r *refIndex) remove(w WorkerKey, ehs []uint64) error {
	var first error
	for _, eh := range ehs {
		h, ok := r.handles[w][eh]
		if !ok {
			if first == nil {
				first = ErrBlockNotFound
			}
			continue
		}
		if h.count--; h.count > 0 {
			continue
		}
		delete(r.handles[w], eh)
		if r.holds(w, h.node) {
			continue
		}
		delete(h.node.workers, w)
		if len(h.node.workers) == 0 {
			r.drop(h.node)
		}
	}
	return first
}

// holds reports whether w has any handle naming n.
func (r *refIndex) holds(w WorkerKey, n *refNode) bool {
	for _, h := range r.handles[w] {
		if h.node == n {
			return true
		}
	}
	return false
}

// drop detaches n and forgets every handle naming a node of its subtree.
func (r *refIndex) drop(n *refNode) {
	delete(n.parent.kids, n.local)
	var walk func(*refNode)
	walk = func(x *refNode) {
		for w := range x.workers {
			for eh, h := range r.handles[w] {
				if h.node == x {
					delete(r.handles[w], eh)
				}
			}
		}
		for _, k := range x.kids {
			walk(k)
		}
	}
	walk(n)
}

func (r *refIndex) clear(id uint64, forget bool) {
	for w, hs := range r.handles {
		if w.WorkerID != id {
			continue
		}
		for _, h := range hs {
			delete(h.node.workers, w)
		}
		if forget {
			delete(r.handles, w)
		} else {
			r.handles[w] = map[uint64]*refHandle{}
		}
	}
	var walk func(*refNode)
	walk = func(x *refNode) {
		for _, k := range x.kids {
			if len(k.workers) == 0 {
				r.drop(k)
			} else {
				walk(k)
			}
		}
	}
	walk(r.root)
}

func (r *refIndex) findMatches(q []uint64) []Score {
	var path []*refNode
	for x := r.root; len(path) < len(q); {
		if x = x.kids[q[len(path)]]; x == nil {
			break
		}
		path = append(path, x)
	}
	var out []Score
	if len(path) == 0 {
		return out
	}
	for w := range path[0].workers {
		d := 0
		for d < len(path) && path[d].workers[w] {
			d++
		}
		out = append(out, Score{Worker: w, Blocks: uint32(d)})
	}
	sortScores(out)
	return out
}

func (r *refIndex) size() int {
	n := 0
	for _, hs := range r.handles {
		n += len(hs)
	}
	return n
}

func (r *refIndex) workers() []WorkerKey {
	var out []WorkerKey
	for w := range r.handles {
		out = append(out, w)
	}
	sortKeys(out)
	return out
}

func sortKeys(ks []WorkerKey) {
	slices.SortFunc(ks, func(a, b WorkerKey) int {
		return cmp.Or(cmp.Compare(a.WorkerID, b.WorkerID), cmp.Compare(a.DPRank, b.DPRank))
	})
}

func sortScores(s []Score) {
	slices.SortFunc(s, func(a, b Score) int {
		return cmp.Or(cmp.Compare(a.Worker.WorkerID, b.Worker.WorkerID), cmp.Compare(a.Worker.DPRank, b.Worker.DPRank))
	})
}

// allHandles returns every handle of t.
func allHandles(t *handleTable) []handle {
	var out []handle
	t.each(func(h handle) { out = append(out, h) })
	return out
}

// checkInvariants verifies the index's internal structure; it returns the first violation.
func checkInvariants(ix *Index) error {
	size := 0
	deadRefs := make(map[uint32]uint32) // dead handles naming each dropped block, over every worker
	isDead := func(h handle) bool { return ix.locs[h.id].node == deadNode }
	for s, ws := range ix.workers {
		if ws == nil {
			continue
		}
		size += ws.live()
		if st := ix.tiers[s]; st.tier != TierDevice {
			// A lower-tier slot: reachable from its device slot, and a union holding every handle of the
			// next faster tier's slot with at least as many references.
			if got := ix.slotOf[ws.key]; got != st.dev || ix.tiers[st.dev].lower[st.tier-1] != uint32(s)+1 {
				return fmt.Errorf("%v tier slot %d not linked from device slot %d", ws.key, s, got)
			}
			src := st.dev
			for u := st.tier - 1; u > TierDevice; u-- {
				if l := ix.tiers[st.dev].lower[u-1]; l != 0 {
					src = l - 1
					break
				}
			}
			for _, h := range allHandles(&ix.workers[src].handles) {
				if isDead(h) {
					continue
				}
				if i, ok := ws.handles.find(h.eh); !ok || ws.handles.count(i) < h.count || ws.handles.id(i) != h.id {
					return fmt.Errorf("%v %v slot misses handle %#x of slot %d", ws.key, st.tier, h.eh, src)
				}
			}
		} else if got := ix.slotOf[ws.key]; got != uint32(s) {
			return fmt.Errorf("slot of %v is %d, want %d", ws.key, got, s)
		}
		for _, t := range []*handleTable{&ws.handles, &ws.own} {
			for eh, m := range t.more {
				if _, ok := t.find(eh); !ok || m == 0 {
					return fmt.Errorf("worker %v: %d extra references of absent or single handle %#x", ws.key, m, eh)
				}
			}
		}
		n, dead := 0, 0
		for _, h := range allHandles(&ws.handles) {
			n++
			if i, ok := ws.handles.find(h.eh); !ok || ws.handles.at(i) != h {
				return fmt.Errorf("worker %v: handle %#x unreachable", ws.key, h.eh)
			}
			if isDead(h) {
				dead++
				deadRefs[h.id]++
				continue
			}
			nd, _ := ix.locate(h.id)
			if !ix.nodes[nd].live || !ix.nodes[nd].workers.has(uint32(s)) {
				return fmt.Errorf("worker %v: handle %#x names block %d where the worker is absent", ws.key, h.eh, h.id)
			}
		}
		if n != ws.handles.n || dead != ws.dead {
			return fmt.Errorf("worker %v: %d handles (%d dead), count says %d (%d)", ws.key, n, dead, ws.handles.n, ws.dead)
		}
	}
	for id, l := range ix.locs {
		if l.node == deadNode && l.off != deadRefs[uint32(id)] {
			return fmt.Errorf("dropped block %d: %d dead handles, its loc says %d", id, deadRefs[uint32(id)], l.off)
		}
	}
	if len(deadRefs) != ix.deadIDs {
		return fmt.Errorf("%d dropped blocks named by dead handles, deadIDs %d", len(deadRefs), ix.deadIDs)
	}
	byID := make(map[uint32]map[uint32][]handle)
	if size != ix.size {
		return fmt.Errorf("size %d, handles %d", ix.size, size)
	}
	reached := 0
	var walk func(n uint32) error
	walk = func(n uint32) error {
		nd := &ix.nodes[n]
		if !nd.live {
			return fmt.Errorf("node %d reachable but freed", n)
		}
		reached++
		if n != rootNode {
			if len(nd.hashes) == 0 || len(nd.ids) != len(nd.hashes) {
				return fmt.Errorf("node %d: run lengths %d/%d", n, len(nd.hashes), len(nd.ids))
			}
			if nd.workers.empty() {
				return fmt.Errorf("node %d: no workers", n)
			}
			for j, id := range nd.ids {
				if ix.locs[id] != (loc{node: n, off: uint32(j)}) {
					return fmt.Errorf("node %d: block %d located at %v", n, id, ix.locs[id])
				}
			}
			var err error
			nd.workers.each(func(slot uint32) {
				if byID[slot] == nil {
					byID[slot] = ix.handlesOf(slot)
				}
				for _, id := range nd.ids {
					if err == nil && len(byID[slot][id]) == 0 {
						err = fmt.Errorf("node %d: worker slot %d present without a handle", n, slot)
					}
				}
			})
			if err != nil {
				return err
			}
		}
		if t := len(nd.kids.rest); nd.kids.table {
			used := 0
			for _, s := range nd.kids.rest {
				if s.node != 0 {
					used++
				}
			}
			if nd.kids.first != (kid{}) || t < minKidTable || t&(t-1) != 0 || used != int(nd.kids.n) || 4*used > 3*t {
				return fmt.Errorf("node %d: kid table of %d slots, %d used, %d counted, first %+v", n, t, used, nd.kids.n, nd.kids.first)
			}
		} else if int(nd.kids.n) != t+min(int(nd.kids.n), 1) {
			return fmt.Errorf("node %d: %d kids, %d in rest", n, nd.kids.n, t)
		}
		var err error
		nd.eachKid(func(c uint32) {
			cd := &ix.nodes[c]
			if err != nil {
				return
			}
			if cd.parent != n {
				err = fmt.Errorf("node %d: parent %d, want %d", c, cd.parent, n)
				return
			}
			if k, ok := nd.child(cd.hashes[0]); !ok || k != c {
				err = fmt.Errorf("node %d: child %d not found by its first hash", n, c)
				return
			}
			err = walk(c)
		})
		return err
	}
	if err := walk(rootNode); err != nil {
		return err
	}
	if live := len(ix.nodes) - len(ix.freeNodes); live != reached {
		return fmt.Errorf("%d live nodes, %d reachable", live, reached)
	}
	return nil
}

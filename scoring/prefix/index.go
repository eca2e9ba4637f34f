package prefix

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"unsafe"
)

// WorkerKey names one KV cache: a backend worker and its data-parallel rank.
type WorkerKey struct {
	WorkerID uint64
	DPRank   uint32
}

// Block is one stored KV block: the engine's opaque chained hash (the worker's handle for parents and
// removals) and the router's local hash recomputed from the block's tokens (the tree key).
type Block struct {
	EngineHash uint64
	LocalHash  uint64
}

// Score is the number of consecutive prefix blocks of a query that a worker holds on its device (Blocks),
// and how far that prefix continues on lower tiers: Host more blocks held on host memory (or the device),
// then Disk more held on disk or external storage (or a faster tier). Host and Disk are 0 for workers that
// never reported a lower-tier block.
type Score struct {
	Worker WorkerKey
	Blocks uint32
	Host   uint32
	Disk   uint32
}

// Stats counts what the index has applied since it was created.
type Stats struct {
	StoredBlocks   uint64 // blocks applied by Store, duplicates of a held engine hash included
	RemovedBlocks  uint64 // engine hashes released by Remove (one per hash found)
	ClearedBlocks  uint64 // engine hashes dropped by ClearWorker and RemoveWorker
	CascadedBlocks uint64 // engine hashes dropped because an ancestor block lost its last worker

	RejectedParentNotFound uint64 // stores rejected whole: parent engine hash unknown
	RejectedInvalidBlock   uint64 // stores stopped: an engine hash already names another block
	BlockNotFound          uint64 // engine hashes in removals that the worker did not hold
}

// workerState is everything the index keeps per (worker, dp_rank).
type workerState struct {
	key     WorkerKey
	handles handleTable
	// multi counts, per block id, the distinct engine hashes beyond the first that the worker holds for that
	// block. It is nil unless an engine names one block with two hashes, which chained engine hashes never
	// do; the worker leaves the block only when its last handle there goes.
	multi map[uint32]uint32
	// own counts, for a lower-tier slot, the references of its own tier's stores (handles counts them
	// together with the mirrored ones of faster tiers): a removal on the tier may take only these.
	own handleTable
	// dead counts the handles in the table whose block was dropped by a cascade (its id is dead, see
	// Index.locs). They are deleted when a lookup meets them or when they outnumber the live ones
	// (compact), never searched for: a cascade knows the blocks it drops, not the engine hashes that
	// name them.
	dead int
}

// live is the number of handles that name a block.
func (ws *workerState) live() int { return ws.handles.n - ws.dead }

// Index is the prefix index. The zero value is not usable; call New.
type Index struct {
	// View is the tree the queries read: the nodes, and per worker slot its key and tier. An owner that
	// serves reads while it writes keeps a second View in step (NewView, Sync).
	View

	freeNodes []uint32 // indices of freed nodes, reused first
	// locs maps a block id to where the block sits. A dropped block that dead handles still name keeps
	// its id until the last of them is deleted: loc{node: deadNode, off: how many}.
	locs    []loc
	freeIDs []uint32 // freed block ids, reused first
	deadIDs int      // ids of dropped blocks still named by dead handles

	slotOf    map[WorkerKey]uint32
	workers   []*workerState // by slot; nil for a free slot
	freeSlots []uint32

	// evicted logs the device blocks the workers' Removed events take away, while logEvicted is set
	// (LogEvictions), up to maxEvictedLog of them until TakeEvicted empties it.
	evicted    []Evicted
	logEvicted bool
	size       int    // Σ handles over every slot, lower-tier slots included
	sink       uint32 // keeps handleTable.touch from being optimized away
	stats      Stats

	// With a View attached (NewView), the nodes written since the last Sync, each flagged dirty, and
	// whether the slot arrays changed.
	track      bool
	dirty      []uint32
	kidLog     []kidOp // changes of child tables since the last Sync (node.kidsFull ones excepted)
	slotsDirty bool
}

// slotTier is a worker slot's place among its worker's tiers: TierDevice for the worker's own slot (the
// one in Index.slotOf), whose lower holds slot+1 of its host and disk slots (0: none yet); for a
// lower-tier slot, which holds what the worker holds on that tier or any faster one (tiers.go), dev is
// its device slot.
type slotTier struct {
	tier  Tier
	dev   uint32
	lower [numTiers - 1]uint32
}

// New returns an empty index.
func New() *Index {
	ix := &Index{slotOf: make(map[WorkerKey]uint32)}
	ix.nodes = append(ix.nodes, node{live: true})
	return ix
}

// slotFor returns the dense (device) slot of w, registering w when it is new.
func (ix *Index) slotFor(w WorkerKey) uint32 {
	if s, ok := ix.slotOf[w]; ok {
		return s
	}
	s := ix.newSlot(&workerState{key: w}, slotTier{})
	ix.slotOf[w] = s
	return s
}

// newSlot gives ws a dense slot, reusing a freed one first.
func (ix *Index) newSlot(ws *workerState, t slotTier) uint32 {
	var s uint32
	if k := len(ix.freeSlots); k > 0 {
		s = ix.freeSlots[k-1]
		ix.freeSlots = ix.freeSlots[:k-1]
		ix.workers[s] = ws
		// The keys table is immutable once a view has it (Matches keep it after the view is left): a
		// reused slot gets a new table. Appending is safe, tables handed out are never read past their end.
		ix.keys = slices.Clone(ix.keys)
		ix.keys[s] = ws.key
		ix.tiers[s] = t
	} else {
		s = uint32(len(ix.workers))
		ix.workers = append(ix.workers, ws)
		ix.keys = append(ix.keys, ws.key)
		ix.tiers = append(ix.tiers, t)
	}
	ix.words = max(ix.words, int(s>>6)+1)
	ix.slotsDirty = true
	return s
}

// pending is a range of positions of one node that the storing worker is joining. Joining a range costs at
// most two splits, so a store adds its worker range by range rather than block by block.
type pending struct {
	node   uint32
	lo, hi int
	ok     bool
}

// Store applies a stored event of worker w: blocks in chain order under the block whose engine hash is
// parent (the root when !hasParent). An unknown parent rejects the whole store with ErrParentNotFound.
// Storing an engine hash the worker already holds for the same block adds a reference; one that it holds
// for another block stops the store with ErrInvalidBlockSequence, leaving the earlier blocks applied.
// The blocks are device blocks (the engine's own pool); StoreTier stores on a lower tier.
func (ix *Index) Store(w WorkerKey, parent uint64, hasParent bool, blocks []Block) error {
	s, ok := ix.slotOf[w]
	if !ok {
		if hasParent {
			ix.stats.RejectedParentNotFound++
			return fmt.Errorf("%w: worker %d rank %d parent %#x", ErrParentNotFound, w.WorkerID, w.DPRank, parent)
		}
		s = ix.slotFor(w)
	}
	n, err := ix.store(s, parent, hasParent, blocks)
	if ix.lower > 0 && n > 0 {
		ix.mirrorStore(s, TierDevice, parent, hasParent, blocks[:n])
	}
	return err
}

// store applies a store to one slot and returns how many blocks it applied.
func (ix *Index) store(slot uint32, parent uint64, hasParent bool, blocks []Block) (int, error) {
	cur := noBlock
	ws := ix.workers[slot]
	if hasParent {
		i, ok := ix.findLive(slot, parent)
		if !ok {
			ix.stats.RejectedParentNotFound++
			return 0, fmt.Errorf("%w: worker %d rank %d parent %#x", ErrParentNotFound, ws.key.WorkerID, ws.key.DPRank, parent)
		}
		cur = ws.handles.id(i)
	}
	ix.sink += ws.handles.touch(blocks)
	var p pending
	for j, b := range blocks {
		// The child position of cur with this local hash, if it exists.
		n, off := ix.locate(cur)
		nd := &ix.nodes[n]
		cand := noBlock
		if off+1 < len(nd.hashes) {
			if nd.hashes[off+1] == b.LocalHash {
				cand = nd.ids[off+1]
			}
		} else if c, ok := nd.child(b.LocalHash); ok {
			cand = ix.nodes[c].ids[0]
		}
		hi, held := ix.findLive(slot, b.EngineHash)
		if held && ws.handles.id(hi) != cand {
			ix.flush(slot, &p)
			ix.stats.RejectedInvalidBlock++
			return j, fmt.Errorf("%w: worker %d rank %d engine hash %#x already names another block",
				ErrInvalidBlockSequence, ws.key.WorkerID, ws.key.DPRank, b.EngineHash)
		}
		ix.stats.StoredBlocks++
		if cand != noBlock {
			cn, coff := ix.locate(cand)
			present := ix.nodes[cn].workers.has(slot)
			switch {
			case held:
				ws.handles.incr(hi)
			case present:
				ix.insertHandle(slot, b.EngineHash, cand)
				ix.size++
				if ws.multi == nil {
					ws.multi = make(map[uint32]uint32)
				}
				ws.multi[cand]++
			default:
				ix.insertHandle(slot, b.EngineHash, cand)
				ix.size++
			}
			if !present {
				if p.ok && p.node == cn && p.hi+1 == coff {
					p.hi = coff
				} else {
					ix.flush(slot, &p)
					p = pending{node: cn, lo: coff, hi: coff, ok: true}
				}
			}
			cur = cand
			continue
		}
		// A new block: branch off cur, or extend cur's run when only this worker holds it and nothing
		// hangs below.
		ix.flush(slot, &p)
		n, off = ix.locate(cur)
		if off+1 < len(ix.nodes[n].hashes) {
			ix.split(n, off+1)
		}
		nd = &ix.nodes[n]
		if n != rootNode && nd.numKids() == 0 && nd.workers.only(slot) {
			cur = ix.appendPos(n, b.LocalHash)
		} else {
			c := ix.newNode(n)
			ix.nodes[c].workers.set(slot)
			ix.reserve(c, len(blocks)-j)
			cur = ix.appendPos(c, b.LocalHash)
			ix.addKid(n, b.LocalHash, c)
		}
		ix.insertHandle(slot, b.EngineHash, cur)
		ix.size++
	}
	ix.flush(slot, &p)
	return len(blocks), nil
}

// flush adds the worker to the pending range: isolate the range in its own node, then merge it with its
// parent or child when the worker sets have become equal.
func (ix *Index) flush(slot uint32, p *pending) {
	if !p.ok {
		return
	}
	p.ok = false
	n := p.node
	if p.hi+1 < len(ix.nodes[n].hashes) {
		ix.split(n, p.hi+1)
	}
	m := n
	if p.lo > 0 {
		m = ix.split(n, p.lo)
	}
	ix.nodes[m].workers.set(slot)
	ix.touch(m)
	ix.tryMerge(m)
	ix.tryMerge(ix.nodes[m].parent)
}

// Remove applies a removed event of worker w. Each engine hash loses one reference; at zero the worker
// leaves the block, and a block left with no worker is dropped with everything below it. Unknown hashes are
// counted and skipped; the first one is returned, wrapping ErrBlockNotFound. The hashes are device blocks;
// RemoveTier removes from a lower tier.
func (ix *Index) Remove(w WorkerKey, engineHashes []uint64) error {
	var first error
	s, known := ix.slotOf[w]
	mirror := known && ix.lower > 0 && ix.tiers[s].lower != [numTiers - 1]uint32{}
	for _, eh := range engineHashes {
		if !known || !ix.removeOne(s, eh) {
			ix.stats.BlockNotFound++
			if first == nil {
				first = fmt.Errorf("%w: worker %d rank %d engine hash %#x", ErrBlockNotFound, w.WorkerID, w.DPRank, eh)
			}
			continue
		}
		if mirror {
			ix.mirrorRemove(s, TierDevice, eh)
		}
	}
	return first
}

// removeOne drops one reference of slot to engine hash eh and reports whether the slot held it.
func (ix *Index) removeOne(s uint32, eh uint64) bool {
	ws := ix.workers[s]
	i, ok := ix.findLive(s, eh)
	if !ok {
		return false
	}
	ix.stats.RemovedBlocks++
	if ix.logEvicted && len(ix.evicted) < maxEvictedLog && ix.tiers[s].tier == TierDevice {
		if n, off := ix.locate(ws.handles.id(i)); off >= 0 && n != deadNode {
			nd := &ix.nodes[n]
			ix.evicted = append(ix.evicted, Evicted{Worker: ws.key, Local: nd.hashes[off], Depth: nd.start + uint32(off)})
		}
	}
	if ws.handles.count(i) > 1 {
		ws.handles.decr(i)
		return true
	}
	id := ws.handles.id(i)
	ws.handles.deleteAt(i)
	ix.size--
	if ws.multi[id] > 0 {
		if ws.multi[id]--; ws.multi[id] == 0 {
			delete(ws.multi, id)
		}
		return true
	}
	ix.leave(s, id)
	return true
}

// leave takes worker slot out of block id.
func (ix *Index) leave(slot, id uint32) {
	n, off := ix.locate(id)
	if ix.nodes[n].workers.only(slot) {
		ix.truncate(n, off)
		return
	}
	if off+1 < len(ix.nodes[n].hashes) {
		ix.split(n, off+1)
	}
	m := n
	if off > 0 {
		m = ix.split(n, off)
	}
	md := &ix.nodes[m]
	md.workers.unset(slot)
	ix.touch(m)
	if md.workers.empty() {
		ix.dropSubtree(m, nil, true)
		return
	}
	ix.tryMerge(m)
	ix.tryMerge(md.parent)
}

// truncate cuts node n's run at off when its only worker leaves the block there: that block, the rest of
// the run and every child lose their last worker (a cascade). It needs no split, so the common eviction of
// a conversation cached on one worker allocates nothing. The caller has dropped the handle at off.
func (ix *Index) truncate(n uint32, off int) {
	nd := &ix.nodes[n]
	for nd.numKids() > 0 {
		var c uint32
		nd.kids.each(func(k kid) { c = k.node })
		ix.dropSubtree(c, nil, false)
	}
	ix.freeIDs = append(ix.freeIDs, nd.ids[off]) // the caller deleted its only handle
	ix.dropBlocks(nd.ids[off+1:], &nd.workers, nil)
	if off == 0 {
		p := nd.parent
		ix.removeKid(p, nd.hashes[0])
		ix.freeNode(n)
		ix.tryMerge(p)
		return
	}
	nd.hashes, nd.ids = nd.hashes[:off], nd.ids[:off]
	nd.sums = nd.sums[:min(len(nd.sums), wholeChunks(nd.start, off))]
	nd.synced = min(nd.synced, uint32(off))
	ix.touch(n)
}

// dropSubtree removes node m, which no worker holds any more, and everything below it: the handles that
// other workers still have there (only workers removed from a middle block can have them) are dropped too,
// except for the slots in skip, whose tables the caller resets. With merge, m's parent then merges with
// its remaining child when it can.
func (ix *Index) dropSubtree(m uint32, skip bitset, merge bool) {
	md := &ix.nodes[m]
	p := md.parent
	ix.removeKid(p, md.hashes[0])
	stack := []uint32{m}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		nd := &ix.nodes[n]
		nd.eachKid(func(c uint32) { stack = append(stack, c) })
		ix.dropBlocks(nd.ids, &nd.workers, skip)
		ix.freeNode(n)
	}
	if merge {
		ix.tryMerge(p)
	}
}

// dropBlocks drops the blocks ids, held by the slots of workers outside skip (whose tables the caller
// resets). Their handles become dead: each worker's table keeps them until a lookup meets them or compact
// runs, and each id stays reserved (loc{deadNode, handles naming it}) until the last is deleted. Finding
// the handles now would take a probe per (worker, block) with the engine hash that worker used, which
// the tree does not keep, or a scan of the worker's table. Cost: one step per holding worker plus one per
// block, and a table lookup per block only for workers that name a block with two engine hashes.
func (ix *Index) dropBlocks(ids []uint32, workers *wset, skip bitset) {
	if len(ids) == 0 {
		return
	}
	holders := uint32(0)
	workers.each(func(slot uint32) {
		if skip.has(slot) {
			return
		}
		holders++
		ws := ix.workers[slot]
		ws.dead += len(ids)
		ix.size -= len(ids)
		ix.stats.CascadedBlocks += uint64(len(ids))
	})
	for _, id := range ids {
		ix.locs[id] = loc{node: deadNode, off: holders}
	}
	workers.each(func(slot uint32) {
		ws := ix.workers[slot]
		if skip.has(slot) || ws.multi == nil {
			return
		}
		for _, id := range ids {
			if m := ws.multi[id]; m > 0 {
				ws.dead += int(m)
				ix.size -= int(m)
				ix.stats.CascadedBlocks += uint64(m)
				ix.locs[id].off += m
				delete(ws.multi, id)
			}
		}
	})
	for _, id := range ids {
		if ix.locs[id].off == 0 {
			ix.freeIDs = append(ix.freeIDs, id)
		} else {
			ix.deadIDs++
		}
	}
	workers.each(func(slot uint32) {
		if ws := ix.workers[slot]; !skip.has(slot) && 2*ws.dead > ws.handles.n {
			ix.compact(slot)
		}
	})
}

// deadNode is the node of a dropped block that dead handles still name.
const deadNode = ^uint32(0)

// findLive returns the table slot of slot's handle for engine hash eh, deleting it instead when it is
// dead (its block was dropped).
func (ix *Index) findLive(slot uint32, eh uint64) (int, bool) {
	ws := ix.workers[slot]
	i, ok := ws.handles.find(eh)
	if !ok || ix.locs[ws.handles.id(i)].node != deadNode {
		return i, ok
	}
	id := ws.handles.id(i)
	ws.handles.deleteAt(i)
	ix.forget(slot, ws, eh, id)
	return -1, false
}

// forget accounts for a dead handle (eh → id) deleted from slot's table.
func (ix *Index) forget(slot uint32, ws *workerState, eh uint64, id uint32) {
	ws.dead--
	l := &ix.locs[id]
	if l.off--; l.off == 0 {
		ix.freeIDs = append(ix.freeIDs, id)
		ix.deadIDs--
	}
	if ix.tiers[slot].tier != TierDevice {
		ws.dropOwn(eh)
	}
}

// compact deletes every dead handle of slot, rebuilding its table at the size of the live ones.
func (ix *Index) compact(slot uint32) {
	ws := ix.workers[slot]
	if ws.dead == 0 {
		return
	}
	old := ws.handles.slots
	ws.handles.resize(ws.live())
	for i := range old {
		s := &old[i]
		switch eh, id := s.eh(), s.idp-1; {
		case s.idp == 0:
		case ix.locs[id].node == deadNode:
			delete(ws.handles.more, eh)
			ix.forget(slot, ws, eh, id)
		default:
			ws.handles.put(eh, id)
		}
	}
}

// insertHandle adds eh → id to slot's table (eh absent), making room by deleting dead handles rather
// than growing when it has them.
func (ix *Index) insertHandle(slot uint32, eh uint64, id uint32) {
	ws := ix.workers[slot]
	if ws.dead > 0 && ws.handles.full() {
		ix.compact(slot)
	}
	ws.handles.insert(eh, id)
}

// handlesOf returns, per block id, the live handles of slot (control plane: Dump).
func (ix *Index) handlesOf(slot uint32) map[uint32][]handle {
	ws := ix.workers[slot]
	out := make(map[uint32][]handle, ws.live())
	ws.handles.each(func(h handle) {
		if ix.locs[h.id].node != deadNode {
			out[h.id] = append(out[h.id], h)
		}
	})
	return out
}

// ClearWorker drops the blocks of every dp_rank of workerID (Dynamo's Cleared event). The worker's ranks
// stay known.
func (ix *Index) ClearWorker(workerID uint64) {
	ix.clear(workerID, allRanks, false)
}

// ClearRank drops the blocks of one dp_rank of a worker (that rank's engine restarted or reset its prefix
// cache; vLLM's AllBlocksCleared comes from one rank's block pool). The other ranks keep theirs.
func (ix *Index) ClearRank(w WorkerKey) {
	ix.clear(w.WorkerID, int64(w.DPRank), false)
}

// RemoveWorker drops the blocks of every dp_rank of workerID and forgets its ranks.
func (ix *Index) RemoveWorker(workerID uint64) {
	ix.clear(workerID, allRanks, true)
}

// allRanks is clear's rank argument for every dp_rank of the worker.
const allRanks = -1

func (ix *Index) clear(workerID uint64, rank int64, forget bool) {
	var mask bitset
	for s, ws := range ix.workers {
		if ws == nil || ws.key.WorkerID != workerID || (rank != allRanks && int64(ws.key.DPRank) != rank) {
			continue
		}
		mask.set(uint32(s))
		ix.size -= ws.live()
		ix.stats.ClearedBlocks += uint64(ws.live())
		ws.handles.each(func(h handle) {
			if ix.locs[h.id].node == deadNode {
				ix.forget(uint32(s), ws, h.eh, h.id)
			}
		})
		ws.dead = 0
		ws.handles.reset()
		ws.own.reset()
		ws.multi = nil
		if forget {
			if ix.tiers[s].tier == TierDevice {
				delete(ix.slotOf, ws.key)
			} else {
				ix.lower--
			}
			ix.tiers[s] = slotTier{}
			ix.slotsDirty = true
			ix.workers[s] = nil
			ix.freeSlots = append(ix.freeSlots, uint32(s))
		}
	}
	if mask == nil {
		return
	}
	// Only the nodes the worker held change (the drops and merges below touch what they change): the
	// next Sync copies those alone. Touching every node made a worker's reset at 256 workers sync every
	// node of the index.
	for n := 1; n < len(ix.nodes); n++ {
		if nd := &ix.nodes[n]; nd.live && nd.workers.andNotAny(mask) {
			ix.touch(uint32(n))
		}
	}
	for n := 1; n < len(ix.nodes); n++ {
		if nd := &ix.nodes[n]; nd.live && nd.workers.empty() {
			ix.dropSubtree(uint32(n), mask, true)
		}
	}
	for n := 1; n < len(ix.nodes); n++ {
		for ix.tryMerge(uint32(n)) {
		}
	}
}

// Evicted is a device block a worker's engine removed (a Removed event): its local block hash and its
// depth in the prompt (0: the first block). A vLLM-style engine removes a cached block only to reuse it,
// and frees a request's blocks last block first, so the removal of a request's last block says that what
// the engine evicts now was released when that request ended (scoring/sched's age.go).
type Evicted struct {
	Worker WorkerKey
	Local  uint64
	Depth  uint32
}

// maxEvictedLog bounds the eviction log between two TakeEvicted: removals beyond it are not logged.
const maxEvictedLog = 1 << 16

// LogEvictions starts or stops logging the device blocks Removed events take away (TakeEvicted).
func (ix *Index) LogEvictions(on bool) {
	ix.logEvicted = on
	if !on {
		ix.evicted = nil
	}
}

// TakeEvicted appends the logged removals, in the order they were applied, to dst and empties the log.
func (ix *Index) TakeEvicted(dst []Evicted) []Evicted {
	dst = append(dst, ix.evicted...)
	ix.evicted = ix.evicted[:0]
	return dst
}

// WorkerBlocks is the number of engine hashes w holds (Dynamo's tree size of a worker).
func (ix *Index) WorkerBlocks(w WorkerKey) int {
	s, ok := ix.slotOf[w]
	if !ok {
		return 0
	}
	return ix.workers[s].live()
}

// Workers returns every known (worker, dp_rank), sorted.
func (ix *Index) Workers() []WorkerKey {
	out := make([]WorkerKey, 0, len(ix.slotOf))
	for w := range ix.slotOf {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b WorkerKey) int {
		return cmp.Or(cmp.Compare(a.WorkerID, b.WorkerID), cmp.Compare(a.DPRank, b.DPRank))
	})
	return out
}

// Size is the number of (engine hash, worker) entries: Σ WorkerBlocks (device blocks).
func (ix *Index) Size() int {
	n := ix.size
	if ix.lower > 0 {
		for s, ws := range ix.workers {
			if ws != nil && ix.tiers[s].tier != TierDevice {
				n -= ws.live()
			}
		}
	}
	return n
}

// Positions is the number of block positions in the tree: distinct prefixes held by at least one worker.
// A prefix held by workers of two indexes (two indexer shards) counts once in each.
func (ix *Index) Positions() int { return len(ix.locs) - len(ix.freeIDs) - ix.deadIDs }

// Stats returns the counters.
func (ix *Index) Stats() Stats { return ix.stats }

// commonPrefix returns how many leading hashes a and b (of equal length) share. A query usually matches
// a whole edge, so an edge of 32 hashes or more is first compared whole, as bytes (the runtime's
// vectorized compare: some 60 ns for a 512-block edge, where the scan takes ~0.5 ns a hash with the
// walk's registers spilled); a mismatch, and a short edge, are scanned hash by hash.
func commonPrefix(a, b []uint64) int {
	if len(a) >= 32 && bytes.Equal(u64Bytes(a), u64Bytes(b)) {
		return len(a)
	}
	m := 0
	for m < len(a) && a[m] == b[m] {
		m++
	}
	return m
}

// u64Bytes views s's memory as bytes (read-only).
func u64Bytes(s []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
}

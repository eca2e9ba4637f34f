package prefix

import (
	"fmt"
	"maps"
	"slices"
)

// Tier is the storage tier a worker holds a block in: the engine's device pool, or a lower tier that an
// offloading connector fills (vLLM's medium "CPU", Dynamo's StorageTier).
type Tier uint8

const (
	// TierDevice is the engine's own KV pool: the only tier that is a prefix-cache hit.
	TierDevice Tier = iota
	// TierHost is host memory (pinned CPU memory of an offloading connector).
	TierHost
	// TierDisk is local disk or NVMe, and storage beyond the worker (external): the slowest tier.
	TierDisk
	numTiers
)

// A worker that reports lower-tier blocks gets one extra slot per lower tier, created on its first
// lower-tier event. The slot of tier t holds every block the worker holds on t or on a faster tier: the
// host slot is the union of device and host, the disk slot the union of all three. Reference counts make
// the union exact: a device store is mirrored into the worker's lower slots, a device removal too (only
// for hashes the device slot held), a host store into the host and disk slots. The walk of a query then
// measures, per slot, the prefix held on that tier or better, and a worker's Score is
//
//	Blocks = device prefix, Host = host-slot prefix − Blocks, Disk = disk-slot prefix − host-slot prefix.
//
// A device-only index (no lower slot anywhere) pays one branch on Store, Remove and FindMatches.

// String names the tier as the metrics label it.
func (t Tier) String() string {
	switch t {
	case TierDevice:
		return "device"
	case TierHost:
		return "host"
	case TierDisk:
		return "disk"
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// StoreTier is Store for blocks held on tier t. The parent may be held on t or on any faster tier. A
// lower-tier block is never part of Score.Blocks.
func (ix *Index) StoreTier(w WorkerKey, t Tier, parent uint64, hasParent bool, blocks []Block) error {
	if t == TierDevice || t >= numTiers {
		return ix.Store(w, parent, hasParent, blocks)
	}
	d, ok := ix.slotOf[w]
	if !ok {
		if hasParent {
			ix.stats.RejectedParentNotFound++
			return fmt.Errorf("%w: worker %d rank %d parent %#x", ErrParentNotFound, w.WorkerID, w.DPRank, parent)
		}
		d = ix.slotFor(w)
	}
	l := ix.lowerSlot(d, t)
	n, err := ix.store(l, parent, hasParent, blocks)
	own := &ix.workers[l].own
	for _, b := range blocks[:n] {
		if i, ok := own.find(b.EngineHash); ok {
			own.incr(i)
		} else {
			own.insert(b.EngineHash, 0)
		}
	}
	if n > 0 {
		ix.mirrorStore(d, t, parent, hasParent, blocks[:n])
	}
	return err
}

// RemoveTier is Remove for blocks held on tier t: a block evicted from host memory stays credited on the
// device, and the reverse.
func (ix *Index) RemoveTier(w WorkerKey, t Tier, engineHashes []uint64) error {
	if t == TierDevice || t >= numTiers {
		return ix.Remove(w, engineHashes)
	}
	var first error
	d, known := ix.slotOf[w]
	var l uint32
	if known {
		l = ix.tiers[d].lower[t-1]
	}
	for _, eh := range engineHashes {
		if l == 0 || !ix.takeOwn(l-1, eh) || !ix.removeOne(l-1, eh) {
			ix.stats.BlockNotFound++
			if first == nil {
				first = fmt.Errorf("%w: worker %d rank %d %s engine hash %#x", ErrBlockNotFound, w.WorkerID, w.DPRank, t, eh)
			}
			continue
		}
		ix.mirrorRemove(d, t, eh)
	}
	return first
}

// takeOwn drops one of the tier's own references to eh from lower slot l, and reports whether it had one.
func (ix *Index) takeOwn(l uint32, eh uint64) bool {
	own := &ix.workers[l].own
	i, ok := own.find(eh)
	if !ok {
		return false
	}
	if own.count(i) > 1 {
		own.decr(i)
	} else {
		own.deleteAt(i)
	}
	return true
}

// dropOwn forgets the tier's own references to eh (its handle was dropped by a cascade or a clear).
func (ws *workerState) dropOwn(eh uint64) {
	if i, ok := ws.own.find(eh); ok {
		ws.own.deleteAt(i)
	}
}

// lowerSlot returns the slot of tier t of device slot d, creating it as a copy of the next faster tier's
// slot (the union it must contain) the first time.
func (ix *Index) lowerSlot(d uint32, t Tier) uint32 {
	if l := ix.tiers[d].lower[t-1]; l != 0 {
		return l - 1
	}
	src := d
	for u := t - 1; u > TierDevice; u-- {
		if l := ix.tiers[d].lower[u-1]; l != 0 {
			src = l - 1
			break
		}
	}
	ix.compact(src) // the copy's handles must all be live: dead ones would name their ids uncounted
	sw := ix.workers[src]
	ws := &workerState{key: sw.key, multi: maps.Clone(sw.multi)}
	ws.handles = sw.handles
	ws.handles.slots = slices.Clone(sw.handles.slots)
	ws.handles.more = maps.Clone(sw.handles.more)
	s := ix.newSlot(ws, slotTier{tier: t, dev: d})
	ix.size += ws.handles.n
	ix.lower++
	ix.tiers[d].lower[t-1] = s + 1
	// Every node holding src holds all its positions (a node's run shares one worker set).
	for n := 1; n < len(ix.nodes); n++ {
		if nd := &ix.nodes[n]; nd.live && nd.workers.has(src) {
			nd.workers.set(s)
			ix.touch(uint32(n))
		}
	}
	return s
}

// mirrorStore applies blocks, stored on tier t and accepted there, to the worker's slots of the tiers
// below t. Mirrors are bookkeeping, not events: the counters stay as the event left them.
func (ix *Index) mirrorStore(d uint32, t Tier, parent uint64, hasParent bool, blocks []Block) {
	for u := max(t+1, TierHost); u < numTiers; u++ {
		if l := ix.tiers[d].lower[u-1]; l != 0 {
			st := ix.stats
			_, _ = ix.store(l-1, parent, hasParent, blocks)
			ix.stats = st
		}
	}
}

// mirrorRemove drops the reference that a removal of eh from tier t took from the tier's slot from the
// worker's slots of the tiers below t.
func (ix *Index) mirrorRemove(d uint32, t Tier, eh uint64) {
	for u := max(t+1, TierHost); u < numTiers; u++ {
		if l := ix.tiers[d].lower[u-1]; l != 0 {
			st := ix.stats
			ix.removeOne(l-1, eh)
			ix.stats = st
		}
	}
}

// TierBlocks is the number of engine hashes w holds on tier t or a faster one (for the device tier,
// WorkerBlocks).
func (ix *Index) TierBlocks(w WorkerKey, t Tier) int {
	s, ok := ix.slotOf[w]
	if !ok || t >= numTiers {
		return 0
	}
	if t > TierDevice {
		l := ix.tiers[s].lower[t-1]
		if l == 0 {
			return ix.TierBlocks(w, t-1)
		}
		s = l - 1
	}
	return ix.workers[s].live()
}

// findTiered is FindMatches once some worker holds lower-tier blocks: the same walk, recording each
// slot's prefix length, then one Score per worker with its device, host and disk overlap. sets, when not
// nil, lends the working sets of a view of more than 2,048 slots (Match's).
func (v *View) findTiered(qr *Query, out []Score, sets *scratch) []Score {
	q := qr.hashes
	c, ok := v.nodes[rootNode].child(q[0])
	if !ok {
		return out
	}
	var dbuf [2048]uint32
	var depthOf []uint32
	switch n := v.words * 64; {
	case n <= len(dbuf):
		depthOf = dbuf[:n]
	case sets != nil:
		depthOf = sets.depths(n)
	default:
		depthOf = make([]uint32, n)
	}
	var abuf, fbuf [32]uint64
	var active, first []uint64
	switch {
	case v.words <= len(abuf):
		active, first = abuf[:v.words], fbuf[:v.words]
	case sets != nil:
		active, first = sets.words(v.words)
	default:
		active, first = make([]uint64, v.words), make([]uint64, v.words)
	}
	nd := &v.nodes[c]
	for i := range active {
		active[i] = nd.workers.word(i)
	}
	copy(first, active)
	depth := 0
	for {
		m := matchRun(nd, qr)
		depth = int(nd.start) + m
		if m < len(nd.hashes) || depth == len(q) {
			break
		}
		if c, ok = nd.child(q[depth]); !ok {
			break
		}
		nd = &v.nodes[c]
		alive := uint64(0)
		for i, a := range active {
			if a == 0 {
				continue
			}
			x := nd.workers.word(i)
			for d := a &^ x; d != 0; d &= d - 1 {
				depthOf[i<<6+trailingZeros(d)] = uint32(depth)
			}
			active[i] = a & x
			alive |= a & x
		}
		if alive == 0 {
			break
		}
	}
	for i, a := range active {
		for ; a != 0; a &= a - 1 {
			depthOf[i<<6+trailingZeros(a)] = uint32(depth)
		}
	}
	// One Score per device slot among the slots that matched the first block. A worker's slots all hold
	// that block when any does (lower slots are unions), so its device slot is reached through any of them.
	const done = 1 << 31 // marks a device slot whose Score is out (depths are below 2^31)
	for i, a := range first {
		for ; a != 0; a &= a - 1 {
			s := uint32(i<<6 + trailingZeros(a))
			d := s
			if st := &v.tiers[s]; st.tier != TierDevice {
				d = st.dev
			}
			if depthOf[d]&done != 0 {
				continue
			}
			dt := &v.tiers[d]
			dev := depthOf[d]
			host := dev
			if l := dt.lower[TierHost-1]; l != 0 {
				host = max(host, depthOf[l-1])
			}
			disk := host
			if l := dt.lower[TierDisk-1]; l != 0 {
				disk = max(disk, depthOf[l-1])
			}
			out = append(out, Score{Worker: v.keys[d], Blocks: dev, Host: host - dev, Disk: disk - host})
			depthOf[d] |= done
		}
	}
	return out
}

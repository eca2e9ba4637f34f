package prefix

import "math/bits"

// handle is one engine hash held by a (worker, dp_rank): the block it names and how many stores hold it.
type handle struct {
	eh    uint64 // engine hash, opaque
	id    uint32 // block id (index into Index.locs)
	count uint32 // stores minus removes
}

// hslot is a handle as its table stores it: 12 bytes, the engine hash in two halves and the block id
// plus one (0 marks an empty slot). References beyond the first live in handleTable.more: an engine hash
// stored twice is rare (vLLM can do it), so the count costs no bytes per slot.
type hslot struct {
	lo, hi uint32
	idp    uint32
}

func (s *hslot) eh() uint64 { return uint64(s.hi)<<32 | uint64(s.lo) }

// handleTable maps a worker's engine hashes to blocks: open addressing with linear probing and
// backward-shift deletion (no tombstones), 12 bytes a slot, load factor at most 3/4, growing by half
// (any size: the home slot is a multiply-shift, not a mask), so that a table is on average about 60 %
// full. A Go map[uint64]*node would cost about 4× the memory and a pointer per entry for the GC to scan.
type handleTable struct {
	slots []hslot
	n     int               // occupied slots
	more  map[uint64]uint32 // references beyond the first, by engine hash; nil while none
}

// home is the ideal slot of eh. Fibonacci hashing spreads engine hashes that are small or sequential;
// the high word of the product with the table's length maps the mixed hash onto [0, len).
func (t *handleTable) home(eh uint64) int {
	hi, _ := bits.Mul64(eh*0x9E3779B97F4A7C15, uint64(len(t.slots)))
	return int(hi)
}

// next is the slot after i, wrapping around.
func (t *handleTable) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

// used reports whether slot i holds a handle.
func (t *handleTable) used(i int) bool { return t.slots[i].idp != 0 }

// id returns the block id of the handle at slot i.
func (t *handleTable) id(i int) uint32 { return t.slots[i].idp - 1 }

// at returns the handle at slot i.
func (t *handleTable) at(i int) handle {
	s := &t.slots[i]
	eh := s.eh()
	return handle{eh: eh, id: s.idp - 1, count: 1 + t.more[eh]}
}

// incr adds a reference to the handle at slot i.
func (t *handleTable) incr(i int) {
	if t.more == nil {
		t.more = make(map[uint64]uint32)
	}
	t.more[t.slots[i].eh()]++
}

// decr drops a reference of the handle at slot i, which must have more than one.
func (t *handleTable) decr(i int) {
	eh := t.slots[i].eh()
	if t.more[eh]--; t.more[eh] == 0 {
		delete(t.more, eh)
	}
}

// count returns the references of the handle at slot i.
func (t *handleTable) count(i int) uint32 {
	if t.more == nil {
		return 1
	}
	return 1 + t.more[t.slots[i].eh()]
}

// each calls fn for every handle.
func (t *handleTable) each(fn func(h handle)) {
	for i := range t.slots {
		if t.used(i) {
			fn(t.at(i))
		}
	}
}

// find returns the slot holding eh, or false.
func (t *handleTable) find(eh uint64) (int, bool) {
	if t.n == 0 {
		return -1, false
	}
	lo, hi := uint32(eh), uint32(eh>>32)
	for i := t.home(eh); ; i = t.next(i) {
		s := &t.slots[i]
		if s.idp == 0 {
			return -1, false
		}
		if s.lo == lo && s.hi == hi {
			return i, true
		}
	}
}

// touch loads the home slot of every engine hash of blocks. The loads are independent, so the CPU
// overlaps their cache misses; the store loop that follows then finds its slots in cache. With 256
// workers the tables hold 16 MB or more and a miss per block would otherwise dominate the apply rate.
func (t *handleTable) touch(blocks []Block) uint32 {
	if t.n == 0 {
		return 0
	}
	var x uint32
	for _, b := range blocks {
		x += t.slots[t.home(b.EngineHash)].idp
	}
	return x
}

// full reports whether the next insert grows the table.
func (t *handleTable) full() bool { return (t.n+1)*4 > len(t.slots)*3 }

// insert adds eh → id with one reference; eh must be absent.
func (t *handleTable) insert(eh uint64, id uint32) {
	if t.full() {
		t.grow()
	}
	t.put(eh, id)
}

// put places eh → id in its probe run (room is guaranteed).
func (t *handleTable) put(eh uint64, id uint32) {
	i := t.home(eh)
	for t.slots[i].idp != 0 {
		i = t.next(i)
	}
	t.slots[i] = hslot{lo: uint32(eh), hi: uint32(eh >> 32), idp: id + 1}
	t.n++
}

func (t *handleTable) grow() {
	old := t.slots
	t.resize(t.n + 1)
	t.rehash(old)
}

// rehash puts every handle of old into the (empty, resized) table; counts stay in more.
func (t *handleTable) rehash(old []hslot) {
	for i := range old {
		if s := &old[i]; s.idp != 0 {
			t.put(s.eh(), s.idp-1)
		}
	}
}

// resize empties the table and gives it room for n handles: at least half again its length when
// growing (n = t.n + 1), the smallest that fits otherwise (compaction).
func (t *handleTable) resize(n int) {
	size := max(8, ((n+1)*4+2)/3+1)
	if n > t.n {
		size = max(size, len(t.slots)+len(t.slots)/2)
	}
	t.slots = make([]hslot, size)
	writeFirst(t.slots) // rehash probes (reads) before it writes
	t.n = 0
}

// deleteAt empties slot i and shifts back the entries of its probe run so that lookups never need
// tombstones.
func (t *handleTable) deleteAt(i int) {
	if t.more != nil {
		delete(t.more, t.slots[i].eh())
	}
	for j := t.next(i); t.slots[j].idp != 0; j = t.next(j) {
		if !probeStays(i, t.home(t.slots[j].eh()), j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = hslot{}
	t.n--
}

// probeStays reports, for backward-shift deletion from a linear-probing table, whether the entry at slot
// j, whose home slot is home, stays when slot i before it in its probe run is emptied: it does when home
// lies cyclically in (i, j], since a lookup for it starts after i and never passes the hole. Otherwise it
// moves into i. Shared by the handle tables and the child tables (node.go).
func probeStays(i, home, j int) bool {
	if i <= j {
		return i < home && home <= j
	}
	return i < home || home <= j
}

// reset forgets every handle and releases the memory.
func (t *handleTable) reset() {
	*t = handleTable{}
}

package prefix

import "math/bits"

// handle is one engine hash held by a (worker, dp_rank): the block it names and how many stores hold it.
type handle struct {
	eh    uint64 // engine hash, opaque
	id    uint32 // block id (index into Index.locs)
	count uint32 // stores minus removes; 0 marks an empty slot
}

// handleTable maps a worker's engine hashes to blocks: open addressing with linear probing and
// backward-shift deletion (no tombstones), 16 bytes a slot, load factor at most 3/4. A Go
// map[uint64]*node would cost about 3× the memory and a pointer per entry for the GC to scan.
type handleTable struct {
	slots []handle // length 0 or a power of two
	n     int      // occupied slots
	shift uint8    // 64 - log2(len(slots))
}

// home is the ideal slot of eh. Fibonacci hashing spreads engine hashes that are small or sequential.
func (t *handleTable) home(eh uint64) int {
	return int((eh * 0x9E3779B97F4A7C15) >> t.shift)
}

// find returns the slot holding eh, or false.
func (t *handleTable) find(eh uint64) (int, bool) {
	if t.n == 0 {
		return -1, false
	}
	mask := len(t.slots) - 1
	for i := t.home(eh); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.count == 0 {
			return -1, false
		}
		if s.eh == eh {
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
		x += t.slots[t.home(b.EngineHash)].count
	}
	return x
}

// full reports whether the next insert grows the table.
func (t *handleTable) full() bool { return (t.n+1)*4 > len(t.slots)*3 }

// insert adds eh → id with count 1; eh must be absent.
func (t *handleTable) insert(eh uint64, id uint32) {
	if t.full() {
		t.grow()
	}
	t.put(handle{eh: eh, id: id, count: 1})
}

func (t *handleTable) put(h handle) {
	mask := len(t.slots) - 1
	i := t.home(h.eh)
	for t.slots[i].count != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = h
	t.n++
}

func (t *handleTable) grow() {
	old := t.slots
	t.resize(t.n + 1)
	for _, h := range old {
		if h.count != 0 {
			t.put(h)
		}
	}
}

// resize empties the table and gives it room for n handles (and at least twice its current ones when
// growing: n = t.n + 1).
func (t *handleTable) resize(n int) {
	size := 8
	for (n+1)*4 > size*3 {
		size *= 2
	}
	if n > t.n {
		size = max(size, 2*len(t.slots))
	}
	t.slots = make([]handle, size)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	t.n = 0
}

// deleteAt empties slot i and shifts back the entries of its probe run so that lookups never need
// tombstones.
func (t *handleTable) deleteAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].count != 0; j = (j + 1) & mask {
		k := t.home(t.slots[j].eh)
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = handle{}
	t.n--
}

// reset forgets every handle and releases the memory.
func (t *handleTable) reset() {
	*t = handleTable{}
}

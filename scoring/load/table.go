package load

// refTable is a refcount map from block hash to count: open addressing, linear probing, backward-shift
// deletion (no tombstones). Keys are xxh3 hashes or splitmix64 outputs, already uniform, so the low bits
// index the table directly. Key 0 is the empty marker and is kept aside. A Go map costs ~40 ns per
// operation at these sizes; this table a few ns, which matters because a request adds and frees ~512.
type refTable struct {
	keys  []uint64
	vals  []uint32
	mask  uint64
	n     int // occupied slots, key 0 excluded
	zero  uint32
	limit int // grow above this many entries (load factor 1/2)
}

func newRefTable() *refTable {
	t := &refTable{}
	t.alloc(64)
	return t
}

func (t *refTable) alloc(size int) {
	t.keys = make([]uint64, size)
	t.vals = make([]uint32, size)
	t.mask = uint64(size - 1)
	t.limit = size / 2
}

// Len is the number of distinct keys.
func (t *refTable) Len() int {
	if t.zero > 0 {
		return t.n + 1
	}
	return t.n
}

// Has reports whether k has a positive count.
func (t *refTable) Has(k uint64) bool {
	if k == 0 {
		return t.zero > 0
	}
	for i := k & t.mask; ; i = (i + 1) & t.mask {
		switch t.keys[i] {
		case k:
			return true
		case 0:
			return false
		}
	}
}

// Inc adds one reference to k.
func (t *refTable) Inc(k uint64) {
	if k == 0 {
		t.zero++
		return
	}
	for i := k & t.mask; ; i = (i + 1) & t.mask {
		switch t.keys[i] {
		case k:
			t.vals[i]++
			return
		case 0:
			t.keys[i], t.vals[i] = k, 1
			t.n++
			if t.n > t.limit {
				t.grow()
			}
			return
		}
	}
}

// Dec drops one reference to k; at zero the key leaves. Unknown keys are ignored.
func (t *refTable) Dec(k uint64) {
	if k == 0 {
		if t.zero > 0 {
			t.zero--
		}
		return
	}
	i := k & t.mask
	for {
		switch t.keys[i] {
		case k:
			if t.vals[i] > 1 {
				t.vals[i]--
				return
			}
			t.remove(i)
			return
		case 0:
			return
		}
		i = (i + 1) & t.mask
	}
}

// remove empties slot i and shifts later members of its probe run back so lookups stay correct.
func (t *refTable) remove(i uint64) {
	t.n--
	for {
		t.keys[i], t.vals[i] = 0, 0
		j := i
		for {
			j = (j + 1) & t.mask
			k := t.keys[j]
			if k == 0 {
				return
			}
			home := k & t.mask
			// Move k back to i when its home is not in (i, j] (cyclically).
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				t.keys[i], t.vals[i] = k, t.vals[j]
				i = j
				break
			}
		}
	}
}

func (t *refTable) grow() {
	keys, vals := t.keys, t.vals
	t.alloc(2 * len(keys))
	for i, k := range keys {
		if k == 0 {
			continue
		}
		j := k & t.mask
		for t.keys[j] != 0 {
			j = (j + 1) & t.mask
		}
		t.keys[j], t.vals[j] = k, vals[i]
	}
}

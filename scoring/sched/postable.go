package sched

import "github.com/kvroute/kvroute/scoring"

// posTable maps a worker rank to its index in the target list: open addressing with linear probing over
// a power-of-two array at most half full, keys in place. The candidate loop scatters every overlap score
// through it, so it must cost a probe or two, not a general map's hashing and indirection.
type posTable struct {
	shift uint
	slots []posSlot
}

type posSlot struct {
	key scoring.WorkerKey
	pos int32 // index + 1; 0 marks an empty slot
}

func newPosTable(n int) posTable {
	size, bits := 2, uint(1)
	for size < 2*n {
		size, bits = size*2, bits+1
	}
	return posTable{shift: 64 - bits, slots: make([]posSlot, size)}
}

// home is Fibonacci hashing of the id with the rank mixed in: worker ids are Dynamo lease ids (64-bit,
// often sequential in tests), so the multiply spreads them over the high bits the slot is taken from.
func (p *posTable) home(k scoring.WorkerKey) uint64 {
	return ((k.WorkerID ^ uint64(k.DPRank)<<48) * 0x9e3779b97f4a7c15) >> p.shift
}

func (p *posTable) put(k scoring.WorkerKey, i int) {
	mask := uint64(len(p.slots) - 1)
	for h := p.home(k); ; h = (h + 1) & mask {
		if s := &p.slots[h]; s.pos == 0 || s.key == k {
			s.key, s.pos = k, int32(i+1)
			return
		}
	}
}

func (p *posTable) find(k scoring.WorkerKey) (int, bool) {
	mask := uint64(len(p.slots) - 1)
	for h := p.home(k); ; h = (h + 1) & mask {
		s := &p.slots[h]
		if s.pos == 0 {
			return 0, false
		}
		if s.key == k {
			return int(s.pos - 1), true
		}
	}
}

// del removes k (nothing when absent) by backward shift: each later key of the run that a probe from
// its home would no longer reach moves into the gap, so no tombstones are left and find stays exact.
func (p *posTable) del(k scoring.WorkerKey) {
	mask := uint64(len(p.slots) - 1)
	gap := p.home(k)
	for ; p.slots[gap].key != k || p.slots[gap].pos == 0; gap = (gap + 1) & mask {
		if p.slots[gap].pos == 0 {
			return
		}
	}
	for j := (gap + 1) & mask; p.slots[j].pos != 0; j = (j + 1) & mask {
		// The key at j may fill the gap when its home is not in the cyclic range (gap, j].
		if h := p.home(p.slots[j].key); (j-h)&mask >= (j-gap)&mask {
			p.slots[gap] = p.slots[j]
			gap = j
		}
	}
	p.slots[gap] = posSlot{}
}

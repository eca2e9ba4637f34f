package bench

// lru is a block LRU keyed by uint64: a map into an intrusive doubly-linked list over a slice, so a touch
// is one map probe and four index writes, and evicted nodes are reused. Not safe for concurrent use.
//
// Callers touch a request's chain leaf first and root last: a block is then always more recent than
// every block below it, so eviction takes leaves first and the held set stays prefix-closed, as vLLM's
// free-block queue does.
type lru struct {
	capacity int
	pos      map[uint64]int32
	nodes    []lruNode
	head     int32 // most recent; -1 when empty
	tail     int32 // least recent
	free     int32 // free-node list through next
}

type lruNode struct {
	key        uint64
	prev, next int32
}

func newLRU(capacity int) *lru {
	return &lru{capacity: capacity, pos: make(map[uint64]int32), head: -1, tail: -1, free: -1}
}

// Len is the number of held keys.
func (l *lru) Len() int { return len(l.pos) }

// Has reports whether key is held, without touching it.
func (l *lru) Has(key uint64) bool {
	_, ok := l.pos[key]
	return ok
}

func (l *lru) unlink(i int32) {
	n := &l.nodes[i]
	if n.prev >= 0 {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
}

func (l *lru) pushFront(i int32) {
	n := &l.nodes[i]
	n.prev, n.next = -1, l.head
	if l.head >= 0 {
		l.nodes[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
}

// Touch makes key the most recent, inserting it when absent; it reports whether it was inserted. It
// never evicts: call EvictOver after touching a whole chain.
func (l *lru) Touch(key uint64) bool {
	if i, ok := l.pos[key]; ok {
		if l.head != i {
			l.unlink(i)
			l.pushFront(i)
		}
		return false
	}
	var i int32
	if l.free >= 0 {
		i = l.free
		l.free = l.nodes[i].next
	} else {
		l.nodes = append(l.nodes, lruNode{})
		i = int32(len(l.nodes) - 1)
	}
	l.nodes[i].key = key
	l.pos[key] = i
	l.pushFront(i)
	return true
}

// EvictOver removes least-recent keys until at most capacity remain, appending them to dst.
func (l *lru) EvictOver(dst []uint64) []uint64 {
	for len(l.pos) > l.capacity && l.tail >= 0 {
		i := l.tail
		l.unlink(i)
		k := l.nodes[i].key
		delete(l.pos, k)
		l.nodes[i].next = l.free
		l.free = i
		dst = append(dst, k)
	}
	return dst
}

package mocker

// EventKind is the kind of a KV cache event.
type EventKind uint8

// The three vLLM KV cache events.
const (
	EventStored EventKind = iota + 1
	EventRemoved
	EventCleared
)

// KVEvent is one engine cache event, in the engine's terms; the runtime converts it to the wire type of
// workers/kvevents. Slices are owned by the event (never reused by the engine).
type KVEvent struct {
	Kind EventKind
	// Hashes are the stored blocks in chain order, or the one evicted block.
	Hashes []BlockHash
	// Parent is the hash of the block before Hashes[0] (Stored only); HasParent is false for block 0.
	Parent    BlockHash
	HasParent bool
	// Tokens are the stored blocks' tokens, concatenated (len = len(Hashes) * BlockSize).
	Tokens    []uint32
	BlockSize int
	// Extra holds one entry per stored block (nil = None).
	Extra    []*ExtraKeys
	LoraName string
}

// block is one physical KV block. Free blocks sit in an intrusive doubly linked LRU queue (prev/next);
// cached blocks with the same hash form a singly linked duplicate chain (nextDup), because vLLM does not
// deduplicate cache entries and announces each physical copy.
type block struct {
	hash      BlockHash
	parent    BlockHash
	hasParent bool
	cached    bool
	inFree    bool
	ref       int32
	prev      int32
	next      int32
	nextDup   int32
	tokens    []uint32 // shares the owning request's token array; never mutated
	extra     *ExtraKeys
	lora      string
}

// blockPool is vLLM's BlockPool: a fixed set of physical blocks, a hash → block map of full cached blocks
// and a free queue in eviction order (head first). Freed blocks keep their hash (they stay cached) until
// they are popped for reuse; only then is BlockRemoved emitted. Not safe for concurrent use.
//
// Blocks are made as they are first allocated. vLLM's queue starts with every block in id order, and a
// freed block joins its tail, behind every block never used; so the queue is the blocks not made yet
// (ids len(blocks) .. capacity-1, popped in order) followed by the linked list of freed blocks (head ..
// tail). Making all of them up front (and sizing the cache map for all) was most of a simulated
// worker's start: 80 % of the CPU of kvroute bench lab's standing suite, whose hundreds of fleets use
// a fraction of their blocks (docs/benchmarks.md, "Blocks made as they are first used").
type blockPool struct {
	bs       int
	capacity int // physical blocks (num_gpu_blocks)
	blocks   []block
	cache    map[BlockHash]int32
	head     int32
	tail     int32
	numFree  int
	events   []KVEvent
	// evictions counts BlockRemoved events (a metric).
	evictions uint64
}

func newBlockPool(numBlocks, blockSize int) *blockPool {
	return &blockPool{bs: blockSize, capacity: numBlocks, cache: map[BlockHash]int32{}, head: -1, tail: -1, numFree: numBlocks}
}

func (p *blockPool) pushFree(id int32) {
	b := &p.blocks[id]
	b.inFree, b.prev, b.next = true, p.tail, -1
	if p.tail >= 0 {
		p.blocks[p.tail].next = id
	} else {
		p.head = id
	}
	p.tail = id
	p.numFree++
}

func (p *blockPool) unlinkFree(id int32) {
	b := &p.blocks[id]
	if b.prev >= 0 {
		p.blocks[b.prev].next = b.next
	} else {
		p.head = b.next
	}
	if b.next >= 0 {
		p.blocks[b.next].prev = b.prev
	} else {
		p.tail = b.prev
	}
	b.inFree, b.prev, b.next = false, -1, -1
	p.numFree--
}

// lookup returns a physical block caching h, or -1.
func (p *blockPool) lookup(h BlockHash) int32 {
	if id, ok := p.cache[h]; ok {
		return id
	}
	return -1
}

// touch takes a reference on a cached block, reactivating it if it was free (an InactiveHit).
func (p *blockPool) touch(id int32) {
	b := &p.blocks[id]
	if b.ref == 0 && b.inFree {
		p.unlinkFree(id)
	}
	b.ref++
}

// allocate pops the least recently freed block and takes a reference. A block that still holds a hash is
// evicted first, emitting BlockRemoved before whatever store reuses it. The caller checks numFree.
func (p *blockPool) allocate() int32 {
	if n := len(p.blocks); n < p.capacity { // the queue's head is the first block never used
		p.blocks = append(p.blocks, block{prev: -1, next: -1, nextDup: -1, ref: 1})
		p.numFree--
		return int32(n)
	}
	id := p.head
	if id < 0 {
		panic("mocker: allocate from an empty free queue")
	}
	p.unlinkFree(id)
	b := &p.blocks[id]
	if b.cached {
		h := b.hash
		p.uncache(id)
		p.evictions++
		p.events = append(p.events, KVEvent{Kind: EventRemoved, Hashes: []BlockHash{h}})
	}
	b.ref = 1
	return id
}

func (p *blockPool) uncache(id int32) {
	b := &p.blocks[id]
	h := b.hash
	if head := p.cache[h]; head == id {
		if b.nextDup >= 0 {
			p.cache[h] = b.nextDup
		} else {
			delete(p.cache, h)
		}
	} else {
		for cur := head; cur >= 0; cur = p.blocks[cur].nextDup {
			if p.blocks[cur].nextDup == id {
				p.blocks[cur].nextDup = b.nextDup
				break
			}
		}
	}
	b.cached, b.nextDup, b.tokens, b.extra, b.lora = false, -1, nil, nil, ""
	b.hash, b.parent, b.hasParent = 0, 0, false
}

// cacheBlock marks a full, referenced block as cached under h. Events are emitted by the caller, one per
// request and step, covering its consecutive new blocks.
func (p *blockPool) cacheBlock(id int32, h, parent BlockHash, hasParent bool, tokens []uint32, extra *ExtraKeys, lora string) {
	b := &p.blocks[id]
	if b.cached {
		panic("mocker: caching an already cached block")
	}
	b.cached, b.hash, b.parent, b.hasParent, b.tokens, b.extra, b.lora = true, h, parent, hasParent, tokens, extra, lora
	b.nextDup = -1
	if head, ok := p.cache[h]; ok {
		// Append at the chain's end so lookups keep returning the oldest copy.
		cur := head
		for p.blocks[cur].nextDup >= 0 {
			cur = p.blocks[cur].nextDup
		}
		p.blocks[cur].nextDup = id
	} else {
		p.cache[h] = id
	}
}

// release drops one reference on each block, last block first, so that a request's tail blocks are
// evicted before its head: shared prefixes survive longest (vLLM frees in reverse order).
func (p *blockPool) release(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		b := &p.blocks[id]
		b.ref--
		if b.ref < 0 {
			panic("mocker: block reference count below zero")
		}
		if b.ref == 0 {
			p.pushFree(id)
		}
	}
}

// reset drops every cached hash if no block is in use and emits AllBlocksCleared; otherwise it fails.
func (p *blockPool) reset() bool {
	if p.numFree != p.capacity {
		return false
	}
	for id := range p.blocks {
		if p.blocks[id].cached {
			b := &p.blocks[id]
			b.cached, b.nextDup, b.tokens, b.extra, b.lora = false, -1, nil, nil, ""
			b.hash, b.parent, b.hasParent = 0, 0, false
		}
	}
	clear(p.cache)
	p.events = append(p.events, KVEvent{Kind: EventCleared})
	return true
}

// usedBlocks is the number of referenced blocks (vLLM's KV usage numerator).
func (p *blockPool) usedBlocks() int { return p.capacity - p.numFree }

// CachedBlock is one cached physical block, the ground truth behind GET /debug/kv_blocks.
type CachedBlock struct {
	BlockID   int        `json:"block_id"`
	Hash      uint64     `json:"block_hash"`
	Parent    *uint64    `json:"parent_block_hash"`
	TokenIDs  []uint32   `json:"token_ids"`
	ExtraKeys *ExtraKeys `json:"extra_keys"`
	LoraName  string     `json:"lora_name,omitempty"`
	RefCount  int        `json:"ref_cnt"`
}

// cachedBlocks lists the cached blocks in block-id order.
func (p *blockPool) cachedBlocks(dst []CachedBlock) []CachedBlock {
	for id := range p.blocks {
		b := &p.blocks[id]
		if !b.cached {
			continue
		}
		cb := CachedBlock{BlockID: id, Hash: uint64(b.hash), TokenIDs: b.tokens, ExtraKeys: b.extra, LoraName: b.lora, RefCount: int(b.ref)}
		if b.hasParent {
			par := uint64(b.parent)
			cb.Parent = &par
		}
		dst = append(dst, cb)
	}
	return dst
}

package mm

import (
	"sync"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
)

// sizeCacheShards splits the cache so concurrent requests rarely meet on a lock; a power of two.
const sizeCacheShards = 16

// sizeCache is an LRU of image sizes keyed by mm_hash with a time-to-live, split into shards by the
// low bits of the hash (well mixed: it is an XXH3 output). Each shard is a map plus an intrusive
// doubly linked recency list under its own mutex; Get moves the entry to the front, so it takes the
// write lock too (a read lock would not be cheaper here: the critical section is a few pointer writes).
type sizeCache struct {
	shards [sizeCacheShards]cacheShard
	ttl    time.Duration
	clock  clock.Clock // the TTL's; tests pass a fake one
}

type cacheShard struct {
	mu   sync.Mutex
	m    map[Hash]*cacheEntry
	head cacheEntry // sentinel: head.next is the most recent, head.prev the least recent
	cap  int
	_    [40]byte // keep neighbouring shards' locks on separate cache lines
}

type cacheEntry struct {
	key        Hash
	size       Size
	expires    int64 // unix nanoseconds
	prev, next *cacheEntry
}

func newSizeCache(entries int, ttl time.Duration, clk clock.Clock) *sizeCache {
	c := &sizeCache{ttl: ttl, clock: clk}
	per := (entries + sizeCacheShards - 1) / sizeCacheShards
	if per < 1 {
		per = 1
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.m = make(map[Hash]*cacheEntry)
		s.cap = per
		s.head.next, s.head.prev = &s.head, &s.head
	}
	return c
}

func (c *sizeCache) shard(k Hash) *cacheShard { return &c.shards[uint64(k)&(sizeCacheShards-1)] }

func (s *cacheShard) unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (s *cacheShard) pushFront(e *cacheEntry) {
	e.prev, e.next = &s.head, s.head.next
	s.head.next.prev = e
	s.head.next = e
}

// get returns the cached size of k if present and not expired; an expired entry is dropped.
func (c *sizeCache) get(k Hash) (Size, bool) {
	now := c.clock.Now().UnixNano()
	s := c.shard(k)
	s.mu.Lock()
	e, ok := s.m[k]
	if !ok {
		s.mu.Unlock()
		return Size{}, false
	}
	if now >= e.expires {
		s.unlink(e)
		delete(s.m, k)
		s.mu.Unlock()
		return Size{}, false
	}
	if s.head.next != e {
		s.unlink(e)
		s.pushFront(e)
	}
	sz := e.size
	s.mu.Unlock()
	return sz, true
}

// put stores k's size for ttl, evicting the least recently used entry of the shard when full.
func (c *sizeCache) put(k Hash, sz Size) {
	exp := c.clock.Now().Add(c.ttl).UnixNano()
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[k]; ok {
		e.size, e.expires = sz, exp
		s.unlink(e)
		s.pushFront(e)
		return
	}
	var e *cacheEntry
	if len(s.m) >= s.cap {
		e = s.head.prev // recycle the LRU entry
		s.unlink(e)
		delete(s.m, e.key)
	} else {
		e = new(cacheEntry)
	}
	*e = cacheEntry{key: k, size: sz, expires: exp}
	s.m[k] = e
	s.pushFront(e)
}

// len is the number of entries (expired ones included until touched).
func (c *sizeCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

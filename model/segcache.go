package model

import (
	"bytes"
	"container/list"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// DefaultSegmentCacheBytes bounds a Model's segment cache: 64 MiB holds the token ids of roughly 200 long
// (100k-token) conversations' worth of distinct turns.
const DefaultSegmentCacheBytes = 64 << 20

// minCachedSegment is the shortest segment worth a cache lookup (bytes): even a 10-byte segment ("assistant\n")
// costs more to normalize, split and look up word by word than one map probe.
const minCachedSegment = 8

// SegmentCache remembers the ids of text segments, the pieces between added tokens of a rendered prompt. Added
// tokens are split out before normalization and pre-tokenization, so a segment's ids never depend on its
// neighbors: caching per segment is exact. In a chat prompt every message body is its own segment (it sits
// between <|im_start|>role and <|im_end|>), so a long conversation re-sends its earlier turns as cache hits and
// only the new turn is tokenized.
//
// Bounded LRU by bytes (segment text plus 4 bytes per id it holds room for). One mutex guards it; a lookup is a map probe, so the
// lock is held for well under a microsecond.
type SegmentCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	items map[string]*list.Element
	lru   list.List // front = most recently used; values are *segEntry

	hits, misses atomic.Int64
}

type segEntry struct {
	text string
	ids  []uint32
}

// NewSegmentCache returns a cache holding at most maxBytes.
func NewSegmentCache(maxBytes int64) *SegmentCache {
	return &SegmentCache{max: maxBytes, items: map[string]*list.Element{}}
}

// cost counts the ids' capacity, not their length: an encoding grown by append holds up to a quarter more
// than it uses, and that is what the cache keeps alive.
func (e *segEntry) cost() int64 { return int64(len(e.text)) + 4*int64(cap(e.ids)) + 64 }

func (c *SegmentCache) get(s string) ([]uint32, bool) {
	c.mu.Lock()
	el, ok := c.items[s]
	if ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	if !ok {
		c.misses.Add(1)
		return nil, false
	}
	c.hits.Add(1)
	return el.Value.(*segEntry).ids, true
}

// put stores ids (which the cache then owns; callers may keep reading them) under a copy of s.
func (c *SegmentCache) put(s string, ids []uint32) {
	e := &segEntry{text: strings.Clone(s), ids: ids} // clone: s points into a whole rendered prompt
	if e.cost() > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[e.text]; ok {
		return
	}
	c.items[e.text] = c.lru.PushFront(e)
	c.size += e.cost()
	for c.size > c.max {
		old := c.lru.Back()
		oe := old.Value.(*segEntry)
		c.lru.Remove(old)
		delete(c.items, oe.text)
		c.size -= oe.cost()
	}
}

// SegmentStats are a cache's counters since it was made.
type SegmentStats struct {
	Hits, Misses int64
	Bytes        int64
	Entries      int
}

// Stats returns the cache's counters.
func (c *SegmentCache) Stats() SegmentStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return SegmentStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Bytes: c.size, Entries: len(c.items)}
}

// EncodeCached is Encode with the segments of s looked up in (and added to) cache. The result always equals
// Encode(s). The ids are gathered first and copied once into an exactly sized result: for a 100k-token prompt
// the copy is most of the work left once the segments are cached.
func (t *Tokenizer) EncodeCached(s string, cache *SegmentCache) []uint32 {
	if cache == nil {
		return t.Encode(s)
	}
	b := t.getBufs()
	pieces := t.added.split(s, b.pieces[:0])
	refs := b.refs[:0]
	scratch := b.scratch[:0]
	total := 0
	for _, p := range pieces {
		var r segRef
		switch seg := s[p.start:p.end]; {
		case p.isAdded:
			r = segRef{id: p.id, single: true}
		case len(seg) < minCachedSegment || (p.start == 0 && t.prependFirst):
			n := len(scratch)
			scratch = t.encodeText(scratch, seg, p.start == 0, b)
			r = segRef{from: n, to: len(scratch), inScratch: true}
		default:
			ids, ok := cache.get(seg)
			if !ok {
				ids = t.encodeText(nil, seg, p.start == 0, b)
				cache.put(seg, ids)
			}
			r = segRef{ids: ids}
		}
		total += r.len()
		refs = append(refs, r)
	}
	dst := make([]uint32, 0, total)
	for _, r := range refs {
		switch {
		case r.single:
			dst = append(dst, r.id)
		case r.inScratch:
			dst = append(dst, scratch[r.from:r.to]...)
		default:
			dst = append(dst, r.ids...)
		}
	}
	clear(refs) // drop references to cached slices before pooling
	b.pieces, b.refs, b.scratch = pieces[:0], refs[:0], scratch[:0]
	t.bufs.Put(b)
	return dst
}

// segRef is one piece of EncodeCached's result: an added token, a range of the scratch buffer, or cached ids.
type segRef struct {
	ids       []uint32
	from, to  int
	id        uint32
	single    bool
	inScratch bool
}

func (r *segRef) len() int {
	switch {
	case r.single:
		return 1
	case r.inScratch:
		return r.to - r.from
	}
	return len(r.ids)
}

// ErrNoTemplate is returned by EncodeChat for a model without a chat template.
var ErrNoTemplate = errors.New("model: no chat template")

// RenderChat renders messages with the model's chat template.
func (m *Model) RenderChat(msgs []Message, opts ChatOptions) (string, error) {
	if m.ChatTemplate == nil {
		return "", ErrNoTemplate
	}
	return m.ChatTemplate.Render(msgs, opts)
}

// EncodeChat renders messages and tokenizes the prompt as the engine does for chat completions (no post-processor
// tokens: the template writes its own), reusing the ids of segments seen before.
//
// The prompt text lives only for the call, in a pooled buffer: everything that outlives it (the segment and word
// caches' keys, the result) is copied out.
func (m *Model) EncodeChat(msgs []Message, opts ChatOptions) ([]uint32, error) {
	if m.ChatTemplate == nil {
		return nil, ErrNoTemplate
	}
	buf := renderBufs.Get().(*bytes.Buffer)
	buf.Reset()
	buf.Grow(renderSize(msgs))
	defer func() {
		if buf.Cap() <= maxPooledRender {
			renderBufs.Put(buf)
		}
	}()
	if err := m.ChatTemplate.execute(buf, msgs, opts); err != nil {
		return nil, err
	}
	text := unsafe.String(unsafe.SliceData(buf.Bytes()), buf.Len())
	if opts.ContinueFinalMessage {
		n, err := continueCut(text, msgs)
		if err != nil {
			return nil, err
		}
		text = text[:n]
	}
	return m.Tokenizer.EncodeCached(text, m.segments), nil
}

// Segments returns the model's segment cache (for stats).
func (m *Model) Segments() *SegmentCache { return m.segments }

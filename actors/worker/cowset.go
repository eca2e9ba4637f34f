package worker

import (
	"hash/maphash"
	"maps"
)

// cowSet is the fleet's published set of mirrors by key (worker id, or topic in bind mode): immutable
// once published, read without locks through an atomic.Pointer, written only by the fleet actor. It is
// held in parts by the key's hash, and a change copies only the part its key falls in, so a join or a
// removal copies about 1/64 of the fleet. One map copied whole per change made registering 8,192
// workers allocate 2 GB (docs/benchmarks.md, "A fleet joining one worker at a time").
type cowSet[K comparable] struct {
	parts [cowParts]map[K]*Mirror
	n     int
	part  func(K) uint64
}

// cowParts is the number of parts of a cowSet.
const cowParts = 64

// newIDSet is an empty set by worker id: ids are lease ids, often sequential, so the low bits spread
// them.
func newIDSet() *cowSet[uint64] { return &cowSet[uint64]{part: func(id uint64) uint64 { return id }} }

// topicSeed hashes topics to parts; a process's sets only need to agree with themselves.
var topicSeed = maphash.MakeSeed()

// newTopicSet is an empty set by topic.
func newTopicSet() *cowSet[string] {
	return &cowSet[string]{part: func(t string) uint64 { return maphash.String(topicSeed, t) }}
}

func (s *cowSet[K]) get(k K) (*Mirror, bool) {
	m, ok := s.parts[s.part(k)%cowParts][k]
	return m, ok
}

func (s *cowSet[K]) len() int { return s.n }

// each calls fn with every mirror of the set, in no order.
func (s *cowSet[K]) each(fn func(*Mirror)) {
	for _, p := range s.parts {
		for _, m := range p {
			fn(m)
		}
	}
}

// with returns a set that also maps k to m, s unchanged.
func (s *cowSet[K]) with(k K, m *Mirror) *cowSet[K] {
	next := *s
	i := s.part(k) % cowParts
	p := maps.Clone(s.parts[i])
	if p == nil {
		p = map[K]*Mirror{}
	}
	if _, had := p[k]; !had {
		next.n++
	}
	p[k] = m
	next.parts[i] = p
	return &next
}

// without returns a set without k, s unchanged (s itself when it has no k).
func (s *cowSet[K]) without(k K) *cowSet[K] {
	i := s.part(k) % cowParts
	if _, ok := s.parts[i][k]; !ok {
		return s
	}
	next := *s
	p := maps.Clone(s.parts[i])
	delete(p, k)
	next.parts[i], next.n = p, s.n-1
	return &next
}

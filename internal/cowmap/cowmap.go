// Package cowmap is a copy-on-write map for a set that many goroutines read without locks while one
// writer at a time changes it a key at a time: the fleet's workers by id and by topic, a bind socket's
// registered topics.
//
// # Overview
//
// A Map is immutable once published (through an atomic.Pointer, by its owner). With and Without return
// a new version and leave the receiver as it was, so a reader keeps a consistent version for as long
// as it holds it. The keys are held in Parts maps by a hash of the key, and a change copies only the
// map its key falls in: about 1/64 of the set. One map copied whole per change made registering 8,192
// workers through the router allocate 2 GB, and 8,192 topics of one bind socket take 4.3 s
// (docs/benchmarks.md, "A fleet joining one worker at a time").
//
// # Concurrency model
//
// None inside: a version is never written after With or Without returned it, so any number of
// goroutines may read it; the owner serializes the writers and publishes each version.
//
// # Ownership
//
// A new version shares the unchanged parts with its predecessor; values are shared, not copied.
//
// # Data flow
//
// writer: Load → With / Without → Store; readers: Load → Get / All / Len.
package cowmap

import (
	"hash/maphash"
	"iter"
	"maps"
)

// Parts is the number of maps a Map is held in.
const Parts = 64

// Map is one version of the set: immutable.
type Map[K comparable, V any] struct {
	parts [Parts]map[K]V
	n     int
	hash  func(K) uint64
}

// New returns an empty map whose keys go to parts by hash.
func New[K comparable, V any](hash func(K) uint64) *Map[K, V] { return &Map[K, V]{hash: hash} }

// NewByID returns an empty map by integer id: ids (lease ids, often sequential) spread over the parts
// by their low bits.
func NewByID[V any]() *Map[uint64, V] { return New[uint64, V](func(id uint64) uint64 { return id }) }

// seed hashes strings to parts; a process's maps only need to agree with themselves.
var seed = maphash.MakeSeed()

// NewByString returns an empty map by string, which GetBytes can read with the key as bytes.
func NewByString[V any]() *Map[string, V] {
	return New[string, V](func(s string) uint64 { return maphash.String(seed, s) })
}

// Get returns the value of k.
func (m *Map[K, V]) Get(k K) (V, bool) {
	v, ok := m.parts[m.hash(k)%Parts][k]
	return v, ok
}

// GetBytes is Get with the key as bytes, without converting it to a string: a key read off a socket.
// m must come from NewByString.
func GetBytes[V any](m *Map[string, V], k []byte) (V, bool) {
	v, ok := m.parts[maphash.Bytes(seed, k)%Parts][string(k)]
	return v, ok
}

// Len returns the number of keys.
func (m *Map[K, V]) Len() int { return m.n }

// All yields every key and value, in no order.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for _, p := range m.parts {
			for k, v := range p {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// With returns a version that also maps k to v (replacing k's value), m unchanged.
func (m *Map[K, V]) With(k K, v V) *Map[K, V] {
	next := *m
	i := m.hash(k) % Parts
	p := maps.Clone(m.parts[i])
	if p == nil {
		p = map[K]V{}
	}
	if _, had := p[k]; !had {
		next.n++
	}
	p[k] = v
	next.parts[i] = p
	return &next
}

// Without returns a version without k, m unchanged (m itself when it has no k).
func (m *Map[K, V]) Without(k K) *Map[K, V] {
	i := m.hash(k) % Parts
	if _, ok := m.parts[i][k]; !ok {
		return m
	}
	next := *m
	p := maps.Clone(m.parts[i])
	delete(p, k)
	next.parts[i], next.n = p, m.n-1
	return &next
}

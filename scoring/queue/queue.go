package queue

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/minheap"
)

// ErrBadPolicy: an unknown policy name.
var ErrBadPolicy = errors.New("queue: unknown policy")

// Key is what ordering reads about a waiting request.
type Key struct {
	// Strict is the absolute tier (x-dynamo-request-strict-priority); a higher tier always pops first.
	Strict uint32
	// PriorityJump is nvext.agent_hints.priority or x-dynamo-request-priority, in seconds, clamped ≥ 0
	// (see Jump).
	PriorityJump float64
	// Arrival is when the request entered the router.
	Arrival time.Time
	// ISL and BestCachedTokens feed WSPT: new_tokens = ISL − best cached (scoring.BestCachedTokens).
	ISL              int
	BestCachedTokens int
}

// Jump clamps a raw priority to a valid priority_jump: negative and NaN become 0.
func Jump(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		if math.IsInf(v, 1) {
			return math.MaxFloat64
		}
		return 0
	}
	return v
}

// Score is Dynamo's policy_score for a key, with arrival offsets measured from epoch:
//
//	fcfs: jump − offset          (earlier first; a jump of s seconds moves the arrival s earlier)
//	lcfs: jump + offset          (later first)
//	wspt: (1 + jump) / max(1, ISL − best cached)   (Smith's rule: short uncached work first)
//
// Higher pops first.
func Score(p scoring.QueuePolicy, k Key, epoch time.Time) float64 {
	offset := k.Arrival.Sub(epoch).Seconds()
	switch p {
	case scoring.QueueLCFS:
		return k.PriorityJump + offset
	case scoring.QueueWSPT:
		return (1 + k.PriorityJump) / float64(max(1, k.ISL-k.BestCachedTokens))
	default:
		return k.PriorityJump - offset
	}
}

// item is one heap entry, kept small (24 bytes) so sifting moves little memory; the key and value live
// in slots, reused through a free list.
type item struct {
	score  float64
	seq    uint64 // insertion order: equal keys pop first-in first
	strict uint32
	slot   int32
}

type slot[T any] struct {
	key Key
	v   T
}

// Queue is the pending-request queue: a binary max-heap on (strict tier, policy score), ties in insertion
// order. Not safe for concurrent use; the scheduler actor owns it.
type Queue[T any] struct {
	policy scoring.QueuePolicy
	epoch  time.Time
	seq    uint64
	heap   []item
	slots  []slot[T]
	free   []int32
}

// New returns an empty queue. Arrival offsets are measured from epoch (the router's start), which keeps
// FCFS scores small and exact.
func New[T any](policy scoring.QueuePolicy, epoch time.Time) (*Queue[T], error) {
	switch policy {
	case scoring.QueueFCFS, scoring.QueueWSPT, scoring.QueueLCFS:
	default:
		return nil, fmt.Errorf("%w: %q", ErrBadPolicy, policy)
	}
	return &Queue[T]{policy: policy, epoch: epoch}, nil
}

// Policy returns the queue's policy.
func (q *Queue[T]) Policy() scoring.QueuePolicy { return q.policy }

// Len is the number of waiting requests.
func (q *Queue[T]) Len() int { return len(q.heap) }

// Push adds v with key k.
func (q *Queue[T]) Push(k Key, v T) {
	q.seq++
	var s int32
	if n := len(q.free); n > 0 {
		s, q.free = q.free[n-1], q.free[:n-1]
		q.slots[s] = slot[T]{key: k, v: v}
	} else {
		s = int32(len(q.slots))
		q.slots = append(q.slots, slot[T]{key: k, v: v})
	}
	q.heap = minheap.Push(q.heap, item{strict: k.Strict, score: Score(q.policy, k, q.epoch), seq: q.seq, slot: s}, before)
}

// Peek returns the next request without removing it.
func (q *Queue[T]) Peek() (T, Key, bool) {
	if len(q.heap) == 0 {
		var zero T
		return zero, Key{}, false
	}
	sl := &q.slots[q.heap[0].slot]
	return sl.v, sl.key, true
}

// Pop removes and returns the next request.
func (q *Queue[T]) Pop() (T, Key, bool) {
	if len(q.heap) == 0 {
		var zero T
		return zero, Key{}, false
	}
	var top item
	top, q.heap = minheap.Pop(q.heap, before)
	sl := q.slots[top.slot]
	q.slots[top.slot] = slot[T]{} // drop references for the GC
	q.free = append(q.free, top.slot)
	return sl.v, sl.key, true
}

// Rekey recomputes every key with fn (for example after an overlap refresh changed BestCachedTokens)
// and restores heap order. O(n).
func (q *Queue[T]) Rekey(fn func(k Key, v T) Key) {
	for i := range q.heap {
		it := &q.heap[i]
		sl := &q.slots[it.slot]
		sl.key = fn(sl.key, sl.v)
		it.strict = sl.key.Strict
		it.score = Score(q.policy, sl.key, q.epoch)
	}
	minheap.Init(q.heap, before)
}

// before reports whether a pops before b.
func before(a, b *item) bool {
	if a.strict != b.strict {
		return a.strict > b.strict
	}
	if a.score != b.score {
		return a.score > b.score
	}
	return a.seq < b.seq
}

package sched

import (
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// Session affinity limits (Dynamo's): the longest TTL, the most bindings held, the longest session id.
const (
	MaxSessionTTL      = 31_536_000 * time.Second
	MaxSessionBindings = 65_536
	MaxSessionIDBytes  = 256
)

// sessions binds X-Dynamo-Session-ID values to the worker rank their first request went to
// (--router-session-affinity-ttl-secs, hard affinity): later requests of the session are pinned there
// while the binding lives. The TTL slides: every routed request of the session renews it.
//
// The bindings are also listed in expiry order, soonest first (first … last): a binding made or renewed
// goes to the end (before any that expire later, should the clock step back), so expiring stops at the
// first live binding. A pass over every binding instead, whenever a new session met the full table
// (MaxSessionBindings live sessions), held the machine 0.76–1.6 ms per new session
// (BenchmarkSessionsFull; now 17–65 ns).
//
// Each worker's bindings are also listed apart (byWorker, wprev … wnext), so a worker leaving drops its
// own: a pass over every binding held the machine 0.20–0.23 ms per worker leaving with the table full,
// 17–22 µs now for its 64 bindings (BenchmarkSessionsWorkerLeaving). A new binding, or one moving to
// another worker, costs one more map write.
type sessions struct {
	ttl         time.Duration
	limit       int // MaxSessionBindings
	m           map[string]*binding
	first, last *binding
	byWorker    map[uint64]*binding // the first binding to each worker (any rank)
}

type binding struct {
	id           string
	k            scoring.WorkerKey
	expiry       time.Time
	prev, next   *binding
	wprev, wnext *binding
}

func newSessions(ttl time.Duration) *sessions {
	s := &sessions{limit: MaxSessionBindings}
	s.setTTL(ttl)
	return s
}

func (s *sessions) setTTL(ttl time.Duration) {
	s.ttl = ttl
	if ttl <= 0 {
		s.m, s.first, s.last, s.byWorker = nil, nil, nil, nil
	} else if s.m == nil {
		s.m, s.byWorker = make(map[string]*binding), make(map[uint64]*binding)
	}
}

func (s *sessions) on() bool { return s.ttl > 0 }

// lookup returns the live binding of id at now.
func (s *sessions) lookup(now time.Time, id string) (scoring.WorkerKey, bool) {
	b, ok := s.m[id]
	if !ok || !now.Before(b.expiry) {
		return scoring.WorkerKey{}, false
	}
	return b.k, true
}

// bind binds (or renews) id to k until now + TTL. At the binding limit, expired bindings are dropped
// first; a new session that still finds no room stays unbound (routed on its merits).
func (s *sessions) bind(now time.Time, id string, k scoring.WorkerKey) {
	if s.m == nil || len(id) > MaxSessionIDBytes {
		return
	}
	b := s.m[id]
	if b == nil {
		if len(s.m) >= s.limit {
			s.expire(now)
			if len(s.m) >= s.limit {
				return
			}
		}
		b = &binding{id: id, k: k}
		s.m[id] = b
		s.link(b)
	} else {
		s.unlink(b)
		if b.k.WorkerID != k.WorkerID {
			s.unlinkWorker(b)
			b.k = k
			s.link(b)
		}
	}
	b.k, b.expiry = k, now.Add(s.ttl)
	s.insert(b)
}

// link puts b first in its worker's list.
func (s *sessions) link(b *binding) {
	head := s.byWorker[b.k.WorkerID]
	b.wprev, b.wnext = nil, head
	if head != nil {
		head.wprev = b
	}
	s.byWorker[b.k.WorkerID] = b
}

// unlinkWorker takes b out of its worker's list.
func (s *sessions) unlinkWorker(b *binding) {
	if b.wprev == nil {
		if b.wnext == nil {
			delete(s.byWorker, b.k.WorkerID)
		} else {
			s.byWorker[b.k.WorkerID] = b.wnext
		}
	} else {
		b.wprev.wnext = b.wnext
	}
	if b.wnext != nil {
		b.wnext.wprev = b.wprev
	}
	b.wprev, b.wnext = nil, nil
}

// insert puts b in the list by its expiry: at the end, unless the clock stepped back.
func (s *sessions) insert(b *binding) {
	after := s.last
	for after != nil && after.expiry.After(b.expiry) {
		after = after.prev
	}
	b.prev = after
	if after == nil {
		b.next, s.first = s.first, b
	} else {
		b.next, after.next = after.next, b
	}
	if b.next == nil {
		s.last = b
	} else {
		b.next.prev = b
	}
}

// unlink takes b out of the list.
func (s *sessions) unlink(b *binding) {
	if b.prev == nil {
		s.first = b.next
	} else {
		b.prev.next = b.next
	}
	if b.next == nil {
		s.last = b.prev
	} else {
		b.next.prev = b.prev
	}
	b.prev, b.next = nil, nil
}

// drop forgets b.
func (s *sessions) drop(b *binding) {
	s.unlink(b)
	s.unlinkWorker(b)
	delete(s.m, b.id)
}

// expire drops the bindings whose TTL passed: the list's head, up to the first live one.
func (s *sessions) expire(now time.Time) {
	for s.first != nil && !now.Before(s.first.expiry) {
		s.drop(s.first)
	}
}

// removeWorker drops the bindings to a worker that left.
func (s *sessions) removeWorker(id uint64) {
	for b := s.byWorker[id]; b != nil; b = s.byWorker[id] {
		s.drop(b)
	}
}

// Sessions is the number of live session bindings.
func (m *Machine) Sessions() int { return len(m.sess.m) }

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
type sessions struct {
	ttl time.Duration
	m   map[string]binding
}

type binding struct {
	k      scoring.WorkerKey
	expiry time.Time
}

func newSessions(ttl time.Duration) *sessions {
	s := &sessions{}
	s.setTTL(ttl)
	return s
}

func (s *sessions) setTTL(ttl time.Duration) {
	s.ttl = ttl
	if ttl <= 0 {
		s.m = nil
	} else if s.m == nil {
		s.m = make(map[string]binding)
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

// bind binds (or renews) id to k until now + TTL. At the binding limit, expired bindings are swept
// first; a new session that still finds no room stays unbound (routed on its merits).
func (s *sessions) bind(now time.Time, id string, k scoring.WorkerKey) {
	if s.m == nil || len(id) > MaxSessionIDBytes {
		return
	}
	if _, ok := s.m[id]; !ok && len(s.m) >= MaxSessionBindings {
		s.expire(now)
		if len(s.m) >= MaxSessionBindings {
			return
		}
	}
	s.m[id] = binding{k: k, expiry: now.Add(s.ttl)}
}

// expire drops the bindings whose TTL passed.
func (s *sessions) expire(now time.Time) {
	for id, b := range s.m {
		if !now.Before(b.expiry) {
			delete(s.m, id)
		}
	}
}

// removeWorker drops the bindings to a worker that left.
func (s *sessions) removeWorker(id uint64) {
	for sid, b := range s.m {
		if b.k.WorkerID == id {
			delete(s.m, sid)
		}
	}
}

// Sessions is the number of live session bindings.
func (m *Machine) Sessions() int { return len(m.sess.m) }

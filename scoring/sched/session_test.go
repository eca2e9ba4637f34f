package sched

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// TestSessionsAsAPassWould: bindings made, renewed, expired, refused at the limit and dropped with
// their worker, while the clock mostly moves on and sometimes steps back and the TTL changes, hold what
// a plain map swept whole at every expiry holds (the table before the expiry order); the expiry list
// stays in order and lists every binding once, and so do the workers' lists, each under its worker.
func TestSessionsAsAPassWould(t *testing.T) {
	type ref struct {
		k      scoring.WorkerKey
		expiry time.Time
	}
	rng := rand.New(rand.NewPCG(5, 8))
	s := newSessions(10 * time.Second)
	s.limit = 24
	want := map[string]ref{}
	sweep := func(now time.Time) {
		for id, b := range want {
			if !now.Before(b.expiry) {
				delete(want, id)
			}
		}
	}
	now := time.Unix(100, 0)
	refused := 0
	for step := range 20_000 {
		now = now.Add(time.Duration(rng.IntN(300)-20) * time.Millisecond) // sometimes back
		switch op := rng.IntN(20); {
		case op < 14:
			id, k := "s"+strconv.Itoa(rng.IntN(400)), scoring.WorkerKey{WorkerID: uint64(rng.IntN(8))}
			if _, ok := want[id]; !ok && len(want) >= s.limit {
				sweep(now)
			}
			if _, ok := want[id]; ok || len(want) < s.limit {
				want[id] = ref{k, now.Add(s.ttl)}
			} else {
				refused++
			}
			s.bind(now, id, k)
		case op < 17:
			sweep(now)
			s.expire(now)
		case op < 19:
			w := uint64(rng.IntN(8))
			for id, b := range want {
				if b.k.WorkerID == w {
					delete(want, id)
				}
			}
			s.removeWorker(w)
		default:
			s.setTTL(time.Duration(2+rng.IntN(15)) * time.Second)
		}
		if len(s.m) != len(want) {
			t.Fatalf("step %d: %d bindings, want %d", step, len(s.m), len(want))
		}
		for id, r := range want {
			if b := s.m[id]; b == nil || b.k != r.k || !b.expiry.Equal(r.expiry) {
				t.Fatalf("step %d: session %s bound %+v, want %+v", step, id, b, r)
			}
		}
		n := 0
		for b := s.first; b != nil; b = b.next {
			if n++; (b.prev == nil) != (b == s.first) || (b.next == nil) != (b == s.last) || (b.next != nil && b.next.expiry.Before(b.expiry)) {
				t.Fatalf("step %d: the expiry list is broken at %s", step, b.id)
			}
		}
		if n != len(s.m) {
			t.Fatalf("step %d: %d bindings listed, %d held", step, n, len(s.m))
		}
		n = 0
		for w, head := range s.byWorker {
			for b := head; b != nil; b = b.wnext {
				if n++; b.k.WorkerID != w || (b.wprev == nil) != (b == head) || (b.wnext != nil && b.wnext.wprev != b) || s.m[b.id] != b {
					t.Fatalf("step %d: worker %d's list is broken at %s", step, w, b.id)
				}
			}
		}
		if n != len(s.m) {
			t.Fatalf("step %d: %d bindings in the workers' lists, %d held", step, n, len(s.m))
		}
	}
	if refused == 0 {
		t.Fatal("no session was refused at the limit: the test did not reach it")
	}
}

// BenchmarkSessionsFull: new sessions meeting a table full of live bindings (MaxSessionBindings): each
// is refused, after dropping the expired ones.
func BenchmarkSessionsFull(b *testing.B) {
	s := newSessions(time.Hour)
	now := time.Unix(0, 0)
	for i := range MaxSessionBindings {
		s.bind(now, fmt.Sprint("live-", i), scoring.WorkerKey{WorkerID: uint64(i % 1024)})
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprint("new-", i)
	}
	b.ResetTimer()
	for i := range b.N {
		s.bind(now, ids[i%len(ids)], scoring.WorkerKey{})
	}
}

// BenchmarkSessionsWorkerLeaving: a worker of 1,024 leaving while the session table is full
// (MaxSessionBindings live bindings, 64 to each worker): its bindings dropped, then made again.
func BenchmarkSessionsWorkerLeaving(b *testing.B) {
	s := newSessions(time.Hour)
	now := time.Unix(0, 0)
	for i := range MaxSessionBindings {
		s.bind(now, fmt.Sprint("live-", i), scoring.WorkerKey{WorkerID: uint64(i % 1024)})
	}
	var leave time.Duration
	b.ResetTimer()
	for i := range b.N {
		w := uint64(i*7919) % 1024
		t0 := time.Now()
		s.removeWorker(w)
		leave += time.Since(t0)
		for j := int(w); j < MaxSessionBindings; j += 1024 {
			s.bind(now, fmt.Sprint("live-", j), scoring.WorkerKey{WorkerID: w})
		}
	}
	b.ReportMetric(float64(leave.Nanoseconds())/float64(b.N)/1e3, "leave-us")
}

package hugepage

import (
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/kvroute/kvroute/internal/routine"
)

// ErrUnsupported: the platform has no transparent huge pages (not Linux, or a kernel without THP).
var ErrUnsupported = errors.New("hugepage: transparent huge pages are not supported here")

// Heap is the Go heap as advised for huge pages.
type Heap struct {
	anchor uintptr // an address inside the heap's arenas (the reservation's first byte)
	ahead  uintptr // free heap Advise keeps faulted in ahead of the runtime's use (set once Reserve has)
	mu     sync.Mutex
	done   []span // the ranges advised so far, sorted and merged
	vec    []byte // mincore's answer for done, reused
	group  routine.Group
	stop   chan struct{}
	once   sync.Once
}

// span is one mapping's range, rounded inward to huge pages.
type span struct{ start, end uintptr }

// Stats is what one pass advised.
type Stats struct {
	Mappings int // ranges newly advised
	Bytes    int // their size
	// Populated is the bytes faulted in ahead of the runtime's use (the lowest wholly absent huge pages
	// of the advised heap, up to the Heap's budget).
	Populated int
	// Populating is the time spent faulting them in: where the host backs a guest's memory on first
	// touch, seconds a GiB.
	Populating time.Duration
	// Ahead is the free heap found faulted in ahead of the runtime's use before the pass faulted more in:
	// the bytes the runtime counts released (handed back to the kernel, as it believes) that are resident.
	Ahead int
}

// uncovered returns the parts of s that no range of done covers (done sorted and merged).
func uncovered(done []span, s span) []span {
	var out []span
	at := s.start
	for _, d := range done {
		if d.end <= at || d.start >= s.end {
			continue
		}
		if d.start > at {
			out = append(out, span{at, d.start})
		}
		at = max(at, d.end)
		if at >= s.end {
			return out
		}
	}
	if at < s.end {
		out = append(out, span{at, s.end})
	}
	return out
}

// cover adds s to done, keeping it sorted and merged.
func cover(done []span, s span) []span {
	out := make([]span, 0, len(done)+1)
	for _, d := range done {
		switch {
		case d.end < s.start:
			out = append(out, d)
		case d.start > s.end:
			if s.end > s.start {
				out = append(out, s)
				s = span{}
			}
			out = append(out, d)
		default:
			s = span{min(s.start, d.start), max(s.end, d.end)}
		}
	}
	if s.end > s.start {
		out = append(out, s)
	}
	return out
}

// advise is the periodic pass's goroutine.
var advise = routine.Named("hugepage.advise")

// Keep runs Advise every period until Stop.
func (h *Heap) Keep(period time.Duration) {
	h.stop = make(chan struct{})
	h.group.Go(advise, func() { h.keep(period, nil) })
}

// keep is Keep's goroutine. The pass's system calls (reading the maps, mincore, faulting pages in:
// seconds a pass where the host backs what is faulted in) keep a thread busy in the kernel beside the
// threads running Go code. On a machine with as many CPUs as the runtime has Ps, the kernel then shares
// the CPUs among them, and the index's readers wait out its time slices. The thread runs SCHED_IDLE, on
// CPU time nothing else wants (docs in doc.go); it is never unlocked, so it ends with the goroutine and
// its policy with it.
//
// The main thread is the exception: the runtime never ends it, it parks it when its locked goroutine
// exits, so a pass that ran there would leave it SCHED_IDLE for the process's life. Landing there, the
// goroutine holds the main thread (no other goroutine can run on a thread locked to one) while it starts
// its successor, which therefore runs elsewhere, and lets the main thread go once the successor has its
// own. locked, when not nil, is closed once this goroutine holds its thread.
func (h *Heap) keep(period time.Duration, locked chan<- struct{}) {
	runtime.LockOSThread()
	if locked != nil {
		close(locked)
	}
	if mainThread() {
		next := make(chan struct{})
		if h.group.Go(advise, func() { h.keep(period, next) }) {
			<-next
		}
		runtime.UnlockOSThread()
		return
	}
	_ = idleThread()
	routine.Every(h.stop, period, func() { _, _ = h.Advise() })
}

// Stop ends Keep's goroutine and waits for it.
func (h *Heap) Stop() {
	h.once.Do(func() {
		if h.stop != nil {
			close(h.stop)
		}
		h.group.Stop()
		h.group.Wait()
	})
}

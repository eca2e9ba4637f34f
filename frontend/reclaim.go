package frontend

import (
	"net"
	"runtime/debug"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// reclaimer returns memory to the OS after a burst of connections ends. A thousand slow clients leave
// behind their read buffers, body buffers and goroutine stacks as free heap, which the Go runtime
// would otherwise hand back only slowly, or keep: a process that served a flood at 4 GB stayed there.
// When the open connections have fallen at least reclaimDrop below their peak since the last reclaim,
// and to half of it or less, a reclaim is scheduled reclaimDelay later (time for the connections'
// goroutines to finish), and at most one runs per reclaimEvery (a forced collection costs CPU in
// proportion to the heap, the router's index included). Steady traffic, where connections come and go
// around a level, never triggers it.
type reclaimer struct {
	mu        sync.Mutex
	open      int
	peak      int
	scheduled bool
	last      time.Time
	runs      int
	stopped   bool
}

const (
	reclaimDrop  = 64
	reclaimDelay = time.Second
	reclaimEvery = 8 * time.Second
)

// connState is fasthttp's ConnState hook.
func (r *reclaimer) connState(_ net.Conn, st fasthttp.ConnState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch st {
	case fasthttp.StateNew:
		r.open++
		r.peak = max(r.peak, r.open)
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		r.open--
		if r.peak-r.open >= reclaimDrop && 2*r.open <= r.peak && !r.scheduled && !r.stopped {
			r.scheduled = true
			time.AfterFunc(max(reclaimDelay, reclaimEvery-time.Since(r.last)), r.reclaim)
		}
	}
}

func (r *reclaimer) reclaim() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.peak = r.open
	r.mu.Unlock()
	// Two collections: the first moves pooled buffers (fasthttp's readers and writers sit in
	// sync.Pools) to the pools' victim caches, the second frees them; FreeOSMemory then returns the
	// free pages.
	debug.FreeOSMemory()
	debug.FreeOSMemory()
	r.mu.Lock()
	r.scheduled, r.last = false, time.Now()
	r.runs++
	r.mu.Unlock()
}

func (r *reclaimer) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
}

package hugepage

import (
	"errors"
	"sync"
	"time"

	"github.com/kvroute/kvroute/internal/routine"
)

// ErrUnsupported: the platform has no transparent huge pages (not Linux, or a kernel without THP).
var ErrUnsupported = errors.New("hugepage: transparent huge pages are not supported here")

// Heap is the Go heap as advised for huge pages.
type Heap struct {
	anchor uintptr // an address inside the heap's arenas (the reservation's first byte)
	mu     sync.Mutex
	seen   map[span]bool // mappings already advised
	group  routine.Group
	stop   chan struct{}
	once   sync.Once
}

// span is one mapping's range, rounded inward to huge pages.
type span struct{ start, end uintptr }

// Stats is what one pass advised.
type Stats struct {
	Mappings int // mappings newly advised
	Bytes    int // their size
}

// advise is the periodic pass's goroutine.
var advise = routine.Named("hugepage.advise")

// Keep runs Advise every period until Stop.
func (h *Heap) Keep(period time.Duration) {
	h.stop = make(chan struct{})
	h.group.Go(advise, func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				_, _ = h.Advise()
			}
		}
	})
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

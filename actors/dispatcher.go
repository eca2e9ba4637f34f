package actors

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/internal/routine"
)

// ReuseDispatcher runs actor mailboxes on goroutines that are kept and reused, instead of protoactor's
// default of one new goroutine per mailbox scheduling. A request actor's work (template rendering,
// tokenization, hashing, the index query) needs a few tens of KiB of stack: on a fresh goroutine that
// stack is grown and copied on every request, which cost half of the routing stage in the frontend's
// throughput profile. Reused goroutines keep their grown stacks.
//
// The pool is elastic: Schedule hands the work to an idle goroutine if there is one, else starts a new
// one, so a mailbox that blocks (a request waiting in the router queue) never starves the others. A
// goroutine idle for IdleTimeout exits.
type ReuseDispatcher struct {
	work       chan func()
	throughput int
	idle       time.Duration
	live       atomic.Int64
}

var _ actor.Dispatcher = (*ReuseDispatcher)(nil)

// NewReuseDispatcher returns a dispatcher processing up to throughput messages per scheduling, whose
// goroutines exit after idle without work.
func NewReuseDispatcher(throughput int, idle time.Duration) *ReuseDispatcher {
	return &ReuseDispatcher{work: make(chan func()), throughput: throughput, idle: idle}
}

// dispatcherLoop is a pooled mailbox goroutine; it ends after IdleTimeout without work.
var dispatcherLoop = routine.Named("actors.dispatcher")

// Schedule runs fn on an idle pooled goroutine, or a new one.
func (d *ReuseDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		d.live.Add(1)
		dispatcherLoop.Go(func() { d.loop(fn) })
	}
}

// Throughput is the number of messages a mailbox processes before yielding.
func (d *ReuseDispatcher) Throughput() int { return d.throughput }

// Live is the number of pooled goroutines.
func (d *ReuseDispatcher) Live() int64 { return d.live.Load() }

func (d *ReuseDispatcher) loop(fn func()) {
	defer d.live.Add(-1)
	t := time.NewTimer(d.idle)
	defer t.Stop()
	for {
		fn()
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(d.idle)
		select {
		case fn = <-d.work:
		case <-t.C:
			return
		}
	}
}

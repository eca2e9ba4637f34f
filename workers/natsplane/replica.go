package natsplane

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/scoring/sched"
)

// ReplicaConfig configures replica sync (--router-replica-sync).
type ReplicaConfig struct {
	// RouterID names this router on the subject; a router ignores its own events. Default: a fresh nuid
	// (unique per process start, as Dynamo's random u64).
	RouterID string
	// QueueSize bounds the queue "natsplane.replica" between the request path and the publisher; when it
	// is full the newest event is dropped and counted. Default 100,000 (Dynamo's enqueue channel).
	QueueSize int
}

// ReplicaStats are replica sync's counters.
type ReplicaStats struct {
	Published   uint64 // local events sent
	Dropped     uint64 // local events dropped because the queue was full
	QueueDepth  int    // local events waiting
	Applied     uint64 // remote events applied
	Own         uint64 // own events received back and ignored
	ApplyErrors uint64 // remote events that did not apply (unknown worker or request, bad message)
	// RemoteDropped counts remote events the NATS client dropped because this router applied them too
	// slowly (the subscription's pending limit, QueueSize messages).
	RemoteDropped uint64
}

// ReplicaSync publishes this router's load changes and applies other routers'.
// Best-effort: events travel on core NATS, lost events are repaired by stale-request expiry on the
// receiving side, and a new replica starts with zero remote load and converges as requests end.
//
// Goroutines: the request path only enqueues (Observe never blocks); one publisher goroutine drains the
// queue; the NATS subscription's goroutine applies remote events.
type ReplicaSync struct {
	cfg  ReplicaConfig
	nc   *nats.Conn
	q    chan sched.LoadEvent
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu  sync.Mutex
	r   RemoteLoad
	sub *nats.Subscription

	published, dropped, applied, own, applyErrs atomic.Uint64
}

// NewReplicaSync starts the publisher. Set the router's load observer (router.Config.OnLoad) to Observe before router.New, then call
// Start with the router.
func NewReplicaSync(nc *nats.Conn, cfg ReplicaConfig) *ReplicaSync {
	if cfg.RouterID == "" {
		cfg.RouterID = nuid.Next()
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 100_000
	}
	rs := &ReplicaSync{cfg: cfg, nc: nc, q: make(chan sched.LoadEvent, cfg.QueueSize), stop: make(chan struct{}), done: make(chan struct{})}
	replicaPublish.Go(rs.publishLoop)
	return rs
}

// replicaPublish drains the load-event queue onto NATS; Stop joins it through done.
var replicaPublish = routine.Named("natsplane.replica-publish")

// RouterID is this router's id on the subject.
func (rs *ReplicaSync) RouterID() string { return rs.cfg.RouterID }

// Observe is the router's load observer (router.Config.OnLoad): it enqueues without blocking, dropping
// the event when the queue is full.
func (rs *ReplicaSync) Observe(ev sched.LoadEvent) {
	select {
	case rs.q <- ev:
	default:
		rs.dropped.Add(1)
	}
}

func (rs *ReplicaSync) publishLoop() {
	defer close(rs.done)
	var buf []byte
	for {
		select {
		case <-rs.stop:
			return
		case ev := <-rs.q:
			buf = appendReplicaEvent(buf[:0], rs.cfg.RouterID, &ev)
			if rs.nc.Publish(ReplicaSubject, buf) == nil {
				rs.published.Add(1)
			} else {
				rs.dropped.Add(1)
			}
		}
	}
}

// RemoteLoad is what replica sync applies other routers' load changes to: *router.Router satisfies it.
type RemoteLoad interface {
	ApplyRemote(routerID string, ev sched.LoadEvent) error
}

// Start subscribes to the other routers' events and applies them to r.
func (rs *ReplicaSync) Start(r RemoteLoad) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.sub != nil {
		return errors.New("natsplane: replica sync already started")
	}
	rs.r = r
	sub, err := rs.nc.Subscribe(ReplicaSubject, rs.handle)
	if err != nil {
		return fmt.Errorf("natsplane: replica subscribe: %w", err)
	}
	_ = sub.SetPendingLimits(rs.cfg.QueueSize, -1)
	rs.sub = sub
	return rs.nc.Flush()
}

func (rs *ReplicaSync) handle(m *nats.Msg) {
	routerID, ev, err := decodeReplicaEvent(m.Data)
	if err != nil {
		rs.applyErrs.Add(1)
		return
	}
	if routerID == rs.cfg.RouterID {
		rs.own.Add(1)
		return
	}
	if err := rs.r.ApplyRemote(routerID, ev); err != nil {
		rs.applyErrs.Add(1)
		return
	}
	rs.applied.Add(1)
}

// Stats returns the counters.
func (rs *ReplicaSync) Stats() ReplicaStats {
	st := ReplicaStats{Published: rs.published.Load(), Dropped: rs.dropped.Load(), QueueDepth: len(rs.q), Applied: rs.applied.Load(),
		Own: rs.own.Load(), ApplyErrors: rs.applyErrs.Load()}
	rs.mu.Lock()
	if rs.sub != nil {
		if d, err := rs.sub.Dropped(); err == nil {
			st.RemoteDropped = uint64(d)
		}
	}
	rs.mu.Unlock()
	return st
}

// Stop unsubscribes and stops the publisher (queued events are dropped).
func (rs *ReplicaSync) Stop() {
	rs.once.Do(func() {
		rs.mu.Lock()
		if rs.sub != nil {
			_ = rs.sub.Unsubscribe()
		}
		rs.mu.Unlock()
		close(rs.stop)
		<-rs.done
	})
}

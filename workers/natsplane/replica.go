package natsplane

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	// ListInterval is how often this router publishes its active lists (sched.ActiveList: each core's
	// workers and own active requests), from which the other replicas free what they still charge for
	// it after a lost Free, and all of it once its lists stop for three intervals (the router is gone).
	// Default 10 s; negative: never (a lost Free is charged until stale expiry).
	ListInterval time.Duration
}

// ReplicaStats are replica sync's counters.
type ReplicaStats struct {
	Published   uint64 // local events sent
	Dropped     uint64 // local events dropped because the queue was full
	QueueDepth  int    // local events waiting
	Applied     uint64 // remote events applied
	Own         uint64 // own events received back and ignored
	ApplyErrors uint64 // remote events that did not apply (unknown worker or request, bad message)
	Lists       uint64 // active lists published (messages)
	Reconciled  uint64 // remote active lists applied (messages)
	// RemoteFreed counts remote requests freed because their router's active list lacked them (a lost
	// Free repaired) or their router went silent.
	RemoteFreed uint64
	Silent      uint64 // routers whose lists stopped for three intervals: what they were charged is freed
	// RemoteDropped counts remote events the NATS client dropped because this router applied them too
	// slowly (the subscription's pending limit, QueueSize messages).
	RemoteDropped uint64
}

// ReplicaSync publishes this router's load changes and applies other routers'.
// Best-effort: events travel on core NATS. A lost Free is repaired within ListInterval: every router
// publishes its active lists, in order with its events, and a replica frees the requests it charges for
// that router on the listed workers that the list lacks; a lost Add stays uncharged until the request
// ends, and a new replica starts with zero remote load and converges as requests end.
//
// Goroutines: the request path only enqueues (Observe never blocks); one publisher goroutine drains the
// queue; a ticker enqueues the active lists; the NATS subscription's goroutine applies remote events.
type ReplicaSync struct {
	cfg  ReplicaConfig
	nc   *nats.Conn
	q    chan replicaItem
	stop chan struct{}
	done chan struct{}
	tick chan struct{} // closed when the list ticker has returned (or at Start, when lists are off)
	once sync.Once

	mu  sync.Mutex
	r   RemoteLoad
	sub *nats.Subscription
	// heard is when each other router's last active list arrived (the subscription's goroutine writes
	// it, the list ticker sweeps it): a router silent for silentLists intervals is gone.
	heard map[string]heardList

	published, dropped, applied, own, applyErrs, lists, reconciled, remoteFreed, silent atomic.Uint64
}

// replicaItem is one entry of the publisher's queue: a load event, or an active list when list is set.
type replicaItem struct {
	ev   sched.LoadEvent
	list *sched.ActiveList
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
	if cfg.ListInterval == 0 {
		cfg.ListInterval = 10 * time.Second
	}
	rs := &ReplicaSync{cfg: cfg, nc: nc, q: make(chan replicaItem, cfg.QueueSize), stop: make(chan struct{}), done: make(chan struct{}),
		tick: make(chan struct{})}
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
	rs.enqueue(replicaItem{ev: ev})
}

// enqueue queues an item for the publisher without blocking, dropping it when the queue is full.
func (rs *ReplicaSync) enqueue(it replicaItem) {
	select {
	case rs.q <- it:
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
		case it := <-rs.q:
			if it.list != nil {
				for _, b := range appendReplicaLists(rs.cfg.RouterID, rs.cfg.ListInterval, it.list) {
					if rs.nc.Publish(ReplicaSubject, b) == nil {
						rs.lists.Add(1)
					} else {
						rs.dropped.Add(1)
					}
				}
				continue
			}
			buf = appendReplicaEvent(buf[:0], rs.cfg.RouterID, &it.ev)
			if rs.nc.Publish(ReplicaSubject, buf) == nil {
				rs.published.Add(1)
			} else {
				rs.dropped.Add(1)
			}
		}
	}
}

// RemoteLoad is what replica sync applies other routers' load changes and active lists to, and takes
// this router's active lists from: *router.Router satisfies it.
type RemoteLoad interface {
	ApplyRemote(routerID string, ev sched.LoadEvent) error
	// ReconcileRemote frees the requests charged for routerID on the workers l covers that l lacks, and
	// returns their number.
	ReconcileRemote(routerID string, l sched.ActiveList) int
	// ActiveLists calls emit with each core's active list, under the lock that orders the core's load
	// events (so that a list follows every event reported before it and precedes every later one).
	ActiveLists(emit func(sched.ActiveList))
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
	if rs.cfg.ListInterval > 0 {
		replicaLists.Go(rs.listLoop)
	} else {
		close(rs.tick)
	}
	return rs.nc.Flush()
}

// replicaLists enqueues the router's active lists every ListInterval; Stop joins it through tick.
var replicaLists = routine.Named("natsplane.replica-lists")

func (rs *ReplicaSync) listLoop() {
	defer close(rs.tick)
	// A first list at once: the other routers know this one and its interval from its start, so its
	// requests are freed even if it dies before its first tick.
	rs.r.ActiveLists(func(l sched.ActiveList) { rs.enqueue(replicaItem{list: &l}) })
	t := time.NewTicker(rs.cfg.ListInterval)
	defer t.Stop()
	for {
		select {
		case <-rs.stop:
			return
		case now := <-t.C:
			rs.r.ActiveLists(func(l sched.ActiveList) { rs.enqueue(replicaItem{list: &l}) })
			rs.sweep(now)
		}
	}
}

// silentLists is how many of a router's list intervals without a list from it make it gone: what this
// router charges for it is freed (a frontend that died: its requests died with their clients'
// connections). A router only cut off for longer keeps running its requests uncharged here until they
// end (a list cannot rebuild them): less accurate load, never phantom load.
const silentLists = 3

// maxRouters bounds the routers remembered (ids come from the network); past it the oldest is forgotten
// (its load stays until its requests end or expire).
const maxRouters = 4096

// heardList is when a router's last list arrived and the interval it said it publishes at. A router
// heard only through its load events so far (this router started after its first list) is presumed to
// publish at this router's own interval, and each of its events counts as a list until one arrives: its
// requests are freed if it goes silent before its next list.
type heardList struct {
	at       time.Time
	every    time.Duration
	presumed bool
}

// sweep frees what this router charges for every router silent for silentLists intervals at now.
func (rs *ReplicaSync) sweep(now time.Time) {
	var gone []string
	rs.mu.Lock()
	for id, h := range rs.heard {
		if now.Sub(h.at) > silentLists*h.every {
			gone = append(gone, id)
			delete(rs.heard, id)
		}
	}
	rs.mu.Unlock()
	for _, id := range gone {
		rs.remoteFreed.Add(uint64(rs.r.ReconcileRemote(id, sched.ActiveList{All: true})))
		rs.silent.Add(1)
	}
}

// hear records a list from routerID at now, published every every.
func (rs *ReplicaSync) hear(routerID string, now time.Time, every time.Duration) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.record(routerID, heardList{at: now, every: every})
}

// heardEvent records a load event from routerID at now: a router not heard before is presumed to
// publish its lists at this router's interval (heardList); one heard only so far is still alive.
func (rs *ReplicaSync) heardEvent(routerID string, now time.Time) {
	if rs.cfg.ListInterval <= 0 {
		return // no sweep runs here
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if h, ok := rs.heard[routerID]; !ok || h.presumed {
		rs.record(routerID, heardList{at: now, every: rs.cfg.ListInterval, presumed: true})
	}
}

// record sets routerID's entry, forgetting the oldest past maxRouters; rs.mu is held.
func (rs *ReplicaSync) record(routerID string, h heardList) {
	if rs.heard == nil {
		rs.heard = make(map[string]heardList)
	}
	now := h.at
	if _, ok := rs.heard[routerID]; !ok && len(rs.heard) >= maxRouters {
		oldest, at := "", now
		for id, h := range rs.heard {
			if h.at.Before(at) {
				oldest, at = id, h.at
			}
		}
		delete(rs.heard, oldest)
	}
	rs.heard[routerID] = h
}

func (rs *ReplicaSync) handle(m *nats.Msg) {
	if len(m.Data) > 1 && m.Data[1] == replicaList {
		rs.handleList(m.Data)
		return
	}
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
	rs.heardEvent(routerID, time.Now())
	rs.applied.Add(1)
}

// handleList applies another router's active list.
func (rs *ReplicaSync) handleList(b []byte) {
	routerID, every, l, err := decodeReplicaList(b)
	switch {
	case err != nil:
		rs.applyErrs.Add(1)
	case routerID == rs.cfg.RouterID:
		rs.own.Add(1)
	default:
		rs.hear(routerID, time.Now(), every)
		rs.remoteFreed.Add(uint64(rs.r.ReconcileRemote(routerID, l)))
		rs.reconciled.Add(1)
	}
}

// Stats returns the counters.
func (rs *ReplicaSync) Stats() ReplicaStats {
	st := ReplicaStats{Published: rs.published.Load(), Dropped: rs.dropped.Load(), QueueDepth: len(rs.q), Applied: rs.applied.Load(),
		Own: rs.own.Load(), ApplyErrors: rs.applyErrs.Load(), Lists: rs.lists.Load(), Reconciled: rs.reconciled.Load(),
		RemoteFreed: rs.remoteFreed.Load(), Silent: rs.silent.Load()}
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
		started := rs.sub != nil
		if started {
			_ = rs.sub.Unsubscribe()
		}
		rs.mu.Unlock()
		close(rs.stop)
		<-rs.done
		if started {
			<-rs.tick
		}
	})
}

package indexer

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// ErrStopped is returned by calls made after Stop.
var ErrStopped = errors.New("indexer: stopped")

// Config configures the sharded indexer.
type Config struct {
	// Shards is the number of shard actors (Dynamo's --router-event-threads). Default 4, at most GOMAXPROCS
	// (scoring.DefaultIndexShards). More shards apply events in parallel; each query reads every shard, so
	// more shards cost query time, and a prefix on workers of several shards is stored once a shard.
	Shards int
	// MailboxSize bounds each shard's mailbox; senders block when it is full (back-pressure on event
	// ingestion instead of unbounded memory). Default 4096 messages.
	MailboxSize int
	// WarmEvery is how often a goroutine reads what queries read of every shard's live view (its nodes,
	// chunk sums, worker-set words and child tables: prefix.View.Warm), so that a query finds its path in
	// the caches after the writes have run; a period in which no query ran is skipped. 0: never. Default
	// 5 ms, 1.3–3.9 % of a core at 1,000 workers on the conversation trace (the package doc has the
	// figures; Warmed counts what it did).
	WarmEvery time.Duration
}

// DefaultConfig returns Dynamo's defaults, the shards capped at GOMAXPROCS.
func DefaultConfig() Config {
	return Config{Shards: scoring.DefaultIndexShards(), MailboxSize: 4096, WarmEvery: DefaultWarmEvery}
}

// DefaultWarmEvery is Config.WarmEvery's default (--router-index-warm-secs).
const DefaultWarmEvery = scoring.DefaultIndexWarm

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.Shards < 1 || c.Shards > 256 {
		return fmt.Errorf("indexer: shards %d out of range [1, 256]", c.Shards)
	}
	if c.MailboxSize < 1 {
		return fmt.Errorf("indexer: mailbox size %d must be positive", c.MailboxSize)
	}
	if err := scoring.CheckIndexWarm(c.WarmEvery); err != nil {
		return fmt.Errorf("indexer: warm period %w", err)
	}
	return nil
}

// Indexer is the indexer root: it owns N shard actors, pins each worker to the shard with the fewest
// workers on first sight, routes every write to that shard, and answers overlap queries by reading every
// shard's published view and merging.
type Indexer struct {
	system *actor.ActorSystem
	root   *actor.PID
	shards []*shard
	gates  []gate // shards[i].g is &gates[i]
	pids   []*actor.PID

	warm      chan struct{} // closed by Stop: ends the warmer (nil without one)
	warmDone  chan struct{} // closed by the warmer when it ends
	warmEvery time.Duration
	sink      uint64        // the warmer's sums, so that its loads are kept (the warmer's goroutine only)
	warmed    atomic.Uint64 // shard views warmed
	warmBusy  atomic.Int64  // ns the warmer spent reading views (its yields between slices not counted)

	mu      sync.Mutex // guards assign, counts and stopped (control plane only)
	assign  map[uint64]int
	counts  []int
	stopped bool
}

// rootActor supervises the shard actors; it handles no messages of its own.
type rootActor struct {
	shards []*shard
	pids   chan []*actor.PID
	size   int
}

func (r *rootActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		pids := make([]*actor.PID, len(r.shards))
		for i, s := range r.shards {
			s := s
			props := actor.PropsFromProducer(func() actor.Actor { return &shardActor{s: s} },
				actor.WithMailbox(actor.Bounded(r.size)))
			pids[i] = ctx.Spawn(props)
		}
		r.pids <- pids
	}
}

// shardDecider restarts a shard whose Receive panicked: the shard's state lives outside the actor, so a
// restart resumes with the same index; a panic here is a broken invariant worth a log line upstream.
func shardDecider(reason interface{}) actor.Directive { return actor.RestartDirective }

// New starts the indexer's actors in system.
func New(system *actor.ActorSystem, cfg Config) (*Indexer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	x := &Indexer{
		system: system,
		shards: make([]*shard, cfg.Shards),
		gates:  make([]gate, cfg.Shards),
		assign: make(map[uint64]int),
		counts: make([]int, cfg.Shards),
	}
	for i := range x.shards {
		x.shards[i] = newShard(&x.gates[i], cfg.MailboxSize)
	}
	ready := make(chan []*actor.PID, 1)
	props := actor.PropsFromProducer(func() actor.Actor {
		return &rootActor{shards: x.shards, pids: ready, size: cfg.MailboxSize}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(10, 10*time.Second, shardDecider)))
	x.root = system.Root.Spawn(props)
	x.pids = <-ready
	if x.warmEvery = cfg.WarmEvery; x.warmEvery > 0 {
		x.warm, x.warmDone = make(chan struct{}), make(chan struct{})
		warmKind.Go(func() {
			defer close(x.warmDone)
			x.warmLoop(cfg.WarmEvery)
		})
	}
	return x, nil
}

// WarmEvery returns the warming period (Config.WarmEvery; 0: no warmer).
func (x *Indexer) WarmEvery() time.Duration { return x.warmEvery }

// WarmStats is what the warmer did since the indexer started: the shard views it read and the time it
// spent reading them.
type WarmStats struct {
	Views uint64
	Busy  time.Duration
}

// Warmed returns the warmer's counts so far (zero without a warmer).
func (x *Indexer) Warmed() WarmStats {
	return WarmStats{Views: x.warmed.Load(), Busy: time.Duration(x.warmBusy.Load())}
}

// shardOf returns the shard index of a worker, assigning it on first sight.
func (x *Indexer) shardOf(workerID uint64) (int, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopped {
		return 0, false
	}
	if s, ok := x.assign[workerID]; ok {
		return s, true
	}
	best := 0
	for i, c := range x.counts {
		if c < x.counts[best] {
			best = i
		}
	}
	x.assign[workerID] = best
	x.counts[best]++
	return best, true
}

// Send delivers a message for workerID to its shard (assigning the worker on first sight), in order with
// the worker's other messages. It blocks when the shard's pending list is full.
func (x *Indexer) Send(workerID uint64, m shardMessage) error {
	s, ok := x.shardOf(workerID)
	if !ok {
		return ErrStopped
	}
	x.post(s, m)
	return nil
}

// post queues m on shard s and tells its actor when the list was empty.
func (x *Indexer) post(s int, m shardMessage) {
	if x.shards[s].enqueue(m) {
		x.system.Root.Send(x.pids[s], &drainPending{})
	}
}

// Apply sends one re-keyed batch of a worker to its shard.
func (x *Indexer) Apply(m *Apply) error { return x.Send(m.WorkerID, m) }

// ClearWorker drops all of a worker's blocks and waits until it is done.
func (x *Indexer) ClearWorker(workerID uint64) error {
	done := make(chan struct{})
	if err := x.Send(workerID, &ClearWorker{WorkerID: workerID, Done: done}); err != nil {
		return err
	}
	<-done
	return nil
}

// RemoveWorker drops a worker's blocks, forgets it, frees its shard slot and waits until it is done.
func (x *Indexer) RemoveWorker(workerID uint64) error {
	x.mu.Lock()
	s, ok := x.assign[workerID]
	if ok {
		delete(x.assign, workerID)
		x.counts[s]--
	}
	stopped := x.stopped
	x.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	if !ok {
		return nil
	}
	done := make(chan struct{})
	x.post(s, &RemoveWorker{WorkerID: workerID, Done: done})
	<-done
	return nil
}

// Flush waits until every message sent to any shard before the call has been applied.
func (x *Indexer) Flush() {
	dones := make([]chan struct{}, len(x.pids))
	for i := range x.pids {
		dones[i] = make(chan struct{})
		x.post(i, &Barrier{Done: dones[i]})
	}
	for _, d := range dones {
		<-d
	}
}

// FindMatches appends to out the overlap of every (worker, dp rank) that holds at least the first block
// of local (on its device or a lower tier), reading each shard's published view without waiting for its
// writer. Workers are disjoint across shards, so the merge is a concatenation. It enters every shard's
// view first and walks their paths ahead in turn (prefix.Ahead), so that the shards' cache misses
// overlap, then queries them one after another.
func (x *Indexer) FindMatches(local []uint64, out []prefix.Score) []prefix.Score {
	return x.read(local, out, nil)
}

// Match is FindMatches into m (which it resets): each shard's answer in groups of worker slots with the
// same overlap (prefix.Matches), rather than a Score per worker. At 1,000 workers a query then writes
// tens of groups inside the views instead of about a thousand 32-byte Scores; the router's scheduler
// reads the groups through its own slot → row map (docs/benchmarks.md, "Overlaps in groups").
func (x *Indexer) Match(local []uint64, m *prefix.Matches) {
	m.Reset()
	x.read(local, nil, m)
}

// read is FindMatches (m nil) or Match.
func (x *Indexer) read(local []uint64, out []prefix.Score, m *prefix.Matches) []prefix.Score {
	var q prefix.Query // the query's chunk sums, computed once for every shard
	q.Reset(local)
	gates := x.gates
	if len(gates) > maxAhead {
		for i := range gates {
			g := &gates[i]
			v, k := g.enter(g.live.Load())
			out = readView(v, &q, out, m)
			g.leave(k)
		}
		return out
	}
	var views [maxAhead]*prefix.View
	var ks [maxAhead]uint32
	var ahead [maxAhead]prefix.Ahead
	n := len(gates)
	for i := range gates {
		ks[i] = gates[i].live.Load() // every gate's line at once, before the first atomic add waits for them
	}
	for i := range gates {
		views[i], ks[i] = gates[i].enter(ks[i])
		ahead[i].Reset(views[i], &q)
	}
	for more := true; more; {
		more = false
		for i := range n {
			if ahead[i].Step(&q) {
				more = true
			}
		}
	}
	for i := range gates {
		out = readView(views[i], &q, out, m)
		gates[i].leave(ks[i])
	}
	return out
}

// readView queries one view: into m when it is not nil, else appending Scores to out.
func readView(v *prefix.View, q *prefix.Query, out []prefix.Score, m *prefix.Matches) []prefix.Score {
	if m != nil {
		v.Match(q, m)
		return out
	}
	return v.FindMatchesQuery(q, out)
}

// maxAhead is the most shards whose paths FindMatches walks ahead in turn (prefix.Ahead); an index of
// more shards is read one shard after another.
const maxAhead = 8

// LogEvictions starts or stops logging, in every shard, the device blocks the workers' Removed events
// take away (prefix.Index.LogEvictions), for TakeEvicted.
func (x *Indexer) LogEvictions(on bool) {
	for _, s := range x.shards {
		s.mu.Lock()
		s.idx.LogEvictions(on)
		s.mu.Unlock()
	}
}

// TakeEvicted appends every shard's logged removals to dst (each shard's in the order applied; a
// worker's events are all on one shard) and empties the logs. The router takes them at a decision at
// most every sched.EvictedEvery, outside its scheduler lock.
func (x *Indexer) TakeEvicted(dst []prefix.Evicted) []prefix.Evicted {
	for _, s := range x.shards {
		s.mu.Lock()
		dst = s.idx.TakeEvicted(dst)
		s.mu.Unlock()
	}
	return dst
}

// Blocks returns the number of blocks indexed for one worker rank.
func (x *Indexer) Blocks(w prefix.WorkerKey) int {
	x.mu.Lock()
	si, ok := x.assign[w.WorkerID]
	x.mu.Unlock()
	if !ok {
		return 0
	}
	s := x.shards[si]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx.WorkerBlocks(w)
}

// Stats returns the index-side counters of a worker.
func (x *Indexer) Stats(workerID uint64) WorkerStats {
	x.mu.Lock()
	si, ok := x.assign[workerID]
	x.mu.Unlock()
	if !ok {
		return WorkerStats{}
	}
	s := x.shards[si]
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stats[workerID]; st != nil {
		return *st
	}
	return WorkerStats{}
}

// ShardOf reports the shard a worker is pinned to, and whether it is known.
func (x *Indexer) ShardOf(workerID uint64) (int, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.assign[workerID]
	return s, ok
}

// ShardWorkers returns how many workers each shard owns.
func (x *Indexer) ShardWorkers() []int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]int(nil), x.counts...)
}

// Size returns the number of (block, worker rank) entries in the whole index.
func (x *Indexer) Size() int {
	n := 0
	for _, s := range x.shards {
		s.mu.Lock()
		n += s.idx.Size()
		s.mu.Unlock()
	}
	return n
}

// Positions returns the block positions of every shard's tree, summed: a prefix held by workers of k
// shards counts k times (prefix.Index.Positions).
func (x *Indexer) Positions() int {
	n := 0
	for _, s := range x.shards {
		s.mu.Lock()
		n += s.idx.Positions()
		s.mu.Unlock()
	}
	return n
}

// Stop stops the shard actors after they drain their mailboxes.
func (x *Indexer) Stop() {
	x.mu.Lock()
	if x.stopped {
		x.mu.Unlock()
		return
	}
	x.stopped = true
	x.mu.Unlock()
	if x.warm != nil {
		close(x.warm)
		<-x.warmDone
	}
	_ = x.system.Root.PoisonFuture(x.root).Wait()
}

// EventCount is one cell of the applied-events counter.
type EventCount struct {
	Status, Type string
	Count        uint64
}

// EventCounts sums the applied-events counters over shards (non-zero cells only).
func (x *Indexer) EventCounts() []EventCount {
	var out []EventCount
	for st := 0; st < numStatus; st++ {
		for ty := 0; ty < numEventType; ty++ {
			var n uint64
			for _, s := range x.shards {
				n += s.applied[st][ty].Load()
			}
			if n > 0 {
				out = append(out, EventCount{Status: statusLabel[st], Type: typeLabel[ty], Count: n})
			}
		}
	}
	return out
}

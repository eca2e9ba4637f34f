package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/cowmap"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// Errors of the fleet's control plane.
var (
	ErrDuplicate = errors.New("worker: already registered")
	ErrUnknown   = registry.ErrUnknownWorker
	ErrStopped   = errors.New("worker: fleet stopped")
	errResync    = errors.New("worker: resync requested")
)

// imageTokensFor is the image normalization of a worker's stored blocks: none (the legacy mm_hash
// suffix) for a worker registered with mm_scheme=block_mm_infos.
func (c *Config) imageTokensFor(spec *registry.Spec) (tok, end uint32) {
	if spec.MMScheme == registry.MMSchemeBlockMMInfos {
		return 0, 0
	}
	return c.ImageTokenID, c.ImageEndTokenID
}

// Config configures the fleet and its mirrors.
type Config struct {
	// BlockSize is the router's hashing block size; stored blocks are re-keyed in chunks of it.
	BlockSize int
	// ImageTokenID, when non-zero, turns on Dynamo's image-run normalization of stored blocks (runs of this
	// token id become the pad value of the image named in extra_keys).
	ImageTokenID uint32
	// ImageEndTokenID, when non-zero, is the token closing an image in the engine's prompt (Llama-4
	// <|image_end|>, Pixtral [IMG_END]): normalization moves to the block's next image there rather than
	// after every run of ImageTokenID (mm.Spec.EndTokenID).
	ImageEndTokenID uint32
	// InitialBackoff and BackoffWindow drive the exponential restart of a failed subscriber
	// (protoactor's exponential backoff strategy). Defaults 100ms and 30s.
	InitialBackoff time.Duration
	BackoffWindow  time.Duration
	// ReplayTimeout bounds one replay exchange with a worker. Default 2s.
	ReplayTimeout time.Duration
	// IdentityCheck is how often each directly connected worker's event publisher is re-verified while
	// connected (kvevents.Config.IdentityCheck). Default 30s; negative disables.
	IdentityCheck time.Duration
	// BindEndpoints, when set, make the fleet bind one SUB socket at each (--kv-events-bind, repeatable,
	// e.g. tcp://*:5557, or a port range tcp://*:5557-5558: registry.ExpandBindEndpoints) to which workers'
	// publishers connect; each batch is attributed to the worker whose Spec.Topic equals the message topic
	// (workers registered without an events endpoint). The i-th endpoint receives dp rank i, as vLLM's
	// rank r publishes to its endpoint's port + r; a worker's replay endpoint is offset the same way.
	BindEndpoints []string
	// BindShare, when set, makes the fleet use another fleet's bind sockets instead of binding its own
	// (a model's prefill core shares its decode core's: both fleets' workers publish to the same
	// --kv-events-bind endpoints, and a second bind of a port cannot succeed). Its workers' topics are
	// registered on those sockets, checked against both fleets' topics, and their batches dispatched to
	// its mirrors. BindEndpoints is then ignored.
	BindShare *Fleet
	// Grace is how long a worker's event stream may show a problem (no batch yet, every store rejected,
	// batches of ranks it does not have) before the worker is marked degraded with the reason (Audit).
	// Default 10s.
	Grace time.Duration
	// Log receives one line per worker when it turns degraded and per unknown topic; nil discards.
	Log *slog.Logger
	// Clock stamps batches, additions and audits; nil means the wall clock.
	Clock clock.Clock
}

// DefaultConfig returns the defaults for a block size.
func DefaultConfig(blockSize int) Config {
	return Config{BlockSize: blockSize, InitialBackoff: 100 * time.Millisecond, BackoffWindow: 30 * time.Second, ReplayTimeout: 2 * time.Second,
		IdentityCheck: 30 * time.Second, Grace: 10 * time.Second}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.BlockSize <= 0 {
		return fmt.Errorf("worker: block size %d must be positive", c.BlockSize)
	}
	if c.InitialBackoff <= 0 || c.BackoffWindow < c.InitialBackoff {
		return fmt.Errorf("worker: backoff %v within %v is invalid", c.InitialBackoff, c.BackoffWindow)
	}
	return nil
}

// deps is what every mirror of a fleet shares.
type deps struct {
	cfg     Config
	index   *indexer.Indexer
	unknown atomic.Uint64
}

func (d *deps) now() time.Time { return d.cfg.Clock.Now() }

// Fleet supervises one mirror actor per backend worker. Adding and removing workers are control-plane
// messages to the fleet actor; reading the current set is a lock-free load of an immutable set (internal/cowmap).
type Fleet struct {
	system  *actor.ActorSystem
	pid     *actor.PID
	deps    *deps
	mirrors atomic.Pointer[cowmap.Map[uint64, *Mirror]]
	// version counts the changes of mirrors, each after its set was published (Version).
	version atomic.Uint64
	// schemes is what every worker's multimodal forms have in common (allLegacyMM, allHexMMIDs bits):
	// the frontend asks it per image request, so the fleet actor works it out when a worker comes or
	// goes rather than each request reading every mirror.
	schemes atomic.Uint32
	// legacyMM and hexMMIDs count the workers of each form (the fleet actor's, with the set).
	legacyMM, hexMMIDs int
	stopped            atomic.Bool

	// Bind mode: one SUB socket per bind endpoint (dp rank) for every topic-attributed worker.
	binds    []*kvevents.BindSubscriber
	byTopic  atomic.Pointer[cowmap.Map[string, *Mirror]]
	bindStop context.CancelFunc
	bindDone []chan struct{}
	unknown  unknownTopics
	// bindHost is the fleet whose sockets binds are (Config.BindShare), nil when they are this fleet's;
	// sharers are the fleets sharing this fleet's sockets, whose mirrors its sockets' batches may be for.
	bindHost *Fleet
	sharers  atomic.Pointer[[]*Fleet]

	auditStop context.CancelFunc
	auditDone chan struct{}
}

// NewFleet starts the fleet supervisor in system. Mirrors write to index.
func NewFleet(system *actor.ActorSystem, index *indexer.Indexer, cfg Config) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Clock = clock.Or(cfg.Clock)
	f := &Fleet{system: system, deps: &deps{cfg: cfg, index: index}}
	f.mirrors.Store(cowmap.NewByID[*Mirror]())
	f.byTopic.Store(cowmap.NewByString[*Mirror]())
	props := actor.PropsFromProducer(func() actor.Actor { return &fleetActor{f: f, pids: map[uint64]*actor.PID{}} },
		// A mirror that panics is restarted; its subscribers are restarted with it.
		actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Minute, func(any) actor.Directive { return actor.RestartDirective })))
	f.pid = system.Root.Spawn(props)
	switch host := cfg.BindShare; {
	case host != nil:
		host = host.bindOwner() // the fleet that owns the sockets dispatches to every sharer
		f.bindHost, f.binds = host, host.binds
		host.share(f)
	case len(cfg.BindEndpoints) > 0:
		if err := f.startBind(); err != nil {
			f.Stop()
			return nil, err
		}
	}
	f.startAudit()
	return f, nil
}

// startBind opens one bind-mode subscriber per endpoint. Each goroutine owns its socket and its
// converters (one per topic, with their re-keying scratch).
func (f *Fleet) startBind() error {
	ctx, cancel := context.WithCancel(context.Background())
	f.bindStop = cancel
	for rank, ep := range f.deps.cfg.BindEndpoints {
		bs, err := f.newBind(rank, ep)
		if err != nil {
			return err
		}
		done := make(chan struct{})
		f.binds, f.bindDone = append(f.binds, bs), append(f.bindDone, done)
		bindSubscriber.Go(func() {
			defer close(done)
			_ = bs.Run(ctx)
		})
		select {
		case <-bs.Ready():
		case <-done:
			return fmt.Errorf("worker: cannot bind %s", ep)
		case <-time.After(5 * time.Second):
			return fmt.Errorf("worker: binding %s timed out", ep)
		}
	}
	return nil
}

func (f *Fleet) newBind(rank int, ep string) (*kvevents.BindSubscriber, error) {
	type conversion struct {
		m *Mirror
		c *converter
	}
	convs := map[string]conversion{}
	conv := func(topic string) (*Mirror, *converter) {
		m, owner := f.topicOwner(topic)
		if m == nil {
			return nil, nil
		}
		cv := convs[topic]
		if cv.m != m {
			imageTok, imageEnd := owner.deps.cfg.imageTokensFor(&m.Spec)
			cv = conversion{m, &converter{workerID: m.Spec.ID, rank: rank, dpSize: m.Spec.DPRanks(), blockSize: owner.deps.cfg.BlockSize,
				imageTok: imageTok, imageEnd: imageEnd}}
			convs[topic] = cv
		}
		return m, cv.c
	}
	return kvevents.NewBindSubscriber(kvevents.BindConfig{Endpoint: ep, ReplayTimeout: f.deps.cfg.ReplayTimeout},
		kvevents.BindHandler{
			OnBatch: func(topic string, seq uint64, b *kvevents.Batch) {
				if m, c := conv(topic); m != nil {
					msg := c.convert(seq, b)
					msg.Bound = true
					f.system.Root.Send(m.pid, msg)
				}
			},
			OnReset: func(topic string) {
				if m, c := conv(topic); m != nil {
					c.salted = nil
					f.system.Root.Send(m.pid, &engineReset{Rank: rank})
				}
			},
			OnUnknownTopic: func(topic []byte) { f.unknown.saw(f.deps.cfg.Log, topic, ep) },
		})
}

// share adds sharer to the fleets whose mirrors this fleet's bind sockets dispatch to.
func (f *Fleet) share(sharer *Fleet) {
	var next []*Fleet
	if cur := f.sharers.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, sharer)
	f.sharers.Store(&next)
}

// bindOwner is the fleet whose bind sockets this fleet uses: its host, or itself.
func (f *Fleet) bindOwner() *Fleet {
	if f.bindHost != nil {
		return f.bindHost
	}
	return f
}

// topicOwner returns the mirror registered under topic on this fleet's bind sockets and the fleet that
// holds it (this one or a sharer), or nil.
func (f *Fleet) topicOwner(topic string) (*Mirror, *Fleet) {
	if m, _ := f.byTopic.Load().Get(topic); m != nil {
		return m, f
	}
	if sharers := f.sharers.Load(); sharers != nil {
		for _, s := range *sharers {
			if m, _ := s.byTopic.Load().Get(topic); m != nil {
				return m, s
			}
		}
	}
	return nil, nil
}

// BindAddr is the first resolved --kv-events-bind endpoint ("" when bind mode is off).
func (f *Fleet) BindAddr() string {
	if len(f.binds) == 0 {
		return ""
	}
	return f.binds[0].Addr()
}

// BindAddrs are the resolved --kv-events-bind endpoints, by dp rank.
func (f *Fleet) BindAddrs() []string {
	out := make([]string, len(f.binds))
	for i, b := range f.binds {
		out[i] = b.Addr()
	}
	return out
}

// BindStats returns the bind-mode subscribers' counters, summed (zero when bind mode is off).
func (f *Fleet) BindStats() kvevents.Stats {
	var st kvevents.Stats
	for _, b := range f.binds {
		st.Add(b.Stats())
	}
	return st
}

// bindSessions returns the bind sockets' session-wide counts (unknown topics, connections, malformed
// frames) without the per-topic ones: a step per socket, where BindStats sums every topic's counters.
func (f *Fleet) bindSessions() kvevents.Stats {
	var st kvevents.Stats
	for _, b := range f.binds {
		st.Add(b.Counters().Snapshot())
	}
	return st
}

// UnknownTopics returns the distinct unregistered topics seen on the bind sockets (at most 16, the first
// ones) and how many messages carried any unregistered topic.
func (f *Fleet) UnknownTopics() ([]string, uint64) {
	return f.bindOwner().unknown.list(), f.bindSessions().UnknownTopics
}

// Add starts mirroring a worker.
func (f *Fleet) Add(spec registry.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if f.stopped.Load() {
		return ErrStopped
	}
	reply := make(chan error, 1)
	f.system.Root.Send(f.pid, &AddWorker{Spec: spec, Reply: reply})
	return <-reply
}

// Remove stops mirroring a worker and drops its blocks from the index.
func (f *Fleet) Remove(id uint64) error {
	if f.stopped.Load() {
		return ErrStopped
	}
	reply := make(chan error, 1)
	f.system.Root.Send(f.pid, &RemoveWorker{ID: id, Reply: reply})
	return <-reply
}

// Get returns the mirror of a worker.
func (f *Fleet) Get(id uint64) (*Mirror, bool) {
	return f.mirrors.Load().Get(id)
}

// Version changes after every change of the set of workers (a worker added, replaced or removed): a
// reader that keeps something worked out from the set, read after Version, knows it is still current
// while Version returns the same value.
func (f *Fleet) Version() uint64 { return f.version.Load() }

// Len returns the number of workers.
func (f *Fleet) Len() int { return f.mirrors.Load().Len() }

// Each calls fn with every current mirror, in no order, without copying or sorting the set (Mirrors).
func (f *Fleet) Each(fn func(*Mirror)) {
	for _, m := range f.mirrors.Load().All() {
		fn(m)
	}
}

// Mirrors returns the current mirrors sorted by id.
func (f *Fleet) Mirrors() []*Mirror {
	cur := f.mirrors.Load()
	out := make([]*Mirror, 0, cur.Len())
	for _, m := range cur.All() {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.ID < out[j].Spec.ID })
	return out
}

// AllLegacyMM reports whether the fleet has workers and every one is registered with
// mm_scheme=block_mm_infos: the frontend then routes requests with images in that scheme.
func (f *Fleet) AllLegacyMM() bool { return f.schemes.Load()&allLegacyMM != 0 }

// AllHexMMIDs reports whether the fleet has workers and every one's engine takes image ids as the
// unpadded 16-hex mm_hash (registry.Spec.TakesHexMMIDs: SGLang, TensorRT-LLM): the frontend then
// forwards that form instead of vLLM's 64-character uuid.
func (f *Fleet) AllHexMMIDs() bool { return f.schemes.Load()&allHexMMIDs != 0 }

// Bits of Fleet.schemes.
const (
	allLegacyMM = 1 << iota
	allHexMMIDs
)

// countSchemes counts m's forms in (d 1) or out (d -1) of the fleet, after the published set took m in
// or out, and sets Fleet.schemes (the fleet actor). AllLegacyMM and AllHexMMIDs used to read every
// mirror per image request: 70 µs a call for a fleet of 8,000 SGLang workers.
func (f *Fleet) countSchemes(m *Mirror, d int) {
	if m.Spec.MMScheme == registry.MMSchemeBlockMMInfos {
		f.legacyMM += d
	}
	if m.Spec.TakesHexMMIDs() {
		f.hexMMIDs += d
	}
	n := f.mirrors.Load().Len()
	var bits uint32
	if n > 0 && f.legacyMM == n {
		bits |= allLegacyMM
	}
	if n > 0 && f.hexMMIDs == n {
		bits |= allHexMMIDs
	}
	f.schemes.Store(bits)
}

// Status returns every worker's status sorted by id.
func (f *Fleet) Status() []Status {
	ms := f.Mirrors()
	out := make([]Status, len(ms))
	for i, m := range ms {
		out[i] = m.status(f.deps.index)
	}
	return out
}

// StatusOf returns one worker's status.
func (f *Fleet) StatusOf(id uint64) (Status, bool) {
	m, ok := f.Get(id)
	if !ok {
		return Status{}, false
	}
	return m.status(f.deps.index), true
}

// Resync drops a worker's blocks and restarts its subscribers, which replay the worker's buffered stream
// from sequence 0. It returns once the blocks are dropped.
func (f *Fleet) Resync(id uint64) error {
	m, ok := f.Get(id)
	if !ok {
		return ErrUnknown
	}
	done := make(chan struct{})
	f.system.Root.Send(m.pid, &resync{Done: done})
	<-done
	return nil
}

// SetHealth records a worker's health for its status ("" reason when healthy).
func (f *Fleet) SetHealth(id uint64, healthy bool, reason string) {
	if m, ok := f.Get(id); ok {
		if healthy {
			reason = ""
		} else if reason == "" {
			reason = "health check failed"
		}
		m.health.Store(&reason)
	}
}

// SetPrediction records how a worker's cached blocks are predicted (PredictionEvents or PredictionApprox).
func (f *Fleet) SetPrediction(id uint64, mode string) {
	if m, ok := f.Get(id); ok {
		m.prediction.Store(&mode)
	}
}

// SetDegraded records why a worker's KV events cannot be trusted ("" clears it).
func (f *Fleet) SetDegraded(id uint64, reason string) {
	if m, ok := f.Get(id); ok {
		m.degraded.Store(&reason)
	}
}

// UnknownMessages counts messages an actor of this fleet did not understand.
func (f *Fleet) UnknownMessages() uint64 { return f.deps.unknown.Load() }

// Stop stops every mirror and the fleet actor.
func (f *Fleet) Stop() {
	if f.stopped.Swap(true) {
		return
	}
	if f.bindStop != nil {
		f.bindStop()
		for _, d := range f.bindDone {
			<-d
		}
	}
	if f.auditStop != nil {
		f.auditStop()
		<-f.auditDone
	}
	_ = f.system.Root.PoisonFuture(f.pid).Wait()
}

// fleetActor owns the set of mirrors; it is the only writer of Fleet.mirrors.
type fleetActor struct {
	f    *Fleet
	pids map[uint64]*actor.PID
}

func (a *fleetActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *AddWorker:
		msg.Reply <- a.add(ctx, msg.Spec)
	case *RemoveWorker:
		msg.Reply <- a.remove(ctx, msg.ID)
	default:
		a.f.deps.unknown.Add(1)
	}
}

func (a *fleetActor) add(ctx actor.Context, spec registry.Spec) error {
	if _, ok := a.pids[spec.ID]; ok {
		return fmt.Errorf("%w: %d", ErrDuplicate, spec.ID)
	}
	d := a.f.deps
	m := &Mirror{Spec: spec, c: &counters{}, added: d.now()}
	m.c.lastSeq.Store(-1)
	if spec.Events == "" && spec.Topic == "" {
		setState(m.c, StateNoEvents)
	} else {
		setState(m.c, StateConnecting)
	}
	if spec.Events != "" {
		for r := 0; r < spec.DPRanks(); r++ {
			sub, err := newSubscription(spec, r, d.cfg)
			if err != nil {
				return err
			}
			m.subs = append(m.subs, sub)
		}
	}
	if spec.Events == "" && spec.Topic != "" {
		if len(a.f.binds) == 0 {
			return fmt.Errorf("%w: worker %d names topic %q but the router has no --kv-events-bind endpoint", registry.ErrBadSpec, spec.ID, spec.Topic)
		}
		if spec.CurveKey != "" {
			// The bound SUB socket is shared by every publisher, so it cannot hold one worker's CURVE
			// server key; taking the spec would index whoever publishes on its topic, keyed or not.
			return fmt.Errorf("%w: worker %d names curve_key with topic %q, but CURVE is not available on the --kv-events-bind socket: give the worker an events= endpoint (the router connects and authenticates it) or drop curve_key", registry.ErrBadSpec, spec.ID, spec.Topic)
		}
		if m, _ := a.f.bindOwner().topicOwner(spec.Topic); m != nil { // this fleet's or a fleet sharing its sockets
			return fmt.Errorf("%w: topic %q is already registered", ErrDuplicate, spec.Topic)
		}
		m.bound = true
		binds, topic := a.f.binds, spec.Topic
		m.topicStats = func() kvevents.Stats {
			var st kvevents.Stats
			for _, b := range binds {
				st.Add(b.TopicStats(topic))
			}
			return st
		}
	}
	props := actor.PropsFromProducer(func() actor.Actor { return &mirrorActor{m: m, deps: d} },
		actor.WithSupervisor(actor.NewExponentialBackoffStrategy(d.cfg.BackoffWindow, d.cfg.InitialBackoff)))
	m.pid = ctx.Spawn(props)
	a.pids[spec.ID] = m.pid
	a.f.mirrors.Store(a.f.mirrors.Load().With(spec.ID, m))
	a.f.version.Add(1)
	a.f.countSchemes(m, 1)
	if m.bound {
		a.f.byTopic.Store(a.f.byTopic.Load().With(spec.Topic, m))
		for rank, b := range a.f.binds {
			replay := ""
			if rank < spec.DPRanks() {
				replay, _ = registry.RankEndpoint(spec.Replay, rank) // validated by registry.Spec
			}
			b.AddTopic(spec.Topic, replay)
		}
	}
	return nil
}

func (a *fleetActor) remove(ctx actor.Context, id uint64) error {
	pid, ok := a.pids[id]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknown, id)
	}
	// Stop the mirror (and its subscribers) first so no batch of this worker follows the removal.
	_ = ctx.PoisonFuture(pid).Wait()
	delete(a.pids, id)
	if m, ok := a.f.mirrors.Load().Get(id); ok {
		setState(m.c, StateRemoved)
		if m.bound {
			for _, b := range a.f.binds {
				b.RemoveTopic(m.Spec.Topic)
			}
			a.f.byTopic.Store(a.f.byTopic.Load().Without(m.Spec.Topic))
		}
		a.f.mirrors.Store(a.f.mirrors.Load().Without(id))
		a.f.version.Add(1)
		a.f.countSchemes(m, -1)
	}
	return a.f.deps.index.RemoveWorker(id)
}

// rankKey is the index key of a worker's dp rank.
func rankKey(id uint64, rank int) prefix.WorkerKey {
	return prefix.WorkerKey{WorkerID: id, DPRank: uint32(rank)}
}

package kvevents

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/internal/cowmap"
)

// BindConfig configures a BindSubscriber: one SUB socket that binds, to which the workers' PUB sockets
// connect (vLLM with a connect-style endpoint, llm-d's deployment, kvroute's --kv-events-bind).
type BindConfig struct {
	// Endpoint to bind, e.g. tcp://*:5557, or tcp://127.0.0.1:* for an ephemeral port (see Addr).
	Endpoint string
	// Subscribe is the SUB prefix filter; "" receives every topic (unknown ones are counted and dropped).
	Subscribe string
	// ReconnectMin and ReconnectMax bound the backoff between rebind attempts after a socket error.
	// Defaults 100ms and 5s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// PollInterval is the worst-case stop latency. Default 100ms.
	PollInterval time.Duration
	// ReplayTimeout is how long a topic's replay may stay silent. Default 2s.
	ReplayTimeout time.Duration
	// RcvHWM is the receive high-water mark, shared by all workers. Default 100_000.
	RcvHWM int
}

// Validate reports a missing endpoint.
func (c BindConfig) Validate() error {
	if c.Endpoint == "" {
		return fmt.Errorf("%w: bind Endpoint is required", ErrConfig)
	}
	return Config{Endpoint: c.Endpoint, ReconnectMin: c.ReconnectMin, ReconnectMax: c.ReconnectMax}.Validate()
}

// BindHandler receives a BindSubscriber's output on its goroutine, in sequence order per topic.
type BindHandler struct {
	// OnBatch gets each decoded batch of a registered topic once; b is reused after it returns.
	OnBatch func(topic string, seq uint64, b *Batch)
	// OnReset is called when topic's engine restarted: drop that worker's state.
	OnReset func(topic string)
	// OnUnknownTopic, when set, sees the topic of each message no registered worker claims (it is
	// counted in UnknownTopics and dropped). The slice is only valid during the call.
	OnUnknownTopic func(topic []byte)
}

// BindSubscriber receives the event streams of many workers on one bound SUB socket and attributes each
// message to a worker by its topic frame: llm-d's "kv@<host>:<port>@<model>", or any per-worker topic
// registered with AddTopic. Sequence tracking, replay and reset detection are per topic.
//
// Run owns the SUB socket and every topic's DEALER replay socket. AddTopic, RemoveTopic, Addr and Stats
// are safe from any goroutine: the topic registry is an immutable map (internal/cowmap: a change copies
// 1/64 of it) swapped through an atomic pointer, and Run reconciles its streams with the topics changed
// since it last looked, not with the whole registry.
type BindSubscriber struct {
	cfg BindConfig
	h   BindHandler
	c   Counters

	regMu sync.Mutex // serializes registry writers
	reg   atomic.Pointer[cowmap.Map[string, *topicReg]]
	// changed is set with each registry change; pending lists the topics changed since Run last took
	// them, up to maxPending, past which rescan asks Run to check every stream instead (under regMu).
	changed atomic.Bool
	pending []string
	rescan  bool

	ready     chan struct{}
	readyOnce sync.Once
	addr      atomic.Pointer[string]

	// Owned by Run's goroutine. connects counts the publishers' connections; a stream that has not seen
	// the latest verifies its publisher before its next live batch. Marking every stream at each
	// connection instead cost a pass over the streams per connection: 8,192 × 8,192 steps for a fleet of
	// 8,192 workers connecting.
	streams  map[string]*stream
	connects uint64
	// conns maps the descriptor of each connection the socket accepted to the connection's ordinal
	// (accepts, counted from 1): a message's descriptor (its "__fd" property) names the connection it
	// came on, so a stream verifies its publisher only when its own connection changed, not at every
	// worker's connect (with 8,192 workers, a connect made every stream ask its publisher in turn, one
	// round trip each, on this goroutine). A descriptor reused by a later connection gets that one's
	// ordinal before any of its messages is read (the monitor is read first). Entries are not removed on
	// disconnect: a closed connection's queued messages keep its ordinal, and the map is bounded by the
	// descriptors the process can hold.
	conns   map[int]uint64
	accepts uint64
}

// topicReg is a registered topic: its replay endpoint and its counters (its stream's sequence, replay
// and decode counts; Stats sums them with the session-wide ones). Immutable once published: a new
// endpoint is a new topicReg with the same counters, and a topic removed and added again gets new
// counters, so a stream whose counters are not its topic's belongs to an earlier registration.
type topicReg struct {
	replay string
	c      *Counters
}

// NewBindSubscriber validates cfg and returns a BindSubscriber with no registered topics.
func NewBindSubscriber(cfg BindConfig, h BindHandler) (*BindSubscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := Config{ReconnectMin: cfg.ReconnectMin, ReconnectMax: cfg.ReconnectMax, PollInterval: cfg.PollInterval,
		ReplayTimeout: cfg.ReplayTimeout, RcvHWM: cfg.RcvHWM}.withDefaults()
	cfg.ReconnectMin, cfg.ReconnectMax, cfg.PollInterval = d.ReconnectMin, d.ReconnectMax, d.PollInterval
	cfg.ReplayTimeout, cfg.RcvHWM = d.ReplayTimeout, d.RcvHWM
	s := &BindSubscriber{cfg: cfg, h: h, ready: make(chan struct{}), streams: map[string]*stream{}}
	s.reg.Store(cowmap.NewByString[*topicReg]())
	return s, nil
}

// AddTopic registers a worker's topic, with its replay ROUTER address ("" for none). Re-adding a topic
// updates its replay endpoint.
func (s *BindSubscriber) AddTopic(topic, replayEndpoint string) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	reg := s.reg.Load()
	c := &Counters{}
	if old, ok := reg.Get(topic); ok {
		if old.replay == replayEndpoint {
			return
		}
		c = old.c
	}
	s.publish(reg.With(topic, &topicReg{replay: replayEndpoint, c: c}), topic)
}

// RemoveTopic unregisters a topic; its later messages count as UnknownTopics and its state is dropped.
func (s *BindSubscriber) RemoveTopic(topic string) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	reg := s.reg.Load()
	if next := reg.Without(topic); next != reg {
		s.publish(next, topic)
	}
}

// maxPending bounds the changed topics kept for Run: changes made while no message arrives (Run
// reconciles on the next one) do not pile up.
const maxPending = 1 << 12

// publish swaps in the next registry, topic changed in it, and tells Run. The caller holds regMu.
func (s *BindSubscriber) publish(next *cowmap.Map[string, *topicReg], topic string) {
	s.reg.Store(next)
	switch {
	case s.rescan:
	case len(s.pending) < maxPending:
		s.pending = append(s.pending, topic)
	default:
		s.pending, s.rescan = nil, true
	}
	s.changed.Store(true)
}

// TopicStats returns a registered topic's counters (zero for an unknown topic); safe from any goroutine.
func (s *BindSubscriber) TopicStats(topic string) Stats {
	if e, ok := s.reg.Load().Get(topic); ok {
		return e.c.Snapshot()
	}
	return Stats{}
}

// VLLMTopic is llm-d's per-worker topic: "kv@<host>:<port>@<model>".
func VLLMTopic(hostPort, model string) string { return "kv@" + hostPort + "@" + model }

// Ready is closed after the first successful bind.
func (s *BindSubscriber) Ready() <-chan struct{} { return s.ready }

// Addr is the bound endpoint (wildcard port resolved) once Ready.
func (s *BindSubscriber) Addr() string { return load(&s.addr) }

// Stats returns a snapshot of the counters, summed over the registered topics (a removed topic's counts
// leave the sum); safe from any goroutine.
func (s *BindSubscriber) Stats() Stats {
	st := s.c.Snapshot()
	for _, e := range s.reg.Load().All() {
		st.Add(e.c.Snapshot())
	}
	return st
}

// Counters exposes the session-wide live counters (unknown topics, malformed frames, connections);
// per-topic counts are in TopicStats. Safe from any goroutine.
func (s *BindSubscriber) Counters() *Counters { return &s.c }

// Run binds and delivers batches until ctx is done, rebinding with backoff after a socket error (to the
// resolved address, so connected publishers find it again). It returns nil once ctx is done and every
// socket it opened is closed.
func (s *BindSubscriber) Run(ctx context.Context) error {
	defer s.closeStreams()
	backoff := s.cfg.ReconnectMin
	for {
		healthy, _ := s.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.c.Reconnects.Add(1)
		if healthy {
			backoff = s.cfg.ReconnectMin
		}
		if !sleepCtx(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, s.cfg.ReconnectMax)
	}
}

func (s *BindSubscriber) session(ctx context.Context) (bool, error) {
	sub, err := newSub(s.cfg.RcvHWM, s.cfg.ReconnectMin, s.cfg.ReconnectMax, s.cfg.Subscribe)
	if err != nil {
		return false, err
	}
	defer sub.Close()
	endpoint := s.cfg.Endpoint
	if a := s.Addr(); a != "" && strings.Contains(endpoint, ":*") {
		endpoint = a // keep the port the workers were told
	}
	if err := sub.Bind(endpoint); err != nil {
		return false, err
	}
	if s.Addr() == "" {
		addr, _ := sub.GetLastEndpoint()
		s.addr.Store(&addr)
	}
	// A publisher that (re)connects may be a restarted engine: the socket cannot say whose topic the
	// connection carries, so every stream with a replay endpoint verifies its publisher's identity
	// (replay from its last seq, compared by digest) before its next live batch, as connect mode does on
	// each reconnect.
	mon, stopMonitor, err := monitorConnects(sub, true)
	if err != nil {
		return false, err
	}
	defer stopMonitor()
	s.readyOnce.Do(func() { close(s.ready) })
	defer s.closeDealers()
	onConnect := func() {
		s.c.Connects.Add(1)
		s.connects++ // a stream whose messages name no connection checks at its next message (stream)
	}
	s.conns = map[int]uint64{} // this socket's connections
	onAccept := func(fd int) {
		s.accepts++
		s.conns[fd] = s.accepts
	}
	return readLoop(ctx, sub, s.cfg.PollInterval, &s.c, func(topic []byte, seq uint64, payload []byte, fd int) {
		st := s.stream(topic, fd)
		if st == nil {
			s.c.UnknownTopics.Add(1)
			if s.h.OnUnknownTopic != nil {
				s.h.OnUnknownTopic(topic)
			}
			return
		}
		st.handle(ctx, seq, payload)
	}, loopHooks{mon: mon, onConnect: onConnect, onAccept: onAccept}) // no timed identity checks: one silent replay endpoint would stall every worker's stream
}

// stream returns the state of a registered topic, creating it on first sight, or nil for an unknown
// topic; fd is the descriptor of the connection the message came on (-1: not known). It first
// reconciles the streams of the topics changed since it last looked; after that every stream is one of
// a registered topic, so a topic with a stream needs no look at the registry.
func (s *BindSubscriber) stream(topic []byte, fd int) *stream {
	if s.changed.Load() {
		s.reconcile()
	}
	conn := s.conns[fd]
	if st := s.streams[string(topic)]; st != nil {
		s.observe(st, conn)
		return st
	}
	e, ok := cowmap.GetBytes(s.reg.Load(), topic)
	if !ok {
		return nil
	}
	name, replay, c := string(topic), e.replay, e.c
	st := &stream{replayEndpoint: replay, replayTimeout: s.cfg.ReplayTimeout, poll: s.cfg.PollInterval, c: c,
		connects: s.connects, conn: conn}
	if s.h.OnBatch != nil {
		st.onBatch = func(seq uint64, b *Batch) { s.h.OnBatch(name, seq, b) }
	}
	if s.h.OnReset != nil {
		st.onReset = func() { s.h.OnReset(name) }
	}
	s.streams[name] = st
	return st
}

// observe sets st.verify when the publisher behind st may have changed since its last message: the
// message came on another connection than the last one (conn, its ordinal), or, when the connection is
// not known (0), some publisher connected since st last looked.
func (s *BindSubscriber) observe(st *stream, conn uint64) {
	switch {
	case conn != 0 && conn != st.conn:
		st.conn = conn
	case conn != 0 || st.connects == s.connects:
		st.connects = s.connects
		return
	}
	st.connects, st.verify = s.connects, st.replayEndpoint != "" && !st.replayDead
}

// reconcile takes the topics changed since the last call and brings their streams in line with the
// registry: a removed topic's stream (or one of an earlier registration, removed and added again) is
// closed and dropped, and a stream whose replay endpoint changed closes its DEALER to open the new one.
// The work is the changed topics', so a fleet registering one worker at a time costs a step per worker.
func (s *BindSubscriber) reconcile() {
	s.regMu.Lock()
	topics, all := s.pending, s.rescan
	s.pending, s.rescan = nil, false
	s.changed.Store(false)
	reg := s.reg.Load()
	s.regMu.Unlock()
	if all { // more changes than maxPending since the last look
		for name, st := range s.streams {
			s.align(reg, name, st)
		}
		return
	}
	for _, name := range topics {
		if st := s.streams[name]; st != nil {
			s.align(reg, name, st)
		}
	}
}

// align brings one stream in line with its topic's registration in reg.
func (s *BindSubscriber) align(reg *cowmap.Map[string, *topicReg], name string, st *stream) {
	e, ok := reg.Get(name)
	switch {
	case !ok || e.c != st.c:
		st.closeDealer()
		delete(s.streams, name)
	case e.replay != st.replayEndpoint:
		st.closeDealer()
		st.replayEndpoint = e.replay
	}
}

func (s *BindSubscriber) closeDealers() {
	for _, st := range s.streams {
		st.closeDealer()
	}
}

func (s *BindSubscriber) closeStreams() {
	s.closeDealers()
	clear(s.streams)
}

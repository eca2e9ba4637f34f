package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// ErrPublisherClosed is returned by Publish once the publisher's Run has returned.
var ErrPublisherClosed = errors.New("kvevents: publisher closed")

// ShouldBind is vLLM's bind-vs-connect rule for the PUB endpoint: bind if the endpoint holds
// "*" or "::" or is ipc:// or inproc://; otherwise connect (to a router whose SUB socket binds).
func ShouldBind(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// PublisherConfig configures a Publisher, the engine side of the event plane (tests, the mocker).
type PublisherConfig struct {
	// Endpoint is the PUB address; bound or connected by ShouldBind. Use tcp://127.0.0.1:* for an
	// ephemeral port (read it back with Addr). Required.
	Endpoint string
	// Bind binds Endpoint whatever ShouldBind says: a fixed loopback port (tcp://127.0.0.1:5557) has
	// neither "*" nor "::", so vLLM's rule would connect to it.
	Bind bool
	// ReplayEndpoint is the ROUTER replay address, always bound; "" disables replay.
	ReplayEndpoint string
	// Topic is frame 0 of every message. vLLM's default is "".
	Topic string
	// Layout selects map (current vLLM) or array (legacy) events.
	Layout Layout
	// DPRank is stamped into batches that carry none, as vLLM's publish() does with its DP rank.
	DPRank uint32
	// BufferSteps is the replay ring length in batches. Default 10_000, as vLLM.
	BufferSteps int
	// HWM is the PUB send high-water mark in messages; past it ZMQ drops. Default 100_000, as vLLM.
	HWM int
	// QueueSize bounds the batches waiting for the publisher goroutine; Publish blocks when it is full,
	// as vLLM's scheduler does. Default 1024.
	QueueSize int
	// PollInterval is how often replay requests are served when no batch is flowing. Default 5ms.
	PollInterval time.Duration
	// CurveSecretKey, when set (40 Z85 characters), makes the PUB and replay sockets CURVE servers:
	// only subscribers that know the matching public key can read the stream, and they can be sure it
	// comes from this publisher.
	CurveSecretKey string
	// SkipSend, when set, is asked for every seq: true keeps the batch in the replay ring but does not
	// send it (fault injection for tests and the mocker's lossy mode).
	SkipSend func(seq uint64) bool
	// SendTwice, when set, is asked for every seq sent: true sends the batch a second time right after
	// (a duplicate on the wire, as a relay's retry makes; fault injection for tests).
	SendTwice func(seq uint64) bool
}

func (c PublisherConfig) withDefaults() PublisherConfig {
	if c.BufferSteps <= 0 {
		c.BufferSteps = 10_000
	}
	if c.HWM <= 0 {
		c.HWM = 100_000
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 1024
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Millisecond
	}
	return c
}

// Validate reports a missing endpoint.
func (c PublisherConfig) Validate() error {
	if c.Endpoint == "" {
		return fmt.Errorf("%w: publisher Endpoint is required", ErrConfig)
	}
	return nil
}

// PublisherStats counts what a publisher did.
type PublisherStats struct {
	Published      uint64 // batches assigned a seq (sent or skipped)
	Skipped        uint64 // batches withheld by SkipSend
	SendErrors     uint64 // PUB sends that failed
	ReplayRequests uint64 // well-formed replay requests served
	QueueDepth     int    // batches waiting in the queue "kvevents.publish"
}

// Publisher publishes KV event batches as vLLM's ZmqEventPublisher does: 3-frame messages
// [topic, seq_be8, payload] from seq 0, a replay ROUTER answering from a bounded ring, END marker ff×8.
// Run owns both sockets; Publish may be called from any goroutine.
type Publisher struct {
	cfg   PublisherConfig
	queue chan []byte // "kvevents.publish": encoded payloads, bounded by QueueSize

	ready      chan struct{}
	done       chan struct{}
	addr       atomic.Pointer[string]
	replayAddr atomic.Pointer[string]

	published, skipped, sendErrors, replays atomic.Uint64
}

// NewPublisher validates cfg; sockets are opened by Run.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Publisher{
		cfg:   cfg,
		queue: make(chan []byte, cfg.QueueSize),
		ready: make(chan struct{}),
		done:  make(chan struct{}),
	}, nil
}

// Publish encodes b in the configured layout (in the caller's goroutine, so b may be reused at once) and
// queues it, blocking while the queue is full. It returns ErrPublisherClosed after Run has returned, or
// ctx's error.
func (p *Publisher) Publish(ctx context.Context, b *Batch) error {
	if !b.HasDPRank {
		stamped := *b
		stamped.DPRank, stamped.HasDPRank = p.cfg.DPRank, true
		b = &stamped
	}
	return p.PublishRaw(ctx, AppendBatch(nil, b, p.cfg.Layout))
}

// PublishRaw queues an already encoded payload (replayed captures, or malformed bytes for fault
// injection). The publisher keeps payload: the caller must not modify it afterwards.
func (p *Publisher) PublishRaw(ctx context.Context, payload []byte) error {
	select {
	case <-p.done:
		return ErrPublisherClosed
	default:
	}
	select {
	case p.queue <- payload:
		return nil
	case <-p.done:
		return ErrPublisherClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ready is closed once Run has bound or connected its sockets (Addr and ReplayAddr are then valid).
func (p *Publisher) Ready() <-chan struct{} { return p.ready }

// Done is closed when Run has returned.
func (p *Publisher) Done() <-chan struct{} { return p.done }

// Addr is the PUB endpoint after Ready: the resolved address when bound (wildcard port filled in).
func (p *Publisher) Addr() string { return load(&p.addr) }

// ReplayAddr is the bound ROUTER endpoint after Ready, or "".
func (p *Publisher) ReplayAddr() string { return load(&p.replayAddr) }

func load(a *atomic.Pointer[string]) string {
	if s := a.Load(); s != nil {
		return *s
	}
	return ""
}

// Stats returns the publisher's counters; safe from any goroutine.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{
		Published: p.published.Load(), Skipped: p.skipped.Load(), SendErrors: p.sendErrors.Load(),
		ReplayRequests: p.replays.Load(), QueueDepth: len(p.queue),
	}
}

// replayEntry is one buffered batch.
type replayEntry struct {
	seq     uint64
	payload []byte
}

// pubState is everything Run's goroutine owns.
type pubState struct {
	pub, router *zmq.Socket
	poller      *zmq.Poller
	topic       []byte
	seq         uint64
	ring        []replayEntry // circular, len = BufferSteps
	head, n     int           // oldest index and count
}

// Run opens the sockets, then sends queued batches and serves replay requests until ctx is done. It
// closes its sockets before returning; a Publisher runs once.
func (p *Publisher) Run(ctx context.Context) error {
	defer close(p.done)
	st := &pubState{topic: []byte(p.cfg.Topic), ring: make([]replayEntry, p.cfg.BufferSteps)}
	defer st.close()
	if err := p.open(st); err != nil {
		return err
	}
	close(p.ready)
	var tick <-chan time.Time
	if st.router != nil {
		t := time.NewTicker(p.cfg.PollInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case payload := <-p.queue:
			p.send(st, payload)
		case <-tick:
			p.serveReplay(st)
		}
	}
}

func (p *Publisher) open(st *pubState) error {
	pub, err := zmq.NewSocket(zmq.PUB)
	if err != nil {
		return err
	}
	st.pub = pub
	if err := pub.SetLinger(0); err != nil {
		return err
	}
	if err := pub.SetSndhwm(p.cfg.HWM); err != nil {
		return err
	}
	if err := curveServer(pub, p.cfg.CurveSecretKey); err != nil {
		return err
	}
	if p.cfg.Bind || ShouldBind(p.cfg.Endpoint) {
		if err := pub.Bind(p.cfg.Endpoint); err != nil {
			return fmt.Errorf("kvevents: bind %s: %w", p.cfg.Endpoint, err)
		}
		addr, _ := pub.GetLastEndpoint()
		p.addr.Store(&addr)
	} else {
		if err := pub.Connect(p.cfg.Endpoint); err != nil {
			return fmt.Errorf("kvevents: connect %s: %w", p.cfg.Endpoint, err)
		}
		addr := p.cfg.Endpoint
		p.addr.Store(&addr)
	}
	if p.cfg.ReplayEndpoint == "" {
		return nil
	}
	r, err := zmq.NewSocket(zmq.ROUTER)
	if err != nil {
		return err
	}
	st.router = r
	if err := r.SetLinger(0); err != nil {
		return err
	}
	if err := curveServer(r, p.cfg.CurveSecretKey); err != nil {
		return err
	}
	if err := r.Bind(p.cfg.ReplayEndpoint); err != nil {
		return fmt.Errorf("kvevents: bind replay %s: %w", p.cfg.ReplayEndpoint, err)
	}
	addr, _ := r.GetLastEndpoint()
	p.replayAddr.Store(&addr)
	st.poller = zmq.NewPoller()
	st.poller.Add(r, zmq.POLLIN)
	return nil
}

func (st *pubState) close() {
	if st.pub != nil {
		st.pub.Close()
	}
	if st.router != nil {
		st.router.Close()
	}
}

// send assigns the next seq, sends (unless SkipSend says no) and buffers the batch for replay.
func (p *Publisher) send(st *pubState, payload []byte) {
	seq := st.seq
	st.seq++
	p.published.Add(1)
	var seq8 [8]byte
	binary.BigEndian.PutUint64(seq8[:], seq)
	if p.cfg.SkipSend != nil && p.cfg.SkipSend(seq) {
		p.skipped.Add(1)
	} else if err := sendFrames(st.pub, st.topic, seq8[:], payload); err != nil {
		p.sendErrors.Add(1)
	} else if p.cfg.SendTwice != nil && p.cfg.SendTwice(seq) {
		if err := sendFrames(st.pub, st.topic, seq8[:], payload); err != nil {
			p.sendErrors.Add(1)
		}
	}
	if len(st.ring) == 0 {
		return
	}
	if st.n < len(st.ring) {
		st.ring[(st.head+st.n)%len(st.ring)] = replayEntry{seq, payload}
		st.n++
	} else {
		st.ring[st.head] = replayEntry{seq, payload}
		st.head = (st.head + 1) % len(st.ring)
	}
}

// serveReplay answers every pending replay request without blocking.
func (p *Publisher) serveReplay(st *pubState) {
	for {
		polled, err := st.poller.Poll(0)
		if err != nil || len(polled) == 0 {
			return
		}
		msg, err := st.router.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			return // EAGAIN or a closed socket: nothing more to serve now
		}
		// [identity, "", start_seq8]: exactly three frames, as vLLM requires.
		if len(msg) != 3 || len(msg[2]) != 8 {
			continue
		}
		p.replays.Add(1)
		id, start := msg[0], binary.BigEndian.Uint64(msg[2])
		var seq8 [8]byte
		for i := 0; i < st.n; i++ {
			e := st.ring[(st.head+i)%len(st.ring)]
			if e.seq < start {
				continue
			}
			binary.BigEndian.PutUint64(seq8[:], e.seq)
			if sendRouter(st.router, id, seq8[:], e.payload) != nil {
				break
			}
		}
		binary.BigEndian.PutUint64(seq8[:], endSeq)
		_ = sendRouter(st.router, id, seq8[:], nil)
	}
}

func sendFrames(s *zmq.Socket, topic, seq8, payload []byte) error {
	if _, err := s.SendBytes(topic, zmq.SNDMORE); err != nil {
		return err
	}
	if _, err := s.SendBytes(seq8, zmq.SNDMORE); err != nil {
		return err
	}
	_, err := s.SendBytes(payload, 0)
	return err
}

// sendRouter sends one replay reply [identity, "", seq8, payload].
func sendRouter(r *zmq.Socket, id, seq8, payload []byte) error {
	if _, err := r.SendBytes(id, zmq.SNDMORE); err != nil {
		return err
	}
	return sendFrames(r, nil, seq8, payload)
}

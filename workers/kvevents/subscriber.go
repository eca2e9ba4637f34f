package kvevents

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// Config configures a Subscriber (connect mode: the router dials each worker's PUB socket).
type Config struct {
	// Endpoint is the worker's PUB address, e.g. tcp://10.0.0.5:5557 (vLLM's "endpoint" with the host
	// filled in, plus the DP port offset for rank > 0). Required.
	Endpoint string
	// ReplayEndpoint is the worker's ROUTER replay address, e.g. tcp://10.0.0.5:5558. Empty disables
	// replay: gaps and the slow-joiner window are then counted as Lost.
	ReplayEndpoint string
	// Topic is the subscription prefix; vLLM's default topic is "", which matches everything.
	Topic string
	// ReconnectMin and ReconnectMax bound the exponential backoff between socket sessions after an error,
	// and are also ZMQ's own TCP reconnect interval (ZMQ_RECONNECT_IVL / _MAX). Defaults 100ms and 5s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// PollInterval is how long one poll blocks before the context is checked again: the worst-case stop
	// latency. Default 100ms.
	PollInterval time.Duration
	// ReplayTimeout is how long a replay may stay silent before it is abandoned. Default 2s.
	ReplayTimeout time.Duration
	// CurveServerKey, when set, is the publisher's CURVE public key (40 Z85 characters): the SUB and
	// replay sockets then only complete handshakes with the holder of the matching secret key, and the
	// stream is encrypted.
	CurveServerKey string
	// RcvHWM is the SUB socket's receive high-water mark in messages; past it ZMQ drops (seen as gaps).
	// Default 100_000, vLLM's publisher default.
	RcvHWM int
	// IdentityCheck is how often the publisher's identity is verified while the connection stays up: the
	// reconnect catch-up (replay from the last batch, compared by digest) run on a timer. A restart the
	// connection does not show — a relay in between that stays connected, and a new engine whose first
	// batch to arrive happens to carry last+1 — is otherwise invisible to sequence numbers. Each check is
	// one replay exchange (counted in Replays). Default 30s; negative disables.
	IdentityCheck time.Duration
}

// DefaultConfig returns a Config with every default set and no endpoint.
func DefaultConfig() Config {
	return Config{
		ReconnectMin:  100 * time.Millisecond,
		ReconnectMax:  5 * time.Second,
		PollInterval:  100 * time.Millisecond,
		ReplayTimeout: 2 * time.Second,
		RcvHWM:        100_000,
		IdentityCheck: defaultIdentityCheck,
	}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = d.ReconnectMin
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = d.ReconnectMax
	}
	if c.PollInterval <= 0 {
		c.PollInterval = d.PollInterval
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = d.ReplayTimeout
	}
	if c.RcvHWM <= 0 {
		c.RcvHWM = d.RcvHWM
	}
	if c.IdentityCheck == 0 {
		c.IdentityCheck = d.IdentityCheck
	}
	return c
}

// ErrConfig is the class of invalid subscriber and publisher configurations.
var ErrConfig = errors.New("kvevents: invalid config")

// Validate reports a missing endpoint or inverted backoff bounds.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return fmt.Errorf("%w: Endpoint is required", ErrConfig)
	}
	if c.CurveServerKey != "" && len(c.CurveServerKey) != 40 {
		return fmt.Errorf("%w: CurveServerKey must be 40 Z85 characters", ErrConfig)
	}
	if c.ReconnectMax > 0 && c.ReconnectMin > c.ReconnectMax {
		return fmt.Errorf("%w: ReconnectMin %v > ReconnectMax %v", ErrConfig, c.ReconnectMin, c.ReconnectMax)
	}
	return nil
}

// Handler receives a subscriber's output, always on the subscriber's goroutine and in sequence order.
type Handler struct {
	// OnBatch gets each decoded batch once. b is reused after OnBatch returns: copy what you keep.
	OnBatch func(seq uint64, b *Batch)
	// OnReset is called when the engine restarted (its sequence went backwards): drop everything known
	// about this worker. Batches of the new engine follow.
	OnReset func()
}

// Subscriber reads one worker's KV event stream. Run owns the SUB and DEALER sockets; Stats may be called
// from any goroutine.
type Subscriber struct {
	cfg Config
	c   Counters
	st  stream
	// lastErr is why the last socket session ended, nil once a session received a message (Err).
	lastErr atomic.Pointer[error]
}

// NewSubscriber validates cfg (zero durations take their defaults) and returns a Subscriber that calls h.
func NewSubscriber(cfg Config, h Handler) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Subscriber{cfg: cfg}
	s.st = stream{
		replayEndpoint: cfg.ReplayEndpoint, replayTimeout: cfg.ReplayTimeout, poll: cfg.PollInterval, curveServerKey: cfg.CurveServerKey,
		c: &s.c, onBatch: h.OnBatch, onReset: h.OnReset,
	}
	return s, nil
}

// Stats returns a snapshot of the counters; safe from any goroutine.
func (s *Subscriber) Stats() Stats { return s.c.Snapshot() }

// Counters exposes the live counters (for metrics exporters); safe from any goroutine.
func (s *Subscriber) Counters() *Counters { return &s.c }

// Err returns why the last socket session ended (a socket that could not be opened or connected), nil
// when none failed since one received a message; safe from any goroutine.
func (s *Subscriber) Err() error {
	if e := s.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Run connects and delivers batches until ctx is done, reopening the sockets with exponential backoff
// after a socket error. It returns nil once ctx is done and its sockets are closed. Run must not be called
// twice concurrently.
func (s *Subscriber) Run(ctx context.Context) error {
	backoff := s.cfg.ReconnectMin
	for {
		healthy, err := s.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.c.Reconnects.Add(1) // the session ended on a socket error: counted, kept for Err, retried
		switch {
		case err != nil:
			s.lastErr.Store(&err)
		case healthy:
			s.lastErr.Store(nil)
		}
		if healthy {
			backoff = s.cfg.ReconnectMin
		}
		if !sleepCtx(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, s.cfg.ReconnectMax)
	}
}

// session runs one SUB socket lifetime. healthy reports whether any message arrived.
func (s *Subscriber) session(ctx context.Context) (healthy bool, err error) {
	sub, err := newSub(s.cfg.RcvHWM, s.cfg.ReconnectMin, s.cfg.ReconnectMax, s.cfg.Topic)
	if err != nil {
		return false, err
	}
	defer sub.Close()
	if err := curveClient(sub, s.cfg.CurveServerKey); err != nil {
		return false, err
	}
	defer s.st.closeDealer()
	// Every (re)connection of the SUB socket may have lost batches: watch for it and catch up.
	mon, stopMonitor, err := monitorConnects(sub, false)
	if err != nil {
		return false, err
	}
	defer stopMonitor()
	if err := sub.Connect(s.cfg.Endpoint); err != nil {
		return false, err
	}
	s.st.discard = func() uint64 { return discardQueued(sub, s.cfg.RcvHWM) }
	defer func() { s.st.discard = nil }()
	loop := loopHooks{mon: mon, onConnect: func() {
		s.c.Connects.Add(1)
		s.st.catchUp(ctx)
		s.st.join.start(time.Now(), s.cfg.PollInterval)
	}}
	if s.st.replayEndpoint != "" {
		lastCheck := time.Now()
		loop.tick = func(now time.Time) {
			switch {
			case s.st.join.due(now, s.followUpCap()):
				s.st.catchUp(ctx)
			case s.cfg.IdentityCheck > 0 && now.Sub(lastCheck) >= s.cfg.IdentityCheck:
				if s.st.tr.have {
					s.st.catchUp(ctx)
				}
			default:
				return
			}
			lastCheck = time.Now()
		}
	}
	return readLoop(ctx, sub, s.cfg.PollInterval, &s.c, func(_ []byte, seq uint64, payload []byte, _ int) {
		s.st.join.joined = true
		s.st.handle(ctx, seq, payload)
	}, loop)
}

// followUpCap is the longest wait between the catch-ups of a connection no live message has proven yet:
// the identity check's period, or its default when the check is off.
func (s *Subscriber) followUpCap() time.Duration {
	if s.cfg.IdentityCheck > 0 {
		return s.cfg.IdentityCheck
	}
	return defaultIdentityCheck
}

// defaultIdentityCheck is Config.IdentityCheck's default.
const defaultIdentityCheck = 30 * time.Second

// joinProbe repeats the catch-up of a connection until a live message proves that the publisher has our
// subscription. The handshake the monitor reports completes before the SUB's subscription reaches the
// PUB socket, which attaches it at its next send (ZMQ's slow joiner): a batch published in between is
// dropped, and when the worker then goes quiet no later seq reveals the gap (a router that starts beside
// an idle fleet and routes one request per worker loses exactly those requests' blocks). The catch-up
// right after the handshake cannot close that window, so it runs again after one poll interval, then
// after twice that, doubling up to the cap, until the first live message arrives. Each run on a quiet
// publisher is one replay exchange answered by the END marker alone.
type joinProbe struct {
	joined bool          // a live message arrived on this connection
	next   time.Time     // when the next catch-up is due; zero: none scheduled
	gap    time.Duration // the wait before the one after it
}

func (p *joinProbe) start(now time.Time, first time.Duration) {
	p.joined, p.next, p.gap = false, now.Add(first), 2*first
}

// due reports a catch-up is due now and schedules the next one.
func (p *joinProbe) due(now time.Time, ceiling time.Duration) bool {
	if p.joined || p.next.IsZero() || now.Before(p.next) {
		return false
	}
	p.next, p.gap = now.Add(p.gap), min(2*p.gap, ceiling)
	return true
}

// loopHooks are readLoop's optional callbacks.
type loopHooks struct {
	// mon, when not nil, is a socket-monitor PAIR socket: each event read from it calls onConnect before
	// any further message is read, so a catch-up replay precedes the live messages of the new connection.
	mon       *zmq.Socket
	onConnect func()
	// onAccept (bind mode), when not nil, gets the monitor's accepted events with their connections'
	// file descriptors (monitorConnects with conns), and each message's connection is read for the
	// handler ("__fd" among libzmq's message properties).
	onAccept func(fd int)
	// tick, when not nil, runs after every wait (at least once per poll interval) with the time.
	tick func(now time.Time)
	// waitIgnoresMonitor makes the wait deaf to mon (tests: a monitor helper that never runs in time).
	waitIgnoresMonitor bool
}

// monitorSeq numbers the inproc monitor endpoints of this process.
var monitorSeq atomic.Uint64

// monitorConnects opens a PAIR socket that receives sub's handshake-succeeded events (one per
// established connection, the first included), and with conns its accepted events (their values are
// the connections' file descriptors). stop ends the monitoring, then closes the PAIR; it must
// run before sub is closed.
//
// The order matters to the whole process: libzmq emits a handshake event from its I/O thread with a
// blocking send on the monitor's own PAIR. With our end of the pair closed first, a handshake that
// completes before the closed SUB's connections are torn down (a reconnect in flight when the router
// stops a worker) blocks that send, and the I/O thread, forever: every ZMQ socket of the process (all
// the other workers' streams, the simulated workers' publishers) stops moving, and the router sees no
// event again. zmq_socket_monitor with no endpoint detaches the monitor under libzmq's monitor lock, so
// no event can be sent to it afterwards.
func monitorConnects(sub *zmq.Socket, conns bool) (mon *zmq.Socket, stop func(), err error) {
	addr := fmt.Sprintf("inproc://kvevents-monitor-%d", monitorSeq.Add(1))
	events := zmq.EVENT_HANDSHAKE_SUCCEEDED
	if conns {
		events |= zmq.EVENT_ACCEPTED
	}
	if err := sub.Monitor(addr, events); err != nil {
		return nil, nil, err
	}
	detach := func() { _ = sub.Monitor("", 0) }
	mon, err = zmq.NewSocket(zmq.PAIR)
	if err != nil {
		detach()
		return nil, nil, err
	}
	if err := mon.SetLinger(0); err != nil {
		detach()
		mon.Close()
		return nil, nil, err
	}
	if err := mon.Connect(addr); err != nil {
		detach()
		mon.Close()
		return nil, nil, err
	}
	return mon, func() { detach(); mon.Close() }, nil
}

// maxDrain bounds the messages read per poll, so the context is still checked under a flood.
const maxDrain = 1024

// readLoop reads 3-frame messages from sub until ctx is done or the socket fails, handing each well-formed
// one to fn. healthy reports whether any message arrived.
// The hooks (loopHooks) add the connect monitor and a periodic tick.
func readLoop(ctx context.Context, sub *zmq.Socket, poll time.Duration, c *Counters,
	fn func(topic []byte, seq uint64, payload []byte, fd int), h loopHooks) (healthy bool, err error) {
	mon := h.mon
	waitMon := mon
	if h.waitIgnoresMonitor {
		waitMon = nil
	}
	wait, closeWait, err := newLoopWait(sub, waitMon, poll)
	if err != nil {
		return false, err
	}
	defer closeWait()
	var msg [][]byte // the frames' slice, reused (the frames are not)
	for ctx.Err() == nil {
		readable, monitor, err := wait()
		if err != nil {
			return healthy, err
		}
		if h.tick != nil {
			h.tick(time.Now())
		}
		if monitor {
			readConnects(mon, &h)
		}
		if !readable {
			continue
		}
		// Drain what is queued before waiting again: one wait per burst, not per message.
		for i := 0; i < maxDrain && ctx.Err() == nil; i++ {
			if mon != nil {
				// A connection's handshake event is in the monitor before any message it carries (the
				// subscription is sent after the handshake), so reading the monitor first puts every
				// catch-up before its connection's live messages. The helper's wake-up (monitor above)
				// cannot promise that: under load the reader can find the SUB readable before the helper
				// has run, and a new engine's batch handled ahead of the catch-up that would detect the
				// restart can read as in order (TestConnectPrecedesItsMessages).
				readConnects(mon, &h)
			}
			var fd int
			msg, fd, err = recvMessage(sub, h.onAccept != nil, msg[:0])
			if err != nil {
				if errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
					break
				}
				return healthy, err
			}
			healthy = true
			topic, seq, payload, ok := splitMessage(msg)
			if !ok {
				c.DecodeErrors.Add(1)
				continue
			}
			fn(topic, seq, payload, fd)
		}
	}
	return healthy, nil
}

// recvMessage reads one multi-part message without waiting (frames appended to msg) and, with conns,
// the descriptor of the connection it came on from its first frame's properties (-1 when it has none).
func recvMessage(sub *zmq.Socket, conns bool, msg [][]byte) (_ [][]byte, fd int, err error) {
	fd = -1
	if !conns {
		msg, err = sub.RecvMessageBytes(zmq.DONTWAIT)
		return msg, fd, err
	}
	first, props, err := sub.RecvBytesWithMetadata(zmq.DONTWAIT, fdProperty)
	if err != nil {
		return msg, fd, err
	}
	if v, ok := props[fdProperty]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			fd = n
		}
	}
	msg = append(msg, first)
	for {
		more, err := sub.GetRcvmore()
		if err != nil || !more {
			return msg, fd, err
		}
		part, err := sub.RecvBytes(0) // a message's parts arrive together
		if err != nil {
			return msg, fd, err
		}
		msg = append(msg, part)
	}
}

// fdProperty is libzmq's message property holding the descriptor of the connection the message came on
// (the private property behind the deprecated ZMQ_SRCFD).
const fdProperty = "__fd"

// readConnects reads every event queued in the monitor, calling onConnect for each handshake (and
// onAccept for each connection accepted). ZMQ_EVENTS
// (one call, which also takes in the socket's pending commands) answers the usual "nothing" before a
// receive is tried (three calls and a message allocated).
func readConnects(mon *zmq.Socket, h *loopHooks) {
	for {
		if st, err := mon.GetEvents(); err == nil && st&zmq.POLLIN == 0 {
			return
		}
		ev, _, value, err := mon.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			return
		}
		switch {
		case ev&zmq.EVENT_HANDSHAKE_SUCCEEDED != 0:
			h.onConnect()
		case ev&zmq.EVENT_ACCEPTED != 0 && h.onAccept != nil:
			h.onAccept(value)
		}
	}
}

// newLoopWait returns readLoop's wait: it blocks until sub may have a message (readable) or mon an event
// (monitor), or for at most poll. It parks on the netpoller (readWaiter) where ZMQ_FD allows, else
// blocks in zmq_poll.
func newLoopWait(sub, mon *zmq.Socket, poll time.Duration) (wait func() (readable, monitor bool, err error), closeWait func(), err error) {
	w, err := newReadWaiter(sub, mon)
	if err == nil {
		readable := func() bool {
			ev, err := sub.GetEvents()
			return err != nil || ev&zmq.POLLIN != 0 // an error: let the read report it
		}
		wait = func() (bool, bool, error) { return w.wait(readable, poll) }
		return wait, w.close, nil
	}
	if !errors.Is(err, errNotPollable) {
		return nil, nil, err
	}
	poller := zmq.NewPoller()
	poller.Add(sub, zmq.POLLIN)
	if mon != nil {
		poller.Add(mon, zmq.POLLIN)
	}
	wait = func() (bool, bool, error) {
		polled, err := poller.Poll(poll)
		if err != nil {
			return false, false, err
		}
		// Both are read when anything is ready, as before: reads are non-blocking.
		return len(polled) > 0, len(polled) > 0 && mon != nil, nil
	}
	return wait, func() {}, nil
}

// discardQueued reads and drops what sub holds now, at most limit messages (new ones keep arriving).
func discardQueued(sub *zmq.Socket, limit int) (n uint64) {
	for ; n < uint64(limit); n++ {
		if _, err := sub.RecvMessageBytes(zmq.DONTWAIT); err != nil {
			break
		}
	}
	return n
}

// newSub opens a SUB socket with the common options.
func newSub(hwm int, ivl, ivlMax time.Duration, topic string) (*zmq.Socket, error) {
	sub, err := zmq.NewSocket(zmq.SUB)
	if err != nil {
		return nil, err
	}
	for _, set := range []func() error{
		func() error { return sub.SetLinger(0) },
		func() error { return sub.SetRcvhwm(hwm) },
		func() error { return sub.SetReconnectIvl(ivl) },
		func() error { return sub.SetReconnectIvlMax(ivlMax) },
		func() error { return sub.SetSubscribe(topic) },
	} {
		if err := set(); err != nil {
			sub.Close()
			return nil, err
		}
	}
	return sub, nil
}

// sleepCtx waits d or until ctx is done; it reports whether the wait completed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

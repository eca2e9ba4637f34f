package faultproxy

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/internal/routine"
)

// ErrConfig is the class of invalid proxy configurations.
var ErrConfig = errors.New("faultproxy: invalid config")

// Config configures a Proxy.
type Config struct {
	// Upstream is the worker's PUB endpoint, e.g. tcp://127.0.0.1:5557. Required.
	Upstream string
	// UpstreamReplay is the worker's replay ROUTER endpoint; "" disables the replay pass-through.
	UpstreamReplay string
	// Listen is the proxy's PUB bind address. Default tcp://127.0.0.1:* (a free port, read back with
	// Addr; a cut rebinds the same port).
	Listen string
	// ListenReplay is the proxy's ROUTER bind address. Default tcp://127.0.0.1:*.
	ListenReplay string
	// Topic is the upstream subscription prefix. Default "" (everything).
	Topic string
	// PollInterval bounds how long a socket poll blocks, i.e. the stop latency and the timer resolution
	// of delays and cuts. Default 2ms.
	PollInterval time.Duration
	// ReplayTimeout is how long a replay session may stay silent before its DEALER is closed. Default 5s
	// (longer than the subscriber's 2s, so the subscriber gives up first).
	ReplayTimeout time.Duration
	// HWM is the send and receive high-water mark of the event sockets. Default 100_000, as vLLM.
	HWM int
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "tcp://127.0.0.1:*"
	}
	if c.ListenReplay == "" {
		c.ListenReplay = "tcp://127.0.0.1:*"
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 2 * time.Millisecond
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = 5 * time.Second
	}
	if c.HWM <= 0 {
		c.HWM = 100_000
	}
	return c
}

// Validate reports a missing upstream.
func (c Config) Validate() error {
	if c.Upstream == "" {
		return fmt.Errorf("%w: Upstream is required", ErrConfig)
	}
	return nil
}

// Stats counts what the proxy did; every field is cumulative.
type Stats struct {
	Received    uint64 // batches read from the worker
	Forwarded   uint64 // batch sends downstream (a duplicate counts twice)
	Dropped     uint64 // batches dropped by the Drop fault
	Duplicated  uint64
	Reordered   uint64
	Delayed     uint64
	CutDropped  uint64 // batches dropped because the stream was cut (held batches included)
	Cuts        uint64 // cuts started
	Replays     uint64 // replay requests passed through
	ReplayMsgs  uint64 // replay answers passed back (END markers included)
	ReplayLost  uint64 // replay sessions closed on timeout
	SendErrors  uint64
	RebindFails uint64 // failed attempts to bind again after a cut
}

type counters struct {
	received, forwarded, dropped, duplicated, reordered, delayed atomic.Uint64
	cutDropped, cuts, replays, replayMsgs, replayLost            atomic.Uint64
	sendErrors, rebindFails                                      atomic.Uint64
}

// Proxy is a running fault-injecting proxy of one worker's event stream.
type Proxy struct {
	cfg Config
	c   counters

	faults atomic.Pointer[Faults]
	cuts   chan time.Duration // "faultproxy.cuts": cut requests for the events goroutine
	// upstream is the worker's PUB endpoint, read by the events goroutine each step (SetUpstream);
	// upReplay the worker's ROUTER, read by the replay goroutine for each new request.
	upstream, upReplay atomic.Pointer[string]

	addr, replayAddr string

	stop     chan struct{}
	loops    routine.Group
	stopOnce sync.Once
}

// Start validates cfg, binds the proxy's sockets and starts its two goroutines. Faults start empty
// (everything passes).
func Start(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Proxy{cfg: cfg, cuts: make(chan time.Duration, 16), stop: make(chan struct{})}
	p.faults.Store(&Faults{})
	p.upstream.Store(&cfg.Upstream)
	p.upReplay.Store(&cfg.UpstreamReplay)
	ready := make(chan error, 2)
	var addrMu sync.Mutex
	p.goRun(func() {
		runEvents(p, func(addr string, err error) {
			addrMu.Lock()
			p.addr = addr
			addrMu.Unlock()
			ready <- err
		})
	})
	n := 1
	if cfg.UpstreamReplay != "" {
		n = 2
		p.goRun(func() {
			runReplay(p, func(addr string, err error) {
				addrMu.Lock()
				p.replayAddr = addr
				addrMu.Unlock()
				ready <- err
			})
		})
	}
	var errs []error
	for range n {
		if err := <-ready; err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// proxyLoop is one of the proxy's two socket loops (events, replay); Close joins them.
var proxyLoop = routine.Named("faultproxy.loop")

// goRun is the one place the proxy starts goroutines, so Close can wait for all of them.
func (p *Proxy) goRun(f func()) { p.loops.Go(proxyLoop, f) }

// Addr is the proxy's PUB endpoint: point the subscriber's Endpoint here.
func (p *Proxy) Addr() string { return p.addr }

// ReplayAddr is the proxy's ROUTER endpoint ("" without replay): the subscriber's ReplayEndpoint.
func (p *Proxy) ReplayAddr() string { return p.replayAddr }

// SetFaults replaces the fault configuration; the RNG is re-seeded from f.Seed. A zero Faults stops the
// faults (batches already held are still released on their schedule).
func (p *Proxy) SetFaults(f Faults) {
	if f.BySeq != nil {
		m := make(map[uint64]Fault, len(f.BySeq))
		for k, v := range f.BySeq {
			m[k] = v
		}
		f.BySeq = m
	}
	p.faults.Store(&f)
}

// Cut closes the proxy's PUB socket for d (subscribers see a disconnect), drops every batch meanwhile,
// then binds the same address again. A cut requested during a cut extends it; Cut(0) ends a cut now.
// A TCP-level middlebox shows a worker's death this way: cut while the worker is down.
func (p *Proxy) Cut(d time.Duration) {
	select {
	case p.cuts <- d:
	case <-p.stop:
	}
}

// SetUpstream points the proxy at a worker's new endpoints (a worker restarted on other ports): the SUB
// disconnects from the old PUB and connects to the new one, and replay requests from now on go to the
// new ROUTER. Subscribers of the proxy keep their connection, as behind a relay or a load balancer.
func (p *Proxy) SetUpstream(events, replay string) {
	p.upReplay.Store(&replay)
	p.upstream.Store(&events)
}

// Stats returns the counters; safe from any goroutine.
func (p *Proxy) Stats() Stats {
	c := &p.c
	return Stats{
		Received: c.received.Load(), Forwarded: c.forwarded.Load(), Dropped: c.dropped.Load(),
		Duplicated: c.duplicated.Load(), Reordered: c.reordered.Load(), Delayed: c.delayed.Load(),
		CutDropped: c.cutDropped.Load(), Cuts: c.cuts.Load(), Replays: c.replays.Load(),
		ReplayMsgs: c.replayMsgs.Load(), ReplayLost: c.replayLost.Load(), SendErrors: c.sendErrors.Load(),
		RebindFails: c.rebindFails.Load(),
	}
}

// Close stops both goroutines, which close their sockets; it is idempotent.
func (p *Proxy) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.loops.Wait()
}

func (p *Proxy) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

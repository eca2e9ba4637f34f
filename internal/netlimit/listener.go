package netlimit

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// MaxConns bounds the connections open at once; 0 or less: no bound.
	MaxConns int
	// Evict, when set, runs when a new connection would pass MaxConns: it may close one of the open
	// connections (through the net.Conn this listener returned, so that it stops counting) to make room,
	// and reports whether it did; the new connection is then accepted. The HTTP edge closes the one idle
	// longest, as nginx reuses keep-alive connections when it runs out.
	Evict func() bool
	// Refuse, when set, runs on each connection past MaxConns (when Evict made no room) before it is
	// closed, to write a short answer; it must not block (a new socket's send buffer takes a short
	// answer at once).
	Refuse func(net.Conn)
	// WriteTimeout bounds each write of at most writeStep bytes on an accepted connection: a peer that
	// stops reading fails the write within it instead of holding the writer, and whatever the writer
	// holds, for as long as it keeps its connection open. 0: writes are left to the deadlines the
	// connection's user sets (set none of its own then: each write would replace theirs).
	WriteTimeout time.Duration
	// Stats receives the counts (nil: counts nobody reads). Several listeners may share one.
	Stats *ConnStats
}

// Listener is a listener that bounds the connections open at once, keeps accepting through errors that
// pass and, optionally, bounds how long a peer that stops reading can hold a write.
//
// Past the bound a new connection is handed to Refuse and closed, so the listener never holds more than
// the bound's descriptors. Accept errors other than the listener's closing (EMFILE while descriptors are
// held elsewhere, ENOBUFS, a connection reset before it was taken) are retried after a pause that
// doubles from 5 ms to a second, as net/http's server does, and counted: an accept loop that returns
// on them (fasthttp's Serve, a hand-written loop) stops serving for good at the first full descriptor
// table.
type Listener struct {
	net.Listener
	cfg ListenerConfig
	st  *ConnStats

	closeOnce sync.Once
	done      chan struct{}
}

// ConnStats are a Listener's counts, shared with its owner's metrics.
type ConnStats struct {
	open          atomic.Int64
	refused       atomic.Int64
	evicted       atomic.Int64
	acceptErrors  atomic.Int64
	writeTimeouts atomic.Int64
}

// Open is the number of connections accepted and not yet closed.
func (s *ConnStats) Open() int64 { return s.open.Load() }

// Refused is the number of connections refused because the bound was reached.
func (s *ConnStats) Refused() int64 { return s.refused.Load() }

// Evicted is the number of open connections Evict closed to make room for a new one.
func (s *ConnStats) Evicted() int64 { return s.evicted.Load() }

// AcceptErrors is the number of failed accepts (each retried after a pause).
func (s *ConnStats) AcceptErrors() int64 { return s.acceptErrors.Load() }

// WriteTimeouts is the number of writes that failed because the peer took no bytes of them within
// WriteTimeout.
func (s *ConnStats) WriteTimeouts() int64 { return s.writeTimeouts.Load() }

// Accept pauses after this long an accept error, doubling to acceptPauseMax.
const (
	acceptPauseMin = 5 * time.Millisecond
	acceptPauseMax = time.Second
)

// writeStep is the most bytes one deadline covers: a large write is made in steps of it, each with
// WriteTimeout of its own, so a peer reading slowly but steadily is not cut off, and one that stops is.
const writeStep = 1 << 20

// NewListener wraps ln as cfg says.
func NewListener(ln net.Listener, cfg ListenerConfig) *Listener {
	st := cfg.Stats
	if st == nil {
		st = new(ConnStats)
	}
	cfg.MaxConns = max(cfg.MaxConns, 0)
	return &Listener{Listener: ln, cfg: cfg, st: st, done: make(chan struct{})}
}

// Accept returns the next connection under the bound; it returns an error only once the listener is
// closed.
func (l *Listener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			l.st.acceptErrors.Add(1)
			pause = min(max(2*pause, acceptPauseMin), acceptPauseMax)
			t := time.NewTimer(pause)
			select {
			case <-l.done:
				t.Stop()
				return nil, net.ErrClosed
			case <-t.C:
			}
			continue
		}
		pause = 0
		if !l.admit() {
			l.st.refused.Add(1)
			if l.cfg.Refuse != nil {
				l.cfg.Refuse(c)
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, st: l.st, writeTimeout: l.cfg.WriteTimeout}, nil
	}
}

// admit counts a new connection under the bound, making room with Evict when the bound is reached.
func (l *Listener) admit() bool {
	bound := int64(l.cfg.MaxConns)
	if n := l.st.open.Add(1); bound == 0 || n <= bound {
		return true
	}
	l.st.open.Add(-1)
	if l.cfg.Evict == nil || !l.cfg.Evict() {
		return false
	}
	l.st.evicted.Add(1)
	if l.st.open.Add(1) <= bound {
		return true
	}
	l.st.open.Add(-1) // another listener sharing the counts took the room
	return false
}

// Close closes the listener and ends a pause between accept errors.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// conn is an accepted connection counted against the bound until it is closed.
type conn struct {
	net.Conn
	st           *ConnStats
	writeTimeout time.Duration
	closed       atomic.Bool
}

// Write writes p in steps of at most writeStep bytes, each under a deadline of writeTimeout from its
// start (when set).
func (c *conn) Write(p []byte) (int, error) {
	if c.writeTimeout <= 0 {
		return c.Conn.Write(p)
	}
	var n int
	for len(p) > 0 {
		step := p[:min(len(p), writeStep)]
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.writeTimeout)); err != nil {
			return n, err
		}
		k, err := c.Conn.Write(step)
		n += k
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.st.writeTimeouts.Add(1)
			}
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (c *conn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.st.open.Add(-1)
	}
	return c.Conn.Close()
}

// SyscallConn reaches the socket beneath (for code that watches it, e.g. frontend's client-gone watch).
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

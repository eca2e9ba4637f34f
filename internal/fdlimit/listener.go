package fdlimit

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Listener is a listener that bounds the connections open at once and keeps accepting through errors
// that pass.
//
// Past the bound a new connection is handed to the refuse function (which may write a short answer) and
// closed, so the listener never holds more than the bound's descriptors. Accept errors other than the
// listener's closing (EMFILE while descriptors are held elsewhere, ENOBUFS, a connection reset before it
// was taken) are retried after a pause that doubles from 5 ms to a second, as net/http's server does,
// and counted: an accept loop that returns on them (fasthttp's Serve, a hand-written loop) stops
// serving for good at the first full descriptor table.
type Listener struct {
	net.Listener
	max    int64 // open connections allowed; 0: no bound
	refuse func(net.Conn)
	st     *ConnStats

	closeOnce sync.Once
	done      chan struct{}
}

// ConnStats are a Listener's counts, shared with its owner's metrics (several listeners may share one).
type ConnStats struct {
	open         atomic.Int64
	refused      atomic.Int64
	acceptErrors atomic.Int64
}

// Open is the number of connections accepted and not yet closed.
func (s *ConnStats) Open() int64 { return s.open.Load() }

// Refused is the number of connections refused because the bound was reached.
func (s *ConnStats) Refused() int64 { return s.refused.Load() }

// AcceptErrors is the number of failed accepts (each retried after a pause).
func (s *ConnStats) AcceptErrors() int64 { return s.acceptErrors.Load() }

// Accept pauses after this long an accept error, doubling to acceptPauseMax.
const (
	acceptPauseMin = 5 * time.Millisecond
	acceptPauseMax = time.Second
)

// NewListener bounds ln to bound open connections (0 or less: no bound), counting into st (nil: counts
// nobody reads). refuse, when
// not nil, runs on each connection past the bound before it is closed; it must not block (a new
// socket's send buffer takes a short answer at once).
func NewListener(ln net.Listener, bound int, refuse func(net.Conn), st *ConnStats) *Listener {
	if st == nil {
		st = new(ConnStats)
	}
	return &Listener{Listener: ln, max: int64(max(bound, 0)), refuse: refuse, st: st, done: make(chan struct{})}
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
		if n := l.st.open.Add(1); l.max > 0 && n > l.max {
			l.st.open.Add(-1)
			l.st.refused.Add(1)
			if l.refuse != nil {
				l.refuse(c)
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, st: l.st}, nil
	}
}

// Close closes the listener and ends a pause between accept errors.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// conn is an accepted connection counted against the bound until it is closed.
type conn struct {
	net.Conn
	st     *ConnStats
	closed atomic.Bool
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

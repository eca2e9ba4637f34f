package frontend

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvroute/kvroute/internal/fdlimit"
)

// edgeListener is the HTTP edge's listener: it bounds the client connections open at once
// (ServerConfig.MaxConns) and keeps accepting through errors that pass.
//
// Without it, a flood of connections from many addresses (each under MaxConnsPerIP) filled the
// process's descriptor table, and then three things broke at once (`kvroute serve` at `ulimit -n 300`,
// 400 connections held for three seconds): fasthttp took accept's EMFILE for a permanent error and
// stopped serving for good (every later request hung, /health included, after the flood had gone);
// every health check and request dial to a worker failed, so the whole fleet left routing and its
// blocks the index; and libzmq, which aborts the process where it cannot open a descriptor, was one
// reconnect away.
//
// Past MaxConns a new connection is answered 503 (an OpenAI error, Retry-After: 1; over TLS it is only
// closed, since a handshake has not happened) and closed, so the edge never holds more than MaxConns
// descriptors for clients. Accept errors other than the listener's closing (EMFILE from descriptors
// held elsewhere, ENOBUFS, a connection reset before it was taken) are retried after a pause that
// doubles from 5 ms to a second, as net/http's server does, and counted.
type edgeListener struct {
	net.Listener
	max int64 // open connections allowed; 0: no bound
	tls bool  // refusals are closed without an answer
	st  *connStats

	closeOnce sync.Once
	done      chan struct{}
}

// connStats are the edge's connection counts, kept on the Server for its metrics.
type connStats struct {
	open         atomic.Int64
	refused      atomic.Int64
	acceptErrors atomic.Int64
}

// Accept pauses after this long an accept error, doubling to acceptPauseMax.
const (
	acceptPauseMin = 5 * time.Millisecond
	acceptPauseMax = time.Second
)

func newEdgeListener(ln net.Listener, max int, tls bool, st *connStats) *edgeListener {
	return &edgeListener{Listener: ln, max: int64(max), tls: tls, st: st, done: make(chan struct{})}
}

// Accept returns the next connection under the bound; it returns an error only once the listener is
// closed.
func (l *edgeListener) Accept() (net.Conn, error) {
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
			l.refuse(c)
			continue
		}
		return &edgeConn{Conn: c, st: l.st}, nil
	}
}

// Close closes the listener and ends a pause between accept errors.
func (l *edgeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// refusedAnswer is the answer to a connection past MaxConns.
var refusedAnswer = func() []byte {
	status, body := ErrorResponse(errorf(ErrUnavailable, "the server is at its limit of open connections; retry"))
	head := "HTTP/1.1 " + strconv.Itoa(status) + " Service Unavailable\r\nContent-Type: application/json\r\n" +
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	return append([]byte(head), body...)
}()

// refuse answers a connection past the bound and closes it. The answer fits a new socket's send buffer,
// so the write does not wait for the client; the deadline is for a peer that vanished.
func (l *edgeListener) refuse(c net.Conn) {
	if !l.tls {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(refusedAnswer)
	}
	_ = c.Close()
}

// edgeConn is an accepted connection counted against the bound until it is closed.
type edgeConn struct {
	net.Conn
	st     *connStats
	closed atomic.Bool
}

func (c *edgeConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.st.open.Add(-1)
	}
	return c.Conn.Close()
}

// SyscallConn reaches the socket beneath, for the client-gone watch (clientgone.go).
func (c *edgeConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// defaultMaxConns is MaxConns when unset: a quarter of the open-file limit (internal/fdlimit describes
// the shares), at least 64; 0 (no bound) when the limit cannot be read.
func defaultMaxConns() int {
	n := fdlimit.OpenFiles()
	if n == 0 {
		return 0
	}
	return max(n/4, 64)
}

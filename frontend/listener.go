package frontend

import (
	"net"
	"strconv"
	"time"

	"github.com/kvroute/kvroute/internal/netlimit"
)

// The HTTP edge listens through an netlimit.Listener: it bounds the client connections open at once
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
// closed, since no handshake has happened) and closed.
//
// And each write to a client must be taken within WriteTimeout (a MiB at a time). A client that sent a
// streaming request and stopped reading held its request forever: the relay blocked on the connection
// once the socket buffers were full (a few MB of SSE), so the request stayed booked on its worker,
// counted in flight, and its worker stream open, for as long as the client kept the connection (`kvroute
// serve`, a 60,000-token stream to a client that read 120 bytes and slept: still in flight minutes after
// the simulated worker had finished). fasthttp's own WriteTimeout is one deadline for a whole response,
// which a long stream would outlive.

// edgeListener wraps ln for the edge; tls says the connections will speak TLS.
func edgeListener(ln net.Listener, cfg ServerConfig, tls bool, st *netlimit.ConnStats) net.Listener {
	refuse := refuseConn
	if tls {
		refuse = nil
	}
	return netlimit.NewListener(ln, netlimit.ListenerConfig{MaxConns: cfg.MaxConns, Refuse: refuse, WriteTimeout: cfg.WriteTimeout, Stats: st})
}

// refusedAnswer is the answer to a connection past MaxConns.
var refusedAnswer = func() []byte {
	status, body := ErrorResponse(errorf(ErrUnavailable, "the server is at its limit of open connections; retry"))
	head := "HTTP/1.1 " + strconv.Itoa(status) + " Service Unavailable\r\nContent-Type: application/json\r\n" +
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	return append([]byte(head), body...)
}()

// refuseConn writes refusedAnswer; it fits a new socket's send buffer, so the write does not wait for the
// client (the deadline is for a peer that vanished).
func refuseConn(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(refusedAnswer)
}

// defaultMaxConns is MaxConns when unset: a quarter of the open-file limit (internal/netlimit describes
// the shares), at least 64; 0 (no bound) when the limit cannot be read.
func defaultMaxConns() int {
	n := netlimit.OpenFiles()
	if n == 0 {
		return 0
	}
	return max(n/4, 64)
}

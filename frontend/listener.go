package frontend

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/netlimit"
)

// The HTTP edge listens through a netlimit.Listener: it bounds the client connections open at once
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
// At MaxConns a new connection takes the place of the connection idle longest (idleConns, below); when
// every connection is in a request, it is answered 503 (an OpenAI error, Retry-After: 1; over TLS it is
// only closed, since no handshake has happened) and closed.
//
// And each write to a client must be taken within WriteTimeout (a MiB at a time). A client that sent a
// streaming request and stopped reading held its request forever: the relay blocked on the connection
// once the socket buffers were full (a few MB of SSE), so the request stayed booked on its worker,
// counted in flight, and its worker stream open, for as long as the client kept the connection (`kvroute
// serve`, a 60,000-token stream to a client that read 120 bytes and slept: still in flight minutes after
// the simulated worker had finished). fasthttp's own WriteTimeout is one deadline for a whole response,
// which a long stream would outlive.

// edgeListener wraps ln for the edge; tls says the connections will speak TLS; idle makes room at
// MaxConns.
func edgeListener(ln net.Listener, cfg ServerConfig, tls bool, st *netlimit.ConnStats, idle *idleConns) net.Listener {
	refuse := refuseConn
	if tls {
		refuse = nil
	}
	return netlimit.NewListener(ln, netlimit.ListenerConfig{MaxConns: cfg.MaxConns, Evict: idle.evict, Refuse: refuse,
		WriteTimeout: cfg.WriteTimeout, Stats: st})
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

// idleConns lists the edge's connections that are not in a request, idle longest first: new ones that
// have not finished a request's headers and kept-alive ones between requests (fasthttp's ConnState
// hook). A connection arriving at MaxConns takes the place of the one idle longest (evict) rather than
// being refused, as nginx closes keep-alive connections when it runs out of them: so connections that
// hold a place and send nothing (a flood of silent or dripping clients, each under the header and idle
// deadlines) cannot keep new clients out while they last, and a request in progress is never cut.
//
// The list is linked through one node per connection, made when it opens and kept until it closes, so
// that a request (active, then idle again) allocates nothing here.
type idleConns struct {
	mu         sync.Mutex
	head, tail *idleNode // head: idle longest
	n          int       // nodes in the list
	nodes      map[net.Conn]*idleNode
}

type idleNode struct {
	c          net.Conn
	prev, next *idleNode
	listed     bool
	// held: the connection's request holds a place among the server's requests in flight
	// (MaxConcurrent) until the connection is idle again or closes.
	held bool
}

// connState is the tracker's part of fasthttp's ConnState hook. It reports whether a request the
// connection held (hold) has ended: its response is written, or the connection is gone.
func (ic *idleConns) connState(c net.Conn, st fasthttp.ConnState) (released bool) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	nd := ic.nodes[c]
	if nd != nil && st != fasthttp.StateActive {
		released, nd.held = nd.held, false
	}
	switch st {
	case fasthttp.StateNew, fasthttp.StateIdle:
		if nd == nil {
			if ic.nodes == nil {
				ic.nodes = map[net.Conn]*idleNode{}
			}
			nd = &idleNode{c: c}
			ic.nodes[c] = nd
		}
		ic.unlink(nd)
		ic.push(nd)
	case fasthttp.StateActive:
		if nd != nil {
			ic.unlink(nd)
		}
	default: // closed, hijacked
		if nd != nil {
			ic.unlink(nd)
			delete(ic.nodes, c)
		}
	}
	return released
}

// hold marks c's request as holding a place in flight until c is idle again or closes; false when c is
// not tracked (the caller then lets the place go itself).
func (ic *idleConns) hold(c net.Conn) bool {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	nd := ic.nodes[c]
	if nd == nil || nd.held {
		return false
	}
	nd.held = true
	return true
}

// push appends nd at the tail (idle shortest).
func (ic *idleConns) push(nd *idleNode) {
	nd.prev, nd.next, nd.listed = ic.tail, nil, true
	if ic.tail != nil {
		ic.tail.next = nd
	} else {
		ic.head = nd
	}
	ic.tail = nd
	ic.n++
}

// unlink takes nd out of the list, if it is in it.
func (ic *idleConns) unlink(nd *idleNode) {
	if !nd.listed {
		return
	}
	if nd.prev != nil {
		nd.prev.next = nd.next
	} else {
		ic.head = nd.next
	}
	if nd.next != nil {
		nd.next.prev = nd.prev
	} else {
		ic.tail = nd.prev
	}
	nd.prev, nd.next, nd.listed = nil, nil, false
	ic.n--
}

// evict closes the connection idle longest; false when none is idle.
func (ic *idleConns) evict() bool {
	ic.mu.Lock()
	nd := ic.head
	if nd == nil {
		ic.mu.Unlock()
		return false
	}
	ic.unlink(nd)
	ic.mu.Unlock()
	_ = nd.c.Close() // fasthttp's reader fails and ends the connection; the listener's count drops now
	return true
}

// idle is the number of connections not in a request.
func (ic *idleConns) idle() int {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.n
}

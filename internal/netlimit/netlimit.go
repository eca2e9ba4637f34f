// Package netlimit bounds what peers can make the process hold: descriptors (the open-file limit and
// its shares, the errors of running out of it); through Listener, connections and the time a peer that
// stops reading can hold a write; and through Budget, the bytes the requests in flight hold at once
// (the picker's gathered bodies, the frontend's inline images).
//
// # The descriptor budget
//
// Every socket the process holds is a descriptor: libzmq's sockets and their connections (KV event
// streams), the HTTP edge's client connections, the connections to workers (requests, health checks,
// metrics scrapes) and the image fetches. When the table is full, each of them fails its next open with
// EMFILE, and libzmq aborts the process in places rather than failing. So the budget is split, each
// share a fraction of OpenFiles at start:
//
//   - ZMQ sockets: a third (workers/kvevents sets libzmq's socket limit), their connections about half as
//     many again;
//   - the HTTP edge's open client connections: a quarter (frontend.ServerConfig.MaxConns);
//   - the rest, at least a quarter: connections to workers, image fetches, files.
//
// A share is a cap on what the outside can make the process open, not a reservation; the parts that
// open descriptors on the router's own initiative (dials to workers) tell a full table from a fault of
// the peer with Exhausted, so that a flood of clients does not take the fleet out of routing.
//
// # Concurrency model
//
// OpenFiles and Exhausted are stateless; a Budget is one atomic counter. A Listener is used by one accept loop and its Close by any
// goroutine; its ConnStats are atomic; a connection it returns is as safe as the one it wraps, its
// Close idempotent.
package netlimit

import (
	"errors"
	"math"
	"syscall"
)

// OpenFiles returns the process's open-file limit (the soft RLIMIT_NOFILE, which Go raises to the hard
// limit at start), at most math.MaxInt32; 0 when it cannot be read.
func OpenFiles() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int(min(rl.Cur, math.MaxInt32))
}

// Exhausted reports an error of the process running out of descriptors or of the kernel memory a new
// socket needs (EMFILE, ENFILE, ENOBUFS, ENOMEM): a state of this host that any other open would meet
// too, not a fault of the peer being connected to or accepted from.
func Exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

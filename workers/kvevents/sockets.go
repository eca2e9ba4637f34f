package kvevents

import (
	"errors"
	"syscall"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvroute/kvroute/internal/netlimit"
)

// The process's ZMQ socket limit. libzmq allows 1,023 sockets per context unless told otherwise, and
// following a worker takes several: in connect mode its SUB socket, the two PAIR sockets of the connect
// monitor and the replay DEALER; an in-process simulated worker adds its PUB and ROUTER. Past some 250
// followed workers (170 simulated) every new socket failed with "too many open files" and those workers'
// streams never connected: `kvroute serve --workers 400` followed 72 of 400 (docs/benchmarks.md).
//
// The limit is set from the process's open-file limit (Go raises the soft limit to the hard one at
// start): a third of it (the ZMQ share of internal/netlimit's budget), so that the socket limit, where libzmq fails a new socket cleanly with EMFILE,
// comes before the descriptor limit, where libzmq aborts the process in places (an address resolution
// that cannot open a descriptor asserts). Each socket holds a descriptor and its connections about half
// a one more; the rest is left to HTTP clients and files. It is capped at maxSockets (libzmq allocates
// a slot table of that size with the first socket) and also lowers libzmq's default when the open-file
// limit is small. It can only be set before the context opens its first socket, hence at package
// initialisation.
func init() {
	if n := socketLimit(); n > 0 {
		_ = zmq.SetMaxSockets(n) // an error leaves libzmq's default
	}
}

// maxSockets caps the limit: four sockets per followed worker for 16,384 workers (768 KB of libzmq's
// slot table).
const maxSockets = 1 << 16

// socketLimit is the socket limit to set: a third of the open-file limit, at least 16 and at most
// maxSockets; 0 when the open-file limit cannot be read.
func socketLimit() int {
	n := netlimit.OpenFiles()
	if n == 0 {
		return 0
	}
	return max(min(n/3, maxSockets), 16)
}

// SocketLimit reports the process's ZMQ socket limit (for the operator: a fleet needs about four a
// worker it follows).
func SocketLimit() int {
	n, err := zmq.GetMaxSockets()
	if err != nil {
		return 0
	}
	return n
}

// OutOfSockets reports an error of a socket that could not be opened because the process reached its
// ZMQ socket limit or its open-file limit (EMFILE).
func OutOfSockets(err error) bool {
	return errors.Is(err, zmq.Errno(syscall.EMFILE)) || errors.Is(err, syscall.EMFILE)
}

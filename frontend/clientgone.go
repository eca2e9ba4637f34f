package frontend

import (
	"errors"
	"net"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/kvroute/kvroute/internal/routine"
)

// watchClient calls gone (from another goroutine) when the peer of conn closes the connection while a
// request is being prepared or answered, and returns stop, which ends the watch and must be called before
// the connection is read again. fasthttp reads nothing while a handler runs, so without a watch a client
// that hangs up mid-request leaves its image fetches, transfers and the worker's generation running to
// the end.
//
// The watch waits in Go's netpoller for the socket to become readable and peeks (MSG_PEEK) without
// consuming: zero bytes is the peer's FIN; bytes are a pipelined next request (the client is still there:
// the watch ends, as nothing can be learned until the request is read). Connections that expose no
// socket (TLS) are not watched.
// clientWatcher waits for a request's client to hang up; the stop function watchClient returns joins it.
var clientWatcher = routine.Named("frontend.client-watch")

func watchClient(conn net.Conn, gone func()) (stop func()) {
	sc, ok := socketOf(conn).(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	clientWatcher.Go(func() {
		defer close(done)
		var buf [1]byte
		closed := false
		err := rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				return false // nothing yet: wait for readability again
			}
			closed = n == 0 || err != nil // FIN, or a reset
			return true
		})
		if err == nil && closed {
			gone()
		}
	})
	return func() {
		_ = conn.SetReadDeadline(time.Unix(1, 0)) // wakes the waiting Read
		<-done
		_ = conn.SetReadDeadline(time.Time{}) // fasthttp sets its own before the next request
	}
}

// socketOf unwraps fasthttp's per-IP connection counter (MaxConnsPerIP), an unexported struct embedding
// the accepted net.Conn, to reach the socket beneath. Other connections are returned as they are.
func socketOf(c net.Conn) net.Conn {
	if _, ok := c.(syscall.Conn); ok {
		return c
	}
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return c
	}
	if f := v.Elem().FieldByName("Conn"); f.IsValid() && f.CanInterface() {
		if inner, ok := f.Interface().(net.Conn); ok && inner != nil {
			return inner
		}
	}
	return c
}

// watchDelay is how long a request runs before its connection is watched. A watch costs a goroutine, a
// netpoller registration and two deadline changes; requests that end sooner (most token-id and cached
// requests end in well under a millisecond) have nothing worth cancelling. Past it, a client that leaves
// cancels within the netpoller's wake-up.
const watchDelay = 2 * time.Millisecond

// clientWatch is watchClient started after watchDelay; it lives in the job (no allocation of its own).
type clientWatch struct {
	mu      sync.Mutex
	stopped bool
	stop    func() // the running watch's stop, once started
	timer   *time.Timer
}

// start arms the delayed watch of conn; end must be called before the connection is read again.
func (w *clientWatch) start(conn net.Conn, gone func()) {
	w.timer = time.AfterFunc(watchDelay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.stopped {
			w.stop = watchClient(conn, gone)
		}
	})
}

// end stops the watch, waiting for a running one to let go of the connection.
func (w *clientWatch) end() {
	if w.timer == nil || w.timer.Stop() {
		return // never started
	}
	w.mu.Lock()
	w.stopped = true
	stop := w.stop
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}

package kvevents

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvroute/kvroute/internal/routine"
)

// readWaiter parks a reader goroutine on Go's netpoller until its ZMQ socket may have a message, through
// the socket's ZMQ_FD (an eventfd libzmq signals when commands for the socket arrive).
//
// Why not zmq_poll: a subscriber spends most of its life waiting for the next batch, and zmq_poll waits
// in a cgo call, which holds an OS thread and, until sysmon retakes it (20 µs or more), a P. Under load a
// batch arrives every few hundred µs per worker, so every batch cost a P parked in a cgo call (one of two
// cores idle for tens of µs), a retake and a thread wake-up. On the netpoller a waiting subscriber is a
// parked goroutine like any connection reader.
//
// ZMQ_FD is edge-triggered: it says that something happened, not that a message is there. The protocol
// (zmq_getsockopt(3), ZMQ_FD) is to ask ZMQ_EVENTS — which processes the pending commands — before every
// wait, and to wait only while it reports no POLLIN; a signal arriving after that check wakes the wait.
//
// The socket's ZMQ_FD belongs to libzmq: the waiter polls a dup of it and closes only the dup.
type readWaiter struct {
	f  *os.File
	rc syscall.RawConn

	// A monitor socket is waited on by a helper goroutine (one goroutine cannot wait on two descriptors
	// of the netpoller): on a signal it sets monPending and interrupts the main wait by moving its
	// deadline into the past. The reader, the only user of both sockets, then reads the monitor.
	mon        *os.File
	monPending atomic.Bool
	monitor    routine.Group // the helper waiting on mon; close joins it
}

// monitorWait is a subscriber's helper waiting on its monitor socket's fd.
var monitorWait = routine.Named("kvevents.monitor-wait")

// errNotPollable reports a ZMQ_FD the netpoller would not take; the caller falls back to zmq_poll.
var errNotPollable = errors.New("kvevents: ZMQ_FD is not pollable")

func dupZMQFD(s *zmq.Socket) (*os.File, syscall.RawConn, error) {
	fd, err := s.GetFd()
	if err != nil {
		return nil, nil, err
	}
	nfd, err := syscall.Dup(fd)
	if err != nil {
		return nil, nil, err
	}
	syscall.CloseOnExec(nfd)
	if err := syscall.SetNonblock(nfd, true); err != nil {
		syscall.Close(nfd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(nfd), "zmq-fd")
	// A deadline is accepted only by a descriptor the netpoller took.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, nil, errNotPollable
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, rc, nil
}

// newReadWaiter returns a waiter for sub and, when mon is not nil, for mon as well.
func newReadWaiter(sub, mon *zmq.Socket) (*readWaiter, error) {
	f, rc, err := dupZMQFD(sub)
	if err != nil {
		return nil, err
	}
	w := &readWaiter{f: f, rc: rc}
	if mon == nil {
		return w, nil
	}
	mf, mrc, err := dupZMQFD(mon)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.mon = mf
	w.monitor.Go(monitorWait, func() {
		// One RawRead for the helper's whole life: its callback runs once at the start and after every
		// signal, and a signal that comes while it runs is kept for the next wait (a new RawRead would
		// forget it).
		_ = mrc.Read(func(uintptr) bool {
			w.monPending.Store(true)
			_ = f.SetReadDeadline(time.Unix(1, 0)) // wake the reader
			return false
		})
	})
	return w, nil
}

// wait returns once readable reports true (ready; checked first, then after every signal), or after d,
// or when the monitor signalled (monitor: the caller reads the monitor, then waits again).
func (w *readWaiter) wait(readable func() bool, d time.Duration) (ready, monitor bool, err error) {
	if err := w.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return false, false, err
	}
	// After the deadline is set: a monitor signal either is seen here or moves the new deadline.
	if w.monPending.Swap(false) {
		return false, true, nil
	}
	err = w.rc.Read(func(uintptr) bool { return readable() })
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false, w.monPending.Swap(false), nil
	}
	return err == nil, false, err
}

// close stops the helper and closes the dups (not the sockets).
func (w *readWaiter) close() {
	if w.mon != nil {
		w.mon.Close()
		w.monitor.Wait()
	}
	w.f.Close()
}

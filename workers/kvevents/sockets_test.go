package kvevents

import (
	"strings"
	"syscall"
	"testing"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvroute/kvroute/internal/testutil"
)

// TestSocketLimit: the package sets libzmq's socket limit (1,023 by default) to a third of the
// process's open-file limit, so a router can hold more sockets than the default: 1,500 here, the
// sockets of some 375 followed workers; OutOfSockets tells the error of a socket past the limit.
func TestSocketLimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 3*1600 {
		t.Skipf("open-file limit %d: too low to hold the sockets", rl.Cur)
	}
	if got, want := SocketLimit(), int(min(rl.Cur/3, maxSockets)); got != want {
		t.Fatalf("socket limit %d, want %d", got, want)
	}
	var socks []*zmq.Socket
	defer func() {
		for _, s := range socks {
			s.Close()
		}
	}()
	if OutOfSockets(nil) || OutOfSockets(zmq.Errno(syscall.EAGAIN)) || !OutOfSockets(zmq.Errno(syscall.EMFILE)) {
		t.Fatal("OutOfSockets does not tell EMFILE")
	}
	for i := range 1500 {
		s, err := zmq.NewSocket(zmq.PAIR)
		if err != nil {
			t.Fatalf("socket %d: %v", i, err)
		}
		socks = append(socks, s)
	}
}

// TestSubscriberErr: a session that cannot connect (here a transport libzmq does not know) leaves its
// error for Err, which the worker audit adds to "never connected"; before any session, Err is nil.
func TestSubscriberErr(t *testing.T) {
	cfg := fastConfig("nope://127.0.0.1:1", "")
	s, err := NewSubscriber(cfg, Handler{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil {
		t.Fatalf("Err before running: %v", s.Err())
	}
	runUntilCleanup(t, s.Run)
	testutil.Within(t, testTimeout, "the session's error", func() bool { return s.Err() != nil })
	if !strings.Contains(s.Err().Error(), "protocol") {
		t.Fatalf("Err: %v", s.Err())
	}
}

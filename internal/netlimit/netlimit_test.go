package netlimit

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestOpenFiles reads the same limit getrlimit reports.
func TestOpenFiles(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	if got := OpenFiles(); uint64(got) != min(rl.Cur, 1<<31-1) || got <= 0 {
		t.Fatalf("OpenFiles() = %d, getrlimit %d", got, rl.Cur)
	}
}

// TestExhausted tells the host's shortages from a peer's faults, in the shapes the net and os packages
// return them.
func TestExhausted(t *testing.T) {
	wrap := func(e syscall.Errno) error {
		return fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", e)})
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if !Exhausted(wrap(e)) {
			t.Errorf("%v: not exhausted", e)
		}
	}
	for _, e := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ETIMEDOUT, syscall.EHOSTUNREACH} {
		if Exhausted(wrap(e)) {
			t.Errorf("%v: exhausted", e)
		}
	}
	if Exhausted(nil) {
		t.Error("nil: exhausted")
	}
	if _, err := os.Open("/nonexistent/kvroute"); Exhausted(err) {
		t.Errorf("%v: exhausted", err)
	}
}

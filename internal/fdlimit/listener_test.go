package fdlimit

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
)

// accept runs ln.Accept in the background; the channel gets its result.
func accept(ln net.Listener) chan error {
	ch := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			_, err = c.Write([]byte("x"))
		}
		ch <- err
	}()
	return ch
}

// TestListenerBound: connections past the bound are refused (the refuse function answers, then the
// connection is closed) and counted; a closed connection frees its place once, however often it is closed.
func TestListenerBound(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var st ConnStats
	ln := NewListener(inner, 1, func(c net.Conn) { _, _ = c.Write([]byte("no")) }, &st)
	defer ln.Close()
	first, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	second, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	res := accept(ln) // refuses the second, then waits for a third
	buf := make([]byte, 8)
	_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _ := second.Read(buf); string(buf[:n]) != "no" {
		t.Fatalf("refused connection read %q, want the refusal", buf[:n])
	}
	if st.Open() != 1 || st.Refused() != 1 {
		t.Fatalf("open %d refused %d, want 1 1", st.Open(), st.Refused())
	}
	_ = c.Close()
	_ = c.Close()
	if st.Open() != 0 {
		t.Fatalf("open %d after closing twice, want 0", st.Open())
	}
	third, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if err := <-res; err != nil {
		t.Fatalf("third connection: %v", err)
	}
	_ = ln.Close()
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// TestListenerThroughEMFILE: with the descriptor table full, accept fails with EMFILE; the Listener
// counts it, pauses and tries again, and hands over the waiting connection once descriptors are free.
// The open-file limit belongs to the process, so the test lowers it in a child process.
func TestListenerThroughEMFILE(t *testing.T) {
	if os.Getenv("KVROUTE_FDLIMIT_CHILD") != "1" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestListenerThroughEMFILE$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "KVROUTE_FDLIMIT_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: 64}); err != nil {
		t.Skip(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var st ConnStats
	ln := NewListener(inner, 0, nil, &st)
	defer ln.Close()
	res := accept(ln)
	var hog []*os.File
	defer func() {
		for _, f := range hog {
			_ = f.Close()
		}
	}()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !Exhausted(err) {
				t.Fatal(err)
			}
			break
		}
		hog = append(hog, f)
	}
	// One descriptor for the client's end; the server's end waits in the backlog.
	_ = hog[len(hog)-1].Close()
	hog = hog[:len(hog)-1]
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.Eventually(t, "accept to fail with the table full", func() bool { return st.AcceptErrors() > 0 })
	for _, f := range hog {
		_ = f.Close()
	}
	hog = nil
	if err := <-res; err != nil {
		t.Fatalf("after the table emptied: %v", err)
	}
}

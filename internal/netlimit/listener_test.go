package netlimit

import (
	"errors"
	"io"
	"net"
	"os"
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
	ln := NewListener(inner, ListenerConfig{MaxConns: 1, Refuse: func(c net.Conn) { _, _ = c.Write([]byte("no")) }, Stats: &st})
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
	if testutil.Alone(t) {
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
	ln := NewListener(inner, ListenerConfig{Stats: &st})
	defer ln.Close()
	res := accept(ln)
	hog := testutil.FillDescriptors(t)
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

// pair returns both ends of a connection accepted through a Listener with cfg.
func pair(t *testing.T, cfg ListenerConfig) (server, client net.Conn) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := NewListener(inner, cfg)
	t.Cleanup(func() { _ = ln.Close() })
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	return server, client
}

// TestWriteTimeout: a peer that stops reading fails a write (larger than the socket buffers) with a
// deadline error once it has taken nothing for WriteTimeout, and the failure is counted; a peer that
// reads gets a write of several steps whole.
func TestWriteTimeout(t *testing.T) {
	var st ConnStats
	server, _ := pair(t, ListenerConfig{WriteTimeout: 100 * time.Millisecond, Stats: &st})
	n, err := server.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= 64<<20 {
		t.Fatalf("write to a peer that does not read: %d bytes, %v; want a deadline error", n, err)
	}
	if st.WriteTimeouts() != 1 {
		t.Fatalf("%d write timeouts counted, want 1", st.WriteTimeouts())
	}

	server, client := pair(t, ListenerConfig{WriteTimeout: 10 * time.Second})
	got := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, client)
		got <- n
	}()
	const size = 3*writeStep + 17
	if n, err := server.Write(make([]byte, size)); n != size || err != nil {
		t.Fatalf("write to a reading peer: %d of %d bytes, %v", n, size, err)
	}
	_ = server.Close()
	if n := <-got; n != size {
		t.Fatalf("peer read %d of %d bytes", n, size)
	}
}

// TestListenerEvict: at the bound, a connection Evict closes makes room for the new one (counted as
// evicted, not refused); when Evict makes none, the new one is refused.
func TestListenerEvict(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var st ConnStats
	var victim net.Conn
	ln := NewListener(inner, ListenerConfig{MaxConns: 1, Stats: &st, Evict: func() bool {
		if victim == nil {
			return false
		}
		_ = victim.Close()
		victim = nil
		return true
	}})
	defer ln.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	dial()
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	victim = first
	dial()
	second, err := ln.Accept() // evicts the first
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if st.Open() != 1 || st.Evicted() != 1 || st.Refused() != 0 {
		t.Fatalf("after an eviction: open %d evicted %d refused %d, want 1 1 0", st.Open(), st.Evicted(), st.Refused())
	}
	refused := dial()
	res := accept(ln) // nothing to evict: the third is refused, then the call waits for a fourth
	_ = refused.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := refused.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("third connection: %v, want it closed", err)
	}
	if st.Refused() != 1 {
		t.Fatalf("refused %d, want 1", st.Refused())
	}
	_ = ln.Close()
	<-res
}

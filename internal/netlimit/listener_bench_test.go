package netlimit

import (
	"io"
	"net"
	"testing"
)

// BenchmarkRefusal: connections past the bound, each dialed, refused with a short answer and closed on
// the accept goroutine, and read to its end by the client: what a flood past --max-conns costs the
// accept loop, one connection at a time.
func BenchmarkRefusal(b *testing.B) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	answer := make([]byte, 200) // about the edge's JSON 503
	ln := NewListener(inner, ListenerConfig{MaxConns: 1, Refuse: func(c net.Conn) { _, _ = c.Write(answer) }})
	defer ln.Close()
	held, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer held.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept() // takes the held connection, then refuses every other until closed
		if err == nil {
			accepted <- c
			_, _ = ln.Accept()
		}
	}()
	c := <-accepted
	defer c.Close()
	b.ResetTimer()
	for range b.N {
		d, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := io.Copy(io.Discard, d); n != int64(len(answer)) {
			b.Fatalf("read %d bytes of the refusal", n)
		}
		_ = d.Close()
	}
}

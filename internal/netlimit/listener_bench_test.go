package netlimit

import (
	"io"
	"net"
	"testing"
	"time"
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

// BenchmarkConnWrite: one 200-byte write (about an SSE chunk) on an accepted loopback connection whose
// peer drains it, without a write deadline and with WriteTimeout (a deadline set before each write): what
// the edge's --write-timeout costs a streamed chunk.
func BenchmarkConnWrite(b *testing.B) {
	for _, wt := range []struct {
		name string
		d    time.Duration
	}{{"deadline=none", 0}, {"deadline=60s", time.Minute}} {
		b.Run(wt.name, func(b *testing.B) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ln := NewListener(inner, ListenerConfig{WriteTimeout: wt.d})
			defer ln.Close()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			go func() { _, _ = io.Copy(io.Discard, client) }()
			server, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer server.Close()
			chunk := make([]byte, 200)
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			for range b.N {
				if _, err := server.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

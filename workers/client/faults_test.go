package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
)

// hijack returns a server whose handler gets the raw connection after the request was read, for
// failures net/http would not produce on its own.
func hijackServer(t testing.TB, fn func(conn net.Conn, rw *bufio.ReadWriter)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		fn(conn, rw)
	}))
	t.Cleanup(srv.Close)
	return srv
}

var body = []byte(`{"model":"m","prompt":"x","stream":true}`)

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := newEndpoint(t, "http://"+addr, Config{})
	var resp Response
	err = e.Do(context.Background(), &Request{Path: "/v1/completions", Body: body}, &resp)
	if !errors.Is(err, ErrConnect) || !Retryable(err) {
		t.Fatalf("Do: %v", err)
	}
	_, err = e.Stream(context.Background(), &Request{Path: "/v1/completions", Body: body}, nil)
	if !errors.Is(err, ErrConnect) || !Retryable(err) {
		t.Fatalf("Stream: %v", err)
	}
	if err := e.Health(context.Background()); !errors.Is(err, ErrConnect) {
		t.Fatalf("Health: %v", err)
	}
}

func TestStatusErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.URL.Path, "bad") {
			w.WriteHeader(400)
			w.Write([]byte(`{"error":{"message":"prompt too long","code":400}}`))
			return
		}
		w.WriteHeader(500)
		w.Write([]byte(`{"error":{"message":"engine dead","code":500}}`))
	}))
	defer srv.Close()
	e := newEndpoint(t, srv.URL, Config{})
	ctx := context.Background()
	var resp Response
	err := e.Do(ctx, &Request{Path: "/v1/completions", Body: body}, &resp)
	var ce *Error
	if !errors.As(err, &ce) || ce.Class != ErrStatus || !ce.Retryable || ce.Status != 500 || !strings.Contains(string(ce.Body), "engine dead") || resp.Status != 500 {
		t.Fatalf("Do 500: %v", err)
	}
	if err := e.Do(ctx, &Request{Path: "/bad", Body: body}, &resp); err != nil || resp.Status != 400 {
		t.Fatalf("Do 400: %v %d", err, resp.Status)
	}
	_, err = e.Stream(ctx, &Request{Path: "/v1/completions", Body: body}, nil)
	if !errors.As(err, &ce) || ce.Status != 500 || !ce.Retryable || !strings.Contains(string(ce.Body), "engine dead") {
		t.Fatalf("Stream 500: %v", err)
	}
	_, err = e.Stream(ctx, &Request{Path: "/bad", Body: body}, nil)
	if !errors.As(err, &ce) || ce.Status != 400 || ce.Retryable || !strings.Contains(string(ce.Body), "prompt too long") {
		t.Fatalf("Stream 400: %v", err)
	}
	if err := e.Health(ctx); !errors.Is(err, ErrStatus) {
		t.Fatalf("Health: %v", err)
	}
}

// TestStreamDiesMidway: events already delivered make the failure non-retryable.
func TestStreamDiesMidway(t *testing.T) {
	srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, ev := range []string{"data: {\"choices\":[{\"text\":\"\"}]}\n\n", "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"} {
			rw.WriteString(strings.ToLower(itoaHex(len(ev))) + "\r\n" + ev + "\r\n")
		}
		rw.WriteString("10\r\ndata: {\"cho") // half a chunk, then the worker dies
		rw.Flush()
	})
	e := newEndpoint(t, srv.URL, Config{})
	first := 0
	s, err := e.Stream(context.Background(), &Request{Path: "/v1/completions", Body: body}, func() { first++ })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.FirstToken != (i == 1) {
			t.Fatalf("event %d first token %v", i, ev.FirstToken)
		}
	}
	_, err = s.Next()
	if !errors.Is(err, ErrBroken) || Retryable(err) || first != 1 {
		t.Fatalf("after midway death: %v (first %d)", err, first)
	}
	if _, err2 := s.Next(); err2 != err {
		t.Fatalf("Next after failure: %v", err2)
	}
}

func itoaHex(n int) string {
	const digits = "0123456789abcdef"
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 16 {
		b = append([]byte{digits[n%16]}, b...)
	}
	return string(b)
}

// TestDiesBeforeAnyByte: the worker takes the request and closes without answering: retryable.
func TestDiesBeforeAnyByte(t *testing.T) {
	srv := hijackServer(t, func(net.Conn, *bufio.ReadWriter) {})
	e := newEndpoint(t, srv.URL, Config{})
	var resp Response
	err := e.Do(context.Background(), &Request{Path: "/v1/completions", Body: body}, &resp)
	if !errors.Is(err, ErrNoResponse) || !Retryable(err) {
		t.Fatalf("Do: %v", err)
	}
	_, err = e.Stream(context.Background(), &Request{Path: "/v1/completions", Body: body}, nil)
	if !errors.Is(err, ErrNoResponse) || !Retryable(err) {
		t.Fatalf("Stream: %v", err)
	}
}

// TestSlowFirstByteCancel: canceling while the worker has sent nothing closes the connection, and the
// worker sees the disconnect.
func TestSlowFirstByteCancel(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // net/http cancels the request context when the client's connection closes
		close(gone)
	}))
	defer srv.Close()
	e := newEndpoint(t, srv.URL, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.Stream(ctx, &Request{Path: "/v1/completions", Body: body}, nil)
		errc <- err
	}()
	testutil.Eventually(t, "the request to reach the worker", func() bool { return e.Stats().Active == 1 })
	cancel()
	err := <-errc
	if !errors.Is(err, ErrCanceled) || Retryable(err) {
		t.Fatalf("Stream: %v", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not see the disconnect")
	}
}

func TestTimeouts(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/stall-stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte("data: {\"choices\":[{\"text\":\"a\"}]}\n\n"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	e := newEndpoint(t, srv.URL, Config{ResponseTimeout: 50 * time.Millisecond, StreamIdleTimeout: 50 * time.Millisecond})
	var resp Response
	err := e.Do(context.Background(), &Request{Path: "/slow", Body: body}, &resp)
	if !errors.Is(err, ErrTimeout) || !Retryable(err) {
		t.Fatalf("header timeout: %v", err)
	}
	s, err := e.Stream(context.Background(), &Request{Path: "/stall-stream", Body: body}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.Next(); err != nil || !ev.FirstToken {
		t.Fatalf("first event: %v %+v", err, ev)
	}
	if _, err := s.Next(); !errors.Is(err, ErrTimeout) || Retryable(err) {
		t.Fatalf("idle timeout after an event: %v", err)
	}
}

// TestStalePooledConnection: the worker closes a keep-alive connection while it sits in the pool; the
// next request is re-sent once on a fresh connection instead of failing.
func TestStalePooledConnection(t *testing.T) {
	srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		rw.Flush()
		// Close without "Connection: close": the client pools a dead connection.
	})
	e := newEndpoint(t, srv.URL, Config{})
	var resp Response
	for i := range 3 {
		testutil.Eventually(t, "the pooled connection", func() bool { return e.Stats().Active == 0 })
		if err := e.Do(context.Background(), &Request{Path: "/v1/completions", Body: body}, &resp); err != nil || resp.Status != 200 {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if st := e.Stats(); st.Retries < 1 || st.Dials < 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMaxConnsWaitsForContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	e := newEndpoint(t, srv.URL, Config{MaxConns: 1})
	done := make(chan error, 1)
	go func() {
		var resp Response
		done <- e.Do(context.Background(), &Request{Path: "/a", Body: body}, &resp)
	}()
	testutil.Eventually(t, "the first request to hold the connection", func() bool { return e.Stats().Active == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var resp Response
	if err := e.Do(ctx, &Request{Path: "/b", Body: body}, &resp); !errors.Is(err, ErrCanceled) {
		t.Fatalf("second request: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := e.Do(context.Background(), &Request{Path: "/c", Body: body}, &resp); err != nil {
		t.Fatal(err)
	}
}

func TestClosedEndpoint(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	e := newEndpoint(t, srv.URL, Config{})
	if err := e.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if err := e.Health(context.Background()); !errors.Is(err, ErrClosed) || Retryable(err) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestNewEndpointRejects(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:80", "https://w:1", "http://"} {
		if _, err := NewEndpoint(u, Config{}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%q: %v", u, err)
		}
	}
	if _, err := NewEndpoint("http://w:1", Config{MaxConns: -1}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("MaxConns -1: %v", err)
	}
}

// TestLastEventWithoutBlankLine: a body that ends right after "data: [DONE]\n" still yields [DONE]
// (framed with its blank line) and a clean EOF.
func TestLastEventWithoutBlankLine(t *testing.T) {
	srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		b := "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n"
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + itoa(len(b)) + "\r\n\r\n" + b)
		rw.Flush()
	})
	e := newEndpoint(t, srv.URL, Config{})
	s, err := e.Stream(context.Background(), &Request{Path: "/v1/completions", Body: body}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.Next(); err != nil || !ev.FirstToken {
		t.Fatalf("first: %v", err)
	}
	ev, err := s.Next()
	if err != nil || !ev.Done || string(ev.Raw) != "data: [DONE]\n\n" {
		t.Fatalf("done event: %v %q", err, ev.Raw)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// TestIdleConnectionsReaped: connections opened for a burst are closed once idle for IdleConnTimeout even
// while the endpoint stays busy (its LIFO pool keeps reusing the top connection and would otherwise never
// reach them); the server sees them go.
func TestIdleConnectionsReaped(t *testing.T) {
	var open atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		w.Write([]byte("{}"))
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	e := newEndpoint(t, srv.URL, Config{IdleConnTimeout: 150 * time.Millisecond})
	var wg sync.WaitGroup
	for range 8 { // a burst: eight connections at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp Response
			if err := e.Do(context.Background(), &Request{Path: "/slow", Body: body}, &resp); err != nil {
				t.Error(err)
			}
		}()
	}
	testutil.Eventually(t, "the burst in flight", func() bool { return e.Stats().Active == 8 })
	close(release)
	wg.Wait()
	if st := e.Stats(); st.Idle != 8 {
		t.Fatalf("after the burst: %+v", st)
	}
	// Steady sequential load for a while: one connection serves it, the other seven expire.
	deadline := time.Now().Add(600 * time.Millisecond)
	for time.Now().Before(deadline) {
		var resp Response
		if err := e.Do(context.Background(), &Request{Path: "/fast", Body: body}, &resp); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.Stats(); st.Idle > 1 {
		t.Fatalf("stale connections kept in the pool: %+v", st)
	}
	testutil.Eventually(t, "the server to see the stale connections closed", func() bool { return open.Load() <= 1 })
}

// TestAbortPending: AbortPending ends the calls that have had no response byte, as a no-response error
// (retryable on another worker) that says why, and leaves the ones whose answer has begun. The aborted
// call is not tried again on a fresh connection to the same worker.
func TestAbortPending(t *testing.T) {
	release := make(chan struct{})
	var silent, answering atomic.Int32
	srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		if answering.Add(1) == 2 { // the second connection: the answer begins, then stalls
			_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			_ = rw.Flush()
		} else {
			silent.Add(1)
		}
		<-release
	})
	t.Cleanup(func() { close(release) })
	e := newEndpoint(t, srv.URL, Config{})
	done := make(chan error, 1)
	go func() {
		var resp Response
		done <- e.Do(context.Background(), &Request{Path: "/v1/completions", Body: body}, &resp)
	}()
	testutil.Eventually(t, "the silent call at the worker", func() bool { return silent.Load() == 1 })
	stream := make(chan *Stream, 1)
	go func() {
		s, err := e.Stream(context.Background(), &Request{Path: "/v1/completions", Body: body}, nil)
		if err != nil {
			t.Error(err)
		}
		stream <- s
	}()
	s := <-stream
	if s == nil {
		t.Fatal("no stream")
	}
	defer s.Close()
	if n := e.AbortPending(); n != 1 {
		t.Fatalf("AbortPending ended %d calls, want the silent one", n)
	}
	err := <-done
	if !errors.Is(err, ErrNoResponse) || !Retryable(err) || !strings.Contains(err.Error(), "health checks") {
		t.Fatalf("the aborted call: %v", err)
	}
	if silent.Load() != 1 {
		t.Fatalf("the aborted call was tried again on the same worker (%d silent calls)", silent.Load())
	}
	if n := e.AbortPending(); n != 0 {
		t.Fatalf("a second AbortPending ended %d calls, want none (the stream has begun)", n)
	}
}

package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
)

// FuzzStream serves arbitrary bytes as a worker's SSE body and reads it with Stream.Next to its end:
// reading always ends, with io.EOF or a classified *Error; events are framed from the body's own bytes
// (each adds at most the one newline Next supplies to an unterminated last event); an event's data is
// no longer than the event; [DONE] alone is the done event; usage is never negative.
func FuzzStream(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n",
		": keep-alive\n\nevent: x\nid: 1\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
		"data: {\"error\":{\"message\":\"boom\"}}\n\n",
		"data: a\ndata: b\n\n\n\ndata:[DONE]\n\n",
		"data: {\"choices\":[{\"text\":\"",
		"data: {\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":-5}}\n\n",
	} {
		f.Add([]byte(s))
	}
	var body []byte
	srv := hijackServer(f, func(conn net.Conn, rw *bufio.ReadWriter) {
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
		rw.Write(body)
		rw.Flush()
	})
	e, err := NewEndpoint(srv.URL, Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	f.Fuzz(func(t *testing.T, b []byte) {
		body = b
		s, err := e.Stream(context.Background(), &Request{Path: "/v1/completions", Body: []byte(`{}`)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		total, events := 0, 0
		for {
			ev, err := s.Next()
			if err != nil {
				var ce *Error
				if err != io.EOF && !errors.As(err, &ce) {
					t.Fatalf("unclassified error %v", err)
				}
				break
			}
			events++
			if events > len(b)+1 {
				t.Fatalf("%d events from %d bytes", events, len(b))
			}
			total += len(ev.Raw)
			if total > len(b)+events || !bytes.Contains(append(append([]byte(nil), b...), '\n'), bytes.TrimSuffix(ev.Raw, []byte("\n"))) {
				t.Fatalf("event %q is not framed from the body %q", ev.Raw, b)
			}
			if len(ev.Data) > len(ev.Raw) {
				t.Fatalf("data %d bytes from an event of %d", len(ev.Data), len(ev.Raw))
			}
			if ev.Done != bytes.Equal(ev.Data, []byte("[DONE]")) {
				t.Fatalf("done %v for data %q", ev.Done, ev.Data)
			}
		}
		if u, ok := s.Usage(); ok && (u.PromptTokens < 0 || u.CompletionTokens < 0 || u.CachedTokens() < 0) {
			t.Fatalf("usage %+v", u)
		}
	})
}

// A worker that never ends its line breaks the stream at MaxEventBytes instead of growing the event
// until its idle timeout (which each byte renews).
func TestStreamEventBound(t *testing.T) {
	srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		rw.WriteString("6\r\ndata: \r\n")
		for range (MaxEventBytes >> 16) + 4 {
			rw.WriteString(strconv.FormatInt(int64(len(chunk)), 16) + "\r\n")
			rw.Write(chunk)
			if _, err := rw.WriteString("\r\n"); err != nil {
				return
			}
		}
		rw.Flush()
	})
	e := newEndpoint(t, srv.URL, Config{})
	s, err := e.Stream(context.Background(), &Request{Path: "/v1/completions", Body: body}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Next(); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("an endless line: %v", err)
	}
}

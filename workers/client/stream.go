package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/workers/oaiwire"
)

// Event is one server-sent event of a streamed response, valid until the next call to Next.
type Event struct {
	// Raw is the event as received, terminating blank line included: forward it unchanged.
	Raw []byte
	// Data is the payload of its data: lines (joined by "\n"), e.g. a chunk's JSON or "[DONE]".
	Data []byte
	// Done marks "data: [DONE]".
	Done bool
	// FirstToken marks the first event that carries generated output: the worker finished prefill.
	FirstToken bool
	// HasUsage marks an event with a usage object (the last chunk with stream_options.include_usage).
	HasUsage bool
	// Error marks an error event ({"error": ...}) sent mid-stream by the worker.
	Error bool
}

// Stream is a streamed response being read. Not safe for concurrent use: one goroutine (the request's)
// calls Next until it returns an error, then Close. Close may also be called early to abandon it.
type Stream struct {
	e    *Endpoint
	c    *conn
	stop func() bool
	ctx  context.Context
	resp *fasthttp.Response
	br   *bufio.Reader

	status      int
	contentType []byte
	onFirst     func()

	raw, data []byte
	events    int
	first     bool
	usage     oaiwire.Usage
	hasUsage  bool
	done      bool
	err       error
	eof       bool
	atEOF     bool // the body ended; the last event is being delivered
}

// Stream sends req (a body with "stream": true) and returns once the worker's response headers arrive.
// onFirstToken, if not nil, is called once, from Next, when the first event carrying output arrives
// (the router's MarkPrefillCompleted). A non-2xx status is returned as an error after reading the
// (short) error body: 5xx as a retryable ErrStatus, 4xx as a non-retryable ErrStatus carrying the
// worker's body to forward.
func (e *Endpoint) Stream(ctx context.Context, req *Request, onFirstToken func()) (*Stream, error) {
	r := fasthttp.AcquireResponse()
	c, stop, err := e.exchange(ctx, req, r, true)
	if err != nil {
		fasthttp.ReleaseResponse(r)
		return nil, err
	}
	s := &Stream{e: e, c: c, stop: stop, ctx: ctx, resp: r, status: r.StatusCode(), onFirst: onFirstToken}
	s.contentType = append(s.contentType, r.Header.ContentType()...)
	if s.status < 200 || s.status >= 300 {
		body, rerr := s.readAll(64 << 10)
		s.Close()
		if rerr != nil {
			return nil, rerr
		}
		return nil, &Error{Class: ErrStatus, Retryable: s.status >= 500, Status: s.status, Body: body, Addr: e.addr}
	}
	s.br = bufio.NewReaderSize(r.BodyStream(), 4<<10)
	return s, nil
}

// readAll reads up to limit bytes of an error body.
func (s *Stream) readAll(limit int64) ([]byte, error) {
	s.c.nc.SetReadDeadline(time.Now().Add(s.e.cfg.StreamIdleTimeout))
	body, err := io.ReadAll(io.LimitReader(s.resp.BodyStream(), limit))
	if err != nil {
		return nil, classify(s.ctx, s.e.addr, err, true, isTimeout(err))
	}
	return body, nil
}

// Status is the worker's HTTP status (2xx for a Stream returned without error).
func (s *Stream) Status() int { return s.status }

// ContentType is the worker's Content-Type (text/event-stream).
func (s *Stream) ContentType() []byte { return s.contentType }

// Usage returns the usage of the stream's usage event, once seen.
func (s *Stream) Usage() (oaiwire.Usage, bool) { return s.usage, s.hasUsage }

// SawFirstToken reports whether an event with output arrived.
func (s *Stream) SawFirstToken() bool { return s.first }

// Next returns the next event. At the end of the body it returns io.EOF (after [DONE], normally). A
// failure returns an *Error: ErrBroken (not retryable) once any event was returned, ErrCanceled when
// ctx ended (the connection is closed, so the worker aborts), ErrTimeout after StreamIdleTimeout
// without a byte.
func (s *Stream) Next() (Event, error) {
	if s.err != nil {
		return Event{}, s.err
	}
	if s.atEOF {
		s.eof, s.err = true, io.EOF
		return Event{}, io.EOF
	}
	s.raw, s.data = s.raw[:0], s.data[:0]
	dataLines := 0
	for {
		s.c.nc.SetReadDeadline(time.Now().Add(s.e.cfg.StreamIdleTimeout))
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && len(s.raw) == 0 {
				s.eof = true
				s.err = io.EOF
				return Event{}, io.EOF
			}
			if err == io.EOF && dataLines > 0 {
				// The body ended after a complete event without its blank line: deliver it, framed, and
				// end the stream on the next call.
				s.raw = append(s.raw, '\n')
				s.atEOF = true
				break
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			s.err = classify(s.ctx, s.e.addr, err, s.events > 0, isTimeout(err))
			return Event{}, s.err
		}
		if len(s.raw)+len(line) > MaxEventBytes {
			err = errEventTooLarge
		}
		if err != nil {
			s.err = classify(s.ctx, s.e.addr, err, s.events > 0, false)
			return Event{}, s.err
		}
		start := len(s.raw)
		s.raw = append(s.raw, line...)
		content := trimEOL(s.raw[start:])
		if len(content) == 0 {
			if dataLines == 0 && len(s.raw) == len(line) {
				// A blank line between events (or a keep-alive): nothing to deliver.
				s.raw = s.raw[:0]
				continue
			}
			break
		}
		if v, ok := bytes.CutPrefix(content, []byte("data:")); ok {
			v, _ = bytes.CutPrefix(v, []byte(" "))
			if dataLines > 0 {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, v...)
			dataLines++
		}
		// Comments (":"), event:, id:, retry: lines are passed through in Raw and otherwise ignored.
	}
	s.events++
	ev := Event{Raw: s.raw, Data: s.data}
	s.inspect(&ev)
	return ev, nil
}

// MaxEventBytes bounds one SSE event of a worker's stream (its lines gathered until the blank line):
// far above any chunk an engine writes (a token's text, ids and top logprobs), and what keeps a worker
// that never ends a line or an event from growing the frontend's memory until its idle timeout, which
// every byte renews. A larger event breaks the stream.
const MaxEventBytes = 8 << 20

// errEventTooLarge is the cause of a stream broken by an event past MaxEventBytes.
var errEventTooLarge = fmt.Errorf("client: SSE event larger than %d bytes", MaxEventBytes)

// readLine returns the next line, "\n" included; a line longer than the buffer is gathered, up to
// MaxEventBytes.
func (s *Stream) readLine() ([]byte, error) {
	line, err := s.br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		if err != nil && len(line) > 0 && err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return line, err
	}
	long := append([]byte(nil), line...)
	for {
		line, err = s.br.ReadSlice('\n')
		long = append(long, line...)
		if len(long) > MaxEventBytes {
			return nil, errEventTooLarge
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			return long, err
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// chunkProbe reads what the router needs from a chunk: whether it carries output, and its usage.
type chunkProbe struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		TokenIDs     []uint32 `json:"token_ids"`
		FinishReason *string  `json:"finish_reason"`
	} `json:"choices"`
}

var (
	doneData  = []byte("[DONE]")
	usageKey  = []byte(`"usage"`)
	errorKey  = []byte(`"error"`)
	nullBytes = []byte("null")
)

// inspect marks the event's meaning and fires the first-token callback.
func (s *Stream) inspect(ev *Event) {
	d := ev.Data
	if bytes.Equal(d, doneData) {
		ev.Done, s.done = true, true
		return
	}
	if len(d) == 0 || d[0] != '{' {
		return
	}
	if bytes.Contains(d, errorKey) && oaiwire.TopLevelField(d, "error") != nil {
		ev.Error = true
		return
	}
	if !s.first {
		var p chunkProbe
		if json.Unmarshal(d, &p) == nil {
			for _, c := range p.Choices {
				if (c.Text != nil && *c.Text != "") || len(c.TokenIDs) > 0 || c.FinishReason != nil ||
					(c.Delta != nil && ((c.Delta.Content != nil && *c.Delta.Content != "") ||
						(c.Delta.ReasoningContent != nil && *c.Delta.ReasoningContent != "") ||
						(len(c.Delta.ToolCalls) > 0 && !bytes.Equal(c.Delta.ToolCalls, nullBytes)))) {
					s.markFirst(ev)
					break
				}
			}
		}
	}
	if bytes.Contains(d, usageKey) {
		if u, ok, err := oaiwire.ParseUsage(d); err == nil && ok {
			ev.HasUsage = true
			s.usage, s.hasUsage = u, true
			if !s.first && u.CompletionTokens > 0 {
				s.markFirst(ev)
			}
		}
	}
}

func (s *Stream) markFirst(ev *Event) {
	s.first, ev.FirstToken = true, true
	if s.onFirst != nil {
		s.onFirst()
	}
}

// drainTimeout bounds the wait for the end of the body after [DONE]: a worker ends the chunked body
// right after it, so the terminator is usually already buffered.
const drainTimeout = 20 * time.Millisecond

// drainEnd reads the end of the body after [DONE] (the caller stopped there), so the connection can go
// back to the pool instead of being closed: otherwise every streamed request would cost a new
// connection.
func (s *Stream) drainEnd() {
	s.c.nc.SetReadDeadline(time.Now().Add(drainTimeout))
	var buf [512]byte
	for total := 0; total < 64<<10; {
		n, err := s.br.Read(buf[:])
		total += n
		if err == io.EOF {
			s.eof = true
			return
		}
		if err != nil {
			return
		}
	}
}

// Close ends the stream and releases its connection: back to the pool when the body was read to its
// end, closed otherwise (which aborts the request on the worker). Safe to call more than once.
func (s *Stream) Close() error {
	if s.c == nil {
		return nil
	}
	if s.done && !s.eof && s.err == nil {
		s.drainEnd()
	}
	keep := s.stop() && s.eof && !s.resp.ConnectionClose()
	if !keep {
		// Close before releasing the body stream, so a drain never blocks on an unfinished stream.
		s.c.nc.Close()
	}
	s.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(s.resp)
	s.e.release(s.c, keep)
	s.c, s.resp = nil, nil
	return nil
}

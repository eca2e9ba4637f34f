package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/internal/netlimit"
)

// Endpoint is the pooled HTTP/1.1 connection set to one worker. Safe for concurrent use; one per
// worker, created when the worker is registered and closed when it is removed.
//
// Why not fasthttp.HostClient: it cannot be canceled by a context. A client disconnect must close the
// upstream connection at once, since that is how vLLM learns to abort the request and free its KV
// blocks; HostClient only offers deadlines. Endpoint keeps fasthttp's request writer and response
// parser (zero-allocation, chunked streaming) and owns the connections itself, so cancellation is a
// Close on the one connection the request uses.
type Endpoint struct {
	cfg  Config
	addr string // host:port
	host string // Host header

	sem chan struct{} // one token per request in flight (MaxConns); idle connections hold none

	mu     sync.Mutex
	idle   []*conn // LIFO: the most recently used connection is the warmest
	closed bool
	// busy are the connections carrying a request now (AbortPending).
	busy map[*conn]struct{}

	stats struct {
		dials, reuses, retries atomic.Uint64
		active                 atomic.Int64
	}
}

// conn is one pooled connection. read counts response bytes received on it, to tell a failure before
// any byte (retryable) from one after.
type conn struct {
	nc       net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	read     int64
	lastUsed time.Time
	reused   bool
	// responded is set at the first response byte (read is the request goroutine's own); aborted when
	// AbortPending closed the connection.
	responded, aborted atomic.Bool
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.nc.Read(p)
	c.read += int64(n)
	if n > 0 && !c.responded.Load() {
		c.responded.Store(true)
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) { return c.nc.Write(p) }

// NewEndpoint returns the endpoint of the worker at baseURL (http://host:port; a path is ignored, https
// is not supported: workers sit on the private network).
func NewEndpoint(baseURL string, cfg Config) (*Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: worker url %q: want http://host:port", ErrBadConfig, baseURL)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%w: worker url %q: only http is supported", ErrBadConfig, baseURL)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &Endpoint{cfg: cfg, addr: addr, host: u.Host, sem: make(chan struct{}, cfg.MaxConns)}, nil
}

// Addr is the worker's host:port.
func (e *Endpoint) Addr() string { return e.addr }

// APIKey is the key the endpoint sends (Config.APIKey).
func (e *Endpoint) APIKey() string { return e.cfg.APIKey }

// Stats are connection counters, for metrics and tests.
type Stats struct {
	// Dials counts new connections; Reuses counts requests sent on a pooled one.
	Dials, Reuses uint64
	// Retries counts requests re-sent on a fresh connection after a pooled one turned out closed.
	Retries uint64
	// Active is the number of open connections carrying a request; Idle the pooled ones.
	Active int64
	Idle   int
}

// Stats returns the connection counters.
func (e *Endpoint) Stats() Stats {
	e.mu.Lock()
	idle := len(e.idle)
	e.mu.Unlock()
	return Stats{Dials: e.stats.dials.Load(), Reuses: e.stats.reuses.Load(), Retries: e.stats.retries.Load(), Active: e.stats.active.Load(), Idle: idle}
}

// Close closes the idle connections and fails later calls with ErrClosed. Requests in flight finish
// on their connections, which are then closed instead of pooled.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	idle := e.idle
	e.idle, e.closed = nil, true
	e.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
	return nil
}

// acquire returns a connection: a pooled one (fresh=false) or a new one, waiting for a free slot.
func (e *Endpoint) acquire(ctx context.Context, fresh bool) (*conn, error) {
	select {
	case e.sem <- struct{}{}:
	default:
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, &Error{Class: ErrCanceled, Addr: e.addr, Err: context.Cause(ctx)}
		}
	}
	now := time.Now()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		<-e.sem
		return nil, &Error{Class: ErrClosed, Addr: e.addr}
	}
	for !fresh && len(e.idle) > 0 {
		c := e.idle[len(e.idle)-1]
		e.idle = e.idle[:len(e.idle)-1]
		if now.Sub(c.lastUsed) < e.cfg.IdleConnTimeout {
			e.markBusyLocked(c)
			e.mu.Unlock()
			c.reused = true
			e.stats.reuses.Add(1)
			e.stats.active.Add(1)
			return c, nil
		}
		c.nc.Close() // stale: the worker may have closed it already
	}
	e.mu.Unlock()
	d := net.Dialer{Timeout: e.cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", e.addr)
	if err != nil {
		<-e.sem
		if ctx.Err() != nil {
			return nil, &Error{Class: ErrCanceled, Addr: e.addr, Err: context.Cause(ctx)}
		}
		if netlimit.Exhausted(err) || errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, &Error{Class: ErrLocal, Addr: e.addr, Err: err}
		}
		return nil, &Error{Class: ErrConnect, Retryable: true, Addr: e.addr, Err: err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	e.stats.dials.Add(1)
	e.stats.active.Add(1)
	c := &conn{nc: nc}
	c.br = bufio.NewReaderSize(c, e.cfg.ReadBufferSize)
	c.bw = bufio.NewWriterSize(c, 4<<10)
	e.mu.Lock()
	e.markBusyLocked(c)
	e.mu.Unlock()
	return c, nil
}

// markBusyLocked records c as carrying a request; e.mu is held.
func (e *Endpoint) markBusyLocked(c *conn) {
	if e.busy == nil {
		e.busy = make(map[*conn]struct{})
	}
	c.responded.Store(false)
	e.busy[c] = struct{}{}
}

// AbortPending closes the connections whose request has had no response byte yet and returns how many:
// their calls fail as no response (retryable, so the request moves to another worker) rather than wait
// for an answer that will not come. For a worker that stopped answering its health checks (frozen, or
// cut off): a non-streamed request otherwise waits for ResponseTimeout. Requests whose answer has begun
// are left to finish or to their idle timeout.
func (e *Endpoint) AbortPending() int {
	e.mu.Lock()
	var pending []*conn
	for c := range e.busy {
		if !c.responded.Load() {
			c.aborted.Store(true)
			pending = append(pending, c)
		}
	}
	e.mu.Unlock()
	for _, c := range pending {
		c.nc.Close()
	}
	return len(pending)
}

// release returns c to the pool when keep is true, else closes it.
func (e *Endpoint) release(c *conn, keep bool) {
	e.stats.active.Add(-1)
	keep = keep && !c.aborted.Load()
	var now time.Time
	if keep {
		now = time.Now()
		c.lastUsed = now
		c.reused = false
	}
	e.mu.Lock()
	delete(e.busy, c)
	if keep && !e.closed && len(e.idle) < e.cfg.MaxIdleConns {
		e.idle = append(e.idle, c)
		stale := e.reapLocked(now)
		e.mu.Unlock()
		for _, s := range stale {
			s.nc.Close()
		}
		<-e.sem
		return
	}
	e.mu.Unlock()
	c.nc.Close()
	<-e.sem
}

// reapLocked takes the idle connections unused for IdleConnTimeout out of the pool and returns them for
// the caller to close outside the lock. The pool is LIFO, so they are at its bottom; under steady load the
// top is always reused and, without this, connections opened for a past peak would stay open for good.
func (e *Endpoint) reapLocked(now time.Time) []*conn {
	n := 0
	for n < len(e.idle) && now.Sub(e.idle[n].lastUsed) >= e.cfg.IdleConnTimeout {
		n++
	}
	if n == 0 {
		return nil
	}
	stale := append([]*conn(nil), e.idle[:n]...)
	rest := copy(e.idle, e.idle[n:])
	clear(e.idle[rest:])
	e.idle = e.idle[:rest]
	return stale
}

// Header is one extra request header (X-Request-Id, X-data-parallel-rank, ...).
type Header struct {
	Key, Value string
}

// Request is one call to a worker: the endpoint path and the body to send unchanged.
type Request struct {
	// Path is the worker path, e.g. "/v1/chat/completions".
	Path string
	// Body is sent as is (the client's original bytes); nil sends a GET.
	Body []byte
	// Headers are added to the request.
	Headers []Header
}

// exchange sends req on a connection and reads the response headers (and the body unless stream).
// It retries once on a fresh connection when a pooled one fails before any response byte: the worker
// closed it while idle, and a stale keep-alive connection is not the worker's failure. On success the
// caller owns c and must release it; stop undoes the cancellation hook.
func (e *Endpoint) exchange(ctx context.Context, req *Request, resp *fasthttp.Response, stream bool) (c *conn, stop func() bool, err error) {
	for attempt := 0; ; attempt++ {
		c, err = e.acquire(ctx, attempt > 0)
		if err != nil {
			return nil, nil, err
		}
		// Closing the connection is what interrupts a blocked read or write, and what tells the worker to
		// abort.
		if ctx.Done() == nil {
			stop = neverCanceled
		} else {
			nc := c.nc // captured by value: capturing c itself would move it to the heap on every call
			stop = context.AfterFunc(ctx, func() { nc.Close() })
		}
		err = e.roundTrip(c, req, resp, stream)
		if err == nil {
			return c, stop, nil
		}
		stop()
		received := c.read > 0
		reused := c.reused
		aborted := c.aborted.Load()
		e.release(c, false)
		timeout := isTimeout(err)
		if aborted {
			err = errAborted // not a stale keep-alive connection: no second try on this worker
		} else if ctx.Err() == nil && reused && !received && !timeout && attempt == 0 {
			e.stats.retries.Add(1)
			continue
		}
		return nil, nil, classify(ctx, e.addr, err, received, timeout)
	}
}

func neverCanceled() bool { return true }

// isTimeout reports a read or write deadline (fasthttp reports it as its own ErrTimeout).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) || (errors.As(err, &ne) && ne.Timeout())
}

func (e *Endpoint) roundTrip(c *conn, req *Request, resp *fasthttp.Response, stream bool) error {
	// Counted from here: a write that fails on a reused connection has received nothing of this
	// response (the bytes read so far were the previous response's), so it stays retryable.
	c.read = 0
	now := time.Now()
	c.nc.SetWriteDeadline(now.Add(e.cfg.WriteTimeout))
	if err := e.writeRequest(c.bw, req, stream); err != nil {
		return err
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	c.nc.SetReadDeadline(now.Add(e.cfg.ResponseTimeout))
	resp.StreamBody = stream
	return resp.ReadLimitBody(c.br, e.cfg.MaxResponseBodySize)
}

// writeRequest writes req as HTTP/1.1 (the bytes fasthttp.Request.Write produces for it, without its
// per-request URI parse and header table): POST with the body when there is one, else GET. Header
// keys and values have CR and LF replaced by spaces, as fasthttp does, so a client-chosen value (the
// request id) cannot inject a header.
func (e *Endpoint) writeRequest(w *bufio.Writer, req *Request, stream bool) error {
	if req.Body == nil {
		w.WriteString("GET ")
	} else {
		w.WriteString("POST ")
	}
	writePath(w, req.Path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(e.host)
	if req.Body != nil {
		w.WriteString("\r\nContent-Type: application/json\r\nContent-Length: ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(len(req.Body)), 10))
	}
	w.WriteString("\r\n")
	if e.cfg.APIKey != "" {
		w.WriteString("Authorization: Bearer ")
		writeHeaderText(w, e.cfg.APIKey)
		w.WriteString("\r\n")
	}
	for _, h := range req.Headers {
		writeHeaderText(w, h.Key)
		w.WriteString(": ")
		writeHeaderText(w, h.Value)
		w.WriteString("\r\n")
	}
	if stream {
		w.WriteString("Accept: text/event-stream\r\n")
	}
	w.WriteString("\r\n")
	_, err := w.Write(req.Body)
	return err
}

// writePath writes the request target, percent-encoding spaces and control bytes (the paths are the
// code's own, so this only keeps the request line well formed).
func writePath(w *bufio.Writer, p string) {
	const hex = "0123456789ABCDEF"
	start := 0
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f {
			w.WriteString(p[start:i])
			w.WriteByte('%')
			w.WriteByte(hex[c>>4])
			w.WriteByte(hex[c&15])
			start = i + 1
		}
	}
	w.WriteString(p[start:])
}

// writeHeaderText writes a header key or value with CR and LF replaced by spaces.
func writeHeaderText(w *bufio.Writer, s string) {
	for {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			w.WriteString(s)
			return
		}
		w.WriteString(s[:i])
		w.WriteByte(' ')
		s = s[i+1:]
	}
}

var contentTypeJSON = []byte("application/json")

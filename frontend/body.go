package frontend

import (
	"errors"
	"io"
	"net"

	"github.com/valyala/fasthttp"
)

// The server streams request bodies (fasthttp StreamRequestBody): fasthttp reads at most the first
// 8 KiB before the handler runs, and readBody reads the rest in place of fasthttp's own body read, which
// allocated the whole declared Content-Length up front (a client declaring 32 MiB and sending one byte
// a second held 32 MiB until its deadline). Here a body's buffer grows with the bytes that actually
// arrived, and every byte of buffer is charged to one process-wide budget first.

// bodyChunk is the first buffer of a streamed body and the smallest growth step.
const bodyChunk = 16 << 10

// readBody reads a streamed request body into ctx (SetBodyRaw, so handlers read it with PostBody as
// before) and returns how many budget bytes it holds; the caller gives them back when the request
// ends. On error the connection is marked to close: the rest of the body is never read.
func (s *Server) readBody(ctx *fasthttp.RequestCtx) (held int, err error) {
	stream := ctx.RequestBodyStream()
	if stream == nil {
		return 0, nil
	}
	cl := ctx.Request.Header.ContentLength() // -1: chunked; -2: no body
	if cl > s.cfg.MaxBodyBytes {
		ctx.SetConnectionClose()
		return 0, errorf(ErrTooLarge, "request body larger than %d bytes", s.cfg.MaxBodyBytes)
	}
	if cl == 0 || cl == -2 {
		ctx.Request.SetBodyRaw(nil)
		return 0, nil
	}
	limit := s.cfg.MaxBodyBytes + 1 // a chunked body may not pass MaxBodyBytes
	if cl > 0 {
		limit = cl
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if cl > 0 && len(buf) == cl {
				break
			}
			if len(buf) > s.cfg.MaxBodyBytes {
				ctx.SetConnectionClose()
				return held, errorf(ErrTooLarge, "request body larger than %d bytes", s.cfg.MaxBodyBytes)
			}
			n := min(max(2*cap(buf), bodyChunk), limit)
			if !s.budget.TryTake(int64(n - cap(buf))) {
				ctx.SetConnectionClose()
				s.bodyBudgetRefused.Add(1)
				return held, errorf(ErrUnavailable, "the server is reading too many request bodies; retry")
			}
			held += n - cap(buf)
			nb := make([]byte, len(buf), n)
			copy(nb, buf)
			buf = nb
		}
		n, rerr := stream.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			ctx.SetConnectionClose()
			var ne net.Error
			if errors.As(rerr, &ne) && ne.Timeout() {
				return held, errorf(ErrRequestTimeout, "request body not received within %s", s.cfg.ReadTimeout)
			}
			return held, errorf(ErrBadRequest, "cannot read the request body: %v", rerr)
		}
	}
	if cl > 0 && len(buf) < cl {
		ctx.SetConnectionClose()
		return held, errorf(ErrBadRequest, "request body ended after %d of %d bytes", len(buf), cl)
	}
	ctx.Request.SetBodyRaw(buf)
	return held, nil
}

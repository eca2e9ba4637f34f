package client

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/workers/oaiwire"
)

// Response is a worker's complete answer to a non-streaming call. Reuse one across calls to avoid
// allocations: Do overwrites it and reuses Body's capacity.
type Response struct {
	Status      int
	ContentType []byte
	Body        []byte
	// Usage is the body's usage object when HasUsage (2xx JSON responses of the generate endpoints).
	Usage    oaiwire.Usage
	HasUsage bool
}

// Do sends req and reads the whole response into resp. A 4xx is a normal response (the request's
// fault; forward it). A 5xx fills resp and returns a retryable ErrStatus error. Errors wrap the classes
// of errors.go; on ErrCanceled the connection was closed, which aborts the request on the worker.
func (e *Endpoint) Do(ctx context.Context, req *Request, resp *Response) error {
	r := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(r)
	c, stop, err := e.exchange(ctx, req, r, false)
	if err != nil {
		return err
	}
	keep := stop() && !r.ConnectionClose()
	e.release(c, keep)
	resp.Status = r.StatusCode()
	resp.ContentType = append(resp.ContentType[:0], r.Header.ContentType()...)
	resp.Body = append(resp.Body[:0], r.Body()...)
	resp.Usage, resp.HasUsage = oaiwire.Usage{}, false
	if resp.Status >= 500 {
		return &Error{Class: ErrStatus, Retryable: true, Status: resp.Status, Body: resp.Body, Addr: e.addr}
	}
	if resp.Status < 300 && len(resp.Body) > 0 && resp.Body[0] == '{' {
		// A malformed usage is the worker's problem, not the request's: report none.
		if u, ok, err := oaiwire.ParseUsage(resp.Body); err == nil {
			resp.Usage, resp.HasUsage = u, ok
		}
	}
	return nil
}

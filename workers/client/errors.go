package client

import (
	"context"
	"errors"
	"fmt"
)

// Error classes. Every error a call returns wraps exactly one of them; Retryable says whether the
// request may go to another worker.
var (
	// ErrConnect: the worker did not accept a connection (refused, unreachable, dial timeout).
	// Retryable: the worker never saw the request.
	ErrConnect = errors.New("client: connect failed")
	// ErrNoResponse: the connection failed after the request was sent and before any response byte
	// (worker crash, reset). Retryable: nothing reached the client.
	ErrNoResponse = errors.New("client: no response")
	// ErrStatus: the worker answered 5xx. Retryable: the body has not been forwarded. (4xx responses are
	// the request's fault and come back as a normal response.)
	ErrStatus = errors.New("client: worker error status")
	// ErrBroken: the response failed after bytes of it were received (a stream that died midway, a
	// truncated body). Not retryable: the client may already hold part of the answer.
	ErrBroken = errors.New("client: response broken")
	// ErrTimeout: a configured timeout expired (response headers, stream idle). Retryable only before
	// any response byte.
	ErrTimeout = errors.New("client: timeout")
	// ErrCanceled: the caller's context ended (client disconnect); the connection was closed so the
	// worker aborts the request. Never retryable.
	ErrCanceled = errors.New("client: canceled")
	// ErrClosed: the endpoint was closed (worker removed).
	ErrClosed = errors.New("client: endpoint closed")
	// ErrLocal: a connection could not be opened because this host ran out of what a socket needs:
	// descriptors or socket memory (internal/netlimit.Exhausted), or ephemeral ports (EADDRNOTAVAIL).
	// The worker was never reached and is not at fault: health checks and passive health leave it in
	// routing. Not retryable: a dial to another worker meets the same table.
	ErrLocal = errors.New("client: router out of sockets")
	// errAborted is the cause of a call AbortPending ended before any response byte (a no-response
	// error, retryable on another worker).
	errAborted = errors.New("aborted before any response byte: the worker stopped answering its health checks")
)

// Error is a failed call: its class, whether it may be retried on another worker, the worker's status
// and body for ErrStatus, and the cause.
type Error struct {
	Class     error
	Retryable bool
	// Status and Body are the worker's answer for ErrStatus.
	Status int
	Body   []byte
	Addr   string
	Err    error
}

func (e *Error) Error() string {
	msg := e.Class.Error() + " (" + e.Addr + ")"
	if e.Status != 0 {
		msg += fmt.Sprintf(": status %d", e.Status)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the class and the cause, so errors.Is matches both (context.Canceled included).
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Class}
	}
	return []error{e.Class, e.Err}
}

// Retryable reports whether err allows sending the same request to another worker: the failure happened
// before any response byte and not because the caller gave up.
func Retryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

// classify builds the error of a failed exchange. received says whether any response byte arrived.
func classify(ctx context.Context, addr string, err error, received bool, timeout bool) *Error {
	switch {
	case ctx.Err() != nil:
		return &Error{Class: ErrCanceled, Addr: addr, Err: context.Cause(ctx)}
	case timeout:
		return &Error{Class: ErrTimeout, Retryable: !received, Addr: addr, Err: err}
	case received:
		return &Error{Class: ErrBroken, Addr: addr, Err: err}
	}
	return &Error{Class: ErrNoResponse, Retryable: true, Addr: addr, Err: err}
}

package openai

import (
	"errors"
	"fmt"
)

// Error classes of a request. They live here, not in frontend, so that this package can classify its
// own errors without importing its caller; frontend/errors.go uses these same values, so errors.Is
// works across both packages and the status mapping stays at the HTTP edge.
var (
	// ErrBadRequest: malformed JSON, a wrong type, a missing field or a value out of range (400).
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound: the model is not served here (404).
	ErrNotFound = errors.New("not found")
	// ErrTooLarge: the body, a message list or a prompt exceeds a configured limit (413).
	ErrTooLarge = errors.New("request too large")
	// ErrUnprocessable: a well-formed request this frontend does not serve (n > 1, batched prompts,
	// prompt embeddings, beam search) (422).
	ErrUnprocessable = errors.New("unprocessable request")
	// ErrUnavailable: no worker can take the request now (503).
	ErrUnavailable = errors.New("service unavailable")
)

// Error is a request error: a class for the status, the offending parameter (OpenAI's "param", a JSON
// path like "messages[2].content[0].type"), and a message for the client.
type Error struct {
	Class error
	Param string
	Msg   string
}

// Error returns the client-facing message, prefixed with the parameter when there is one.
func (e *Error) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

// Unwrap returns the class, so errors.Is(err, ErrBadRequest) holds.
func (e *Error) Unwrap() error { return e.Class }

// errorf returns an *Error of class about param.
func errorf(class error, param, format string, args ...any) *Error {
	return &Error{Class: class, Param: param, Msg: fmt.Sprintf(format, args...)}
}

// ParamOf returns the parameter an error is about, or "" (for OpenAI's error.param).
func ParamOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Param
	}
	return ""
}

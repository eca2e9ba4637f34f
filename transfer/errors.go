package transfer

import "errors"

// Error classes of the package; callers test them with errors.Is. The wrapped cause says what failed.
var (
	// ErrConfig: an invalid configuration or flag value.
	ErrConfig = errors.New("transfer: bad config")
	// ErrDisabled: Prepare was called on a sender whose mode is off.
	ErrDisabled = errors.New("transfer: disabled")
	// ErrDecode: the image could not be fetched, decoded or preprocessed.
	ErrDecode = errors.New("transfer: image preprocessing failed")
	// ErrExhausted: every buffer of the transfer agent is in use; the request falls back to the URL.
	ErrExhausted = errors.New("transfer: buffer pool exhausted")
	// ErrUnavailable: the segment or the agent cannot be reached (other node, already released, agent down).
	ErrUnavailable = errors.New("transfer: item unavailable")
	// ErrRefused: the agent refused the pull (unknown buffer, wrong or already used token).
	ErrRefused = errors.New("transfer: pull refused")
	// ErrCorrupt: the bytes read do not match the descriptor (header, shape or checksum).
	ErrCorrupt = errors.New("transfer: corrupt item")
	// ErrBadDescriptor: the descriptor is malformed (unknown kind, bad segment name, missing field).
	ErrBadDescriptor = errors.New("transfer: bad descriptor")
	// ErrClosed: the sender or agent was closed.
	ErrClosed = errors.New("transfer: closed")
)

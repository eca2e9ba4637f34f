package mocker

import (
	"sync"
	"time"
)

// Stream is the caller's side of one submitted request: the rank loop appends tokens and the caller
// reads them. The loop never blocks on a Stream: it appends under the mutex and pokes Notify.
type Stream struct {
	mu       sync.Mutex
	tokens   []uint32
	done     bool
	err      error
	cached   int
	prompt   int
	start    time.Time
	firstAt  time.Time
	doneAt   time.Time
	notify   chan struct{}
	rankIdx  int
	reqID    string
	finished chan struct{}
	blockIDs []int32 // a RemoteDecode request's prompt blocks, set with its last token
}

func newStream(id string, prompt int, start time.Time) *Stream {
	return &Stream{reqID: id, prompt: prompt, start: start, notify: make(chan struct{}, 1), finished: make(chan struct{})}
}

// Notify is poked (never blocking, capacity 1) whenever new tokens or the end arrive.
func (s *Stream) Notify() <-chan struct{} { return s.notify }

// Finished is closed when the request is done or failed.
func (s *Stream) Finished() <-chan struct{} { return s.finished }

// StreamState is a snapshot of a Stream.
type StreamState struct {
	// Tokens are all tokens generated so far (a copy beyond the caller's offset, see Read).
	Tokens       []uint32
	Done         bool
	Err          error
	PromptTokens int
	CachedTokens int
	// Start, FirstToken and End are the runtime clock's times of submission, first token and completion.
	Start, FirstToken, End time.Time
	// BlockIDs are a RemoteDecode request's full prompt blocks (remote_block_ids), once done.
	BlockIDs []int32
}

// Read appends the tokens after index from to dst and reports the state.
func (s *Stream) Read(from int, dst []uint32) StreamState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from < len(s.tokens) {
		dst = append(dst, s.tokens[from:]...)
	}
	return StreamState{Tokens: dst, Done: s.done, Err: s.err, PromptTokens: s.prompt, CachedTokens: s.cached, Start: s.start, FirstToken: s.firstAt, End: s.doneAt, BlockIDs: s.blockIDs}
}

func (s *Stream) deliver(p *Progress, at time.Time) {
	s.mu.Lock()
	s.tokens = append(s.tokens, p.Token)
	s.cached = p.CachedTokens
	if p.First {
		s.firstAt = at
	}
	done := p.Done && !s.done
	if done {
		s.done, s.doneAt, s.blockIDs = true, at, p.BlockIDs
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if done {
		close(s.finished)
	}
}

func (s *Stream) fail(err error, at time.Time) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done, s.err, s.doneAt = true, err, at
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	close(s.finished)
}

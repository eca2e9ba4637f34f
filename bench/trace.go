package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"time"
)

// ErrBadTrace classes every trace parsing error; the cause names the line.
var ErrBadTrace = errors.New("bench: bad trace")

// TraceBlockSize is the number of tokens one Mooncake hash_id stands for (--trace-block-size default).
const TraceBlockSize = 512

// Request is one line of a Mooncake trace.
type Request struct {
	// Timestamp is the arrival time in milliseconds from the start of the trace.
	Timestamp int64 `json:"timestamp"`
	// InputLength and OutputLength are in tokens.
	InputLength  int `json:"input_length"`
	OutputLength int `json:"output_length"`
	// HashIDs holds one prefix-chained id per trace block (the last may be partial).
	HashIDs []uint64 `json:"hash_ids"`
}

// Trace is a parsed trace in file order (timestamps non-decreasing after Load).
type Trace struct {
	Requests []Request
}

// LoadTrace reads a Mooncake JSONL file.
func LoadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadTrace(f)
}

// ReadTrace parses Mooncake JSONL: one object per line, blank lines skipped. A line without input_length
// gets len(hash_ids) × 512 tokens. Requests are stably sorted by timestamp.
func ReadTrace(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	t := &Trace{}
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var req Request
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadTrace, line, err)
		}
		if req.Timestamp < 0 || req.InputLength < 0 || req.OutputLength < 0 {
			return nil, fmt.Errorf("%w: line %d: negative field", ErrBadTrace, line)
		}
		if req.InputLength == 0 {
			req.InputLength = len(req.HashIDs) * TraceBlockSize
		}
		t.Requests = append(t.Requests, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %v", ErrBadTrace, line+1, err)
	}
	slices.SortStableFunc(t.Requests, func(a, b Request) int { return int(a.Timestamp - b.Timestamp) })
	return t, nil
}

// FirstMinutes returns the requests that arrive within the first d of the trace (timestamp ≤ d, the
// way the issue counts "the first 10 minutes": 1,756 requests of the conversation trace).
func (t *Trace) FirstMinutes(d time.Duration) *Trace {
	limit := d.Milliseconds()
	n := 0
	for n < len(t.Requests) && t.Requests[n].Timestamp <= limit {
		n++
	}
	return &Trace{Requests: t.Requests[:n]}
}

// Span is the time from the first to the last arrival.
func (t *Trace) Span() time.Duration {
	if len(t.Requests) == 0 {
		return 0
	}
	return time.Duration(t.Requests[len(t.Requests)-1].Timestamp-t.Requests[0].Timestamp) * time.Millisecond
}

// Stats summarizes a trace for reports.
type TraceStats struct {
	Requests      int     `json:"requests"`
	SpanSeconds   float64 `json:"span_s"`
	InputTokens   int64   `json:"input_tokens"`
	OutputTokens  int64   `json:"output_tokens"`
	MeanInput     float64 `json:"mean_input_tokens"`
	DistinctIDs   int     `json:"distinct_hash_ids"`
	ArrivalPerSec float64 `json:"arrivals_per_s"`
}

// Stats counts the trace.
func (t *Trace) Stats() TraceStats {
	s := TraceStats{Requests: len(t.Requests), SpanSeconds: t.Span().Seconds()}
	ids := make(map[uint64]struct{})
	for i := range t.Requests {
		r := &t.Requests[i]
		s.InputTokens += int64(r.InputLength)
		s.OutputTokens += int64(r.OutputLength)
		for _, h := range r.HashIDs {
			ids[h] = struct{}{}
		}
	}
	s.DistinctIDs = len(ids)
	if s.Requests > 0 {
		s.MeanInput = float64(s.InputTokens) / float64(s.Requests)
	}
	if s.SpanSeconds > 0 {
		s.ArrivalPerSec = float64(s.Requests) / s.SpanSeconds
	}
	return s
}

// Arrival is one scheduled request of a replay.
type Arrival struct {
	// At is the offset from the start of the replay.
	At time.Duration
	// Index is the request's index in the trace.
	Index int
}

// ReplayConfig shapes arrival times.
type ReplayConfig struct {
	// Speedup divides trace time (--arrival-speedup): 2 replays a 10-minute trace in 5 minutes. Default 1.
	Speedup float64
	// Jitter, in [0, 1), moves each arrival uniformly within ±Jitter of the gap to its neighbours, seeded,
	// so runs with different seeds see different interleavings of equal timestamps. Default 0: trace time.
	Jitter float64
	// Seed seeds the jitter (and nothing else). Default 42, Dynamo's bench seed.
	Seed uint64
}

// DefaultReplayConfig replays at trace time.
func DefaultReplayConfig() ReplayConfig { return ReplayConfig{Speedup: 1, Seed: 42} }

// Validate checks the configuration.
func (c *ReplayConfig) Validate() error {
	if !(c.Speedup > 0) {
		return fmt.Errorf("bench: arrival speedup %v must be positive", c.Speedup)
	}
	if c.Jitter < 0 || c.Jitter >= 1 {
		return fmt.Errorf("bench: jitter %v out of [0, 1)", c.Jitter)
	}
	return nil
}

// Arrivals returns the replay schedule: one arrival per request, sorted by At, deterministic for a
// seed. Times are relative to the first request.
func (t *Trace) Arrivals(cfg ReplayConfig) ([]Arrival, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := make([]Arrival, len(t.Requests))
	if len(out) == 0 {
		return out, nil
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	t0 := t.Requests[0].Timestamp
	for i := range t.Requests {
		ms := float64(t.Requests[i].Timestamp - t0)
		if cfg.Jitter > 0 {
			var gap float64
			if i+1 < len(t.Requests) {
				gap = float64(t.Requests[i+1].Timestamp - t.Requests[i].Timestamp)
			}
			ms += (rng.Float64()*2 - 1) * cfg.Jitter * gap / 2
			if ms < 0 {
				ms = 0
			}
		}
		out[i] = Arrival{At: time.Duration(ms / cfg.Speedup * float64(time.Millisecond)), Index: i}
	}
	slices.SortStableFunc(out, func(a, b Arrival) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	return out, nil
}

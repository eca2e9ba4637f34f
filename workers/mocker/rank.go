package mocker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// ErrAborted ends a Stream whose request was aborted or whose worker shut down.
var ErrAborted = errors.New("mocker: request aborted")

// ErrStopped is returned by Submit once the worker is shutting down.
var ErrStopped = errors.New("mocker: worker stopped")

// EventPublisher sends one batch per engine step. workers/kvevents' Publisher satisfies it; tests use a
// recorder. Publish may encode b synchronously but must not keep it after returning.
type EventPublisher interface {
	Publish(b *kvevents.Batch) error
	Close() error
}

// maxLag bounds how far the rank loop lets wall time run ahead of simulated time before it gives up
// catching up (steps shorter than the timer's resolution are paced by the step-end deadline, so a late
// wake-up is absorbed by the following steps instead of stretching simulated time).
const maxLag = 20 * time.Millisecond

// rank is one dp rank: an engine, the streams of its live requests and the goroutine that steps it.
// mu guards eng and streams; the loop holds it only to step and to copy the step's output, handlers hold
// it to submit, abort, reset or read ground truth.
type rank struct {
	idx   int
	clock clock.Clock
	pub   EventPublisher // nil: events are dropped (still counted)
	// minSleep is wallMinSleep on the wall clock, 0 on another (a fake clock's timers cost nothing): a
	// step that ends sooner than this is not slept on.
	minSleep time.Duration

	mu      sync.Mutex
	eng     *Engine
	streams map[string]*Stream
	closed  bool // the loop has stopped: submissions fail

	wake     chan struct{}
	inflight atomic.Int64 // submitted, not finished: the dp-rank load balancer reads it

	// Loop-owned scratch.
	batch kvevents.Batch
	out   []delivery

	publishedBatches atomic.Uint64
	publishedEvents  atomic.Uint64
	publishErrors    atomic.Uint64
}

type delivery struct {
	s *Stream
	p Progress
}

func newRank(idx int, cfg EngineConfig, clk clock.Clock, pub EventPublisher) (*rank, error) {
	cfg.DPRank = idx
	eng, err := NewEngine(cfg)
	if err != nil {
		return nil, err
	}
	r := &rank{idx: idx, clock: clk, pub: pub, eng: eng, streams: map[string]*Stream{}, wake: make(chan struct{}, 1)}
	if _, ok := clk.(clock.Wall); ok {
		r.minSleep = wallMinSleep
	}
	return r, nil
}

func (r *rank) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *rank) submit(req Request) (*Stream, error) {
	s := newStream(req.ID, len(req.Prompt), r.clock.Now())
	s.rankIdx = r.idx
	r.mu.Lock()
	err := ErrStopped
	if !r.closed {
		err = r.eng.Add(req)
	}
	if err == nil {
		r.streams[req.ID] = s
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	r.inflight.Add(1)
	r.poke()
	return s, nil
}

func (r *rank) abort(id string) {
	r.mu.Lock()
	s := r.streams[id]
	live := r.eng.Abort(id)
	delete(r.streams, id)
	r.mu.Unlock()
	if live && s != nil {
		r.inflight.Add(-1)
		s.fail(ErrAborted, r.clock.Now())
		r.poke() // an abort frees blocks: waiting requests may now fit
	}
}

func (r *rank) resetPrefixCache() error {
	r.mu.Lock()
	err := r.eng.ResetPrefixCache()
	r.mu.Unlock()
	if err == nil {
		r.poke() // the loop publishes AllBlocksCleared with its next step, in order
	}
	return err
}

// run steps the engine until stop closes. Step k starts at the simulated end of step k-1 (or now, after an
// idle period or when more than maxLag behind), so simulated time advances by exactly the model's step
// durations while the loop sleeps once per step on one reusable timer.
func (r *rank) run(stop <-chan struct{}) {
	timer := r.clock.NewTimer()
	defer timer.Stop()
	var next time.Time
	for {
		r.mu.Lock()
		res := r.eng.Step()
		if res.Idle {
			r.mu.Unlock()
			select {
			case <-r.wake:
			case <-stop:
				r.failAll()
				return
			}
			next = time.Time{}
			continue
		}
		r.out = r.out[:0]
		for _, p := range res.Progress {
			s := r.streams[p.ID]
			if p.Done {
				delete(r.streams, p.ID)
			}
			if s != nil {
				r.out = append(r.out, delivery{s, p})
			}
		}
		hasEvents := len(res.Events) > 0
		if hasEvents {
			batchFromEvents(&r.batch, res.Events, time.Time{}, r.idx)
		}
		dur := res.Duration
		r.mu.Unlock()

		now := r.clock.Now()
		start := next
		if start.IsZero() || now.Sub(start) > maxLag {
			start = now
		}
		end := start.Add(dur)
		if d := end.Sub(now); d > 0 && d >= r.minSleep {
			timer.Reset(d)
			select {
			case <-timer.C():
			case <-stop:
				r.failAll()
				return
			}
		}
		next = end
		if hasEvents {
			r.batch.TS = float64(end.UnixNano()) / 1e9
			r.publishedBatches.Add(1)
			r.publishedEvents.Add(uint64(len(r.batch.Events)))
			if r.pub != nil {
				if err := r.pub.Publish(&r.batch); err != nil {
					r.publishErrors.Add(1)
				}
			}
		}
		for _, d := range r.out {
			if d.p.Done {
				r.inflight.Add(-1)
			}
			d.s.deliver(&d.p, end)
		}
	}
}

func (r *rank) failAll() {
	r.mu.Lock()
	r.closed = true
	streams := r.streams
	r.streams = map[string]*Stream{}
	r.mu.Unlock()
	now := r.clock.Now()
	for _, s := range streams {
		s.fail(fmt.Errorf("%w: worker stopped", ErrAborted), now)
	}
}

// wallMinSleep is the shortest step end the rank loop sleeps for on the wall clock. A timer that short
// fires late anyway and costs more than it waits (a park, the timer run, a wake-up: 2–3 µs of CPU), and at
// high speedup ratios (1e6 in the frontend benchmarks: a 16-token prefill is 17 ns) every step after an
// idle moment paid it. The step's end still paces the next step, so simulated time is unchanged.
const wallMinSleep = time.Microsecond

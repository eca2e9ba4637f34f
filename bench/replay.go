package bench

import (
	"context"
	"time"
)

// Sleeper waits until an offset from the start of a replay; the real one sleeps on the wall clock, tests
// pass a fake that records the offsets (time is an input, STYLE 2).
type Sleeper interface {
	SleepUntil(ctx context.Context, offset time.Duration) error
}

// WallSleeper sleeps on the wall clock from Start.
type WallSleeper struct{ Start time.Time }

// SleepUntil implements Sleeper.
func (w WallSleeper) SleepUntil(ctx context.Context, offset time.Duration) error {
	d := time.Until(w.Start.Add(offset))
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Replay calls fire for every arrival at its time, in order, on the calling goroutine (fire should hand
// the request off, not serve it). Arrivals sharing a time fire back to back without sleeping. It returns
// the largest lateness observed (how far behind schedule a fire started, measured with now) and
// ctx's error if it stopped early.
func Replay(ctx context.Context, arrivals []Arrival, s Sleeper, now func() time.Duration, fire func(Arrival)) (time.Duration, error) {
	var late time.Duration
	for i, a := range arrivals {
		if i == 0 || a.At != arrivals[i-1].At {
			if err := s.SleepUntil(ctx, a.At); err != nil {
				return late, err
			}
		}
		if now != nil {
			late = max(late, now()-a.At)
		}
		fire(a)
	}
	return late, nil
}

package bench

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

type fakeSleeper struct {
	now    time.Duration
	sleeps []time.Duration
	stopAt time.Duration
}

func (f *fakeSleeper) SleepUntil(ctx context.Context, off time.Duration) error {
	if f.stopAt > 0 && off >= f.stopAt {
		return context.Canceled
	}
	f.sleeps = append(f.sleeps, off)
	f.now = max(f.now, off) + time.Millisecond // every fire lands 1 ms late
	return nil
}

func TestReplayFiresInOrder(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(tinyTrace))
	if err != nil {
		t.Fatal(err)
	}
	arr, err := tr.Arrivals(ReplayConfig{Speedup: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSleeper{}
	var fired []int
	late, err := Replay(context.Background(), arr, f, func() time.Duration { return f.now }, func(a Arrival) { fired = append(fired, a.Index) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fired, []int{0, 1, 2, 3}) {
		t.Fatalf("fired %v", fired)
	}
	// The two arrivals at 0 share one sleep; 900 ms and 1500 ms of trace time at 10×.
	if !slices.Equal(f.sleeps, []time.Duration{0, 90 * time.Millisecond, 150 * time.Millisecond}) {
		t.Fatalf("sleeps %v", f.sleeps)
	}
	if late != time.Millisecond {
		t.Fatalf("lateness %v", late)
	}
	f2 := &fakeSleeper{stopAt: 100 * time.Millisecond}
	fired = fired[:0]
	if _, err := Replay(context.Background(), arr, f2, nil, func(a Arrival) { fired = append(fired, a.Index) }); !errors.Is(err, context.Canceled) || len(fired) != 3 {
		t.Fatalf("stop: %v after %v", err, fired)
	}
}

func TestWallSleeper(t *testing.T) {
	w := WallSleeper{Start: time.Now()}
	if err := w.SleepUntil(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.SleepUntil(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled sleep: %v", err)
	}
}

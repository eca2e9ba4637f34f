package mocker

import "time"

// Clock is the runtime's source of time. The engine itself never reads a clock; the rank loop uses this
// one to pace steps and to stamp event batches.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped timer; Reset arms it.
	NewTimer() Timer
}

// Timer is the part of *time.Timer the rank loop uses.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer returns a stopped wall-clock timer.
func (RealClock) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return realTimer{t}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock is a source of time.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped timer; Reset arms it.
	NewTimer() Timer
}

// Timer is the part of *time.Timer a timed loop uses.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// Or returns c, or Wall when c is nil: a Config's zero Clock means the system clock.
func Or(c Clock) Clock {
	if c == nil {
		return Wall{}
	}
	return c
}

// Wall is the system clock.
type Wall struct{}

var _ Clock = Wall{}

// Now returns time.Now().
func (Wall) Now() time.Time { return time.Now() }

// NewTimer returns a stopped system timer.
func (Wall) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return wallTimer{t}
}

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time   { return w.t.C }
func (w wallTimer) Reset(d time.Duration) { w.t.Reset(d) }
func (w wallTimer) Stop()                 { w.t.Stop() }

// Fake is a manual clock for tests: time moves only through Set, Advance and FireNext, and timers fire
// only then. The zero value starts at the zero time; NewFake starts elsewhere.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a stopped timer that fires when the fake time reaches its deadline.
func (f *Fake) NewTimer() Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	f.timers = append(f.timers, t)
	return t
}

// Advance moves the time forward by d, firing every timer that falls due, earliest first.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moveTo(f.now.Add(d))
}

// Set moves the time to t (backwards too: a clock step), firing every timer due at or before t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moveTo(t)
}

// FireNext moves the time to the earliest armed timer's deadline and fires it; false when none is armed.
// A simulation steps through virtual time this way, one event at a time.
func (f *Fake) FireNext() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	var next *fakeTimer
	for _, t := range f.timers {
		if t.armed && (next == nil || t.at.Before(next.at)) {
			next = t
		}
	}
	if next == nil {
		return false
	}
	if next.at.After(f.now) {
		f.now = next.at
	}
	next.fire(f.now)
	return true
}

// moveTo sets the time and fires the timers due by then in deadline order. f.mu is held.
func (f *Fake) moveTo(t time.Time) {
	f.now = t
	var due []*fakeTimer
	for _, ft := range f.timers {
		if ft.armed && !ft.at.After(t) {
			due = append(due, ft)
		}
	}
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, ft := range due {
		ft.fire(t)
	}
}

type fakeTimer struct {
	f     *Fake
	c     chan time.Time
	at    time.Time
	armed bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.at, t.armed = t.f.now.Add(d), true
	if d <= 0 {
		t.fire(t.f.now)
	}
}

func (t *fakeTimer) Stop() {
	t.f.mu.Lock()
	t.armed = false
	t.f.mu.Unlock()
}

// fire disarms t and delivers now without blocking (a tick not yet read is kept, as time.Timer does
// before Go 1.23). f.mu is held.
func (t *fakeTimer) fire(now time.Time) {
	t.armed = false
	select {
	case t.c <- now:
	default:
	}
}

package clock

import (
	"testing"
	"time"
)

func recv(c <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-c:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestFakeTimers(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name  string
		reset time.Duration
		move  func(f *Fake)
		fires bool
		at    time.Time
	}{
		{"not yet due", 2 * time.Second, func(f *Fake) { f.Advance(time.Second) }, false, time.Time{}},
		{"due on advance", 2 * time.Second, func(f *Fake) { f.Advance(3 * time.Second) }, true, t0.Add(3 * time.Second)},
		{"due exactly", 2 * time.Second, func(f *Fake) { f.Set(t0.Add(2 * time.Second)) }, true, t0.Add(2 * time.Second)},
		{"fire next jumps to the deadline", 5 * time.Second, func(f *Fake) { f.FireNext() }, true, t0.Add(5 * time.Second)},
		{"zero fires at once", 0, func(*Fake) {}, true, t0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake(t0)
			tm := f.NewTimer()
			if _, ok := recv(tm.C()); ok {
				t.Fatal("a new timer fired before Reset")
			}
			tm.Reset(tc.reset)
			tc.move(f)
			got, ok := recv(tm.C())
			if ok != tc.fires || (ok && !got.Equal(tc.at)) {
				t.Fatalf("fired %v at %v, want %v at %v", ok, got, tc.fires, tc.at)
			}
		})
	}
}

func TestFakeStopAndOrder(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	a, b := f.NewTimer(), f.NewTimer()
	a.Reset(3 * time.Second)
	b.Reset(time.Second)
	if !f.FireNext() {
		t.Fatal("no timer armed")
	}
	if _, ok := recv(b.C()); !ok {
		t.Fatal("the earlier timer did not fire first")
	}
	if _, ok := recv(a.C()); ok {
		t.Fatal("the later timer fired with the earlier one")
	}
	a.Stop()
	if f.FireNext() {
		t.Fatal("a stopped timer fired")
	}
	if got := f.Now(); !got.Equal(time.Unix(1, 0)) {
		t.Fatalf("now %v, want the first deadline", got)
	}
}

func TestOr(t *testing.T) {
	if _, ok := Or(nil).(Wall); !ok {
		t.Fatal("Or(nil) is not the wall clock")
	}
	f := NewFake(time.Time{})
	if Or(f) != Clock(f) {
		t.Fatal("Or replaced a clock")
	}
	w := Wall{}.NewTimer()
	w.Reset(time.Millisecond)
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("wall timer did not fire")
	}
}

package testutil

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	tests := []struct {
		name   string
		holdAt int // cond holds from this call on; 0: never
		d      time.Duration
		want   bool
	}{
		{"at once", 1, 5 * time.Second, true},
		{"after a few", 4, 5 * time.Second, true},
		{"never", 0, 30 * time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls int
			got := Poll(tc.d, func() bool { calls++; return tc.holdAt > 0 && calls >= tc.holdAt })
			if got != tc.want {
				t.Fatalf("Poll = %v after %d calls, want %v", got, calls, tc.want)
			}
			if tc.want && calls != tc.holdAt {
				t.Fatalf("cond called %d times, want %d", calls, tc.holdAt)
			}
		})
	}
}

// A condition set by another goroutine is seen.
func TestEventuallySeesAnotherGoroutine(t *testing.T) {
	var done atomic.Bool
	go func() { done.Store(true) }()
	Eventually(t, "the flag", done.Load)
}

// fakeT records a failure instead of stopping the goroutine.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = format }

func TestWithinAndUntilFail(t *testing.T) {
	ft := &fakeT{}
	Within(ft, 5*time.Millisecond, "nothing", func() bool { return false })
	if ft.failed == "" {
		t.Fatal("Within did not fail on a condition that never holds")
	}
	ft = &fakeT{}
	Until(ft, 5*time.Millisecond, "nothing", func() string { return "still missing" })
	if ft.failed == "" {
		t.Fatal("Until did not fail on a condition that never holds")
	}
}

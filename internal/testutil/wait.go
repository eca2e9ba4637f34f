package testutil

import (
	"testing"
	"time"
)

// DefaultWait bounds Eventually: long enough for a loaded 2-core machine under the race detector, short
// enough that a lost condition fails the test rather than the run's timeout.
const DefaultWait = 10 * time.Second

// Eventually polls cond until it returns true, failing t after DefaultWait with what was awaited.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, DefaultWait, what, cond)
}

// Within polls cond until it returns true, failing t after d with what was awaited.
func Within(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Until polls cond until it returns "", failing t after d with what was awaited and cond's last reason
// (for conditions that can say what is still missing).
func Until(t testing.TB, d time.Duration, what string, cond func() string) {
	t.Helper()
	var reason string
	if !Poll(d, func() bool { reason = cond(); return reason == "" }) {
		t.Fatalf("timed out after %v waiting for %s: %s", d, what, reason)
	}
}

// Poll calls cond until it returns true (true) or d has passed (false), waiting 1 ms after the first
// miss and doubling to 20 ms. cond runs at least once, and once more at the deadline.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	wait := time.Millisecond
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(wait, left))
		wait = min(2*wait, 20*time.Millisecond)
	}
}

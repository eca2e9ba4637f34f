package sched

import (
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// TestStaleRequestsExpireOnTicks: ticks once a second drop a request never freed within a tenth of
// StaleExpiry after it turned stale (each worker's sweep runs at most every CleanupInterval), never
// before, with the default expiry and a short one.
func TestStaleRequestsExpireOnTicks(t *testing.T) {
	for _, stale := range []time.Duration{scoring.DefaultStaleExpiry, 20 * time.Second} {
		cfg := scoring.DefaultConfig()
		cfg.Mode, cfg.BlockSize, cfg.StaleExpiry = scoring.ModeKV, 16, stale
		m, err := New(cfg, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Unix(0, 0)
		for i := range 4 {
			m.AddWorker(start, Worker{ID: uint64(i)})
		}
		for r := range 8 {
			if _, _, err := m.Route(start, &Request{ID: strconv.Itoa(r), ISL: 100, Matched: true}); err != nil {
				t.Fatal(err)
			}
		}
		var first, last time.Duration // when the first and the last request left
		for now := start; last == 0 && now.Sub(start) < 2*stale; now = now.Add(time.Second) {
			m.Tick(now)
			if n := len(m.active); n < 8 && first == 0 {
				first = now.Sub(start)
			}
			if len(m.active) == 0 {
				last = now.Sub(start)
			}
		}
		if first <= stale || last == 0 || last > stale+stale/10 {
			t.Fatalf("stale expiry %v: the requests left from %v to %v", stale, first, last)
		}
	}
}

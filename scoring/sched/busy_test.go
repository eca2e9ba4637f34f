package sched

import (
	"math/rand/v2"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// TestBusyMarksAsThePass: after every step of a fleet's life (fleetStep: routes, first tokens, frees, KV
// usage and capacity reports, health changes, workers leaving and joining, the busy thresholds changed
// or cleared, ticks) each target's busy mark, its bit and the count equal asking every target
// (busyAt); and a decision's eligibility with the marks equals the pass over every target that asks
// each one (shortVisits off), with exclusions and unhealthy workers.
func TestBusyMarksAsThePass(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 21))
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 1
	cfg.ActivePrefillTokensThreshold = scoring.Some(300)
	m, now := stepFleet(t, cfg, 5, nil)
	var active []string
	busySeen := 0
	for step := range 4000 {
		fleetStep(t, m, rng, step, &now, &active)
		on, n := busyThresholds(m.cfg), 0
		for i, tg := range m.list {
			var c scoring.Candidate
			want := on && m.busyAt(i, &c)
			if tg.over != want || (m.over[i>>6]>>(i&63)&1 == 1) != want {
				t.Fatalf("step %d: target %d (worker %d) marked %v, bit %d; asked, busy %v", step, i, tg.key.WorkerID,
					tg.over, m.over[i>>6]>>(i&63)&1, want)
			}
			if want {
				n++
			}
		}
		if m.overN != n || len(m.over) != (len(m.list)+63)>>6 {
			t.Fatalf("step %d: %d marked busy in %d words, %d busy of %d targets", step, m.overN, len(m.over), n, len(m.list))
		}
		busySeen += n
		if len(m.list) == 0 {
			continue
		}
		var av avoid
		for range rng.IntN(3) {
			av.exclude = append(av.exclude, uint64(1+rng.IntN(14)))
		}
		sreq := scoring.Request{ISL: 100}
		mask, _, offer, allowed, eligible := m.eligibility(&sreq, av)
		got := mask
		if mask != nil {
			got = append([]uint8(nil), mask...)
		}
		shortVisits = false
		wmask, _, woffer, wallowed, weligible := m.eligibility(&sreq, av)
		shortVisits = true
		all := func(mask []uint8) []uint8 { // nil: nothing filtered, nobody busy, every target eligible
			if mask == nil {
				mask = make([]uint8, len(m.list))
				fillEligible(mask)
			}
			return mask
		}
		got, wmask = all(got), all(wmask)
		if string(got) != string(wmask) || allowed != wallowed || eligible != weligible || (offer == 0) != (woffer == 0) {
			t.Fatalf("step %d: eligibility by the marks %v (%d allowed, %d eligible), by asking %v (%d, %d)",
				step, got, allowed, eligible, wmask, wallowed, weligible)
		}
	}
	if busySeen == 0 {
		t.Fatal("no target was ever busy: the marks went untested")
	}
}

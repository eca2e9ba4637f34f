package sched

import (
	"math/bits"

	"github.com/kvroute/kvroute/scoring"
)

// Busy marks. With busy thresholds set (--active-decode-blocks-threshold and the prefill ones) a decision
// leaves the targets over one out. Asking each target (its load and capacity against the thresholds) made
// every such decision a pass over the fleet: 40-50 us at 8,192 workers, a decision's whole budget twice
// over. Whether a target is over is kept instead where what it reads changes (its load in publish, its KV
// usage, its capacity, the thresholds in SetConfig), as a bit by target position, moved with the
// positions (drop, extend); a decision reads the bits of the busy targets alone, and with none busy
// needs no mask at all (eligibility).

// busyThresholds reports whether cfg sets any busy threshold.
func busyThresholds(cfg *scoring.Config) bool {
	return cfg.ActiveDecodeBlocksThreshold.Set || cfg.ActivePrefillTokensThreshold.Set || cfg.ActivePrefillTokensThresholdFrac.Set
}

// reover brings t's busy mark up to date.
func (m *Machine) reover(t *target) {
	over := false
	if busyThresholds(m.cfg) {
		var c scoring.Candidate
		over = m.busyAt(t.i, &c)
	}
	if over == t.over {
		return
	}
	t.over = over
	w, b := t.i>>6, uint64(1)<<(t.i&63)
	if over {
		m.overN++
		m.over[w] |= b
	} else {
		m.overN--
		m.over[w] &^= b
	}
}

// overAll marks every target again (the thresholds changed).
func (m *Machine) overAll() {
	for _, t := range m.list {
		m.reover(t)
	}
}

// overFrom sizes the marks to the list and writes those of the targets from position from on, which
// moved there (drop) or are new and not yet marked (extend: publish marks them).
func (m *Machine) overFrom(from int) {
	n := (len(m.list) + 63) >> 6
	if len(m.over) < n {
		m.over = append(m.over, make([]uint64, n-len(m.over))...)
	}
	m.over = m.over[:n]
	if from >= len(m.list) {
		clear(m.over[(from+63)>>6:])
		if from&63 != 0 && from>>6 < n {
			m.over[from>>6] &= 1<<(from&63) - 1
		}
		return
	}
	w := from >> 6
	m.over[w] &= 1<<(from&63) - 1 // the bits below from stay
	clear(m.over[w+1:])
	for i, t := range m.list[from:] {
		if t.over {
			i += from
			m.over[i>>6] |= 1 << (i & 63)
		}
	}
}

// markBusy marks the targets over a busy threshold that mask holds eligible as busy, and returns how
// many it marked.
func (m *Machine) markBusy(mask []uint8) (n int) {
	eachBit(m.over, len(mask), func(i int) {
		if mask[i] == candEligible {
			mask[i] = candBusy
			n++
		}
	})
	return n
}

// eachBit calls f with the position of every set bit of words below n, in order: a bitmap of target
// positions read a word of 64 at a time (the busy marks, an exclusion's bitmap).
func eachBit(words []uint64, n int, f func(i int)) {
	for w, x := range words {
		if tail := n - w<<6; tail < 64 { // the last word's bits past n (an only list's bitmap sets them)
			if tail <= 0 {
				return
			}
			x &= 1<<tail - 1
		}
		for ; x != 0; x &= x - 1 {
			f(w<<6 + bits.TrailingZeros64(x))
		}
	}
}

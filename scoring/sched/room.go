package sched

import (
	"math"
	"slices"

	"github.com/kvroute/kvroute/scoring"
)

// Room in the workers' KV caches. An engine evicts cached blocks only when it needs free ones, so a
// worker whose cache has room takes a request's uncached tokens without losing anything, while a full
// one evicts as many cached tokens. The kvroute cost charges those evictions (scoring.EvictionWeight a
// token) when some eligible worker is spacious — more than half of its KV capacity free — and has room
// for the whole request there, and only then. On a fleet whose caches are all full (the steady state),
// or all have room, every worker evicts alike and the decision is the cost's alone. What it changes is
// a fleet that leaves caches empty: without it the few workers that hold a shared system prompt take
// every new conversation (a copy of the prompt elsewhere is a dead copy), their caches churn, and the
// rest of a large fleet stays empty (32 workers on the 8B profile: 77–94 % of the pooled oracle against
// 98 % with the charge, docs/benchmarks.md). Why spacious and not any room: a cache a few blocks short of
// full evicts soon whatever is routed there, and on small fleets, whose caches all fill within the first
// minute, charging evictions during the fill moved later placements and the hit rate by ±2 points
// either way; with the half the 8-worker rows are the same as without the charge after the first
// minute.
//
// The count of a target's cached blocks is the prefix index's (its engines' stored minus removed
// blocks, SetCachedBlocks), refreshed on the workers' metrics scrape; its room is its KV capacity
// less that count, and a decision takes the queued prefill charged there (routed since, not yet stored)
// out of the room as well.

// SetCachedBlocks records how many KV blocks the engines' events have a worker rank holding (the
// prefix index's count for it).
func (m *Machine) SetCachedBlocks(k scoring.WorkerKey, blocks uint64) {
	if t := m.find(k); t != nil {
		t.cached, t.cachedKnown = blocks, true
		m.setRoom(t)
	}
}

// setRoom refreshes t's line.room from its cached blocks and capacity, and the count of spacious
// targets.
func (m *Machine) setRoom(t *target) {
	l := &m.lines[t.i]
	var room uint32
	c := t.totalKV()
	if t.cachedKnown && c > 0 {
		room = 1 + uint32(min(c-min(t.cached, c), math.MaxUint32-1))
	}
	if is := spacious(room, c); is != t.spacious {
		if is {
			m.roomy++
		} else {
			m.roomy--
		}
		t.spacious = is
	}
	l.room = room
}

// spacious reports whether a line's room (line.room) is known and more than half of its capacity c.
func spacious(room uint32, c uint64) bool { return room > 1 && 2*uint64(room-1) > c }

// evicted is how many cached tokens a request with device overlap ov blocks (of isl tokens) evicts on
// line l: its uncached tokens beyond the room its queued prefill leaves (q0: 0 when prefill tokens are
// not tracked). The line's room must be known (l.room > 0).
func evicted(l *line, ov uint32, fisl, fbs, q0 float64) float64 {
	room := float64(l.room-1)*fbs - q0*float64(int64(l.prefill))
	return max(fisl-float64(ov)*fbs-max(room, 0), 0)
}

// evictions is every target's eviction charge (scoring.EvictionWeight a token evicted; 0 where its room
// is unknown) when some eligible spacious target has room for the request, else nil (mask:
// eligibility's, nil when every target is eligible; ov: device overlaps by target). The charges go in a
// scratch slice the decision adds to the costs, so the candidate loop, which runs for every decision,
// carries one nil check instead of the charge's arithmetic. On a fleet with no spacious worker (a busy
// one) it is one comparison.
func (m *Machine) evictions(mask []uint8, ov []uint32, fisl, fbs, q0 float64) []float64 {
	if m.roomy == 0 || !m.roomFor(mask, ov, fisl, fbs, q0) {
		return m.ageCharges(ov, fisl, fbs)
	}
	ev := slices.Grow(m.sc.evict[:0], len(m.lines))[:len(m.lines)]
	for i := range m.lines {
		ev[i] = 0
		if l := &m.lines[i]; l.room > 0 {
			ev[i] = scoring.EvictionWeight * evicted(l, ov[i], fisl, fbs, q0)
		}
	}
	m.sc.evict = ev
	return ev
}

// roomFor reports whether some eligible spacious target has room for the request.
func (m *Machine) roomFor(mask []uint8, ov []uint32, fisl, fbs, q0 float64) bool {
	for i := range m.lines {
		l := &m.lines[i]
		if spacious(l.room, m.tmpl[i].totalKV) && (mask == nil || mask[i] == candEligible) && evicted(l, ov[i], fisl, fbs, q0) == 0 {
			return true
		}
	}
	return false
}

package sched

import (
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/policy"
)

// The queue's pool rule (poolBusy) for a request with no pin and no exclusion asks, per policy class,
// how many targets are eligible (healthy, not busy by the router's thresholds) and how many of those
// are busy by the class's rule. Those counts are kept here as targets change, instead of a pass over the
// fleet at each check: with requests waiting and the pool busy, every first token and every free ran
// that pass for each class, 0.17–0.22 ms at 8,192 workers under the scheduler's lock, 23 ns now
// (BenchmarkPoolBusy).
//
// A target's standing per class is two bits in target.pool; repool recomputes them where what they read
// changes (its load in publish, its KV usage, capacity and health, its arrival), unpool takes them out
// when it leaves, and repoolAll starts over when the classes or the thresholds change (SetConfig).

// Bits of a target's standing in a class's pool.
const (
	poolEligible uint8 = 1 << iota
	poolBusy
)

// poolCount is a class's counts over the fleet.
type poolCount struct{ eligible, busy int }

// poolStanding is target t's standing in class cls's pool: what the counts keep, and what poolPass
// counts over a part of the fleet. A target over the router's busy thresholds is out: its busy mark,
// which every change repool follows has updated first (busy.go).
func (m *Machine) poolStanding(t *target, cls *policy.Class) uint8 {
	if !t.healthy || t.over {
		return 0
	}
	mb := m.tmpl[t.i].maxBatched
	if mb == 0 {
		mb = scoring.DefaultMaxBatchedTokens
	}
	if cls.WorkerBusy(m.lines[t.i].prefill, mb) {
		return poolEligible | poolBusy
	}
	return poolEligible
}

// repool brings t's standing in every class's counts up to date.
func (m *Machine) repool(t *target) {
	if !m.pq.on {
		return
	}
	if len(t.pool) != len(m.pq.classes) {
		t.pool = make([]uint8, len(m.pq.classes))
	}
	for ci := range m.pq.classes {
		st := m.poolStanding(t, m.pq.classes[ci].cls)
		m.pq.classes[ci].pool.add(t.pool[ci], -1)
		m.pq.classes[ci].pool.add(st, 1)
		t.pool[ci] = st
	}
}

// unpool takes t, leaving, out of the counts.
func (m *Machine) unpool(t *target) {
	for ci, st := range t.pool {
		if ci < len(m.pq.classes) {
			m.pq.classes[ci].pool.add(st, -1)
		}
	}
	t.pool = nil
}

// repoolAll counts every target again.
func (m *Machine) repoolAll() {
	for ci := range m.pq.classes {
		m.pq.classes[ci].pool = poolCount{}
	}
	for _, t := range m.list {
		t.pool = nil
		m.repool(t)
	}
}

// add counts a standing d times (1 in, -1 out).
func (p *poolCount) add(st uint8, d int) {
	if st&poolEligible != 0 {
		p.eligible += d
	}
	if st&poolBusy != 0 {
		p.busy += d
	}
}

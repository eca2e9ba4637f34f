package sched

import (
	"slices"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// The age of what each full cache evicts. Once every cache is full (no worker spacious, room.go), a
// request's uncached tokens evict as many cached ones wherever it goes, and the cost alone would treat
// every worker's evictions alike. They are not alike: a vLLM-style engine evicts its free blocks in the
// order they were freed, so a worker whose engine is evicting blocks freed ten minutes ago loses less by
// taking the request than one evicting blocks freed a minute ago, which its conversations are likelier
// to ask for again. A pooled cache evicts the fleet's oldest blocks; routing new work towards the worker
// whose evictions are oldest makes the partitioned caches evict in about that order. Measured in the
// fleet lab on the conversation trace (docs/benchmarks.md), placement, not the engines, was what kept
// the 70B profile's 32-worker rows under 95 % of the pooled oracle.
//
// The router knows each age exactly, from two records. The machine keeps, per worker, when each request
// it routed there ended, keyed by the request's last block (local hash and depth), for as many requests
// as the worker's KV capacity has blocks. The prefix index logs the blocks the engines' Removed events
// take away (prefix.Index.LogEvictions); its owner hands them over every EvictedEvery (Evicted). An engine frees a request's blocks last
// block first and evicts in freeing order, so when a request's last block is evicted, what the engine
// evicts now was freed when that request ended: the worker's eviction age is the time since then. A
// worker that has evicted only blocks whose release is not recorded counts as evicting the oldest; one
// that has evicted nothing is charged nothing.
//
// The charge (evictions, on the kvroute preset's decision): scoring.EvictionAgeWeight per uncached
// token, times 1 − the worker's eviction age over the oldest in the fleet: nothing on the worker
// evicting the oldest blocks, up to the whole weight on one evicting blocks just freed.

// EvictedEvery is how often a machine's owner hands it the index's log of evictions (Evicted): at the
// next decision once this long has passed since the last. Measured in the fleet lab on the conversation
// trace (8B profile, 8 workers, ×2, four seeds): handed on the 2 s metrics scrape, 94.4 % of the pooled
// oracle; every 100 ms, 99.0 %, the same as at every decision.
const EvictedEvery = 100 * time.Millisecond

// leafKey is a request's last block: its local hash and its depth in the prompt.
type leafKey struct {
	local uint64
	depth uint32
}

// lruAge is a target's record of its engine's eviction order (above).
type lruAge struct {
	routed   map[string]leafKey // active request → its last block
	released map[leafKey]int64  // last block → when its request ended (ns)
	order    []leafRelease      // the releases in order, to keep released within the KV capacity
	// evictedAt is when the requests whose last blocks were evicted most recently ended (ns): what the
	// engine evicts now was freed then. 0 while the engine has evicted nothing; 1 (the oldest possible)
	// while it has evicted only blocks whose release is not recorded (generated tokens' blocks, which go
	// before the prompt's last block, or blocks freed before the records began).
	evictedAt int64
}

// maxAgeRecords bounds a target's ended requests while its KV capacity is unknown.
const maxAgeRecords = 1 << 16

type leafRelease struct {
	leaf leafKey
	at   int64
}

// KeepsAges reports whether the machine keeps eviction ages (age.go): the kvroute preset with the
// engines' KV events. Its owner then logs the index's evictions and hands them to Evicted.
func (m *Machine) KeepsAges() bool { return KeepsAges(m.cfg) }

// KeepsAges reports whether a machine with configuration cfg keeps eviction ages.
func KeepsAges(cfg *scoring.Config) bool {
	return cfg.Preset == scoring.PresetKVRoute && cfg.UseKVEvents
}

// ageRouted records the last block of a request routed to t.
func (m *Machine) ageRouted(t *target, req *Request) {
	if len(req.Local) == 0 || !m.KeepsAges() {
		return
	}
	a := &t.age
	if a.routed == nil {
		a.routed, a.released = make(map[string]leafKey), make(map[leafKey]int64)
	}
	a.routed[req.ID] = leafKey{local: req.Local[len(req.Local)-1], depth: uint32(len(req.Local) - 1)}
}

// ageFreed records that request id on t ended at now: its blocks are free and, from the last, in the
// engine's eviction order.
func (m *Machine) ageFreed(t *target, id string, now int64) {
	a := &t.age
	leaf, ok := a.routed[id]
	if !ok {
		return
	}
	delete(a.routed, id)
	a.released[leaf] = now
	a.order = append(a.order, leafRelease{leaf, now})
	// A cache of c blocks holds at most c requests' last blocks: the oldest beyond that are gone. While
	// the capacity is unknown, maxAgeRecords.
	c := int(t.totalKV())
	if c == 0 {
		c = maxAgeRecords
	}
	if len(a.released) > c || len(a.order) > 2*c {
		drop := 0
		for ; drop < len(a.order) && (len(a.released) > c || len(a.order)-drop > c); drop++ {
			r := a.order[drop]
			if at, ok := a.released[r.leaf]; ok && at == r.at {
				delete(a.released, r.leaf)
			}
		}
		a.order = slices.Delete(a.order, 0, drop)
	}
}

// Evicted hands the machine blocks the workers' engines removed (prefix.Index.TakeEvicted), in the
// order they were applied.
func (m *Machine) Evicted(ev []prefix.Evicted) {
	if !m.KeepsAges() {
		return
	}
	for _, e := range ev {
		t := m.find(scoring.WorkerKey(e.Worker))
		if t == nil {
			continue
		}
		was := t.age.evictedAt
		leaf := leafKey{local: e.Local, depth: e.Depth}
		if at, ok := t.age.released[leaf]; ok {
			delete(t.age.released, leaf)
			t.age.evictedAt = max(t.age.evictedAt, at)
		} else if t.age.evictedAt == 0 {
			t.age.evictedAt = 1
		}
		if was == 0 && t.age.evictedAt > 0 {
			m.evicting++
		}
		m.evictedAt[t.i] = t.age.evictedAt
	}
}

// ageCharges is every target's eviction-age charge for a request with device overlaps ov (of fisl
// tokens, blocks of fbs), or nil when no engine has evicted yet. A worker whose engine has evicted
// nothing evicts nothing older than anyone's: while one is left, every evicting worker pays the whole
// weight.
//
// It reads the dense evictedAt and the evicting count. Two passes over the targets themselves (a pointer
// each) made the calibrated selection at 1,024 workers 9.1–9.5 µs where it is 6.5–6.7 now
// (BenchmarkSelectionPass, calibrated/evicting), and the first pass ran on every decision of a fleet with
// no spacious worker, evicting or not (calibrated: 4.4–4.6 → 3.5–3.7 µs).
func (m *Machine) ageCharges(ov []uint32, fisl, fbs float64) []float64 {
	if !m.KeepsAges() || m.evicting == 0 {
		return nil
	}
	ev := slices.Grow(m.sc.evict[:0], len(m.lines))[:len(m.lines)]
	if m.evicting < len(m.evictedAt) { // some engine has evicted nothing: every evicting one pays in full
		for i, at := range m.evictedAt {
			ev[i] = 0
			if at > 0 {
				ev[i] = scoring.EvictionAgeWeight * max(fisl-float64(ov[i])*fbs, 0)
			}
		}
		m.sc.evict = ev
		return ev
	}
	first := m.evictedAt[0]
	for _, at := range m.evictedAt {
		first = min(first, at)
	}
	oldest := max(float64(m.sc.now-first), 0)
	for i, at := range m.evictedAt {
		f := 1.0
		if oldest > 0 {
			f = 1 - float64(m.sc.now-at)/oldest
		}
		ev[i] = scoring.EvictionAgeWeight * f * max(fisl-float64(ov[i])*fbs, 0)
	}
	m.sc.evict = ev
	return ev
}

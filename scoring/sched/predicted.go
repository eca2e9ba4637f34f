package sched

import (
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// predicted is predict-on-route (--router-predicted-ttl-secs): every decision is written to a side index
// of its own that forgets it after the TTL, and a request's overlap with a worker is the larger of the
// primary index's (the engines' events) and the side index's. It closes the window between a decision
// and the worker's KV events for it: a follow-up request (an agent's next turn, best-of-N fan-out)
// arriving before those events still finds the prefix. Side entries never enter the primary index: the
// engines' own hashes differ from the router's chain keys.
type predicted struct {
	ttl  time.Duration
	ix   *prefix.Index
	ap   *scoring.Approx
	next time.Time // no expiry is due before next (zero: nothing held)
}

func newPredicted(ttl time.Duration) *predicted {
	p := &predicted{}
	p.setTTL(ttl)
	return p
}

// setTTL turns the side index on (ttl > 0), off, or changes its TTL; a change starts it empty.
func (p *predicted) setTTL(ttl time.Duration) {
	if ttl == p.ttl && (ttl <= 0) == (p.ix == nil) {
		return
	}
	p.ttl, p.ix, p.ap, p.next = ttl, nil, nil, time.Time{}
	if ttl > 0 {
		p.ix = prefix.New()
		p.ap = scoring.NewApprox(scoring.ApproxConfig{TTL: ttl, Capacity: 1 << 20, TargetRatio: 0.8})
	}
}

func (p *predicted) on() bool { return p.ix != nil }

// scores appends the side index's overlap for local to *dst (nil when off or empty).
func (p *predicted) scores(local []uint64, dst *[]prefix.Score) []prefix.Score {
	if p.ix == nil || p.next.IsZero() || len(local) == 0 {
		return nil
	}
	*dst = p.ix.FindMatches(local, (*dst)[:0])
	return *dst
}

// record writes a decision's blocks (engine hash = prefix chain) for worker k.
func (p *predicted) record(now time.Time, k scoring.WorkerKey, local, chain []uint64) {
	if p.ix == nil || len(chain) == 0 {
		return
	}
	from, evicted := p.ap.Record(k, chain, now)
	if blocks, parent := chainBlocks(local, chain, from); blocks != nil {
		_ = p.ix.Store(prefix.WorkerKey(k), parent, from > 0, blocks) // a chain the side index made itself
	}
	if len(evicted) > 0 {
		_ = p.ix.Remove(prefix.WorkerKey(k), evicted)
	}
	if p.next.IsZero() {
		p.next = now.Add(p.ttl)
	}
}

// expireDue expires entries when one may be due (cheap otherwise: one time comparison).
func (p *predicted) expireDue(now time.Time) {
	if p.ix != nil && !p.next.IsZero() && !now.Before(p.next) {
		p.expire(now)
	}
}

// expire drops the entries whose TTL passed.
func (p *predicted) expire(now time.Time) {
	if p.ix == nil {
		return
	}
	for _, r := range p.ap.Expire(now) {
		_ = p.ix.Remove(prefix.WorkerKey(r.Worker), r.Hashes)
	}
	p.next = time.Time{}
	if t, ok := p.ap.NextExpiry(); ok {
		p.next = t
	}
}

// removeWorker forgets a worker rank's side entries.
func (p *predicted) removeWorker(k scoring.WorkerKey) {
	if p.ix == nil {
		return
	}
	p.ap.RemoveWorker(k)
	p.ix.RemoveWorker(k.WorkerID)
}

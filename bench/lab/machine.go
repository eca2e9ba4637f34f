package lab

import (
	"fmt"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/sched"
)

// machineArm drives the production scheduler, scoring/sched's Machine, as actors/router does: every
// engine registered as a worker with its KV capacity and token budget, the scraped KV usage handed over
// with SetKVUsage, Route/PrefillDone/Free with the lab's time, Tick on the scrape period. Arms differ
// only in the machine's configuration (mode, weights, events or approximate), its Selector (peer
// baselines) and its Index.
type machineArm struct {
	f       *Fleet
	m       *sched.Machine
	scrapes uint64
	// routed, when set, sees each decision (the sglang arm inserts the prompt into its tree).
	routed func(now time.Time, r *Request, w int)
	// learns: the machine's kv decisions take the kvroute preset's learned cost (no selector, no
	// temperature), so its calibration is the policy's.
	learns bool
	// explain, when set, routes with ReturnCosts and records why a better-cached worker was skipped
	// (the learning arms; the decision is the same, TestExplainKeepsDecisions).
	explain *explainer
	// evicted is the index's eviction log as last taken, evictedAt when (takeEvicted).
	evicted   []prefix.Evicted
	evictedAt time.Time
}

var (
	_ Scheduler  = (*machineArm)(nil)
	_ Ticker     = (*machineArm)(nil)
	_ Calibrated = (*machineArm)(nil)
	_ Explainer  = (*machineArm)(nil)
)

// primaryIndex is the run's prefix index as the machine's Index, the way actors/router adapts the
// indexer: reads for overlap, writes for the blocks the machine predicts (approximate mode only).
type primaryIndex struct{ ix *prefix.Index }

func (p primaryIndex) FindMatches(local []uint64, out []prefix.Score) []prefix.Score {
	return p.ix.FindMatches(local, out)
}

// Match answers in groups (sched.Matcher), as the router's indexer does.
func (p primaryIndex) Match(local []uint64, m *prefix.Matches) {
	m.Reset()
	var q prefix.Query
	q.Reset(local)
	p.ix.Match(&q, m)
}

func (p primaryIndex) Store(w scoring.WorkerKey, parent uint64, hasParent bool, blocks []prefix.Block) {
	_ = p.ix.Store(prefix.WorkerKey(w), parent, hasParent, blocks) // a rejected store is the index's counter
}

func (p primaryIndex) Remove(w scoring.WorkerKey, hashes []uint64) {
	_ = p.ix.Remove(prefix.WorkerKey(w), hashes)
}

func newMachineArm(f *Fleet, seed uint64, cfg scoring.Config, ix sched.Index, sel scoring.Selector) (*machineArm, error) {
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	m, err := sched.New(cfg, ix, sched.Options{Seed: &seed, Selector: sel, Start: epoch})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	for w := range f.Workers {
		m.AddWorker(epoch, sched.Worker{ID: Key(w).WorkerID, DPRanks: 1, TotalKVBlocks: f.TotalKVBlocks, MaxNumBatchedTokens: f.MaxNumBatchedTokens})
	}
	learns := cfg.Mode == scoring.ModeKV && cfg.Preset == scoring.PresetKVRoute && cfg.Temperature == 0 && sel == nil
	a := &machineArm{f: f, m: m, learns: learns}
	if f.index != nil && m.KeepsAges() {
		// As the router does: the index logs the engines' evictions, handed over by takeEvicted.
		f.index.LogEvictions(true)
	}
	if learns {
		a.explain = &explainer{pending: f.pending}
	}
	return a, nil
}

// Decisions implements Explainer; nil for arms that do not explain.
func (a *machineArm) Decisions() *Decisions {
	if a.explain == nil {
		return nil
	}
	return &a.explain.d
}

// Calibration implements Calibrated: the machine's learned fit, as the router's decisions use it.
func (a *machineArm) Calibration() (Calibration, bool) {
	if !a.learns {
		return Calibration{}, false
	}
	alpha, beta, gamma, n := a.m.Calibration()
	_, db, dn, out := a.m.DecodeCalibration()
	return Calibration{Alpha: alpha, Beta: beta, Gamma: gamma, N: n, DecodeB: db, DecodeN: dn, MeanOutput: out}, true
}

func released(rel []sched.Released) []Released {
	if len(rel) == 0 {
		return nil
	}
	out := make([]Released, len(rel))
	for i, r := range rel {
		out[i] = Released{ID: r.ID, Worker: WorkerOf(r.Worker), OverlapBlocks: int(r.OverlapBlocks), Err: r.Err}
	}
	return out
}

// syncKV hands the machine the KV usage of the latest scrape, once per scrape.
func (a *machineArm) syncKV() {
	if a.f.scrapes == a.scrapes {
		return
	}
	a.scrapes = a.f.scrapes
	for w := range a.f.Workers {
		if used, ok := a.f.KVUsed(w); ok {
			a.m.SetKVUsage(Key(w), used)
			if a.f.index != nil && a.m.Config().UseKVEvents {
				// As the health monitor does for a worker with KV events: the index's count of its blocks.
				a.m.SetCachedBlocks(Key(w), uint64(a.f.index.WorkerBlocks(prefix.WorkerKey(Key(w)))))
			}
		}
	}
}

// takeEvicted hands the machine the index's log of evictions every sched.EvictedEvery, at a decision,
// as the router does.
func (a *machineArm) takeEvicted(now time.Time) {
	if a.f.index == nil || !a.m.KeepsAges() || now.Sub(a.evictedAt) < sched.EvictedEvery {
		return
	}
	a.evictedAt = now
	a.evicted = a.f.index.TakeEvicted(a.evicted[:0])
	a.m.Evicted(a.evicted)
}

// Route implements Scheduler.
func (a *machineArm) Route(now time.Time, r *Request) (Route, error) {
	a.syncKV()
	a.takeEvicted(now)
	req := &sched.Request{ID: r.ID, Local: r.Local, Chain: r.Chain, ISL: r.ISL}
	if a.explain != nil {
		req.ReturnCosts = true
		a.explain.before(a.m)
	}
	d, queued, err := a.m.Route(now, req)
	if err != nil || queued {
		return Route{Queued: queued}, err
	}
	if a.explain != nil {
		_, _, gamma, _ := a.m.Calibration()
		bs := a.f.BlockSize
		a.explain.after(now.Sub(epoch).Seconds(), r, max(r.ISL, len(r.Local)*bs), bs, gamma, &d)
	}
	w := WorkerOf(d.Worker)
	if a.routed != nil {
		a.routed(now, r, w)
	}
	return Route{Worker: w, OverlapBlocks: int(d.OverlapBlocks)}, nil
}

// PrefillDone implements Scheduler.
func (a *machineArm) PrefillDone(now time.Time, id string) []Released {
	rel, _ := a.m.PrefillDone(now, id) // unknown ids (a failed dispatch) are not the run's concern
	return released(rel)
}

// Output implements OutputRecorder.
func (a *machineArm) Output(id string, tokens int) { a.m.RecordOutput(id, tokens) }

// Free implements Scheduler.
func (a *machineArm) Free(now time.Time, id string) []Released {
	rel, _ := a.m.Free(now, id)
	return released(rel)
}

// Tick implements Ticker: the machine's timers (approximate and predicted expiry, stale requests).
func (a *machineArm) Tick(now time.Time) []Released {
	a.syncKV()
	return released(a.m.Tick(now))
}

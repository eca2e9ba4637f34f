package lab

import (
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// approxArm is Dynamo's kv mode without KV events (--no-kv-events, the e2e bench's kv-approx): the
// index holds what the router sent each worker, kept by scoring.Approx (TTL 120 s, pruned to the
// worker's KV capacity), and the default cost picks over it.
type approxArm struct {
	*selectArm
	index  *prefix.Index
	approx *scoring.Approx
	blocks []prefix.Block
}

func newApproxArm(f *Fleet, seed uint64) (Scheduler, error) {
	cfg := modeConfig(f, scoring.ModeKV)
	cfg.UseKVEvents = false
	sa, err := newSelectArm(f, seed, cfg, nil)
	if err != nil {
		return nil, err
	}
	a := &approxArm{selectArm: sa, index: prefix.New(), approx: scoring.NewApprox(scoring.ApproxConfigFrom(&sa.cfg))}
	for w := range f.Workers {
		a.approx.SetCapacity(Key(w), f.TotalKVBlocks)
	}
	sa.match = func(r *Request, cands []scoring.Candidate) {
		sa.scores = a.index.FindMatches(r.Local, sa.scores[:0])
		for _, s := range sa.scores {
			cands[WorkerOf(scoring.WorkerKey(s.Worker))].Overlap.Device = s.Blocks
		}
	}
	return a, nil
}

// Route implements Scheduler: expire, decide, then record the decision in the approximate index.
func (a *approxArm) Route(now time.Time, r *Request) (Route, error) {
	for _, rm := range a.approx.Expire(now) {
		_ = a.index.Remove(prefix.WorkerKey(rm.Worker), rm.Hashes)
	}
	rt, err := a.selectArm.Route(now, r)
	if err != nil {
		return rt, err
	}
	k := Key(rt.Worker)
	from, evicted := a.approx.Record(k, r.Chain, now)
	if from < len(r.Chain) {
		a.blocks = a.blocks[:0]
		for i := from; i < len(r.Chain); i++ {
			a.blocks = append(a.blocks, prefix.Block{EngineHash: r.Chain[i], LocalHash: r.Local[i]})
		}
		var parent uint64
		if from > 0 {
			parent = r.Chain[from-1]
		}
		_ = a.index.Store(prefix.WorkerKey(k), parent, from > 0, a.blocks)
	}
	if len(evicted) > 0 {
		_ = a.index.Remove(prefix.WorkerKey(k), evicted)
	}
	return rt, nil
}

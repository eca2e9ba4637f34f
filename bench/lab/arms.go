package lab

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/load"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// Arm names.
const (
	ArmRoundRobin   = "round-robin"
	ArmRandom       = "random"
	ArmLeastLoaded  = "least-loaded"
	ArmLLMD         = "llmd"
	ArmSGLang       = "sglang"
	ArmDynamo       = "dynamo"
	ArmDynamoApprox = "dynamo-approx"
	ArmDynamoScale8 = "dynamo-scale8"
)

// Arms are the built-in arms, in report order.
var Arms = []Arm{
	{ArmRoundRobin, "scoring.Select, mode round-robin", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newSelectArm(f, seed, modeConfig(f, scoring.ModeRoundRobin), nil)
	}},
	{ArmRandom, "scoring.Select, mode random", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newSelectArm(f, seed, modeConfig(f, scoring.ModeRandom), nil)
	}},
	{ArmLeastLoaded, "scoring.Select, mode least-loaded", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newSelectArm(f, seed, modeConfig(f, scoring.ModeLeastLoaded), nil)
	}},
	{ArmLLMD, "llm-d EPP: 2:1:1 prefix (KV-event index) / queue / KV-utilization scorers, max score", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newSelectArm(f, seed, modeConfig(f, scoring.ModeKV), bench.NewLLMDSelector(f.BlockSize))
	}},
	{ArmSGLang, "sgl-router cache_aware over its own approximate tree of routed prompts (no KV events)", newSGLangArm},
	{ArmDynamo, "Dynamo's default cost (scoring.Select, kv mode, default weights) over the KV-event index and scoring/load trackers", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newSelectArm(f, seed, modeConfig(f, scoring.ModeKV), nil)
	}},
	{ArmDynamoApprox, "dynamo without KV events: scoring.Approx's index of routed prompts (TTL 120 s)", newApproxArm},
	{ArmDynamoScale8, "dynamo with --router-prefill-load-scale 8 (diagnostic)", func(f *Fleet, seed uint64) (Scheduler, error) {
		c := modeConfig(f, scoring.ModeKV)
		c.PrefillLoadScale = 8
		return newSelectArm(f, seed, c, nil)
	}},
}

// ArmNames lists the built-in arms in order.
func ArmNames() []string {
	out := make([]string, len(Arms))
	for i, a := range Arms {
		out[i] = a.Name
	}
	return out
}

// LookupArm returns the named built-in arm.
func LookupArm(name string) (Arm, error) {
	i := slices.IndexFunc(Arms, func(a Arm) bool { return a.Name == name })
	if i < 0 {
		return Arm{}, fmt.Errorf("%w: unknown arm %q (have %v)", ErrBadConfig, name, ArmNames())
	}
	return Arms[i], nil
}

func modeConfig(f *Fleet, mode scoring.RouterMode) scoring.Config {
	c := scoring.DefaultConfig()
	c.Mode = mode
	c.BlockSize = f.BlockSize
	return c
}

// newRNG is the seeded source of one run's random choices.
func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// selectArm is the router's decision path without the actors: overlap from the KV-event index, load
// from one scoring/load tracker per worker (charged on route, prefill cleared at the first token, freed
// at the end, as the router's scheduler does), capacity from the fleet's shape and scraped KV usage, then
// a scoring.Selector. No queue: Dynamo's default has no queue threshold.
type selectArm struct {
	f        *Fleet
	cfg      scoring.Config
	sel      scoring.Selector
	rng      *rand.Rand
	trackers []*load.Tracker
	where    map[string]int
	rr       uint64
	// match overrides the fleet index (the sglang arm's tree); nil uses f.Index.
	match  func(r *Request, cands []scoring.Candidate)
	scores []prefix.Score
	cands  []scoring.Candidate
}

func newSelectArm(f *Fleet, seed uint64, cfg scoring.Config, sel scoring.Selector) (*selectArm, error) {
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	if sel == nil {
		c := cfg
		sel = scoring.SelectorFunc(func(req scoring.Request, cands []scoring.Candidate, rng scoring.RNG) (scoring.Decision, error) {
			return scoring.Select(req, cands, &c, rng)
		})
	}
	a := &selectArm{f: f, cfg: cfg, sel: sel, rng: newRNG(seed), where: make(map[string]int), cands: make([]scoring.Candidate, f.Workers)}
	lc := load.ConfigFrom(&cfg)
	if err := lc.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	for range f.Workers {
		a.trackers = append(a.trackers, load.New(lc))
	}
	return a, nil
}

func (a *selectArm) candidates(r *Request) []scoring.Candidate {
	for w := range a.cands {
		t := a.trackers[w]
		c := scoring.Candidate{Worker: Key(w), Load: t.Load(r.Chain, a.cfg.AssumeKVReuse)}
		c.InFlight = c.Load.ActiveRequests
		c.Capacity.TotalKVBlocks = uint64(a.f.TotalKVBlocks)
		c.Capacity.MaxNumBatchedTokens = uint64(a.f.MaxNumBatchedTokens)
		c.Capacity.KVUsedBlocks, c.Capacity.KVUsedKnown = a.f.KVUsed(w)
		a.cands[w] = c
	}
	if a.match != nil {
		a.match(r, a.cands)
		return a.cands
	}
	a.scores = a.f.Index.FindMatches(r.Local, a.scores[:0])
	for _, s := range a.scores {
		if w := WorkerOf(scoring.WorkerKey(s.Worker)); w >= 0 && w < len(a.cands) {
			a.cands[w].Overlap.Device = s.Blocks
		}
	}
	return a.cands
}

// Route implements Scheduler.
func (a *selectArm) Route(now time.Time, r *Request) (Route, error) {
	cands := a.candidates(r)
	d, err := a.sel.Select(scoring.Request{ISL: r.ISL, RoundRobin: a.rr}, cands, a.rng)
	a.rr++
	if err != nil {
		return Route{}, err
	}
	if err := a.trackers[d.Index].AddRequest(load.Request{ID: r.ID, SeqHashes: r.Chain, ISL: r.ISL, OverlapBlocks: d.Overlap, Now: now}); err != nil {
		return Route{}, err
	}
	a.where[r.ID] = d.Index
	return Route{Worker: d.Index, OverlapBlocks: int(d.Overlap)}, nil
}

// PrefillDone implements Scheduler.
func (a *selectArm) PrefillDone(_ time.Time, id string) []Released {
	if w, ok := a.where[id]; ok {
		a.trackers[w].MarkPrefillCompleted(id)
	}
	return nil
}

// Free implements Scheduler.
func (a *selectArm) Free(_ time.Time, id string) []Released {
	if w, ok := a.where[id]; ok {
		a.trackers[w].Free(id)
		delete(a.where, id)
	}
	return nil
}

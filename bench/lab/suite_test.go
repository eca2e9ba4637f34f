package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/bench"
)

// TestRunSuite runs a suite of two cases (the trace's head, and a generated workload on another profile
// and fleet) and checks that each study is the seed study of its case, run by the lab itself, that the
// per-seed "both" count and the tally come from the runs' own points, and that the suite is deterministic.
func TestRunSuite(t *testing.T) {
	tr := &bench.Trace{Requests: headTrace(t).Requests[:120]}
	gen := DefaultGenConfig("")
	gen.Duration = 20 * time.Second
	cfg := DefaultConfig()
	cfg.Arms = []string{ArmKV, ArmLLMD, ArmSGLang}
	cfg.KneeSLO = 2 // the suite does not bisect
	cases := []SuiteCase{
		{WorkloadTrace, ProfileMocker, 4, []float64{2, 4}},
		{GenTenants, ProfileLlama8B, 6, []float64{1}},
	}
	var asked []string
	load := func(w string) (Workload, error) {
		asked = append(asked, w)
		if w == WorkloadTrace {
			return func(uint64) (string, *bench.Trace, Images, error) { return "head", tr, nil, nil }, nil
		}
		return func(seed uint64) (string, *bench.Trace, Images, error) {
			g := gen
			g.Kind, g.Seed = w, seed
			t, im, err := GenerateImages(g)
			return w, t, im, err
		}, nil
	}
	seeds := []uint64{5, 8}
	peers := []string{ArmLLMD, ArmSGLang}
	s, err := RunSuite(context.Background(), cfg, cases, seeds, peers, load)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, []string{WorkloadTrace, GenTenants}) || len(s.Studies) != 2 || !slices.Equal(s.Peers, peers) {
		t.Fatalf("asked %v, %d studies, peers %v", asked, len(s.Studies), s.Peers)
	}
	for i, c := range cases {
		cc := cfg
		cc.Profile, cc.Workers, cc.ArrivalSpeedups, cc.KneeSLO = c.Profile, c.Workers, c.Speedups, 0
		w, _ := load(c.Workload)
		one, err := RunSeeds(context.Background(), cc, seeds, peers, w)
		if err != nil {
			t.Fatal(err)
		}
		ja, _ := json.Marshal(one)
		jb, _ := json.Marshal(s.Studies[i])
		if !bytes.Equal(ja, jb) {
			t.Fatalf("case %d: the suite's study differs from RunSeeds of its case", i)
		}
		r0 := s.Studies[i].Runs[0]
		if r0.Workers != c.Workers || r0.Profile != c.Profile || len(r0.Knees) != 0 {
			t.Fatalf("case %d ran %d workers, profile %s, %d knees", i, r0.Workers, r0.Profile, len(r0.Knees))
		}
	}
	// Both, from the runs' points: kv at or above the best peer's hit rate and at or under its TTFT p90.
	var want SuiteTally
	want.Arm = ArmKV
	for _, st := range s.Studies {
		for _, c := range st.Cells {
			if c.Arm != ArmKV {
				continue
			}
			both, itlWins, split, dominated := 0, 0, 0, 0
			for _, r := range st.Runs {
				var kv, bestHit, bestP90, bestITL = 0.0, math.Inf(-1), math.Inf(1), math.Inf(1)
				var kvP90, kvITL float64
				type point struct{ hit, p90 float64 }
				var peerPoints []point
				for _, p := range r.Points {
					if p.ArrivalSpeedup != c.ArrivalSpeedup {
						continue
					}
					hit := p.HitRate / r.Pooled.HitRate
					if p.Arm == ArmKV {
						kv, kvP90, kvITL = hit, p.TTFT.P90, p.ITL.Mean
					} else {
						bestHit, bestP90, bestITL = max(bestHit, hit), min(bestP90, p.TTFT.P90), min(bestITL, p.ITL.Mean)
						peerPoints = append(peerPoints, point{hit, p.TTFT.P90})
					}
				}
				if kv >= bestHit && kvP90 <= bestP90 {
					both++
				}
				if kvITL <= bestITL {
					itlWins++
				}
				if !slices.Contains(peerPoints, point{bestHit, bestP90}) {
					split++
				}
				if slices.ContainsFunc(peerPoints, func(p point) bool { return p.hit > kv && p.p90 < kvP90 }) {
					dominated++
				}
			}
			if c.Split != split || c.Dominated != dominated || dominated > len(seeds)-both {
				t.Fatalf("kv at ×%v: split %d, dominated %d, want %d, %d", c.ArrivalSpeedup, c.Split, c.Dominated, split, dominated)
			}
			want.SplitPairs += split
			want.Dominated += dominated
			if c.ITLWins != itlWins || c.ITL.Mean <= 0 {
				t.Fatalf("kv at ×%v: ITL wins %d, want %d (ITL over the best peer's %v)", c.ArrivalSpeedup, c.ITLWins, itlWins, c.ITL.Mean)
			}
			want.ITLPairs += itlWins
			if c.BothWins != both || both > min(c.HitWins, c.TTFTWins) {
				t.Fatalf("kv at ×%v: both %d, want %d (hit %d, TTFT %d)", c.ArrivalSpeedup, c.BothWins, both, c.HitWins, c.TTFTWins)
			}
			want.Cells++
			want.Pairs += len(seeds)
			want.BothPairs += both
			want.HitPairs += c.HitWins
			if c.OfPooled.Mean >= 95 {
				want.At95++
			}
		}
	}
	tally := s.Tally()
	if len(tally) != 1 || tally[0].Arm != ArmKV || tally[0].Cells != 3 || tally[0].Pairs != 6 ||
		tally[0].BothPairs != want.BothPairs || tally[0].HitPairs != want.HitPairs || tally[0].At95 != want.At95 ||
		tally[0].ITLPairs != want.ITLPairs || tally[0].ITLWorst <= 0 || tally[0].SplitPairs != want.SplitPairs ||
		tally[0].Dominated != want.Dominated {
		t.Fatalf("tally %+v, want %+v", tally, want)
	}
	tables := s.Tables()
	if len(tables) != 2+len(s.Studies[0].Tables())+len(s.Studies[1].Tables()) || len(tables[1].Rows) != 3 {
		t.Fatalf("%d tables, %d cell rows", len(tables), len(tables[1].Rows))
	}
	again, err := RunSuite(context.Background(), cfg, cases, seeds, peers, load)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(s)
	jb, _ := json.Marshal(again)
	if !bytes.Equal(ja, jb) {
		t.Fatal("the same suite twice gave different results")
	}
	if _, err := RunSuite(context.Background(), cfg, nil, seeds, peers, load); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("empty suite: %v", err)
	}
	bad := []SuiteCase{{GenTenants, "no-such-profile", 4, []float64{1}}}
	if _, err := RunSuite(context.Background(), cfg, bad, seeds, peers, load); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("unknown profile: %v", err)
	}
}

// TestStandingCases: the trace's six cases only with a trace, and every generated workload on the three
// profiles, with distinct cases.
func TestStandingCases(t *testing.T) {
	with, without := StandingCases(true), StandingCases(false)
	if len(with) != len(without)+6 || len(without) != 5*len(GenKinds) {
		t.Fatalf("%d cases with the trace, %d without", len(with), len(without))
	}
	for i, c := range with {
		for _, d := range with[:i] {
			if c.Workload == d.Workload && c.Profile == d.Profile && c.Workers == d.Workers {
				t.Fatalf("case %+v twice", c)
			}
		}
		if (c.Workload == WorkloadTrace) != (i < 6) || !slices.Contains(ProfileNames(), c.Profile) || len(c.Speedups) == 0 {
			t.Fatalf("case %d %+v", i, c)
		}
	}
}

// TestPlacedOracle: the placed oracle is the pooled one when one worker serves everything; on a fleet
// it is at most the unbounded oracle, and a placement that splits the agentic loops (round-robin) gets
// less of it than kv's. (It is a model, not a bound on the engines: recency at arrival, not at release,
// and no blocks held by running requests; here the engines get no more than it.)
func TestPlacedOracle(t *testing.T) {
	tr := &bench.Trace{Requests: headTrace(t).Requests[:120]}
	cfg := DefaultConfig()
	cfg.Arms, cfg.ArrivalSpeedups, cfg.KneeSLO = []string{ArmKV, ArmRoundRobin}, []float64{4}, 0
	cfg.Workers = 1
	res, err := Run(context.Background(), cfg, "head", tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Points {
		if p.PlacedHitRate != res.Pooled.HitRate {
			t.Fatalf("%s on one worker: placed %v, pooled %v", p.Arm, p.PlacedHitRate, res.Pooled.HitRate)
		}
	}
	// Agentic tool loops on 4 workers: a loop's turns reuse its prefix only where its earlier turns ran.
	gc := DefaultGenConfig(GenAgentic)
	gc.Duration = time.Minute
	if tr, _, err = GenerateImages(gc); err != nil {
		t.Fatal(err)
	}
	cfg.Workers = 4
	if res, err = Run(context.Background(), cfg, GenAgentic, tr); err != nil {
		t.Fatal(err)
	}
	kv, rr := res.Points[0], res.Points[1]
	if kv.PlacedHitRate > res.Unbounded.HitRate || kv.PlacedHitRate < kv.HitRate || rr.PlacedHitRate >= kv.PlacedHitRate {
		t.Fatalf("placed: kv %v (engines %v), round-robin %v, unbounded %v", kv.PlacedHitRate, kv.HitRate, rr.PlacedHitRate, res.Unbounded.HitRate)
	}
}

// TestSeedCellSplitAndDominated holds the split and dominated counts to hand-made runs: a seed whose
// bests are two peers, one where a single peer beats the arm on both lines, and one the arm wins.
func TestSeedCellSplitAndDominated(t *testing.T) {
	run := func(kv, llmd, sglang [2]float64) *Result {
		r := &Result{Pooled: bench.OracleResult{HitRate: 1}}
		for _, a := range []struct {
			arm string
			hp  [2]float64
		}{{ArmKV, kv}, {ArmLLMD, llmd}, {ArmSGLang, sglang}} {
			p := bench.ArmResult{Arm: a.arm, ArrivalSpeedup: 2, HitRate: a.hp[0]}
			p.TTFT.P90 = a.hp[1]
			r.Points = append(r.Points, p)
		}
		return r
	}
	st := &SeedStudy{Seeds: []uint64{1, 2, 3}, Peers: []string{ArmLLMD, ArmSGLang}, Runs: []*Result{
		run([2]float64{0.85, 0.7}, [2]float64{0.9, 1.0}, [2]float64{0.8, 0.5}),  // llm-d caches most, SGLang answers soonest
		run([2]float64{0.85, 0.45}, [2]float64{0.9, 0.4}, [2]float64{0.8, 0.5}), // llm-d best on both, and ahead of kv on both
		run([2]float64{0.95, 0.3}, [2]float64{0.9, 0.4}, [2]float64{0.9, 0.4}),  // tied peers; kv ahead of both
	}}
	st.summarize()
	kv := st.Cells[0]
	if kv.Arm != ArmKV || kv.Split != 1 || kv.Dominated != 1 || kv.BothWins != 1 || kv.HitWins != 1 || kv.TTFTWins != 1 {
		t.Fatalf("kv cell %+v: want split 1, dominated 1, both 1", kv)
	}
	if st.Cells[1].Peered || st.Cells[1].Split != 0 {
		t.Fatalf("a peer's cell is counted: %+v", st.Cells[1])
	}
}

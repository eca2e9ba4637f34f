package sched

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// TestGroupedOverlapsDecideAlike: the same requests routed with the index's answer in groups (what the
// router passes) and as Scores decide alike, decision for decision, under every selection path: the
// kvroute preset's calibrated cost (with the prefill drain, and with and without predict-on-route, whose
// predictions overlaps merges into the groups), Dynamo's one-pass argmin, its softmax over candidates,
// and with busy thresholds. The index holds 150 workers (three bitset words), some the
// machine does not route to, and during the run workers leave the index and others take their slots,
// and the machine's fleet changes (its slot maps are rebuilt).
func TestGroupedOverlapsDecideAlike(t *testing.T) {
	configs := map[string]func(*scoring.Config){
		"kvroute":    func(*scoring.Config) {},
		"no-predict": func(c *scoring.Config) { c.PredictedTTL = scoring.SomeDuration(0) },
		"dynamo":     func(c *scoring.Config) { c.Preset = scoring.PresetDynamo },
		"softmax":    func(c *scoring.Config) { c.Preset, c.Temperature = scoring.PresetDynamo, 0.5 },
		"thresholds": func(c *scoring.Config) {
			c.Preset, c.ActivePrefillTokensThreshold = scoring.PresetDynamo, scoring.Some(60)
		},
	}
	for name, set := range configs {
		t.Run(name, func(t *testing.T) {
			cfg := scoring.DefaultConfig()
			cfg.Mode, cfg.BlockSize = scoring.ModeKV, 4
			set(&cfg)
			seed := uint64(7)
			machines := [2]*Machine{}
			for i := range machines {
				m, err := New(cfg, nil, Options{Seed: &seed})
				if err != nil {
					t.Fatal(err)
				}
				machines[i] = m
			}
			now := time.Unix(1, 0)
			addWorker := func(id uint64) {
				for _, m := range machines {
					m.AddWorker(now, Worker{ID: id})
				}
			}
			for id := uint64(1); id <= 140; id++ { // workers 141..150 are in the index only
				addWorker(id)
			}
			ix := prefix.New()
			rng := rand.New(rand.NewPCG(1, 2))
			families := make([][]uint64, 12)
			for f := range families {
				families[f] = make([]uint64, 40)
				for i := range families[f] {
					families[f][i] = rng.Uint64()
				}
			}
			engine := uint64(1)
			store := func(id uint64) {
				f := families[rng.IntN(len(families))]
				n := 1 + rng.IntN(len(f))
				blocks := make([]prefix.Block, n)
				for i := range blocks {
					blocks[i] = prefix.Block{EngineHash: engine, LocalHash: f[i]}
					engine++
				}
				if err := ix.Store(prefix.WorkerKey{WorkerID: id}, 0, false, blocks); err != nil {
					t.Fatal(err)
				}
			}
			for id := uint64(1); id <= 150; id++ {
				for range 1 + rng.IntN(3) {
					store(id)
				}
			}
			var active []string
			var mt prefix.Matches
			raised := 0
			for r := range 600 {
				switch r {
				case 200: // slots change hands in the index
					ix.RemoveWorker(3)
					ix.RemoveWorker(77)
					store(151)
					store(152)
				case 400: // the fleet changes
					addWorker(151)
					for _, m := range machines {
						m.RemoveWorker(now, 5)
					}
				}
				f := families[rng.IntN(len(families))]
				local := append([]uint64(nil), f[:1+rng.IntN(len(f))]...)
				for range rng.IntN(20) {
					local = append(local, rng.Uint64())
				}
				var q prefix.Query
				q.Reset(local)
				mt.Reset()
				ix.Match(&q, &mt)
				scores := ix.FindMatches(local, nil)
				id := fmt.Sprint("r", r)
				isl := len(local)*cfg.BlockSize + rng.IntN(4)
				var ds [2]Decision
				for i, m := range machines {
					req := &Request{ID: id, Local: local, ISL: isl, Matched: true}
					if i == 0 {
						req.Scores = scores
					} else {
						req.Matches = &mt
					}
					d, queued, err := m.Route(now, req)
					if err != nil || queued {
						t.Fatalf("request %d: machine %d: queued %v, %v", r, i, queued, err)
					}
					ds[i] = d
				}
				if len(machines[1].sc.raised) > 0 {
					raised++
				}
				if a, b := ds[0], ds[1]; a.Worker != b.Worker || a.OverlapBlocks != b.OverlapBlocks || a.Cost != b.Cost || a.CachedTokens != b.CachedTokens {
					t.Fatalf("request %d: with Scores %+v, with groups %+v", r, a, b)
				}
				active = append(active, id)
				now = now.Add(time.Millisecond)
				// Keep some requests active (load, shared prefixes in prefill), finish others.
				if len(active) > 30 {
					k := rng.IntN(len(active))
					done := active[k]
					active = append(active[:k], active[k+1:]...)
					prefilled := rng.IntN(2) == 0
					for _, m := range machines {
						if prefilled {
							_, _ = m.PrefillDone(now, done)
						}
						// A request on the worker removed at 400 was freed with it.
						if _, err := m.Free(now, done); err != nil && !errors.Is(err, ErrUnknownRequest) {
							t.Fatal(err)
						}
					}
				}
			}
			if predicts := machines[1].pred.on(); predicts != (raised > 0) {
				t.Fatalf("predict-on-route %v, but %d decisions merged a prediction into the groups", predicts, raised)
			}
		})
	}
}

// TestGroupedOverlapsScatterAlike: overlaps gives the same per-target overlaps, the same holder (the
// first in target order among the largest) and the same sole flag from groups as from the Scores they
// expand to, also with predictions merged (into the Scores by maxScores, into the groups by overlaps,
// which keeps the overlaps they raised), and sole is what its definition says: no other listed worker,
// a target or not, holds as many blocks.
func TestGroupedOverlapsScatterAlike(t *testing.T) {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 4
	m, err := New(cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 100; id++ { // 101..130 are in the index only
		m.AddWorker(time.Unix(0, 0), Worker{ID: id})
	}
	ix := prefix.New()
	rng := rand.New(rand.NewPCG(3, 4))
	engine := uint64(1)
	for id := uint64(1); id <= 130; id++ {
		for range 1 + rng.IntN(2) {
			// Few families and mostly short chains: workers often tie for the longest overlap.
			n, f := 1+rng.IntN(6), uint64(rng.IntN(3))
			if rng.IntN(10) == 0 {
				n += rng.IntN(30)
			}
			blocks := make([]prefix.Block, n)
			for i := range blocks {
				blocks[i] = prefix.Block{EngineHash: engine, LocalHash: f<<32 | uint64(i+1)}
				engine++
			}
			if err := ix.Store(prefix.WorkerKey{WorkerID: id}, 0, false, blocks); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mt prefix.Matches
	soles := 0
	for r := range 300 {
		f := uint64(rng.IntN(3))
		local := make([]uint64, 1+rng.IntN(36))
		for i := range local {
			local[i] = f<<32 | uint64(i+1)
		}
		scores := ix.FindMatches(local, nil)
		primary := append([]uint32(nil), m.overlaps(overlap{scores: scores})...)
		// Predictions as the side index makes them: longer than anything the primary lists, for targets
		// and for a worker the machine does not route to, sometimes tied.
		floor := uint32(0)
		for _, s := range scores {
			floor = max(floor, s.Blocks)
		}
		var side []prefix.Score
		for range rng.IntN(4) {
			id := uint64(1 + rng.IntN(110))
			side = append(side, prefix.Score{Worker: prefix.WorkerKey{WorkerID: id}, Blocks: floor + 1 + uint32(rng.IntN(2))})
		}
		slices.SortFunc(side, func(a, b prefix.Score) int { return cmp.Compare(a.Worker.WorkerID, b.Worker.WorkerID) })
		side = slices.CompactFunc(side, func(a, b prefix.Score) bool { return a.Worker == b.Worker })
		rng.Shuffle(len(side), func(i, j int) { side[i], side[j] = side[j], side[i] }) // the holder is not the first listed
		var merged []prefix.Score
		want := append([]uint32(nil), m.overlaps(overlap{scores: maxScores(scores, side, &merged)})...)
		wantMost, wantSole := m.sc.most, m.sc.sole
		var q prefix.Query
		q.Reset(local)
		mt.Reset()
		ix.Match(&q, &mt)
		got := m.overlaps(overlap{grouped: &mt, side: side})
		if !slices.Equal(got, want) || m.sc.most != wantMost || m.sc.sole != wantSole {
			t.Fatalf("query %d: groups give most %d sole %v %v, Scores most %d sole %v %v", r, m.sc.most, m.sc.sole, got,
				wantMost, wantSole, want)
		}
		for _, x := range m.sc.raised {
			if x.primary != primary[x.target] {
				t.Fatalf("query %d: target %d raised from %d, its primary overlap is %d", r, x.target, x.primary, primary[x.target])
			}
		}
		top, tops := uint32(0), 0
		for _, s := range merged {
			if s.Blocks > top {
				top, tops = s.Blocks, 1
			} else if s.Blocks == top {
				tops++
			}
		}
		if sole := wantMost >= 0 && want[wantMost] == top && tops == 1; sole != wantSole {
			t.Fatalf("query %d: sole %v, want %v (largest %d held by %d)", r, wantSole, sole, top, tops)
		}
		if wantSole {
			soles++
		}
	}
	if soles == 0 || soles == 300 {
		t.Fatalf("%d of 300 queries had a sole holder: the test needs both", soles)
	}
}

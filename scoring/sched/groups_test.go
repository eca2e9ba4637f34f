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
// and with busy thresholds. With a queue, requests wait (their overlap kept while the caller's Matches
// answers the next requests), some past OverlapRefreshAfter (the machine queries its index again, in
// groups or in Scores), and some at the minimum-workers gate first: every release decides alike too.
// The index holds 150 workers (three bitset words), some the machine does not route to, and during the
// run workers leave the index and others take their slots, and the machine's fleet changes (its slot
// maps are rebuilt).
func TestGroupedOverlapsDecideAlike(t *testing.T) {
	configs := map[string]func(*scoring.Config){
		"kvroute":    func(*scoring.Config) {},
		"no-predict": func(c *scoring.Config) { c.PredictedTTL = scoring.SomeDuration(0) },
		"dynamo":     func(c *scoring.Config) { c.Preset = scoring.PresetDynamo },
		"softmax":    func(c *scoring.Config) { c.Preset, c.Temperature = scoring.PresetDynamo, 0.5 },
		"thresholds": func(c *scoring.Config) {
			c.Preset, c.ActivePrefillTokensThreshold = scoring.PresetDynamo, scoring.Some(60)
		},
		// A worker is busy with any prefill in flight, so requests wait once every worker has one.
		"queue": func(c *scoring.Config) { c.QueueThreshold = scoring.Some(0) },
		"queue-refresh": func(c *scoring.Config) {
			c.QueueThreshold, c.OverlapRefreshAfter = scoring.Some(0), time.Millisecond
		},
		"gate-queue": func(c *scoring.Config) { // the gate opens when worker 151 joins, at request 400
			c.QueueThreshold, c.OverlapRefreshAfter, c.MinInitialWorkers = scoring.Some(0), time.Millisecond, 141
		},
	}
	for name, set := range configs {
		t.Run(name, func(t *testing.T) {
			cfg := scoring.DefaultConfig()
			cfg.Mode, cfg.BlockSize = scoring.ModeKV, 4
			set(&cfg)
			seed := uint64(7)
			ix := prefix.New()
			var queries [2]int // the machines' own index reads (a refresh, a release from the gate)
			indexes := [2]Index{scoresIndex{ix, &queries[0]}, groupsIndex{scoresIndex{ix, &queries[1]}}}
			machines := [2]*Machine{}
			for i := range machines {
				m, err := New(cfg, indexes[i], Options{Seed: &seed})
				if err != nil {
					t.Fatal(err)
				}
				machines[i] = m
			}
			now := time.Unix(1, 0)
			var active []string
			released := 0
			alike := func(when string, rel [2][]Released) {
				t.Helper()
				if len(rel[0]) != len(rel[1]) {
					t.Fatalf("%s: released %d with Scores, %d with groups", when, len(rel[0]), len(rel[1]))
				}
				for j, a := range rel[0] {
					b := rel[1][j]
					if a.ID != b.ID || (a.Err == nil) != (b.Err == nil) || !sameChoice(a.Decision, b.Decision) {
						t.Fatalf("%s: released with Scores %+v (%v), with groups %+v (%v)", when, a.Decision, a.Err, b.Decision, b.Err)
					}
					if a.Err == nil {
						active = append(active, a.ID)
						released++
					}
				}
			}
			addWorker := func(id uint64) {
				var rel [2][]Released
				for i, m := range machines {
					rel[i] = m.AddWorker(now, Worker{ID: id})
				}
				alike(fmt.Sprint("worker ", id, " joining"), rel)
			}
			for id := uint64(1); id <= 140; id++ { // workers 141..150 are in the index only
				addWorker(id)
			}
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
			var mt prefix.Matches
			raised, waited := 0, 0
			for r := range 600 {
				switch r {
				case 200: // slots change hands in the index
					ix.RemoveWorker(3)
					ix.RemoveWorker(77)
					store(151)
					store(152)
				case 400: // the fleet changes
					addWorker(151)
					var rel [2][]Released
					for i, m := range machines {
						rel[i] = m.RemoveWorker(now, 5)
					}
					alike("worker 5 leaving", rel)
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
				var queued [2]bool
				for i, m := range machines {
					req := &Request{ID: id, Local: local, ISL: isl, Matched: true}
					if i == 0 {
						req.Scores = scores
					} else {
						req.Matches = &mt
					}
					d, q, err := m.Route(now, req)
					if err != nil {
						t.Fatalf("request %d: machine %d: %v", r, i, err)
					}
					ds[i], queued[i] = d, q
				}
				if len(machines[1].sc.raised) > 0 {
					raised++
				}
				if a, b := ds[0], ds[1]; queued[0] != queued[1] || !sameChoice(a, b) {
					t.Fatalf("request %d: with Scores %+v (queued %v), with groups %+v (queued %v)", r, a, queued[0], b, queued[1])
				}
				if queued[0] {
					waited++
				} else {
					active = append(active, id)
				}
				now = now.Add(time.Millisecond)
				// Keep some requests active (load, shared prefixes in prefill), finish others; with a
				// queue, enough that every worker has a prefill and requests wait, then (from request
				// 300) few, three ending a step, so that the queue drains.
				keep, ends := 30, 1
				if cfg.QueueThreshold.Set {
					keep = 350
					if r >= 300 {
						keep, ends = 60, 3
					}
				}
				for e := 0; e < ends && len(active) >= keep; e++ {
					k := rng.IntN(len(active))
					done := active[k]
					active = append(active[:k], active[k+1:]...)
					prefilled := rng.IntN(2) == 0
					var rel [2][]Released
					for i, m := range machines {
						if prefilled {
							r, _ := m.PrefillDone(now, done)
							rel[i] = r
						}
						// A request on the worker removed at 400 was freed with it.
						r, err := m.Free(now, done)
						if err != nil && !errors.Is(err, ErrUnknownRequest) {
							t.Fatal(err)
						}
						rel[i] = append(rel[i], r...)
					}
					alike(fmt.Sprint("request ", done, " ending"), rel)
				}
			}
			if predicts := machines[1].pred.on(); predicts != (raised > 0) {
				t.Fatalf("predict-on-route %v, but %d decisions merged a prediction into the groups", predicts, raised)
			}
			if queues := cfg.QueueThreshold.Set; queues != (waited > 0) || queues != (released > 0) {
				t.Fatalf("queue %v, but %d requests waited and %d were released", queues, waited, released)
			}
			if requery := cfg.OverlapRefreshAfter < time.Second; queries[0] != queries[1] || requery != (queries[1] > 0) {
				t.Fatalf("refresh after %v, but the machines read their index %v times", cfg.OverlapRefreshAfter, queries)
			}
		})
	}
}

// sameChoice reports whether two decisions chose alike: the worker, its overlap and cost, and the
// cached tokens.
func sameChoice(a, b Decision) bool {
	return a.Worker == b.Worker && a.OverlapBlocks == b.OverlapBlocks && a.Cost == b.Cost && a.CachedTokens == b.CachedTokens
}

// scoresIndex is an index for the machine that answers in Scores (FindMatches) and counts its reads.
type scoresIndex struct {
	ix      *prefix.Index
	queries *int
}

func (x scoresIndex) FindMatches(local []uint64, out []prefix.Score) []prefix.Score {
	*x.queries++
	return x.ix.FindMatches(local, out)
}

func (x scoresIndex) Store(w scoring.WorkerKey, parent uint64, hasParent bool, blocks []prefix.Block) {
	_ = x.ix.Store(prefix.WorkerKey(w), parent, hasParent, blocks)
}

func (x scoresIndex) Remove(w scoring.WorkerKey, hashes []uint64) {
	_ = x.ix.Remove(prefix.WorkerKey(w), hashes)
}

// groupsIndex answers in groups too (a Matcher), as the router's indexer does.
type groupsIndex struct{ scoresIndex }

func (x groupsIndex) Match(local []uint64, m *prefix.Matches) {
	*x.queries++
	var q prefix.Query
	q.Reset(local)
	m.Reset()
	x.ix.Match(&q, m)
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
		checkBestCached(t, m, rng, scores, &mt)
	}
	if soles == 0 || soles == 300 {
		t.Fatalf("%d of 300 queries had a sole holder: the test needs both", soles)
	}
}

// checkBestCached: the queue's best cached prefix (its class and its cost) is the same from groups as
// from Scores, and what its definition says, over the targets, some excluded, with and without a pin.
func checkBestCached(t *testing.T, m *Machine, rng *rand.Rand, scores []prefix.Score, mt *prefix.Matches) {
	t.Helper()
	var exclude []uint64
	for range rng.IntN(3) {
		exclude = append(exclude, uint64(1+rng.IntN(130)))
	}
	var pin *scoring.WorkerKey
	if rng.IntN(3) == 0 {
		pin = &scoring.WorkerKey{WorkerID: uint64(1 + rng.IntN(130))}
	}
	isl := 1 + rng.IntN(200)
	want := uint32(0)
	for _, s := range scores {
		k := scoring.WorkerKey(s.Worker)
		if _, target := m.pos.find(k); target && !slices.Contains(exclude, k.WorkerID) && (pin == nil || pinMatches(k, pin, false)) {
			want = max(want, s.Blocks)
		}
	}
	wantCached := min(int(want)*m.cfg.BlockSize, isl)
	byScores := m.bestCached(scores, nil, isl, pin, false, avoid{exclude: exclude})
	byGroups := m.bestCached(nil, mt, isl, pin, false, avoid{exclude: exclude})
	if byScores != wantCached || byGroups != wantCached {
		t.Fatalf("best cached %d from Scores, %d from groups, want %d (pin %v, exclude %v)", byScores, byGroups, wantCached, pin, exclude)
	}
}

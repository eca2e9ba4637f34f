package sched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// denseViews is what reindex derives from the target list: a join's extend must leave the same.
type denseViews struct {
	Lines             []line
	Tmpl              []candTmpl
	Ctxs, Pfg         []float64
	Prefilling        int64
	PfIdle, Roomy     int
	Index, Pos        []int // each target's t.i, and where its key is found
	Spacious          []bool
	MemoLen, SlotMaps int
}

func viewsOf(m *Machine) denseViews {
	v := denseViews{Lines: m.lines, Tmpl: m.tmpl, Ctxs: m.ctxs, Pfg: m.pfg, Prefilling: m.prefilling, PfIdle: m.pfIdle,
		Roomy: m.roomy, MemoLen: len(m.sc.memo), SlotMaps: len(m.sc.slots)}
	for _, t := range m.list {
		i, ok := m.pos.find(t.key)
		if !ok {
			i = -1
		}
		v.Index, v.Pos, v.Spacious = append(v.Index, t.i), append(v.Pos, i), append(v.Spacious, t.spacious)
	}
	return v
}

// TestJoinExtendsViewsAsRebuildWould drives a machine through routes, prefill completions, frees,
// cache and capacity reports, ticks and removals, with workers joining in between: after every join
// the dense views it extended equal what a full reindex builds from the same targets.
func TestJoinExtendsViewsAsRebuildWould(t *testing.T) {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 1
	seed := uint64(7)
	m, err := New(cfg, nil, Options{Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 9))
	now := time.Unix(0, 0)
	var active []string
	joins := 0
	for step := range 600 {
		now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		switch op := rng.IntN(12); {
		case op == 0 || len(m.list) < 2:
			w := Worker{ID: uint64(1000 + step), DPRanks: 1 + rng.IntN(2), TotalKVBlocks: rng.IntN(2) * 4000}
			m.AddWorker(now, w)
			joins++
			got := viewsOf(m)
			m.reindex()
			if want := viewsOf(m); !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d, join %d: extended views\n%+v\nrebuilt\n%+v", step, joins, got, want)
			}
		case op == 1 && len(m.list) > 4:
			m.RemoveWorker(now, m.list[rng.IntN(len(m.list))].key.WorkerID)
		case op <= 6:
			id := fmt.Sprintf("r%d", step)
			var scores []prefix.Score
			for _, tg := range m.list {
				if rng.IntN(3) == 0 {
					scores = append(scores, prefix.Score{Worker: prefix.WorkerKey(tg.key), Blocks: uint32(rng.IntN(100))})
				}
			}
			if _, queued, err := m.Route(now, &Request{ID: id, Local: prompt(uint64(step%5), 0), ISL: 100, Scores: scores, Matched: true}); err == nil && !queued {
				active = append(active, id)
			}
		case op == 7 && len(active) > 0:
			_, _ = m.PrefillDone(now, active[rng.IntN(len(active))])
		case op == 8 && len(active) > 0:
			k := rng.IntN(len(active))
			_, _ = m.Free(now, active[k])
			active = append(active[:k], active[k+1:]...)
		case op == 9:
			tg := m.list[rng.IntN(len(m.list))]
			m.SetCachedBlocks(tg.key, uint64(rng.IntN(5000)))
			m.SetKVUsage(tg.key, uint64(rng.IntN(5000)))
		case op == 10:
			m.SetCapacity(m.list[rng.IntN(len(m.list))].key.WorkerID, 1000+rng.IntN(8000), 2048)
		default:
			m.Tick(now)
		}
	}
	if joins < 20 {
		t.Fatalf("%d joins: the walk did not exercise extend", joins)
	}
}

// TestJoinIsFoundByTheNextDecision: a decision that listed a worker's key before the worker joined
// remembers it as absent; the join forgets that, so the next decision with the same overlap finds the
// new worker and sends the request where the prompt is cached.
func TestJoinIsFoundByTheNextDecision(t *testing.T) {
	m := sharedMachine(t, scoring.DefaultPredictedTTL, 8)
	now := time.Unix(0, 0)
	late := scoring.WorkerKey{WorkerID: 99}
	scores := []prefix.Score{{Worker: prefix.WorkerKey(late), Blocks: 100}}
	if _, _, err := m.Route(now, &Request{ID: "before", Local: prompt(1, 0), ISL: 100, Scores: scores, Matched: true}); err != nil {
		t.Fatal(err)
	}
	m.AddWorker(now, Worker{ID: late.WorkerID})
	d, _, err := m.Route(now, &Request{ID: "after", Local: prompt(1, 0), ISL: 100, Scores: scores, Matched: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker != late || d.OverlapBlocks != 100 {
		t.Fatalf("routed to %v with overlap %d, want the joined worker %v holding all 100 blocks", d.Worker, d.OverlapBlocks, late)
	}
}

package sched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
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
	EvictedAt         []int64
	Evicting          int
	Index, Pos        []int // each target's t.i, and where its key is found
	Spacious          []bool
	MemoLen, SlotMaps int
	Over              []uint64 // the busy marks by position (busy.go), and their count
	OverN             int
}

func viewsOf(m *Machine) denseViews {
	v := denseViews{Lines: m.lines, Tmpl: m.tmpl, Ctxs: m.ctxs, Pfg: m.pfg, Prefilling: m.prefilling, PfIdle: m.pfIdle,
		Roomy: m.roomy, EvictedAt: m.evictedAt, Evicting: m.evicting, MemoLen: len(m.sc.memo), SlotMaps: len(m.sc.slots),
		Over: slices.Clone(m.over), OverN: m.overN}
	for _, t := range m.list {
		i, ok := m.pos.find(t.key)
		if !ok {
			i = -1
		}
		v.Index, v.Pos, v.Spacious = append(v.Index, t.i), append(v.Pos, i), append(v.Spacious, t.spacious)
	}
	return v
}

// rebuild builds every dense view of the machine again from its target list: new views, extended from
// the first target.
func rebuild(m *Machine) {
	n := len(m.list)
	m.lines, m.tmpl = make([]line, 0, n), make([]candTmpl, 0, n)
	m.ctxs, m.pfg, m.evictedAt = make([]float64, 0, n), make([]float64, 0, n), make([]int64, 0, n)
	m.pos = newPosTable(n)
	m.prefilling, m.pfIdle, m.roomy, m.evicting = 0, 0, 0, 0
	m.over, m.overN = nil, 0
	for _, t := range m.list {
		t.over = false // publish marks them again
	}
	m.extend(0)
}

// TestFleetChangesKeepViewsAsRebuildWould drives a machine through routes, prefill completions, frees,
// cache and capacity reports, health changes and ticks, with workers joining, leaving and registering
// again in between: after every join (which extends the views), every leave (which drops a worker's
// lines and moves the later ones down) and every report the dense views equal what rebuilding them from
// the same targets gives, each worker's ranks are found where they are listed, no departed rank is
// found, and the active requests are those the listed workers' trackers hold.
func TestFleetChangesKeepViewsAsRebuildWould(t *testing.T) {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 1
	cfg.ActivePrefillTokensThreshold = scoring.Some(250) // some targets busy: their marks move too
	m := seededMachine(t, cfg, 7)
	rng := rand.New(rand.NewPCG(3, 9))
	now := time.Unix(0, 0)
	var active []string
	joins, leaves, rejoins := 0, 0, 0
	var exclude, only []uint64
	// same checks the views after a change; moved: the change moved targets, so the positions remembered
	// by key (the memo, the slot maps) must be dropped too.
	same := func(step int, what string, moved bool) {
		t.Helper()
		unhealthy := 0
		for _, tg := range m.list {
			if !tg.healthy {
				unhealthy++
			}
		}
		if unhealthy != m.unhealthy {
			t.Fatalf("step %d, %s: %d unhealthy targets counted, %d listed", step, what, m.unhealthy, unhealthy)
		}
		byID := map[uint64][]int{}
		for i, tg := range m.list {
			byID[tg.key.WorkerID] = append(byID[tg.key.WorkerID], i)
		}
		if m.workerCount() != len(byID) {
			t.Fatalf("step %d, %s: %d workers counted, %d listed", step, what, m.workerCount(), len(byID))
		}
		for id, at := range byID {
			if from, to := m.ranks(id); from != at[0] || to != at[len(at)-1]+1 || to-from != len(at) {
				t.Fatalf("step %d, %s: worker %d's ranks at [%d, %d), listed at %v", step, what, id, from, to, at)
			}
		}
		var carried uint64
		healthy := 0
		for _, l := range m.Loads(nil) {
			if l.Healthy {
				carried += l.Load.ActivePrefillTokens
				healthy++
			}
		}
		if c, h := m.PrefillCarried(); c != carried || h != healthy {
			t.Fatalf("step %d, %s: prefill carried %d by %d healthy targets, Loads says %d by %d", step, what, c, h, carried, healthy)
		}
		held := 0
		for _, tg := range m.list {
			for id := range tg.t.Requests() {
				if m.active[id] != tg {
					t.Fatalf("step %d, %s: request %s on worker %d is not active there", step, what, id, tg.key.WorkerID)
				}
				held++
			}
		}
		if held != len(m.active) {
			t.Fatalf("step %d, %s: %d requests active, %d on the listed workers", step, what, len(m.active), held)
		}
		sick := 0
		for _, tg := range m.list {
			if _, listed := m.sick[tg]; listed != !tg.healthy {
				t.Fatalf("step %d, %s: worker %d healthy %v, listed unhealthy %v", step, what, tg.key.WorkerID, tg.healthy, listed)
			}
			if !tg.healthy {
				sick++
			}
		}
		if len(m.sick) != sick || m.unhealthy != sick {
			t.Fatalf("step %d, %s: %d unhealthy targets, %d listed, %d counted", step, what, sick, len(m.sick), m.unhealthy)
		}
		for i, tg := range m.list { // the last request's exclusions, read again after the change
			if want := !tg.healthy || leftOut(tg.key.WorkerID, exclude, only); m.skip(i, avoid{exclude, only}) != want {
				t.Fatalf("step %d, %s: target %d skipped %v, want %v (excluding %v, only %v)", step, what, i, !want, want, exclude, only)
			}
		}
		got := viewsOf(m)
		rebuild(m)
		want := viewsOf(m)
		if !moved {
			got.MemoLen, got.SlotMaps = want.MemoLen, want.SlotMaps
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d, %s: views kept\n%+v\nrebuilt\n%+v", step, what, got, want)
		}
	}
	for step := range 1200 {
		now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		switch op := rng.IntN(13); {
		case op == 0 || len(m.list) < 2:
			w := Worker{ID: uint64(1000 + step), DPRanks: 1 + rng.IntN(2), TotalKVBlocks: rng.IntN(2) * 4000}
			m.AddWorker(now, w)
			joins++
			same(step, fmt.Sprint("join ", joins), true)
		case op == 1 && len(m.list) > 4:
			gone := m.list[rng.IntN(len(m.list))].key
			m.RemoveWorker(now, gone.WorkerID)
			leaves++
			for r := range uint32(2) {
				if _, ok := m.pos.find(scoring.WorkerKey{WorkerID: gone.WorkerID, DPRank: r}); ok {
					t.Fatalf("step %d: worker %d rank %d found after it left", step, gone.WorkerID, r)
				}
			}
			same(step, fmt.Sprint("leave ", leaves), true)
		case op == 11:
			m.SetHealthy(now, m.list[rng.IntN(len(m.list))].key.WorkerID, rng.IntN(2) == 0)
			same(step, "health", false)
		case op <= 6:
			id := fmt.Sprintf("r%d", step)
			var scores []prefix.Score
			for _, tg := range m.list {
				if rng.IntN(3) == 0 {
					scores = append(scores, prefix.Score{Worker: prefix.WorkerKey(tg.key), Blocks: uint32(rng.IntN(100))})
				}
			}
			// Some requests exclude workers, in one array the test reuses as a caller may (long lists
			// are read through a bitmap the machine must not keep across requests).
			exclude, only = exclude[:0], only[:0]
			for range rng.IntN(3) * rng.IntN(12) {
				exclude = append(exclude, m.list[rng.IntN(len(m.list))].key.WorkerID)
			}
			for range rng.IntN(2) * rng.IntN(14) { // a gateway's subset, some of its workers gone
				only = append(only, m.list[rng.IntN(len(m.list))].key.WorkerID+uint64(rng.IntN(2)*1000))
			}
			d, queued, err := m.Route(now, &Request{ID: id, Local: prompt(uint64(step%5), 0), ISL: 100, Scores: scores, Matched: true,
				Exclude: exclude, Only: only})
			if err == nil && !queued {
				active = append(active, id)
				if leftOut(d.Worker.WorkerID, exclude, only) {
					t.Fatalf("step %d: routed to worker %d, which the request leaves out", step, d.Worker.WorkerID)
				}
			}
			for i, tg := range m.list {
				if want := !tg.healthy || leftOut(tg.key.WorkerID, exclude, only); m.skip(i, avoid{exclude, only}) != want {
					t.Fatalf("step %d: target %d skipped %v, want %v (excluding %v, only %v)", step, i, !want, want, exclude, only)
				}
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
			if rng.IntN(2) == 0 { // its engine evicted a block (age.go)
				m.Evicted([]prefix.Evicted{{Worker: prefix.WorkerKey(tg.key)}})
			}
			same(step, "cache report", false)
		case op == 10:
			m.SetCapacity(m.list[rng.IntN(len(m.list))].key.WorkerID, 1000+rng.IntN(8000), 2048)
			same(step, "capacity", false)
		case op == 12 && rng.IntN(3) == 0: // a worker registering again, its ranks maybe changed
			m.AddWorker(now, Worker{ID: m.list[rng.IntN(len(m.list))].key.WorkerID, DPRanks: 1 + rng.IntN(2)})
			rejoins++
			same(step, "join again", true)
		default:
			m.Tick(now)
		}
	}
	if joins < 40 || leaves < 40 || rejoins < 10 {
		t.Fatalf("%d joins, %d leaves, %d joins again: the walk did not exercise extend and drop", joins, leaves, rejoins)
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

// leftOut is whether a request excluding exclude and, when only is not empty, limited to only may not
// go to worker id: written out here rather than through the machine's own avoid.
func leftOut(id uint64, exclude, only []uint64) bool {
	if slices.Contains(exclude, id) {
		return true
	}
	return len(only) > 0 && !slices.Contains(only, id)
}

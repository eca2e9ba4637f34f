package sched

import (
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// TestEventHealthMarks: a worker sent requests whose events stopped is switched to prediction once
// stale, alone; one whose events came after its requests is caught up (and never switched); a
// predicted worker goes back to its events when they flow again and nothing is pending, and stays while
// a request waits for them; a worker without events (lastBatch false) is left alone; and a decision
// taken outside the lock is dropped when the target changed in between (a new request, a leave), to be
// judged again at the next check.
func TestEventHealthMarks(t *testing.T) {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize, cfg.UseKVEvents = scoring.ModeKV, 1, true
	m := seededMachine(t, cfg, 1)
	t0 := time.Unix(100, 0)
	for id := range 6 {
		m.AddWorker(t0, Worker{ID: uint64(id + 1), DPRanks: 1 + id%2})
	}
	set := func(id uint64, since time.Time, approx bool) {
		from, to := m.ranks(id)
		for _, tg := range m.list[from:to] {
			tg.pendingSince, tg.approx = 0, approx
			if !since.IsZero() {
				tg.pendingSince = since.UnixNano()
			}
		}
	}
	const stale = 10 * time.Second
	now := t0.Add(time.Minute)
	set(1, t0, false)                   // requests a minute ago, events silent since before: stale
	set(2, t0, false)                   // requests a minute ago, events after them: caught up
	set(3, time.Time{}, true)           // predicted, events flowing, nothing pending: back
	set(4, now.Add(-time.Second), true) // predicted, a request waits for events: stays
	set(5, t0, false)                   // no events at all (lastBatch false): left alone
	last := map[uint64]time.Time{1: t0.Add(-time.Hour), 2: t0.Add(time.Second), 3: now.Add(-time.Second), 4: now.Add(-2 * time.Second), 6: now}
	lastBatch := func(id uint64) (time.Time, bool) {
		tm, ok := last[id]
		return tm, ok
	}
	marks := m.EventMarks(nil)
	if len(marks) != 7 { // workers 1 to 5, by rank (2 and 4 have two)
		t.Fatalf("%d marks: %+v", len(marks), marks)
	}
	JudgeEvents(now, stale, marks, lastBatch)
	toApprox, toEvents := m.ApplyEvents(marks)
	if !slices.Equal(toApprox, []uint64{1}) || !slices.Equal(toEvents, []uint64{3}) {
		t.Fatalf("to prediction %v, to events %v", toApprox, toEvents)
	}
	for _, tg := range m.list {
		id := tg.key.WorkerID
		wantApprox := id == 1 || id == 4
		wantPending := id == 1 || id == 4 || id == 5
		if tg.approx != wantApprox || (tg.pendingSince != 0) != wantPending {
			t.Fatalf("worker %d rank %d: approx %v pending %v", id, tg.key.DPRank, tg.approx, tg.pendingSince != 0)
		}
	}

	// Judged, then changed before the decisions are applied: dropped, and applied at the next check.
	set(2, t0, false)
	marks = m.EventMarks(marks)
	JudgeEvents(now, stale, marks, func(id uint64) (time.Time, bool) {
		if id == 2 {
			return t0.Add(-time.Hour), true // stale: would switch
		}
		return lastBatch(id)
	})
	set(2, now, false) // a new request since the marks were taken
	if toApprox, _ := m.ApplyEvents(marks); slices.Contains(toApprox, 2) {
		t.Fatal("worker 2 switched on a mark taken before its new request")
	}
	m.RemoveWorker(now, 2)
	if toApprox, toEvents := m.ApplyEvents(marks); len(toApprox)+len(toEvents) != 0 {
		t.Fatalf("marks of a departed worker applied: %v %v", toApprox, toEvents)
	}
	if toApprox, _ := m.EventHealth(now, stale, func(uint64) (time.Time, bool) { return t0.Add(-time.Hour), true }); !slices.Contains(toApprox, 5) {
		t.Fatalf("worker 5, its last batch an hour before its requests: not switched (%v)", toApprox)
	}
}

// BenchmarkEventHealth: the degradation check once a tick at W=8,192 workers (one rank each), every one
// sent requests since its last batch and none stale: "locked" is what the scheduler's lock covers
// (EventMarks and ApplyEvents; JudgeEvents runs outside it), "whole" the three in one, with the last
// batch times looked up in a map as the scheduler did under the lock before.
func BenchmarkEventHealth(b *testing.B) {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize, cfg.UseKVEvents = scoring.ModeKV, 1, true
	m := seededMachine(b, cfg, 1)
	const w = 8192
	now := time.Unix(1000, 0)
	last := make(map[uint64]time.Time, w)
	for id := range uint64(w) {
		m.AddWorker(now, Worker{ID: id + 1})
		last[id+1] = now.Add(-time.Second)
	}
	for _, tg := range m.list {
		tg.pendingSince = now.UnixNano()
	}
	lastBatch := func(id uint64) (time.Time, bool) { t, ok := last[id]; return t, ok }
	b.Run("locked", func(b *testing.B) {
		var marks []EventMark
		for range b.N {
			marks = m.EventMarks(marks)
			m.ApplyEvents(marks)
		}
	})
	b.Run("whole", func(b *testing.B) {
		for range b.N {
			m.EventHealth(now, time.Minute, lastBatch)
		}
	})
}

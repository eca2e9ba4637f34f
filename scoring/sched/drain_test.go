package sched

import (
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// drainFleet is sharedMachine (predict-on-route off) over n workers with a step budget of 512 tokens.
func drainFleet(t *testing.T, n int) *Machine {
	t.Helper()
	m := sharedMachine(t, 0, 0)
	for id := range n {
		m.AddWorker(time.Unix(0, 0), Worker{ID: uint64(id + 1), MaxNumBatchedTokens: 512})
	}
	return m
}

// routeLong pins an unrelated prompt of n tokens to worker 1 at second at.
func routeLong(t *testing.T, m *Machine, at int64, n int) {
	t.Helper()
	long := make([]uint64, n)
	for i := range long {
		long[i] = uint64(i+1) * 7919
	}
	pin := scoring.WorkerKey{WorkerID: 1}
	if _, _, err := m.Route(time.Unix(at, 0), &Request{ID: "long", Local: long, ISL: n, Pin: &pin, Matched: true}); err != nil {
		t.Fatal(err)
	}
}

// checkNextTurn routes the conversation's next turn (3,000 blocks cached on worker 1, 100 more) at second
// at and checks whether it stayed on worker 1 and that worker 1 kept the charge of the long prompt (and
// the turn's 100 tokens when it stayed): the drain is for the decision alone.
func checkNextTurn(t *testing.T, m *Machine, at int64, long uint64, stay bool, what string) {
	t.Helper()
	d, _, err := m.Route(time.Unix(at, 0), &Request{ID: "next", Local: prompt(1, 3000)[:3100], ISL: 3100,
		Scores: onWorker1(3000), Matched: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Worker.WorkerID == 1; got != stay {
		t.Errorf("%s: next turn at %d s went to worker %d (stay on 1: %v)", what, at, d.Worker.WorkerID, stay)
	}
	want := long
	if stay {
		want += 100
	}
	if m.lines[0].prefill != want {
		t.Errorf("%s: worker 1's charge after the decision is %d, want %d", what, m.lines[0].prefill, want)
	}
}

// TestHolderStartedPrefill: worker 1 holds a conversation's 3,000-block context, its previous turn still
// running there (decoding: the one active request sharing it), and an unrelated 20,000-token prompt
// routed there at 1 s, far longer than a step's 512-token budget. The next turn, 100 tokens more, does
// not leave its context for the idle workers once the engine has started that prompt (at 2 s: its charge
// is not counted on the holder), and leaves when it arrives with it (at 1 s: nothing started yet).
func TestHolderStartedPrefill(t *testing.T) {
	for _, c := range []struct {
		at   int64
		stay bool
	}{{2, true}, {1, false}} {
		m := drainFleet(t, 4)
		pin := scoring.WorkerKey{WorkerID: 1}
		ctx := prompt(1, 3000)[:3000]
		if _, _, err := m.Route(time.Unix(0, 0), &Request{ID: "prev", Local: ctx, ISL: 3000, Pin: &pin, Matched: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.PrefillDone(time.Unix(0, 5e8), "prev"); err != nil {
			t.Fatal(err)
		}
		routeLong(t, m, 1, 20000)
		checkNextTurn(t, m, c.at, 20000, c.stay, "4 workers")
	}
}

// TestHolderIdleContextWideFleet: worker 1 holds a conversation's 3,000-block context cached idle (the
// engines report it; no request there shares it: its previous turn ended) and an unrelated
// 40,000-token prompt is routed there at 1 s. The next turn, 100 tokens more, arriving at the same
// instant, stays with its context on 16 workers (the prompt's charge is left out though it has not
// started), and leaves for an idle worker on 4 (neither the idle context nor an unstarted head is
// drained on a small fleet).
func TestHolderIdleContextWideFleet(t *testing.T) {
	for _, c := range []struct {
		workers int
		stay    bool
	}{{16, true}, {4, false}} {
		m := drainFleet(t, c.workers)
		routeLong(t, m, 1, 40000)
		checkNextTurn(t, m, 1, 40000, c.stay, strconv.Itoa(c.workers)+" workers")
	}
}

// TestDrainPart: an idle-context decision leaves out the head's whole charge before α is fit, and then
// what the engine has prefilled of it at α (1,024 tokens a second here) and 6 in 10 of the rest.
func TestDrainPart(t *testing.T) {
	m := &Machine{cal: scoring.NewCalibrator()}
	if got := m.drainPart(40000, 5e9); got != 40000 {
		t.Errorf("before the fit: %d, want 40000", got)
	}
	for range scoring.MinSamples {
		m.cal.Observe(1.0/1024, 0)
	}
	for _, c := range []struct {
		elapsed int64
		want    uint64
	}{{0, 24000}, {-1, 24000}, {10e9, 10240 + 17856}, {50e9, 40000}} {
		if got := m.drainPart(40000, c.elapsed); got != c.want {
			t.Errorf("%d ns after the head started: %d, want %d", c.elapsed, got, c.want)
		}
	}
}

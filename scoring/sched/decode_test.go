package sched

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// decodeMachine is sharedMachine's two workers with --router-decode-weight w.
func decodeMachine(t *testing.T, w float64) *Machine {
	t.Helper()
	m := sharedMachine(t, 0, 2)
	cfg := *m.Config()
	cfg.DecodeWeight = w
	if _, err := m.SetConfig(time.Unix(0, 0), cfg); err != nil {
		t.Fatal(err)
	}
	return m
}

// decodeFleet is a kvroute-preset machine (--router-decode-weight 1) with two workers (block size 1) that has learned its prefill
// (α = prefillPerToken seconds a token) and its decode (decodeBase + decodePerBlock seconds a token per
// context block decoded beside a request) from requests run through Route, PrefillDone, RecordOutput
// and Free; bg long requests stay active on worker 1 at the end (their context: bg × bgISL blocks).
func decodeFleet(t *testing.T, bg int) (*Machine, time.Time) {
	t.Helper()
	const (
		prefillPerToken = 1e-4
		decodeBase      = 5e-3
		decodePerBlock  = 2e-6
		bgISL           = 2000
	)
	m := decodeMachine(t, 1)
	now := time.Unix(10, 0)
	ctx := [3]float64{} // the context each worker decodes, as the test keeps it
	route := func(id string, w uint64, isl int) {
		t.Helper()
		pin := scoring.WorkerKey{WorkerID: w}
		if _, _, err := m.Route(now, &Request{ID: id, Local: prompt(uint64(len(id))<<8|w, 0)[:min(isl, 100)], ISL: isl, Pin: &pin, Matched: true}); err != nil {
			t.Fatal(err)
		}
		ctx[w] += float64(isl)
		now = now.Add(time.Duration(float64(isl) * prefillPerToken * 1e9)) // an idle worker's prefill
		if _, err := m.PrefillDone(now, id); err != nil {
			t.Fatal(err)
		}
	}
	var bgIDs []string
	for i := range 200 {
		if i%40 == 0 && len(bgIDs) < bg {
			id := fmt.Sprintf("bg%d", len(bgIDs))
			route(id, 1, bgISL)
			bgIDs = append(bgIDs, id)
		}
		w := uint64(1 + i%2)
		id, isl, out := fmt.Sprintf("p%d", i), 50+i%100, 100+i%50
		route(id, w, isl)
		now = now.Add(time.Duration(float64(out-1) * (decodeBase + decodePerBlock*ctx[w]) * 1e9))
		m.RecordOutput(id, out)
		if _, err := m.Free(now, id); err != nil {
			t.Fatal(err)
		}
		ctx[w] -= float64(isl)
	}
	a, b, n, mean := m.DecodeCalibration()
	if n != 200 || math.Abs(b-decodePerBlock)/decodePerBlock > 0.01 || math.Abs(a-decodeBase)/decodeBase > 0.01 || mean < 100 || mean > 150 {
		t.Fatalf("decode fit a %v b %v over %d requests, mean output %v; want %v, %v, 200, 100–150", a, b, n, mean, decodeBase, decodePerBlock)
	}
	if alpha, _, _, _ := m.Calibration(); math.Abs(alpha-prefillPerToken)/prefillPerToken > 0.05 {
		t.Fatalf("prefill α %v, want %v", alpha, prefillPerToken)
	}
	return m, now.Add(time.Hour) // past the prefill rate's memory: only the contexts differ
}

// TestDecodeCharge: worker 1 holds the request's 1,000-block prefix but decodes five 2,000-token
// contexts; worker 2 is idle. A request expecting a few tokens stays with its prefix; one expecting
// thousands goes to the idle worker, whose every token would otherwise wait on 10,000 blocks of other
// contexts (and theirs on its own). Before the fleet has taught the machine its decode, nothing is
// charged for it; the charge follows the request's expected output, and the Dynamo preset has none.
func TestDecodeCharge(t *testing.T) {
	ask := func(m *Machine, at time.Time, osl int) (uint64, []scoring.CandidateCost) {
		t.Helper()
		d, err := m.Query(at, &Request{ID: "q", Local: prompt(7, 1000)[:1010], ISL: 1010, OSL: osl,
			Scores: onWorker1(1000), Matched: true, ReturnCosts: true})
		if err != nil {
			t.Fatal(err)
		}
		return d.Worker.WorkerID, d.Candidates
	}
	m, at := decodeFleet(t, 5)
	if w, costs := ask(m, at, 5); w != 1 {
		t.Fatalf("5 tokens expected: went to worker %d, want 1 (its prefix); costs %+v", w, costs)
	}
	if w, costs := ask(m, at, 4000); w != 2 {
		t.Fatalf("4,000 tokens expected: went to worker %d, want 2 (idle); costs %+v", w, costs)
	}
	// The charge's size: on worker 1 DecodeWeight · O · b/α · (C + B·k), C = 10,000 blocks decoded by B =
	// 5 requests, k = the request's 1,010; worker 2 decodes nothing. Its difference between two outputs
	// is that of O alone (the rest of the cost does not depend on the output).
	_, c5 := ask(m, at, 5)
	_, c4k := ask(m, at, 4000)
	_, b, _, _ := m.DecodeCalibration()
	alpha, _, _, _ := m.Calibration()
	want := scoring.DecodeContextWeight * (4000 - 5) * b / alpha * (10000 + 5*1010)
	if got := c4k[0].Cost - c5[0].Cost; math.Abs(got-want) > 1e-6*want {
		t.Fatalf("worker 1 charged %v more for 4,000 tokens than for 5, want %v", got, want)
	}
	if got := c4k[1].Cost - c5[1].Cost; got != 0 {
		t.Fatalf("idle worker 2 charged %v for the longer output", got)
	}
	// Without a trusted decode fit (no request has ended) only the prefill stall is charged, and a
	// request stays with its prefix whatever its output.
	fresh := decodeMachine(t, 1)
	for i := range 5 {
		pin := scoring.WorkerKey{WorkerID: 1}
		if _, _, err := fresh.Route(at, &Request{ID: fmt.Sprintf("bg%d", i), Local: prompt(uint64(i+1), 0), ISL: 2000, Pin: &pin, Matched: true}); err != nil {
			t.Fatal(err)
		}
	}
	if w, costs := ask(fresh, at, 4000); w != 1 {
		t.Fatalf("unlearned decode: went to worker %d, want 1; costs %+v", w, costs)
	}
	// At --router-decode-weight 0 (the default) the learned decode charges nothing: the request stays
	// with its prefix whatever its output, and its costs do not depend on it.
	cfg0 := *m.Config()
	cfg0.DecodeWeight = 0
	if _, err := m.SetConfig(at, cfg0); err != nil {
		t.Fatal(err)
	}
	w, z4k := ask(m, at, 4000)
	if _, z5 := ask(m, at, 5); w != 1 || z4k[0].Cost != z5[0].Cost || z4k[1].Cost != z5[1].Cost {
		t.Fatalf("decode weight 0: went to worker %d, costs %+v for 4,000 tokens and %+v for 5", w, z4k, z5)
	}
	if scoring.DefaultConfig().DecodeWeight != 0 {
		t.Fatalf("default decode weight %v, want 0", scoring.DefaultConfig().DecodeWeight)
	}
	// The Dynamo preset keeps no decode state and charges none.
	cfg := m.Config()
	cfg.Preset = scoring.PresetDynamo
	d := sharedMachine(t, 0, 2)
	if _, err := d.SetConfig(time.Unix(0, 0), cfg.Resolved()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Route(at, &Request{ID: "x", Local: prompt(1, 0), ISL: 100, Matched: true}); err != nil {
		t.Fatal(err)
	}
	if len(d.dreq) != 0 || d.ctxs[0]+d.ctxs[1] != 0 {
		t.Fatalf("the Dynamo preset tracks decode: %d requests, contexts %v", len(d.dreq), d.ctxs)
	}
}

// TestPrefillStall: a request's uncached tokens are charged StallWeight a token for every request
// active where they are prefilled (each waits through the chunks), and a request for the prefill it
// would decode beside: the worker's recent prefill rate × its decode span.
func TestPrefillStall(t *testing.T) {
	m, at := decodeFleet(t, 0)
	ask := func(osl int) []scoring.CandidateCost {
		t.Helper()
		d, err := m.Query(at, &Request{ID: "q", Local: prompt(9, 0), ISL: 100, OSL: osl, Matched: true, ReturnCosts: true})
		if err != nil {
			t.Fatal(err)
		}
		return d.Candidates
	}
	base := ask(1)
	// Three requests become active on worker 2 (their prefill done, decoding).
	for i := range 3 {
		pin := scoring.WorkerKey{WorkerID: 2}
		id := fmt.Sprintf("a%d", i)
		if _, _, err := m.Route(at, &Request{ID: id, Local: prompt(uint64(30+i), 0), ISL: 100, Pin: &pin, Matched: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.PrefillDone(at, id); err != nil {
			t.Fatal(err)
		}
	}
	// At the same instant their 300 tokens are worker 2's recent prefill (a rate of 300 / 10 s). What a
	// request adds there: its 100 tokens stalling the three, the context charge, and worker 2's prefill
	// rate over its decode span (its expected gaps at the fleet's mean gap).
	_, b, _, _ := m.DecodeCalibration()
	alpha, _, _, _ := m.Calibration()
	meanGap := m.gapMean.mean()
	for _, osl := range []int{1, 1001} {
		c := ask(osl)
		ctxCharge := scoring.DecodeContextWeight * float64(osl) * b / alpha * (300 + 3*100)
		own := scoring.DecodeStallWeight * 300 / (prefillRateTau / 1e9) * float64(osl) * meanGap
		want := scoring.DecodeStallWeight*100*3 + ctxCharge + own
		if got := c[1].Cost - base[1].Cost; math.Abs(got-want) > 1e-6*want {
			t.Fatalf("osl %d: worker 2 charged %v with three active requests, want %v (stall %v, context %v, own %v)",
				osl, got, want, scoring.DecodeStallWeight*100*3, ctxCharge, own)
		}
		if got := c[0].Cost - base[0].Cost; got != 0 {
			t.Fatalf("osl %d: worker 1 (nothing active, nothing routed within the rate's memory) charged %v", osl, got)
		}
	}
}

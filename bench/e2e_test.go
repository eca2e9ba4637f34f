package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/workers/mocker"
)

// e2eTinyTrace is 3 conversations of 8 turns on one shared system block (id 0): turn k of conversation c
// carries c's first k+1 blocks, so every turn extends the previous one, as in the conversation trace.
// Three, not four: with an even number of conversations per turn on two workers, round-robin would send
// each conversation to the same worker every turn and match kv routing's hit rate by accident.
func e2eTinyTrace() string {
	var b strings.Builder
	for turn := 0; turn < 8; turn++ {
		for c := 0; c < 3; c++ {
			ids := []string{"0"}
			for k := 0; k <= turn; k++ {
				ids = append(ids, fmt.Sprint(1+c*100+k))
			}
			ts := (turn*3 + c) * 40
			fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}`+"\n",
				ts, len(ids)*32-5, 3+(c+turn)%4, strings.Join(ids, ", "))
		}
	}
	return b.String()
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b)) }

// TestE2ETwoArms runs the tiny trace through kv and round-robin end to end (fleet, router, frontend,
// HTTP streams) and checks that the report's figures are the ones the recorded samples give.
func TestE2ETwoArms(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(e2eTinyTrace()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultE2EConfig()
	cfg.Workers, cfg.Arms, cfg.ArrivalSpeedups, cfg.SpeedupRatio = 2, []string{ArmKV, ArmRoundRobin}, []float64{1}, 20
	cfg.Blocks.BlockSize, cfg.BlockSize, cfg.NumGPUBlocks = 32, 16, 512
	cfg.DrainTimeout = 30 * time.Second
	res, runs, err := RunE2E(context.Background(), cfg, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || len(res.Arms) != 2 {
		t.Fatalf("%d runs, %d results", len(runs), len(res.Arms))
	}
	for i, run := range runs {
		a := res.Arms[i]
		var ttft, e2e []float64
		var prompt, cached, predicted, out int64
		end := 0.0
		for j, s := range run.Samples {
			r := &tr.Requests[s.Index]
			if !s.OK() || s.Worker < 0 {
				t.Fatalf("%s request %d: worker %d err %q", run.Arm, j, s.Worker, s.Err)
			}
			if s.PromptTokens != cfg.Blocks.PromptLen(r) || s.OutputTokens != r.OutputLength {
				t.Fatalf("%s request %d: prompt %d output %d, trace says %d and %d", run.Arm, j, s.PromptTokens, s.OutputTokens, cfg.Blocks.PromptLen(r), r.OutputLength)
			}
			if s.TTFT <= 0 || s.E2E < s.TTFT {
				t.Fatalf("%s request %d: ttft %v e2e %v", run.Arm, j, s.TTFT, s.E2E)
			}
			ttft, e2e = append(ttft, 20*s.TTFT), append(e2e, 20*s.E2E)
			prompt, cached, predicted, out = prompt+int64(s.PromptTokens), cached+int64(s.CachedTokens), predicted+int64(s.PredictedTokens), out+int64(s.OutputTokens)
			end = max(end, 20*(s.At+s.E2E))
		}
		slices.Sort(ttft)
		slices.Sort(e2e)
		if a.Completed != len(tr.Requests) || a.Failed != 0 {
			t.Fatalf("%s: %d completed, %d failed", a.Arm, a.Completed, a.Failed)
		}
		if !near(a.TTFT.P50, Percentile(ttft, 0.5)) || !near(a.TTFT.P90, Percentile(ttft, 0.9)) || !near(a.E2E.P99, Percentile(e2e, 0.99)) || !near(a.TTFT.Max, ttft[len(ttft)-1]) {
			t.Fatalf("%s: percentiles %+v / %+v not from the samples", a.Arm, a.TTFT, a.E2E)
		}
		if a.PromptTokens != prompt || a.CachedTokens != cached || !near(a.HitRate, float64(cached)/float64(prompt)) ||
			!near(a.PredictedHitRate, float64(predicted)/float64(prompt)) || a.OutputTokens != out || !near(a.OutputTokensPerSec, float64(out)/end) {
			t.Fatalf("%s: token figures %+v, samples give prompt %d cached %d predicted %d out %d", a.Arm, a, prompt, cached, predicted, out)
		}
		if len(run.LoadT) == 0 || len(run.Engine) != 2 {
			t.Fatalf("%s: %d load samples, %d engines", a.Arm, len(run.LoadT), len(run.Engine))
		}
	}
	kv, rr := res.Arms[0], res.Arms[1]
	// Conversations extend their previous turn: kv routing follows them and the engines confirm the
	// router's prediction; round-robin alternates, so its request counts are exactly even.
	if kv.HitRate <= rr.HitRate || kv.PredictedTokens == 0 || kv.CachedTokens < kv.PredictedTokens/2 {
		t.Fatalf("kv hit %v predicted %d cached %d; round-robin hit %v", kv.HitRate, kv.PredictedTokens, kv.CachedTokens, rr.HitRate)
	}
	if rr.RequestImbalance != 1 || rr.PredictedTokens != 0 {
		t.Fatalf("round-robin imbalance %v predicted %d", rr.RequestImbalance, rr.PredictedTokens)
	}
	if res.Pooled.HitRate <= 0 || res.Unbounded.HitRate < res.Pooled.HitRate || len(res.Acceptance) != 5 {
		t.Fatalf("oracles %v / %v, %d checks", res.Unbounded.HitRate, res.Pooled.HitRate, len(res.Acceptance))
	}

	rep := NewReport("e2e", nil)
	FillE2EReport(rep, res, runs)
	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.json", "report.md", "ttft_cdf_x1.svg", "hit_rate_x1.svg", "load_kv.svg", "load_round-robin.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	js, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	var back struct {
		Data E2EResult `json:"data"`
	}
	if err := json.Unmarshal(js, &back); err != nil || back.Data.Arms[0].TTFT != kv.TTFT {
		t.Fatalf("report.json: %v, %+v", err, back.Data.Arms)
	}
}

// TestSummarizeArmKnownSamples feeds hand-made samples and checks every derived figure.
func TestSummarizeArmKnownSamples(t *testing.T) {
	run := &ArmRun{Arm: "x", ArrivalSpeedup: 2, TimeScale: 10, Offered: 3, Wall: 4 * time.Second,
		LoadT:  []float64{0, 1, 2},
		Load:   [][]float64{{2, 0, 0}, {0, 0, 1}}, // imbalance 2, idle (skipped), 2 → mean 2
		Engine: []mocker.Stats{{BusyTime: 2 * time.Second, Preemptions: 1}, {BusyTime: 4 * time.Second}}}
	for i := 0; i < 10; i++ {
		run.Samples = append(run.Samples, E2ESample{Index: i, Worker: i % 2, At: float64(i) * 0.1, TTFT: float64(i+1) * 0.01,
			ITL: 0.001, E2E: 0.5, PromptTokens: 100, CachedTokens: 10 * (i % 2), PredictedTokens: 20 * (i % 2), OutputTokens: 5})
	}
	run.Samples[9].Err = "status 503"                                                    // failed: counts in TTFT only
	run.Samples = append(run.Samples, E2ESample{Index: 10, Worker: -1, Err: errNotSent}) // never fired
	a := SummarizeArm(run)
	if a.Requests != 10 || a.Completed != 9 || a.Failed != 1 || a.Errors["status 503"] != 1 {
		t.Fatalf("counts %+v", a)
	}
	// TTFT (model time = ×10): 0.1 … 1.0 s; nearest rank p50 = 5th = 0.5, p90 = 9th = 0.9, p99 = 1.0.
	if !near(a.TTFT.P50, 0.5) || !near(a.TTFT.P90, 0.9) || !near(a.TTFT.P99, 1.0) || !near(a.TTFT.Mean, 0.55) {
		t.Fatalf("ttft %+v", a.TTFT)
	}
	if a.E2E.Count != 9 || !near(a.E2E.P50, 5) || !near(a.ITL.Mean, 0.01) {
		t.Fatalf("e2e %+v itl %+v", a.E2E, a.ITL)
	}
	// Completed 0…8: odd ones (4 of them) cached 10, predicted 20, of 900 prompt tokens.
	if a.PromptTokens != 900 || !near(a.HitRate, 40.0/900) || !near(a.PredictedHitRate, 80.0/900) {
		t.Fatalf("hit %+v", a)
	}
	// Last completion at model time 10 × (0.8 + 0.5) = 13 s.
	if !near(a.RequestsPerSec, 9/13.0) || !near(a.OutputTokensPerSec, 45/13.0) {
		t.Fatalf("rates %v %v", a.RequestsPerSec, a.OutputTokensPerSec)
	}
	if !near(a.Imbalance, 2) || !near(a.RequestImbalance, 1) || !near(a.Utilization, 6.0/8) || a.Preemptions != 1 {
		t.Fatalf("balance %v %v util %v", a.Imbalance, a.RequestImbalance, a.Utilization)
	}
}

func TestE2EAcceptanceChecks(t *testing.T) {
	mk := func(arm string, x, rps, p50, p90, hit float64) ArmResult {
		return ArmResult{Arm: arm, ArrivalSpeedup: x, OfferedRPS: rps, TTFT: Summary{P50: p50, P90: p90}, HitRate: hit}
	}
	r := &E2EResult{SLOTTFT: 2, Pooled: OracleResult{HitRate: 0.25}, Arms: []ArmResult{
		mk(ArmKV, 1, 1, 0.2, 0.5, 0.24), mk(ArmKV, 2, 2, 0.3, 1.5, 0.23), mk(ArmKV, 3, 3, 1, 3, 0.23),
		mk(ArmRoundRobin, 1, 1, 0.4, 1, 0.05), mk(ArmRoundRobin, 2, 2, 1.2, 4, 0.05), mk(ArmRoundRobin, 3, 3, 9, 20, 0.05),
		mk(ArmLLMD, 1, 1, 0.3, 1, 0.2), mk(ArmLLMD, 2, 2, 1, 3, 0.2), mk(ArmLLMD, 3, 3, 5, 9, 0.2),
	}}
	r.Finish()
	if r.Goodput[ArmKV] != 2 || r.Goodput[ArmRoundRobin] != 1 || r.Goodput[ArmLLMD] != 1 {
		t.Fatalf("goodput %v", r.Goodput)
	}
	want := []struct{ known, met bool }{{true, true}, {true, true}, {true, true}, {true, true}, {false, false}}
	for i, c := range r.Acceptance {
		if c.Known != want[i].known || c.Met != want[i].met {
			t.Errorf("check %d %q = %+v", i, c.Target, c)
		}
	}
	// At round-robin's saturation rate (2 req/s): 1.2 / 0.3 = 4×.
	if !strings.Contains(r.Acceptance[2].Value, "4.00×") {
		t.Errorf("saturation check %q", r.Acceptance[2].Value)
	}
}

func TestE2EArmNames(t *testing.T) {
	tests := []struct {
		arm   string
		ok    bool
		scale float64
	}{{"kv", true, 1}, {"llmd", true, 1}, {"kv-scale8", true, 8}, {"kv-scale0.5", true, 0.5}, {"kv-scale", false, 0}, {"kv-scale-1", false, 0}, {"foo", false, 0}}
	for _, tc := range tests {
		t.Run(tc.arm, func(t *testing.T) {
			cfg := DefaultE2EConfig()
			cfg.Arms = []string{tc.arm}
			if err := cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("validate: %v", err)
			}
			if tc.ok {
				if got := armRouterConfig(tc.arm, 64).Scoring.PrefillLoadScale; got != tc.scale {
					t.Fatalf("prefill load scale %v, want %v", got, tc.scale)
				}
			}
		})
	}
}

// TestE2EDisaggArms runs the tiny trace over disaggregated fleets of the same size: with every request
// disaggregated (disagg-all) each takes the prefill hop and the prefill engines reuse the conversations'
// prefixes; with conditional prefill at Dynamo's defaults (disagg) the trace's short prompts (< 5000
// tokens) are all served aggregated on the decode workers.
func TestE2EDisaggArms(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(e2eTinyTrace()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultE2EConfig()
	cfg.Workers, cfg.Arms, cfg.ArrivalSpeedups, cfg.SpeedupRatio = 4, []string{ArmDisaggAll, ArmDisagg}, []float64{1}, 20
	cfg.Blocks.BlockSize, cfg.BlockSize, cfg.NumGPUBlocks = 32, 16, 512
	cfg.DrainTimeout = 30 * time.Second
	res, _, err := RunE2E(context.Background(), cfg, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(len(tr.Requests))
	all, cond := res.Arms[0], res.Arms[1]
	if all.Completed != len(tr.Requests) || all.PrefillWorkers != 2 || all.Disaggregated != n || all.Bypassed != 0 {
		t.Fatalf("disagg-all: %d/%d done, %d prefill workers, %d disaggregated, %d bypassed", all.Completed, n, all.PrefillWorkers, all.Disaggregated, all.Bypassed)
	}
	if !(all.PrefillHitRate > 0.3) {
		t.Fatalf("disagg-all prefill engine hit rate %.3f: the prefill router does not reuse the conversations", all.PrefillHitRate)
	}
	if cond.Completed != len(tr.Requests) || cond.Bypassed != n || cond.Disaggregated != 0 {
		t.Fatalf("disagg: %d/%d done, %d disaggregated, %d bypassed", cond.Completed, n, cond.Disaggregated, cond.Bypassed)
	}
	rep := &Report{}
	FillE2EReport(rep, res, nil)
	found := false
	for _, tb := range rep.Tables {
		found = found || strings.HasPrefix(tb.Title, "Disaggregated serving")
	}
	if !found {
		t.Fatal("no disaggregated serving table in the report")
	}
}

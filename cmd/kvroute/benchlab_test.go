package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchLab runs `kvroute bench lab` twice on a generated workload, on a trace and as a suite, and checks that
// lab.json is the same bytes for the same flags.
func TestBenchLab(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join("..", "..", "bench", "lab", "testdata", "conversation_head.jsonl")
	tests := []struct {
		name string
		args []string
	}{
		{"trace", []string{"--trace", trace, "--minutes", "0.5", "--modes", "kv,llmd", "--sweep-arrival", "1,4", "--knee-steps", "1"}},
		{"generated", []string{"--workload", "fanout", "--gen-duration", "20s", "--modes", "sglang", "--profile", "llama8b-h100", "--knee-slo", "0"}},
		{"images", []string{"--workload", "docqa", "--gen-duration", "20s", "--modes", "kv", "--knee-slo", "0"}},
		{"seeds", []string{"--workload", "tenants", "--gen-duration", "20s", "--modes", "kv,sglang", "--seeds", "1,2", "--knee-steps", "1"}},
		// The standing suite without a trace: every generated workload's cases.
		{"suite", []string{"--suite", "standing", "--gen-duration", "4s", "--gen-rate", "2", "--modes", "kv,sglang", "--seeds", "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var prev []byte
			runs := 2 // twice, and the two lab.json must be equal
			if tc.name == "suite" {
				// Once: every case of the standing suite runs here (its determinism is each case's,
				// checked by the others), and twice took 3.5 of CI's minutes under -race on 2 vCPUs.
				runs = 1
			}
			for i := range runs {
				out := filepath.Join(dir, tc.name, string(rune('a'+i)))
				if code := runBench(append([]string{"lab"}, append(tc.args, "--out", out)...)); code != 0 {
					t.Fatalf("exit %d", code)
				}
				files := []string{"report.json", "report.md", "ttft_p90.svg"}
				if tc.name == "suite" {
					files = files[:2]
					if md, _ := os.ReadFile(filepath.Join(out, "report.md")); !bytes.Contains(md, []byte("## Standing over 40 cases, seeds 1, against the best of sglang")) {
						t.Fatalf("suite report:\n%.600s", md)
					}
				}
				for _, f := range files {
					if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
						t.Fatalf("%s: %v", f, err)
					}
				}
				js, err := os.ReadFile(filepath.Join(out, "lab.json"))
				if err != nil {
					t.Fatal(err)
				}
				if prev != nil && !bytes.Equal(prev, js) {
					t.Fatal("lab.json differs between two runs with the same flags")
				}
				prev = js
			}
		})
	}
	if code := runBench([]string{"lab", "--suite", "no-such-suite", "--out", filepath.Join(dir, "bad")}); code == 0 {
		t.Fatal("an unknown suite ran")
	}
	// A profile file: an engine ten times slower than the mocker's prefill shows in the TTFT.
	slow := filepath.Join(dir, "slow.json")
	if err := os.WriteFile(slow, []byte(`{"name":"slow","num_gpu_blocks":16384,"max_num_seqs":256,"max_num_batched_tokens":8192,
		"timing":{"PrefillBaseMs":20,"PrefillPerTokenMs":0.15,"DecodeBaseMs":6,"DecodePerSeqMs":0.05}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p90 := func(extra ...string) float64 {
		out := filepath.Join(dir, "prof", strings.Join(extra, "_"))
		args := append([]string{"lab", "--trace", trace, "--minutes", "0.5", "--modes", "kv", "--knee-slo", "0", "--out", out}, extra...)
		if code := runBench(args); code != 0 {
			t.Fatalf("%v: exit %d", extra, code)
		}
		js, err := os.ReadFile(filepath.Join(out, "lab.json"))
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Points []struct {
				TTFT struct{ P90 float64 } `json:"ttft_s"`
			} `json:"points"`
		}
		if err := json.Unmarshal(js, &res); err != nil || len(res.Points) != 1 {
			t.Fatalf("lab.json: %v", err)
		}
		return res.Points[0].TTFT.P90
	}
	fast := p90()
	if slow := p90("--profile-file", slow); slow < 3*fast {
		t.Fatalf("TTFT p90 %.3f s with the slow profile, %.3f s with the mocker's", slow, fast)
	}
	if slowed := p90("--speed-change", "1ms:0.2"); slowed < 3*fast {
		t.Fatalf("TTFT p90 %.3f s with engines at a fifth of their speed, %.3f s at full", slowed, fast)
	}
	if code := runBench([]string{"lab", "--trace", trace, "--speed-change", "5m"}); code != 1 {
		t.Fatalf("--speed-change without a factor: exit %d", code)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"name":"bad","num_gpu_blocks":16,"max_num_seqs":1,"max_num_batched_tokens":64,"timing":{"PrefilBaseMs":1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := runBench([]string{"lab", "--trace", trace, "--profile-file", bad}); code != 1 {
		t.Fatalf("misspelt profile field exit %d", code)
	}
	// --seeds: the study's tables, each seed's generated workload drawn anew.
	md, err := os.ReadFile(filepath.Join(dir, "seeds", "a", "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Over 2 seeds (1, 2; tenants", "Against the best of sglang", "| kv | 1.00 |", "seed 1 | seed 2", "Goodput knee"} {
		if !strings.Contains(string(md), want) {
			t.Fatalf("report.md lacks %q:\n%s", want, md)
		}
	}
	var study struct {
		Runs []struct {
			Trace struct{ Requests int } `json:"trace"`
		} `json:"runs"`
	}
	js, err := os.ReadFile(filepath.Join(dir, "seeds", "a", "lab.json"))
	if err != nil || json.Unmarshal(js, &study) != nil || len(study.Runs) != 2 {
		t.Fatalf("lab.json: %v, %d runs", err, len(study.Runs))
	}
	for _, args := range [][]string{{"--seeds", "1,x"}, {"--seeds", "1", "--peers", "nope"}, {"--seeds", "3,3"}} {
		if code := runBench(append([]string{"lab", "--workload", "tenants", "--gen-duration", "10s", "--modes", "kv", "--knee-slo", "0",
			"--out", filepath.Join(dir, "bad")}, args...)); code != 1 {
			t.Fatalf("%v: exit %d", args, code)
		}
	}
	if code := runBench([]string{"lab", "--workload", "nope"}); code != 1 {
		t.Fatalf("unknown workload exit %d", code)
	}
	if code := runBench([]string{"lab", "--trace", trace, "--modes", "nope"}); code != 1 {
		t.Fatalf("unknown arm exit %d", code)
	}
}

// TestBenchLabTimeline: --window sets the report's windows and --calibration-every the period of the
// kv arm's calibration samples in lab.json; report.md and the plots carry them.
func TestBenchLabTimeline(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join("..", "..", "bench", "lab", "testdata", "conversation_head.jsonl")
	type timeline struct {
		Arm         string            `json:"arm"`
		WindowS     float64           `json:"window_s"`
		Windows     []json.RawMessage `json:"windows"`
		Calibration []json.RawMessage `json:"calibration"`
	}
	read := func(extra ...string) []timeline {
		out := filepath.Join(dir, strings.Join(extra, "_"))
		args := append([]string{"lab", "--trace", trace, "--minutes", "1", "--modes", "kv,llmd", "--knee-slo", "0", "--out", out}, extra...)
		if code := runBench(args); code != 0 {
			t.Fatalf("%v: exit %d", extra, code)
		}
		js, err := os.ReadFile(filepath.Join(out, "lab.json"))
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Timelines []timeline `json:"timelines"`
		}
		if err := json.Unmarshal(js, &res); err != nil || len(res.Timelines) != 2 {
			t.Fatalf("lab.json: %v, %d timelines", err, len(res.Timelines))
		}
		for _, f := range []string{"calibration_gamma.svg", "window_ttft_p90.svg"} {
			if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
				t.Fatalf("%s: %v", f, err)
			}
		}
		md, err := os.ReadFile(filepath.Join(out, "report.md"))
		if err != nil || !strings.Contains(string(md), "Learned calibration") || !strings.Contains(string(md), "skipped the best-cached worker") {
			t.Fatalf("report.md has no calibration or decision table: %v", err)
		}
		return res.Timelines
	}
	def, fine := read(), read("--window", "10s", "--calibration-every", "1s")
	if def[0].WindowS != 60 || fine[0].WindowS != 10 || len(fine[0].Windows) <= 2*len(def[0].Windows) {
		t.Fatalf("windows: %v s × %d by default, %v s × %d with --window 10s", def[0].WindowS, len(def[0].Windows), fine[0].WindowS, len(fine[0].Windows))
	}
	if def[0].Arm != "kv" || len(def[0].Calibration) == 0 || len(fine[0].Calibration) < 4*len(def[0].Calibration) {
		t.Fatalf("calibration samples: %d every 5 s, %d every 1 s", len(def[0].Calibration), len(fine[0].Calibration))
	}
	if len(def[1].Calibration) != 0 {
		t.Fatal("the llmd arm learns nothing but has calibration samples")
	}
	if code := runBench([]string{"lab", "--trace", trace, "--window", "1ms"}); code != 1 {
		t.Fatalf("--window 1ms: exit %d", code)
	}
}

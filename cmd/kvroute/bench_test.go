package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestBenchSubcommands runs every bench subcommand on tiny inputs and checks the reports land in --out.
// againSummary matches a run's again summary in the indexer report holding the 40-request trace's 80
// queries (two ids a worker).
var againSummary = regexp.MustCompile(`"again_query_us":\s*\{\s*"count":\s*80,`)

// unpacedNote is the note of --unpaced-runs (default 3): every replay's rate.
var unpacedNote = regexp.MustCompile(`median of 3 replays by event blocks/s; each replay's: ([0-9.]+), ([0-9.]+), ([0-9.]+) M/s`)

// eventRate is a run's event blocks/s in report.json.
var eventRate = regexp.MustCompile(`"event_blocks_per_s":\s*([0-9.e+]+)`)

func TestBenchSubcommands(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	var b strings.Builder
	for i := 0; i < 40; i++ {
		b.WriteString(`{"timestamp": ` + strconv.Itoa(i*50) + `, "input_length": 1100, "output_length": 4, "hash_ids": [` + strconv.Itoa(i%3) + `, ` + strconv.Itoa(100+i%5) + `, ` + strconv.Itoa(200+i) + `]}` + "\n")
	}
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	tests := []struct {
		name string
		args []string
	}{
		{"indexer", []string{"indexer", "--trace", trace, "--workers", "4", "--duplicate", "2", "--block-size", "64", "--sweep", "--sweep-max", "200ms", "--sweep-min", "50ms", "--sweep-steps", "2", "--cold-mb", "1", "--again", "--stall-probe", "20ms"}},
		{"oracle", []string{"oracle", "--trace", trace, "--workers", "2,4", "--capacity", "20"}},
		{"route", []string{"route", "--workers", "4", "--prompt-tokens", "256", "--indexed-blocks", "1k", "--decisions", "50"}},
		{"tokenizer", []string{"tokenizer", "--root", root, "--tokenizers", filepath.Join(root, "testdata", "tokenizers", "llama2", "tokenizer.json"), "--bytes", "4096", "--cold-runs", "1", "--warm-runs", "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name)
			if code := runBench(append(tc.args, "--out", out)); code != 0 {
				t.Fatalf("exit %d", code)
			}
			for _, f := range []string{"report.json", "report.md"} {
				if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
					t.Fatalf("%s: %v", f, err)
				}
			}
			if tc.name == "indexer" { // --again reaches the report: the second reads of 80 queries in every run
				md, _ := os.ReadFile(filepath.Join(out, "report.json"))
				if n := len(againSummary.FindAll(md, -1)); n != 3 {
					t.Fatalf("again summaries with 80 samples in report.json: %d, want 3 runs", n)
				}
				checkUnpacedMedian(t, md)
				// --stall-probe reaches the report: one probe before the runs and one after.
				if n := strings.Count(string(md), `"over_10us_per_s"`); n != 2 || !strings.Contains(string(md), `"when": "after"`) {
					t.Fatalf("host stalls in report.json: %d probes, want before and after", n)
				}
			}
			svgs, _ := filepath.Glob(filepath.Join(out, "*.svg"))
			if len(svgs) == 0 {
				t.Fatal("no plots")
			}
		})
	}
	if code := runBench([]string{"nope"}); code != 2 {
		t.Fatalf("unknown bench exit %d", code)
	}
	if code := runBench([]string{"indexer"}); code != 1 {
		t.Fatalf("missing --trace exit %d", code)
	}
	if code := runBench([]string{"indexer", "--trace", "x", "--unpaced-runs", "0"}); code != 1 {
		t.Fatalf("--unpaced-runs 0 exit %d", code)
	}
}

// checkUnpacedMedian checks that the unpaced run was replayed three times and that its row (the sweep's
// last run) is the replay with the median rate.
func checkUnpacedMedian(t *testing.T, md []byte) {
	t.Helper()
	m := unpacedNote.FindSubmatch(md)
	if m == nil {
		t.Fatalf("report.json has no note of three unpaced replays")
	}
	var rates []float64
	for _, b := range m[1:] {
		v, _ := strconv.ParseFloat(string(b), 64)
		rates = append(rates, v)
	}
	slices.Sort(rates)
	runs := eventRate.FindAllSubmatch(md, -1)
	if len(runs) == 0 {
		t.Fatal("no event_blocks_per_s in report.json")
	}
	row, _ := strconv.ParseFloat(string(runs[len(runs)-1][1]), 64)
	if got := fmt.Sprintf("%.2f", row/1e6); got != fmt.Sprintf("%.2f", rates[1]) {
		t.Fatalf("unpaced row %s M/s, replays %v: want the median", got, rates)
	}
}

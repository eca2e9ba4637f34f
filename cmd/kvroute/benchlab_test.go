package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestBenchLab runs `kvroute bench lab` twice on a generated workload and on a trace, and checks that
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var prev []byte
			for i := range 2 {
				out := filepath.Join(dir, tc.name, string(rune('a'+i)))
				if code := runBench(append([]string{"lab"}, append(tc.args, "--out", out)...)); code != 0 {
					t.Fatalf("exit %d", code)
				}
				for _, f := range []string{"report.json", "report.md", "ttft_p90.svg"} {
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
	if code := runBench([]string{"lab", "--workload", "nope"}); code != 1 {
		t.Fatalf("unknown workload exit %d", code)
	}
	if code := runBench([]string{"lab", "--trace", trace, "--modes", "nope"}); code != 1 {
		t.Fatalf("unknown arm exit %d", code)
	}
}

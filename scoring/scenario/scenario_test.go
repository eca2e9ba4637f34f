package scenario

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/scoring/prefix"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden transcripts under scoring/testdata/scenarios")

const dir = "../testdata/scenarios"

// TestScenarios runs every script in scoring/testdata/scenarios/*.txt against the pure parts (prefix
// index, load trackers, queue, approximate bookkeeping, Select) and compares the transcript with the
// .golden file beside it. Expectations in the script must hold either way.
func TestScenarios(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, path := range scripts {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			r := NewIn(func() Index { return prefix.New() }, dir)
			got, failures, err := r.Run(bytes.NewReader(src))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range failures {
				t.Error(f)
			}
			golden := strings.TrimSuffix(path, ".txt") + ".golden"
			if *rewrite {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -rewrite)", err)
			}
			if got != string(want) {
				t.Errorf("transcript differs from %s (rerun with -rewrite and review the diff):\n%s", golden, got)
			}
		})
	}
}

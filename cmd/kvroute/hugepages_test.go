package main

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/hugepage"
)

// --huge-pages N reserves N MiB of heap and advises it for huge pages before the frontend builds its
// index (at least N MiB of the process's anonymous mappings are advised); a negative value is refused.
func TestHugePagesFlag(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("transparent huge pages are Linux's")
	}
	modelDir, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	advisedBytes := func() int {
		t.Helper()
		n, err := hugepage.AdvisedBytes()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Nothing else in this process advises memory, so before is 0 on a fresh run (and the first run's
	// advice on a repeated one).
	before := advisedBytes()
	_, logged, err := startFlagFrontend(t, modelDir, "--huge-pages", "48")
	if err != nil {
		t.Fatal(err)
	}
	if after := advisedBytes(); after < 48<<20 || !strings.Contains(logged, "huge pages") {
		t.Fatalf("--huge-pages 48: advised mappings %d → %d bytes; log %q", before, after, logged)
	}
	if _, _, err := startFlagFrontend(t, modelDir, "--huge-pages", "-1"); err == nil || !strings.Contains(err.Error(), "--huge-pages") {
		t.Fatalf("--huge-pages -1: %v, want a refusal naming the flag", err)
	}
}

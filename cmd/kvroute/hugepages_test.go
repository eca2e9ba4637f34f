package main

import (
	"bufio"
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// hugeAdvisedBytes sums the anonymous mappings of this process that carry the MADV_HUGEPAGE flag (smaps
// VmFlags "hg").
func hugeAdvisedBytes(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	total, size := 0, 0
	for sc.Scan() {
		line := sc.Text()
		if fs := strings.Fields(line); len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			lo, hi, _ := strings.Cut(fs[0], "-")
			s, _ := strconv.ParseUint(lo, 16, 64)
			e, _ := strconv.ParseUint(hi, 16, 64)
			size = 0
			if fs[4] == "0" {
				size = int(e - s)
			}
			continue
		}
		if strings.HasPrefix(line, "VmFlags:") && strings.Contains(line+" ", " hg ") {
			total += size
		}
	}
	return total
}

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
	start := func(huge string) (*frontendApp, string, error) {
		t.Helper()
		_, herr := captureCLI(t)
		args := []string{"--model-path", modelDir, "--http-host", "127.0.0.1", "--http-port", "0", "--health-check-interval", "0",
			"--no-worker-self-test", "--worker", "id=1,url=http://127.0.0.1:9", "--huge-pages", huge}
		f, _, code, ok := parseFrontend("frontend", args, nil)
		if !ok {
			t.Fatalf("%v: exit %d: %s", args, code, herr.String())
		}
		var logged bytes.Buffer
		app, err := startFrontend(f, newRegistry(), slog.New(slog.NewTextHandler(&logged, nil)))
		if err == nil {
			t.Cleanup(app.stop)
		}
		return app, logged.String(), err
	}
	// Nothing else in this process advises memory, so before is 0 on a fresh run (and the first run's
	// advice on a repeated one).
	before := hugeAdvisedBytes(t)
	_, logged, err := start("48")
	if err != nil {
		t.Fatal(err)
	}
	if after := hugeAdvisedBytes(t); after < 48<<20 || !strings.Contains(logged, "huge pages") {
		t.Fatalf("--huge-pages 48: advised mappings %d → %d bytes; log %q", before, after, logged)
	}
	if _, _, err := start("-1"); err == nil || !strings.Contains(err.Error(), "--huge-pages") {
		t.Fatalf("--huge-pages -1: %v, want a refusal naming the flag", err)
	}
}

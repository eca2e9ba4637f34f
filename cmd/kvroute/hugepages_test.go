package main

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/hugepage"
)

// --huge-pages N reserves N MiB of heap and advises it for huge pages before the frontend builds its
// index (at least N MiB of the process's anonymous mappings are advised); auto decides in the
// background, once the frontend is up, and logs the probe's two figures and its decision, and when it
// took huge pages the heap is advised; off, the default, advises
// nothing and logs nothing of it; a negative value or a word other than auto and off is refused.
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
	// Off first: nothing else in this test's package advises memory, and the advice of auto and N below
	// goes on in the background (every second) until the test ends.
	for _, off := range [][]string{{"--huge-pages", "off"}, nil} {
		before := advisedBytes()
		if _, logged, err := startFlagFrontend(t, modelDir, off...); err != nil || advisedBytes() != before || strings.Contains(logged, "huge pages") {
			t.Fatalf("%v: err %v, advised %d → %d bytes, log %q", off, err, before, advisedBytes(), logged)
		}
	}
	// auto decides in the background: the frontend serves first, the decision is logged when made.
	app, auto, err := startFlagFrontendLog(t, modelDir, "--huge-pages", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if app.ln == nil {
		t.Fatal("auto: the frontend is not listening")
	}
	logged := waitLog(t, auto, "huge pages: auto")
	a := &hugeAuto
	for _, want := range []string{"huge pages: auto", fmt.Sprintf("on=%v", a.on), "probe_ns_per_load_4k=", "probe_ns_per_load_2m="} {
		if !strings.Contains(logged, want) {
			t.Fatalf("auto: log %q lacks %q", logged, want)
		}
	}
	if mode, err := hugepage.Mode(); err == nil && mode != "never" && a.err == nil && (a.probe.SmallNanos <= 0 || a.probe.HugeNanos <= 0 || a.on != a.probe.Worth()) {
		t.Fatalf("auto on a host with THP %s: probe %+v, on %v, err %v", mode, a.probe, a.on, a.err)
	}
	if a.on && advisedBytes() < a.reserved<<20 {
		t.Fatalf("auto took huge pages (probe %+v) but only %d bytes are advised", a.probe, advisedBytes())
	}
	before := advisedBytes()
	_, logged, err = startFlagFrontend(t, modelDir, "--huge-pages", "48")
	if err != nil {
		t.Fatal(err)
	}
	if after := advisedBytes(); after < 48<<20 || !strings.Contains(logged, "huge pages") || !strings.Contains(logged, "populated_mib=") || !strings.Contains(logged, "populate_ms=") {
		t.Fatalf("--huge-pages 48: advised mappings %d → %d bytes; log %q", before, after, logged)
	}
	for _, bad := range []string{"-1", "on", "1.5"} {
		if _, _, err := startFlagFrontend(t, modelDir, "--huge-pages", bad); err == nil || !strings.Contains(err.Error(), "--huge-pages") {
			t.Fatalf("--huge-pages %s: %v, want a refusal naming the flag", bad, err)
		}
	}
}

// waitLog waits, up to two minutes (the probe under the race detector), until the log holds want, and
// returns it; on a timeout the test's log shows what it held.
func waitLog(t *testing.T, logged *syncBuffer, want string) string {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log: %q", logged.String())
		}
	})
	var s string
	waitUntilWithin(t, fmt.Sprintf("%q in the log", want), 2*time.Minute, func() bool {
		s = logged.String()
		return strings.Contains(s, want)
	})
	return s
}

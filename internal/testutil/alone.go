package testutil

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// aloneEnv names, in a fresh process of the test binary, the test it runs alone.
const aloneEnv = "KVROUTE_TEST_ALONE"

// Alone runs the calling test again in a fresh process of the test binary, where it is the only test,
// and returns true in the first process, which then has nothing left to do; in the fresh process it
// returns false and the test goes on. For tests of what belongs to the whole process: its heap and RSS,
// its open-file limit. The fresh process's failure fails t with its output, its skip skips t, and it
// is killed at t's deadline.
func Alone(t *testing.T) bool {
	t.Helper()
	if os.Getenv(aloneEnv) == t.Name() {
		return false
	}
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), aloneEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a fresh process: %v\n%s", t.Name(), err, out)
	}
	if bytes.Contains(out, []byte("--- SKIP")) {
		t.Skipf("skipped in a fresh process:\n%s", out)
	}
	return true
}

// FillDescriptors opens the null device until the process's descriptor table is full (EMFILE or
// ENFILE) and returns the files, closed when t ends. For a process whose open-file limit the test has
// lowered (Alone).
func FillDescriptors(t *testing.T) []*os.File {
	t.Helper()
	var hog []*os.File
	t.Cleanup(func() {
		for _, f := range hog {
			_ = f.Close()
		}
	})
	for range 1 << 16 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
				t.Fatal(err)
			}
			return hog
		}
		hog = append(hog, f)
	}
	t.Fatal("the descriptor table never filled")
	return nil
}

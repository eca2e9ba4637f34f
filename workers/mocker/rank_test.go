package mocker

import (
	"errors"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/testutil"
)

// runVirtual advances the fake clock until s finishes.
func runVirtual(t *testing.T, clk *clock.Fake, s *Stream) StreamState {
	t.Helper()
	testutil.Eventually(t, "request done in virtual time", func() bool {
		select {
		case <-s.Finished():
			return true
		default:
		}
		clk.FireNext()
		return false
	})
	return s.Read(0, nil)
}

// TestRuntimeVirtualTimeSecondRequestFaster runs the full runtime (rank loop, streams) on a fake clock: the
// first token of a repeated prompt arrives earlier by exactly the prefill the cache saved.
func TestRuntimeVirtualTimeSecondRequestFaster(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	cfg := WorkerConfig{Engine: DefaultEngineConfig(), Clock: clk}
	cfg.Engine.BlockSize, cfg.Engine.NumGPUBlocks, cfg.Engine.SpeedupRatio = 16, 512, 2
	w, err := StartWorker(cfg)
	must(t, err)
	t.Cleanup(func() { w.Close() })
	prompt := seq(7, 3000)
	var ttft [2]time.Duration
	var st [2]StreamState
	for i := range 2 {
		s, err := w.Submit(0, Request{Prompt: prompt, MaxTokens: 4})
		must(t, err)
		st[i] = runVirtual(t, clk, s)
		ttft[i] = st[i].FirstToken.Sub(st[i].Start)
	}
	hit := 2992 // (3000-1)/16 full blocks
	if st[0].CachedTokens != 0 || st[1].CachedTokens != hit {
		t.Fatalf("cached %d, %d", st[0].CachedTokens, st[1].CachedTokens)
	}
	want0 := StepDuration(3000, 0, 0, 2, 1)
	want1 := StepDuration(3000-hit, 0, 0, 2, 1)
	if ttft[0] != want0 || ttft[1] != want1 {
		t.Fatalf("ttft %v, %v; want %v, %v", ttft[0], ttft[1], want0, want1)
	}
	t.Logf("saved %v of simulated prefill (model: %.3f ms → %.3f ms at speedup 2)", ttft[0]-ttft[1], PrefillMillis(3000)/2, PrefillMillis(8)/2)
}

func TestSubmitAfterCloseFails(t *testing.T) {
	w, err := StartWorker(DefaultWorkerConfig())
	must(t, err)
	must(t, w.Close())
	if _, err := w.Submit(0, Request{Prompt: seq(0, 4), MaxTokens: 1}); !errors.Is(err, ErrStopped) {
		t.Fatalf("err %v", err)
	}
}

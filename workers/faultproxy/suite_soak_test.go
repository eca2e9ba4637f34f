//go:build soak

package faultproxy_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/workers/faultproxy"
)

// TestFaultSuiteSoak is the long form of TestFaultSuite (`make soak`): every scenario with six workers
// and ten times the requests, then one rig that goes through FAULTSUITE_ROUNDS (default 5) rounds of
// mixed faults, a cut and a restart of one worker, converging after each round.
//
// OPEN (found 2026-12-02, not yet explained): "combined-rounds" fails in most runs: after a few rounds a
// worker's index holds MORE blocks than its simulator caches (every cached chain does score fully, so the
// extra entries are stale blocks whose removal was lost), with many more resets than the worker had
// restarts (e.g. 11 resets for one restart: each one a full replay from 0) and a few replay sessions
// lost at the proxy. The per-round log shows the pattern: a worker that was restarted and later cut keeps
// collecting resets (and rejected stores, missing removes) in every later round without any further
// restart or cut, while workers never restarted see none. "restart-with-drops" at this size fails about one run in three (no reset detected
// after a restart behind a cut). See the report of the fault-suite work; TestFaultSuite (short form) and
// the deterministic cases in restart_test.go pass.
func TestFaultSuiteSoak(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			runScenario(t, sc, rigOpts{workers: 6, gpuBlocks: 256, speedup: 100}, 1200)
		})
	}
	t.Run("combined-rounds", func(t *testing.T) {
		rounds := 5
		if v, err := strconv.Atoi(os.Getenv("FAULTSUITE_ROUNDS")); err == nil && v > 0 {
			rounds = v
		}
		rg := newRig(t, rigOpts{workers: 4, gpuBlocks: 256, speedup: 100})
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds)*2*time.Minute)
		defer cancel()
		for round := range rounds {
			for i, s := range rg.workers {
				s.px.SetFaults(faultproxy.Faults{Seed: uint64(100*round + i), Drop: 0.05, Duplicate: 0.05,
					Reorder: 0.05, Delay: 0.05, DelayFor: 20 * time.Millisecond})
			}
			rg.driveAll(ctx, uint64(1000*round), 300, 8)
			rg.workers[round%len(rg.workers)].px.Cut(300 * time.Millisecond)
			rg.driveAll(ctx, uint64(1000*round+1), 300, 8)
			rg.restart(rg.workers[(round+1)%len(rg.workers)])
			rg.driveAll(ctx, uint64(1000*round+2), 300, 8)
			rg.settle()
			for _, s := range rg.workers {
				st, _ := rg.r.Fleet.StatusOf(s.id)
				t.Logf("round %d worker %d: restarts %d resets %d gaps %d replays %d rejected %d missing_removes %d; proxy %+v",
					round, s.id, s.restarts, st.Resets, st.Gaps, st.Replays, st.RejectedStores, st.MissingRemoves, s.px.Stats())
			}
			rg.converged(30 * time.Second)
			t.Logf("round %d converged", round)
		}
	})
}

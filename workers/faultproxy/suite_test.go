package faultproxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvroute/kvroute/workers/faultproxy"
)

// scenario is one fault pattern of the suite: faults on every proxy while the workload runs, plus an
// optional action in the middle of it (a cut, a worker restart).
type scenario struct {
	name   string
	faults faultproxy.Faults
	action func(rg *rig)
}

func scenarios() []scenario {
	return []scenario{
		{name: "clean"},
		{name: "drop", faults: faultproxy.Faults{Seed: 1, Drop: 0.15}},
		{name: "duplicate", faults: faultproxy.Faults{Seed: 2, Duplicate: 0.15}},
		{name: "reorder", faults: faultproxy.Faults{Seed: 3, Reorder: 0.15, DelayFor: 20 * time.Millisecond}},
		{name: "delay", faults: faultproxy.Faults{Seed: 4, Delay: 0.1, DelayFor: 30 * time.Millisecond}},
		{name: "mixed", faults: faultproxy.Faults{Seed: 5, Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Delay: 0.05,
			DelayFor: 20 * time.Millisecond}},
		{name: "cut", action: func(rg *rig) {
			// The router's SUB loses its connection, reconnects, and catches up through replay.
			for _, s := range rg.workers {
				s.px.Cut(300 * time.Millisecond)
			}
		}},
		{name: "restart", action: func(rg *rig) {
			// A crash: the engine comes back empty on the same endpoint with its sequence at 0.
			rg.restart(rg.workers[0])
		}},
		{name: "restart-with-drops", faults: faultproxy.Faults{Seed: 6, Drop: 0.1}, action: func(rg *rig) {
			rg.restart(rg.workers[0])
		}},
	}
}

// runScenario drives two rounds of the workload on every worker with the faults on, runs the action
// between them, then stops the faults and waits for the index to equal the ground truth.
func runScenario(t *testing.T, sc scenario, o rigOpts, requests int) {
	rg := newRig(t, o)
	for _, s := range rg.workers {
		s.px.SetFaults(sc.faults)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rg.driveAll(ctx, 11, requests/2, 8)
	if sc.action != nil {
		sc.action(rg)
	}
	rg.driveAll(ctx, 23, requests-requests/2, 8)
	rg.settle()
	rg.converged(15 * time.Second)
	for _, s := range rg.workers {
		st, _ := rg.r.Fleet.StatusOf(s.id)
		t.Logf("worker %d: proxy %+v; mirror gaps=%d replays=%d resets=%d restarts=%d rejected=%d missing_removes=%d",
			s.id, s.px.Stats(), st.Gaps, st.Replays, st.Resets, st.Restarts, st.RejectedStores, st.MissingRemoves)
	}
}

// TestFaultSuite is the short form that `make test` runs: three workers under eviction pressure, each
// fault pattern on a fresh rig. The long form is TestFaultSuiteSoak (build tag soak).
func TestFaultSuite(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			runScenario(t, sc, rigOpts{workers: 3, gpuBlocks: 128, speedup: 100}, 120)
		})
	}
}

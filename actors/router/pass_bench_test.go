package router

import (
	"fmt"
	"testing"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/registry"
)

// BenchmarkSelectionPass isolates the selection stage of a decision over W workers that all match the
// prompt: the load rows with the scattered overlap scores, then the cost loop, with one best worker
// (distinct overlaps), with busy thresholds, and with every worker tied (an idle fleet and a prompt none
// of them holds). The busy-threshold rows include writing the capacities.
func BenchmarkSelectionPass(b *testing.B) {
	for _, w := range []int{16, 256, 1024} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			system := actors.NewSystem(nil)
			cfg := DefaultConfig(16)
			cfg.TickInterval = -1
			r, err := New(system, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { r.Stop(); system.Shutdown() })
			for i := range w {
				if err := r.AddWorker(registry.Spec{ID: uint64(i)}); err != nil {
					b.Fatal(err)
				}
			}
			s := r.sched
			ts := s.targets.Load()
			sc := &routeScratch{chain: make([]uint64, 512)}
			for i := range w {
				// Reverse order: the index lists workers in its own order, not the router's.
				sc.scores = append(sc.scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64(w - 1 - i)}, Blocks: uint32(1 + i%500)})
			}
			sreq := scoring.Request{ISL: 8192}
			b.Run("rows", func(b *testing.B) {
				for range b.N {
					sc.loadRows(ts, true, false, nil)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			})
			rows, _ := sc.loadRows(ts, true, false, nil)
			costs := func(b *testing.B) {
				for range b.N {
					am, ok := scoring.NewArgmin(&sreq, s.config(), s.rng)
					if !ok {
						b.Fatal("no one-pass decision")
					}
					am.OfferLoads(rows, nil)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			}
			b.Run("costs", costs)
			// With busy thresholds the rows carry capacities; "offer" is the candidate-at-a-time path the
			// decision took with thresholds before, for comparison.
			busyCfg := *s.config()
			busyCfg.ActiveDecodeBlocksThreshold = scoring.Some(0.9)
			busyCfg.ActivePrefillTokensThresholdFrac = scoring.Some(2)
			b.Run("costs/busy-thresholds", func(b *testing.B) {
				for range b.N {
					am, _ := scoring.NewArgmin(&sreq, &busyCfg, s.rng)
					am.OfferLoads(rows, sc.capacities(ts, nil))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			})
			b.Run("offer/busy-thresholds", func(b *testing.B) {
				for range b.N {
					am, _ := scoring.NewArgmin(&sreq, &busyCfg, s.rng)
					sc.offer(ts, &am, true, false, nil)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			})
			for i := range rows {
				rows[i].Overlap = 0
			}
			b.Run("costs/all-tied", costs)
		})
	}
}

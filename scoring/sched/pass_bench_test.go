package sched

import (
	"fmt"
	"testing"

	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// kvMachine is a Dynamo-mode KV machine (block size 16, no index) over workers 0..n-1, joined at time 0.
func kvMachine(tb testing.TB, n int) *Machine {
	tb.Helper()
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 16
	m, err := New(cfg, nil, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		m.AddWorker(time.Unix(0, 0), Worker{ID: uint64(i)})
	}
	return m
}

// BenchmarkSelectionPass isolates the selection stage of a decision over W workers that all match the
// prompt: the load rows with the scattered overlap scores, then the cost loop, with one best worker
// (distinct overlaps), with busy thresholds, and with every worker tied (an idle fleet and a prompt none
// of them holds). The busy-threshold rows include writing the capacities.
func BenchmarkSelectionPass(b *testing.B) {
	for _, w := range []int{16, 256, 1024} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			m := kvMachine(b, w)
			chain := make([]uint64, 512)
			var scores []prefix.Score
			for i := range w {
				// Reverse order: the index lists workers in its own order, not the machine's.
				scores = append(scores, prefix.Score{Worker: prefix.WorkerKey{WorkerID: uint64(w - 1 - i)}, Blocks: uint32(1 + i%500)})
			}
			sreq := scoring.Request{ISL: 8192}
			b.Run("rows", func(b *testing.B) {
				for range b.N {
					m.loadRows(overlap{scores: scores}, chain, true, false, avoid{})
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			})
			rows, _ := m.loadRows(overlap{scores: scores}, chain, true, false, avoid{})
			costs := func(b *testing.B) {
				for range b.N {
					am, ok := scoring.NewArgmin(&sreq, m.cfg, m.rng)
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
			busyCfg := *m.cfg
			busyCfg.ActiveDecodeBlocksThreshold = scoring.Some(0.9)
			busyCfg.ActivePrefillTokensThresholdFrac = scoring.Some(2)
			b.Run("costs/busy-thresholds", func(b *testing.B) {
				for range b.N {
					am, _ := scoring.NewArgmin(&sreq, &busyCfg, m.rng)
					am.OfferLoads(rows, m.capacities(nil))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			})
			// The linear policy's whole pass (argmin: overlaps scattered, costs, argmin) by the load rows
			// and by the vector kernel (linearArgmin), where the machine has it.
			for _, kernel := range []bool{false, true} {
				if kernel && !haveCostKernel {
					continue
				}
				b.Run(fmt.Sprintf("argmin/kernel=%v", kernel), func(b *testing.B) {
					defer func(on bool) { haveCostKernel = on }(haveCostKernel)
					haveCostKernel = kernel
					for range b.N {
						am, _ := scoring.NewArgmin(&sreq, m.cfg, m.rng)
						if _, _, err := m.argmin(&am, overlap{scores: scores}, chain, true, avoid{}); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
				})
			}
			b.Run("offer/busy-thresholds", func(b *testing.B) {
				for range b.N {
					am, _ := scoring.NewArgmin(&sreq, &busyCfg, m.rng)
					m.offer(&am, overlap{scores: scores}, chain, true, false, avoid{})
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			})
			// The kvroute preset's decision loop (calibrated cost), which reads the dense rows itself.
			b.Run("calibrated", func(b *testing.B) {
				for range b.N {
					if _, _, err := m.calibrated(&sreq, overlap{scores: scores}, scores, false, chain, 8192, true, avoid{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			})
			// The same with the decode charged (--router-decode-weight 1: decode.go's pass over the targets).
			b.Run("calibrated/decode-weight-1", func(b *testing.B) {
				plain := m.cfg
				dcfg := *plain
				dcfg.DecodeWeight = 1
				m.cfg = &dcfg
				defer func() { m.cfg = plain }()
				for range b.N {
					if _, _, err := m.calibrated(&sreq, overlap{scores: scores}, scores, false, chain, 8192, true, avoid{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*w), "ns/worker")
			})
			// The same once every engine has evicted and no worker is spacious (a busy fleet's steady
			// state): each target's eviction-age charge is added (age.go).
			b.Run("calibrated/evicting", func(b *testing.B) {
				evs := make([]prefix.Evicted, w)
				for i := range evs {
					evs[i].Worker = prefix.WorkerKey{WorkerID: uint64(i)}
				}
				m.Evicted(evs)
				m.sc.now = time.Unix(3600, 0).UnixNano()
				b.ResetTimer()
				for range b.N {
					if _, _, err := m.calibrated(&sreq, overlap{scores: scores}, scores, false, chain, 8192, true, avoid{}); err != nil {
						b.Fatal(err)
					}
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

package prefix

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// BenchmarkFindMatches: one op is one FindMatches of a 512-block query against an index built from the
// conversation workload (about 4,096 blocks per worker: 1 M (block, worker) entries at W=256, the whole
// fleet in one index; 256 K at W=64, one shard of four). q=conv queries a random conversation, partly cached
// on one or a few workers; q=chain queries the hot conversation that W/8 workers hold in full (512 blocks
// matched); q=stair queries the staircase conversation (W nodes on the path, one dropout per worker). Each
// call is timed on its own for p50-us and p99-us.
func BenchmarkFindMatches(b *testing.B) {
	for _, workers := range []int{256, 64} {
		wl := getWorkload(workers)
		ix, heap := wl.build()
		for _, q := range []string{"conv", "chain", "stair"} {
			b.Run(fmt.Sprintf("W=%d/B=512/q=%s", workers, q), func(b *testing.B) {
				queries := wl.convQ
				switch q {
				case "chain":
					queries = [][]uint64{wl.chainQ}
				case "stair":
					queries = [][]uint64{wl.stairQ}
				}
				out := make([]Score, 0, workers)
				lat := make([]time.Duration, 0, b.N)
				matched := 0
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					t0 := time.Now()
					out = ix.FindMatches(queries[i%len(queries)], out[:0])
					lat = append(lat, time.Since(t0))
					matched += len(out)
				}
				b.StopTimer()
				p50, p99 := percentiles(lat)
				b.ReportMetric(p50, "p50-us")
				b.ReportMetric(p99, "p99-us")
				b.ReportMetric(float64(matched)/float64(b.N), "workers/op")
				b.ReportMetric(float64(ix.Size()), "entries")
				b.ReportMetric(float64(heap)/float64(ix.Size()), "bytes/block-worker")
			})
		}
	}
}

// BenchmarkStore: one op is one stored event of the conversation workload (at most 16 blocks, 15.6 on
// average), applied in fleet order to an index that grows to the workload's full size and is then rebuilt
// from empty; blocks/s is the apply rate on one core.
func BenchmarkStore(b *testing.B) {
	for _, workers := range []int{256, 64} {
		wl := getWorkload(workers)
		b.Run(fmt.Sprintf("W=%d/chain=16", workers), func(b *testing.B) {
			ix := New()
			blocks := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := i % len(wl.events)
				if k == 0 && i > 0 {
					b.StopTimer()
					ix = New()
					b.StartTimer()
				}
				ev := wl.events[k]
				if err := ix.Store(ev.w, ev.parent, ev.hasParent, ev.blocks); err != nil {
					b.Fatal(err)
				}
				blocks += len(ev.blocks)
			}
			b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}

// BenchmarkBuild: one op builds the whole W=256 index (1 M entries) from its events; it reports the apply
// rate and the heap held per (block, worker) entry after GC.
func BenchmarkBuild(b *testing.B) {
	wl := getWorkload(256)
	b.Run("W=256", func(b *testing.B) {
		var heap uint64
		var ix *Index
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			ix, heap = wl.build()
		}
		b.StopTimer()
		b.ReportMetric(float64(wl.blocks*b.N)/b.Elapsed().Seconds(), "blocks/s")
		b.ReportMetric(float64(heap)/float64(ix.Size()), "bytes/block-worker")
		b.ReportMetric(float64(len(ix.nodes)-len(ix.freeNodes)), "nodes")
	})
}

// BenchmarkChurn: steady state at full size. One op takes one stored event of the workload, removes its
// blocks leaf first (as an engine evicts) and stores them again; blocks/s counts removed plus stored
// blocks. Removals split shared runs, cascade and merge, so this is the write path at its most expensive.
func BenchmarkChurn(b *testing.B) {
	wl := getWorkload(256)
	ix, _ := wl.build()
	b.Run("W=256/chain=16", func(b *testing.B) {
		ehs := make([]uint64, 0, 16)
		blocks := 0
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			ev := wl.events[i%len(wl.events)]
			ehs = ehs[:0]
			for k := len(ev.blocks) - 1; k >= 0; k-- {
				ehs = append(ehs, ev.blocks[k].EngineHash)
			}
			_ = ix.Remove(ev.w, ehs) // a cascade may already have dropped some
			if err := ix.Store(ev.w, ev.parent, ev.hasParent, ev.blocks); err != nil && !errors.Is(err, ErrParentNotFound) {
				b.Fatal(err)
			}
			blocks += 2 * len(ev.blocks)
		}
		b.StopTimer()
		b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
		b.ReportMetric(float64(ix.Size()), "entries")
	})
}

// BenchmarkClearWorker: one worker's engine reset (ClearRank) in the W=256 workload's index with a view
// copy kept in step, then the Sync that brings the copy up to date (what an indexer shard does before it
// lets readers into the copy). Each op clears another worker; at most 256 ops.
func BenchmarkClearWorker(b *testing.B) {
	wl := getWorkload(256)
	b.Run("W=256", func(b *testing.B) {
		if b.N > wl.workers {
			b.Skip("more ops than workers")
		}
		ix, _ := wl.build()
		v := ix.NewView()
		ix.Sync(v)
		nodes := 0
		b.ResetTimer()
		for i := range b.N {
			ix.ClearRank(WorkerKey{WorkerID: uint64(1000 + i/2), DPRank: uint32(i % 2)}) // the workload's keys
			nodes += len(ix.dirty)
			ix.Sync(v)
		}
		b.ReportMetric(float64(nodes)/float64(b.N), "nodes-synced")
	})
}

package bench

import (
	"strconv"
	"testing"
)

// BenchmarkIndexerReplay: one op is one unpaced replay of a 2,000-request synthetic conversation trace
// (24 sessions, 8 system prompts, 128-token blocks) partitioned over W workers with 64-block LRUs,
// through a fresh 4-shard indexer. Reports Dynamo's block throughput and the replay's query p99.
func BenchmarkIndexerReplay(b *testing.B) {
	tr := synthTrace(2000)
	for _, workers := range []int{16, 256} {
		b.Run("W="+strconv.Itoa(workers), func(b *testing.B) {
			cfg := DefaultIndexerConfig()
			cfg.Workers, cfg.BlockSize, cfg.CapacityBlocks = workers, 128, 64
			w, err := PrepareIndexer(tr, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var blocks, p99 float64
			for b.Loop() {
				run, err := w.RunIndexer(0, nil)
				if err != nil {
					b.Fatal(err)
				}
				blocks += run.BlocksPerSec
				p99 += run.QueryMicros.P99
			}
			b.ReportMetric(blocks/float64(b.N), "blocks/s")
			b.ReportMetric(p99/float64(b.N), "query-p99-us")
		})
	}
}

package indexer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring/prefix"
)

// fill indexes `blocks` (block, worker) entries over `workers` workers: conversation-like trees where each
// worker holds a few long chains branching from shared system prompts. It returns a query of qlen blocks
// that matches one chain for its whole length.
func fill(b *testing.B, x *Indexer, workers, blocks, qlen int) []uint64 {
	rng := rand.New(rand.NewPCG(7, 11))
	const chainLen = 512
	per := blocks / workers
	engine := uint64(1)
	var query []uint64
	for w := 0; w < workers; w++ {
		var ops []Op
		for held := 0; held < per; held += chainLen {
			n := min(chainLen, per-held)
			root := uint64(rng.IntN(8)) << 48 // 8 shared prefixes
			blocksOut := make([]prefix.Block, n)
			private := rng.Uint64() | 1<<62
			for i := range blocksOut {
				lh := root + uint64(i)
				if i >= 32 { // after a shared 32-block prefix, the conversation is the worker's own
					lh = private + uint64(i)
				}
				blocksOut[i] = prefix.Block{EngineHash: engine, LocalHash: lh}
				engine++
			}
			ops = append(ops, Op{Kind: OpStore, Blocks: blocksOut})
			if query == nil && n >= qlen {
				query = make([]uint64, qlen)
				for i := range query {
					query[i] = blocksOut[i].LocalHash
				}
			}
		}
		_ = x.Apply(&Apply{WorkerID: uint64(w), Ops: ops})
	}
	x.Flush()
	return query
}

func percentile(d []time.Duration, p float64) float64 {
	slices.Sort(d)
	return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) / 1e3
}

// BenchmarkFindMatches measures one overlap query (fan-out over every shard + merge) for a 512-block
// prompt. Axes: W workers, N indexed (block, worker) entries, S shards; path=direct reads every shard's
// published view from the caller (Indexer.FindMatches), path=chan asks each shard actor through a reply
// channel.
func BenchmarkFindMatches(b *testing.B) {
	for _, c := range []struct{ workers, blocks, shards int }{{256, 1 << 20, 4}, {256, 1 << 20, 1}, {1024, 1 << 20, 4}} {
		for _, path := range []string{"direct", "chan"} {
			name := fmt.Sprintf("W=%d/N=%d/S=%d/B=512/path=%s", c.workers, c.blocks, c.shards, path)
			b.Run(name, func(b *testing.B) {
				x := newIndexer(b, c.shards)
				q := fill(b, x, c.workers, c.blocks, 512)
				out := make([]prefix.Score, 0, c.workers)
				lat := make([]time.Duration, 0, b.N)
				replies := make([]chan []prefix.Score, len(x.pids))
				for i := range replies {
					replies[i] = make(chan []prefix.Score, 1)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					if path == "direct" {
						out = x.FindMatches(q, out[:0])
					} else {
						out = out[:0]
						for s, pid := range x.pids {
							x.system.Root.Send(pid, &Query{Local: q, Reply: replies[s]})
						}
						for s := range x.pids {
							out = append(out, <-replies[s]...)
						}
					}
					lat = append(lat, time.Since(t0))
				}
				b.StopTimer()
				if len(out) == 0 {
					b.Fatal("query matched nothing")
				}
				b.ReportMetric(percentile(lat, 0.50), "p50-us")
				b.ReportMetric(percentile(lat, 0.99), "p99-us")
			})
		}
	}
}

// BenchmarkFindMatchesUnderWrites is the direct path while every shard applies a steady stream of stores
// and removals: what a read pays when writers are busy.
func BenchmarkFindMatchesUnderWrites(b *testing.B) {
	x := newIndexer(b, 4)
	q := fill(b, x, 256, 1<<20, 512)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		engine := uint64(1 << 40)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			blocks := make([]prefix.Block, 16)
			for j := range blocks {
				blocks[j] = prefix.Block{EngineHash: engine, LocalHash: engine ^ 0x5555}
				engine++
			}
			w := uint64(i % 256)
			_ = x.Apply(&Apply{WorkerID: w, Ops: []Op{{Kind: OpStore, Blocks: blocks}, {Kind: OpRemove, Hashes: []uint64{blocks[0].EngineHash}}}})
		}
	}()
	out := make([]prefix.Score, 0, 256)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		out = x.FindMatches(q, out[:0])
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(percentile(lat, 0.50), "p50-us")
	b.ReportMetric(percentile(lat, 0.99), "p99-us")
	b.ReportMetric(percentile(lat, 0.999), "p999-us")
}

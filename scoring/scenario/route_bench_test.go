package scenario

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/load"
	"github.com/kvroute/kvroute/scoring/prefix"
)

const (
	benchBlock      = 16
	benchPromptBlks = 512 // 8k-token prompts
	benchIndexed    = 1 << 20
)

// benchTokens builds prompt p: one of 64 shared 128-block system prefixes, then a unique body.
func benchTokens(p int, tail uint32) []uint32 {
	toks := make([]uint32, benchPromptBlks*benchBlock)
	for i := range toks {
		if i < 128*benchBlock {
			toks[i] = uint32(p%64)<<20 | uint32(i)
		} else {
			toks[i] = uint32(p)<<16 ^ uint32(i)*2654435761 ^ tail
		}
	}
	return toks
}

type benchFleet struct {
	index    *prefix.Index
	active   *load.Registry // active-request index: worker → sequence-hash chains of its running requests
	trackers []*load.Tracker
	snaps    []load.Snapshot
	keys     []scoring.WorkerKey
	slot     map[scoring.WorkerKey]int
	prompts  int
}

// newBenchFleet indexes 1,048,576 blocks (2,048 prompts of 512 blocks, each stored on one worker) and
// gives every worker 4 active 512-block requests.
func newBenchFleet(b *testing.B, workers int) *benchFleet {
	f := &benchFleet{index: prefix.New(), active: load.NewRegistry(), slot: map[scoring.WorkerKey]int{}, prompts: benchIndexed / benchPromptBlks}
	lc := load.DefaultConfig()
	for w := range workers {
		k := scoring.WorkerKey{WorkerID: uint64(w + 1)}
		f.keys = append(f.keys, k)
		f.slot[k] = w
		f.trackers = append(f.trackers, load.New(lc))
	}
	blocks := make([]prefix.Block, benchPromptBlks)
	now := time.Unix(0, 0)
	for p := range f.prompts {
		local := scoring.LocalBlockHashes(nil, benchTokens(p, 0), benchBlock, scoring.Seed, nil)
		seq := scoring.SequenceHashes(nil, local)
		for i := range blocks {
			blocks[i] = prefix.Block{EngineHash: seq[i] ^ engineSalt, LocalHash: local[i]}
		}
		w := p % workers
		if err := f.index.Store(prefix.WorkerKey(f.keys[w]), 0, false, blocks); err != nil {
			b.Fatal(err)
		}
		if p < 4*workers {
			_ = f.trackers[w].AddRequest(load.Request{ID: "bg" + strconv.Itoa(p), SeqHashes: seq, ISL: len(seq) * benchBlock, Now: now})
			if err := f.active.Add("bg"+strconv.Itoa(p), f.keys[w], local, seq); err != nil {
				b.Fatal(err)
			}
		}
	}
	f.snaps = make([]load.Snapshot, workers)
	for i, t := range f.trackers {
		f.snaps[i] = t.Snapshot()
	}
	return f
}

// BenchmarkRouteDecision: one op is the whole pure routing decision for an 8k-token prompt (512 blocks):
// block hashing, sequence hashing, FindMatches on an index of 1 M blocks, candidate building (published
// snapshot + projection per worker), Select in kv mode, AddRequest on the chosen tracker, and the Free
// that keeps the fleet steady (not timed). Queries are indexed prompts with a fresh suffix from block 384.
// Reports p50/p99 of the timed part in µs.
//
// Two ways to get additional_active_blocks: projection=tracker asks every worker's tracker (a binary
// search of its refcount table: a few cache misses per worker), projection=active-index queries one
// load.Registry (a prefix index of active requests, added at AddRequest, removed at Free, untimed),
// which costs O(prompt depth) regardless of the worker count.
func BenchmarkRouteDecision(b *testing.B) {
	for _, workers := range []int{16, 256, 1024} {
		f := newBenchFleet(b, workers)
		for _, proj := range []string{"tracker", "active-index"} {
			b.Run("W="+strconv.Itoa(workers)+"/blocks=1M/projection="+proj, func(b *testing.B) {
				benchRoute(b, f, workers, proj == "active-index")
			})
		}
	}
}

func benchRoute(b *testing.B, f *benchFleet, workers int, activeIndex bool) {
	{
		{ // indentation kept from the inline version
			cfg := scoring.DefaultConfig()
			cfg.Mode = scoring.ModeKV
			rng := rand.New(rand.NewPCG(1, 1))
			queries := make([][]uint32, 256)
			for i := range queries {
				q := benchTokens(rng.IntN(f.prompts), 0)
				tail := benchTokens(rng.IntN(f.prompts), uint32(i+1))
				copy(q[384*benchBlock:], tail[384*benchBlock:])
				queries[i] = q
			}
			var (
				local  = make([]uint64, 0, benchPromptBlks)
				seq    = make([]uint64, 0, benchPromptBlks)
				scores = make([]prefix.Score, 0, workers)
				act    = make([]prefix.Score, 0, workers)
				cands  = make([]scoring.Candidate, workers)
				lat    = make([]time.Duration, 0, b.N)
				now    = time.Unix(0, 0)
				stage  [5]time.Duration
			)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				tokens := queries[i%len(queries)]
				start := time.Now()
				local = scoring.LocalBlockHashes(local[:0], tokens, benchBlock, scoring.Seed, nil)
				seq = scoring.SequenceHashes(seq[:0], local)
				t1 := time.Now()
				scores = f.index.FindMatches(local, scores[:0])
				t2 := time.Now()
				if activeIndex {
					act = f.active.ActivePrefix(local, act[:0])
					for w := range cands {
						c := &cands[w]
						c.Worker, c.Overlap = f.keys[w], scoring.Overlap{}
						c.Load = f.snaps[w].Load(uint64(len(seq)))
					}
					for _, s := range act {
						cands[f.slot[scoring.WorkerKey(s.Worker)]].Load.AdditionalBlocks -= uint64(s.Blocks)
					}
				} else {
					for w := range cands {
						c := &cands[w]
						c.Worker, c.Overlap = f.keys[w], scoring.Overlap{}
						c.Load = f.snaps[w].Load(f.trackers[w].Projection(seq, true))
					}
				}
				for _, s := range scores {
					cands[f.slot[scoring.WorkerKey(s.Worker)]].Overlap.Device = s.Blocks
				}
				t3 := time.Now()
				d, err := scoring.Select(scoring.Request{ISL: len(tokens)}, cands, &cfg, rng)
				t4 := time.Now()
				if err != nil {
					b.Fatal(err)
				}
				tr := f.trackers[d.Index]
				_ = tr.AddRequest(load.Request{ID: "r", SeqHashes: seq, ISL: len(tokens), OverlapBlocks: d.Overlap, Now: now})
				t5 := time.Now()
				lat = append(lat, t5.Sub(start))
				stage[0] += t1.Sub(start)
				stage[1] += t2.Sub(t1)
				stage[2] += t3.Sub(t2)
				stage[3] += t4.Sub(t3)
				stage[4] += t5.Sub(t4)
				tr.Free("r")
				if activeIndex { // the worker actor's side of AddRequest/Free, untimed like Free
					_ = f.active.Add("r", d.Worker, local, seq)
					f.active.Free("r")
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
			for i, name := range []string{"hash", "match", "cands", "select", "add"} {
				b.ReportMetric(float64(stage[i].Nanoseconds())/1e3/float64(b.N), name+"-us")
			}
		}
	}
}

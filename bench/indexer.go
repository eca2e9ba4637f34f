package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// IndexerConfig configures the indexer benchmark: Dynamo's mooncake_bench method
// against kvroute's sharded indexer (actors/indexer).
//
// One op is one overlap query (Match of a request's local block hashes, the router's find_matches: the
// overlaps in groups, prefix.Matches; timed on the caller) or one KV event (a Stored or Removed event of
// one worker, sent as an indexer.Apply). Blocks/s counts query blocks plus stored blocks, Dynamo's "block
// throughput"; event blocks/s counts stored plus removed blocks.
type IndexerConfig struct {
	// Workers is the number of synthetic workers the trace is partitioned over (Dynamo
	// --num-unique-inference-workers). Default 1,000.
	Workers int
	// Duplicate replays every worker's timeline under this many worker ids (Dynamo -d): same blocks, more
	// workers holding them. Default 1.
	Duplicate int
	// BlockSize is the engine KV block size in tokens; it must divide the trace block size. Default 512:
	// one index block per trace hash id, as Dynamo's bench.
	BlockSize int
	// CapacityBlocks is each worker's KV capacity in blocks: an LRU per worker emits Removed events when a
	// store overflows it. Default 0 means 262,144 tokens' worth (512 blocks of 512 tokens).
	CapacityBlocks int
	// Duration is the wall time the whole trace is compressed into (Dynamo --benchmark-duration-ms);
	// 0 replays as fast as possible (the peak). Default 60 s.
	Duration time.Duration
	// Shards is the indexer's shard count (--router-event-threads). Default: as kvroute serve's
	// (scoring.DefaultIndexShards: 4, at most GOMAXPROCS).
	Shards int
	// WarmEvery is the indexer's warming period (indexer.Config.WarmEvery; 0: no warming). Default: as
	// kvroute serve's (indexer.DefaultWarmEvery).
	WarmEvery time.Duration
	// Replayers is the number of goroutines replaying worker timelines (workers are dealt round-robin).
	// Default 2 × GOMAXPROCS.
	Replayers int
	// MaxBatchBlocks splits every Stored event into events of at most this many blocks, each sent as its
	// own Apply (an experiment on the query tail under writes from when readers waited for a shard's
	// write lock; engines batch per scheduler step). Default 0: one event per request.
	MaxBatchBlocks int
	// ColdMB, when positive, adds a cold floor to every run: each request replayed floorPasses more times
	// against the final index, each time after writing ColdMB MiB of other memory, its fastest time kept
	// (IndexerRun.ColdFloorMicros). Default 0: no cold floor.
	ColdMB int
	// Again times every query a second time at once, after its timed run (IndexerRun.AgainMicros): the
	// same query with its path just read, so that what the first run's tail has beyond the second's is
	// the memory it found cold, not the index's work or a wait for a writer. It adds the second reads
	// to the load. Default false.
	Again bool
	// Seed seeds the partition of requests over workers. Default 42.
	Seed uint64
	// Blocks maps hash ids to tokens.
	Blocks Blocks
}

// DefaultIndexerConfig returns the defaults.
func DefaultIndexerConfig() IndexerConfig {
	return IndexerConfig{Workers: 1000, Duplicate: 1, BlockSize: TraceBlockSize, Duration: 60 * time.Second,
		Shards: scoring.DefaultIndexShards(), WarmEvery: indexer.DefaultWarmEvery, Replayers: 2 * runtime.GOMAXPROCS(0), Seed: 42, Blocks: DefaultBlocks()}
}

// Validate checks the configuration.
func (c *IndexerConfig) Validate() error {
	if c.ColdMB < 0 || c.ColdMB > 1024 {
		return fmt.Errorf("bench: cold MiB %d out of range [0, 1024]", c.ColdMB)
	}
	if c.Workers < 1 || c.Duplicate < 1 || c.Replayers < 1 {
		return fmt.Errorf("bench: workers %d, duplicate %d, replayers %d must be positive", c.Workers, c.Duplicate, c.Replayers)
	}
	if c.Duration < 0 || c.CapacityBlocks < 0 || c.MaxBatchBlocks < 0 {
		return fmt.Errorf("bench: negative duration or capacity")
	}
	if err := c.Blocks.Validate(); err != nil {
		return err
	}
	return c.Blocks.CheckEngineBlock(c.BlockSize)
}

func (c *IndexerConfig) capacity() int {
	if c.CapacityBlocks > 0 {
		return c.CapacityBlocks
	}
	return max(1, 262144/c.BlockSize)
}

// ixEntry is one step of a worker's timeline: the query for request req and the event batch it caused.
type ixEntry struct {
	at     int64 // trace time offset, ns
	worker int32
	req    int32
	ops    []indexer.Op
	nOps   int32 // events in ops (stores + removes)
	stored int32
	remove int32
}

// IndexerWorkload is a trace prepared for replay: hashed requests and per-worker event timelines. It is
// reusable across runs (sweep steps).
type IndexerWorkload struct {
	cfg      IndexerConfig
	local    [][]uint64 // per request
	timeline [][]ixEntry
	span     int64 // ns
	// Totals for one pass over every duplicate.
	Queries, Events, QueryBlocks, StoredBlocks, RemovedBlocks int64
	Stores, Removes                                           int64
	MaxWorkerBlocks                                           int
	// HeldBlocks is the blocks every worker holds at the end (one copy): the index must then hold
	// HeldBlocks × Duplicate (block, worker) entries.
	HeldBlocks int64
}

// PrepareIndexer hashes every request, partitions the trace over the workers and simulates each
// worker's LRU to produce its Stored/Removed events. Not timed.
func PrepareIndexer(t *Trace, cfg IndexerConfig) (*IndexerWorkload, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("bench: empty trace")
	}
	w := &IndexerWorkload{cfg: cfg, local: make([][]uint64, len(t.Requests)), timeline: make([][]ixEntry, cfg.Replayers)}
	bs := cfg.BlockSize
	per := cfg.Blocks.BlockSize / bs
	idHashes := make(map[uint64][]uint64)
	var tok []uint32
	hashesOf := func(id uint64) []uint64 {
		if h, ok := idHashes[id]; ok {
			return h
		}
		tok = cfg.Blocks.AppendBlock(tok[:0], id, cfg.Blocks.BlockSize)
		h := make([]uint64, per)
		for j := range h {
			h[j] = scoring.BlockHash(tok[j*bs:(j+1)*bs], nil, scoring.Seed)
		}
		idHashes[id] = h
		return h
	}
	blocks := make([][]prefix.Block, len(t.Requests))
	var chunks []Chunk
	for i := range t.Requests {
		r := &t.Requests[i]
		chunks = cfg.Blocks.AppendChunks(chunks[:0], r, bs)
		local := make([]uint64, len(chunks))
		for j, c := range chunks {
			local[j] = hashesOf(c.ID)[c.Sub]
		}
		seq := scoring.SequenceHashes(nil, local)
		bl := make([]prefix.Block, len(local))
		for j := range bl {
			bl[j] = prefix.Block{EngineHash: seq[j], LocalHash: local[j]}
		}
		w.local[i], blocks[i] = local, bl
	}

	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	byWorker := make([][]int32, cfg.Workers)
	for i := range t.Requests {
		k := rng.IntN(cfg.Workers)
		byWorker[k] = append(byWorker[k], int32(i))
	}
	t0 := t.Requests[0].Timestamp
	w.span = (t.Requests[len(t.Requests)-1].Timestamp - t0) * int64(time.Millisecond)
	capacity := cfg.capacity()
	var evicted []uint64
	for wk, reqs := range byWorker {
		cache := newLRU(capacity)
		var tl []ixEntry
		for _, ri := range reqs {
			bl := blocks[ri]
			from := 0
			for from < len(bl) && cache.Has(bl[from].EngineHash) {
				from++
			}
			for j := len(bl) - 1; j >= 0; j-- {
				cache.Touch(bl[j].EngineHash)
			}
			evicted = cache.EvictOver(evicted[:0])
			e := ixEntry{at: (t.Requests[ri].Timestamp - t0) * int64(time.Millisecond), worker: int32(wk), req: ri}
			if from < len(bl) {
				step := len(bl) - from
				if cfg.MaxBatchBlocks > 0 {
					step = cfg.MaxBatchBlocks
				}
				for lo := from; lo < len(bl); lo += step {
					op := indexer.Op{Kind: indexer.OpStore, Blocks: bl[lo:min(lo+step, len(bl))]}
					if lo > 0 {
						op.Parent, op.HasParent = bl[lo-1].EngineHash, true
					}
					e.ops = append(e.ops, op)
					w.Stores++
				}
				e.stored = int32(len(bl) - from)
			}
			if len(evicted) > 0 {
				e.ops = append(e.ops, indexer.Op{Kind: indexer.OpRemove, Hashes: slices.Clone(evicted)})
				e.remove = int32(len(evicted))
			}
			e.nOps = int32(len(e.ops))
			tl = append(tl, e)
			w.Queries++
			w.QueryBlocks += int64(len(bl))
			w.StoredBlocks += int64(e.stored)
			w.RemovedBlocks += int64(e.remove)
			if e.remove > 0 {
				w.Removes++
			}
			w.MaxWorkerBlocks = max(w.MaxWorkerBlocks, cache.Len())
		}
		w.HeldBlocks += int64(cache.Len())
		r := wk % cfg.Replayers
		w.timeline[r] = append(w.timeline[r], tl...)
	}
	w.Events = w.Stores + w.Removes
	for r := range w.timeline {
		slices.SortStableFunc(w.timeline[r], func(a, b ixEntry) int {
			switch {
			case a.at < b.at:
				return -1
			case a.at > b.at:
				return 1
			}
			return 0
		})
	}
	return w, nil
}

// IndexerRun is the result of one replay.
type IndexerRun struct {
	// OfferedSeconds is the configured duration (0: as fast as possible); ElapsedSeconds the wall time
	// until every event was applied (the final Flush included).
	OfferedSeconds float64 `json:"offered_s"`
	ElapsedSeconds float64 `json:"elapsed_s"`
	Workers        int     `json:"workers"`
	Queries        int64   `json:"queries"`
	Events         int64   `json:"events"`
	QueryBlocks    int64   `json:"query_blocks"`
	StoredBlocks   int64   `json:"stored_blocks"`
	RemovedBlocks  int64   `json:"removed_blocks"`
	// Ops = queries + events; blocks = query blocks + stored blocks (Dynamo's definitions). Offered
	// rates are 0 for an unpaced run.
	OfferedOpsPerSec    float64 `json:"offered_ops_per_s"`
	OpsPerSec           float64 `json:"ops_per_s"`
	OfferedBlocksPerSec float64 `json:"offered_blocks_per_s"`
	BlocksPerSec        float64 `json:"blocks_per_s"`
	// EventBlocksPerSec is (stored + removed blocks) / elapsed: what the write path sustained.
	EventBlocksPerSec float64 `json:"event_blocks_per_s"`
	// QueryMicros summarizes the overlap queries' (Match) latency in µs.
	QueryMicros Summary `json:"query_us"`
	// QuiescentMicros summarizes the overlap query latency of every request replayed once more against the
	// final index from one goroutine with no concurrent writes: the query's own cost, without lock waits
	// and scheduling delays.
	QuiescentMicros Summary `json:"quiescent_query_us"`
	// FloorMicros summarizes, per request, the fastest of floorPasses quiescent replays: the query's own
	// cost with the machine's interruptions filtered out. Its p99 is the index's; what the run's p99 has
	// beyond it came from waiting (for a core, a GC pause, a writer).
	FloorMicros Summary `json:"floor_query_us"`
	// ColdFloorMicros is the floor with the caches cold (IndexerConfig.ColdMB MiB of other memory written
	// before each replay): the query's own cost when the memory it reads comes from far away, as when the
	// writers and other work ran on its core between two queries. Zero without ColdMB. Being a fastest
	// of several, it is steady from run to run where the p99 under writes is not: a change to the index
	// can be judged by it.
	ColdFloorMicros Summary `json:"cold_floor_query_us"`
	// AgainMicros summarizes the second run of every query, at once after the timed one (IndexerConfig.
	// Again; zero without it).
	AgainMicros Summary `json:"again_query_us"`
	// Runtime is what the Go runtime did during the timed run (GC pauses, goroutines' wait for a core).
	Runtime RuntimeStats `json:"runtime"`
	// LoadAvg is the machine's load average (1, 5, 15 min) when the run ended: the other work that shared
	// its cores.
	LoadAvg string `json:"load_avg,omitempty"`
	// KeepingUp: elapsed ≤ 1.1 × offered (Dynamo's warning threshold).
	KeepingUp bool `json:"keeping_up"`
	// IndexEntries is the index size after the run ((block, worker) entries).
	IndexEntries int `json:"index_entries"`
	// MeanMatches is the mean number of (worker, score) results per query.
	MeanMatches float64 `json:"mean_matches"`
	// IndexBytes is the live heap the indexer holds after the run (after a GC, less the heap before it
	// started); BytesPerEntry divides it by IndexEntries: the memory of what `kvroute serve` runs, for
	// the configured shard count.
	IndexBytes    int64   `json:"index_bytes"`
	BytesPerEntry float64 `json:"bytes_per_entry"`
	// Warming is what the index's warmer did during the timed run.
	Warming Warming `json:"warming"`
	// Positions is the block positions of every shard's tree, summed: a prefix held by workers on k
	// shards counts k times, so Positions over the positions of one tree holding everything is the
	// shared-prefix duplication across shards.
	Positions int `json:"positions"`

	latencies []float64
}

// Latencies returns the sorted query latencies in µs.
func (r *IndexerRun) Latencies() []float64 { return r.latencies }

// RunIndexer replays w once against a fresh sharded indexer in a fresh actor system, compressing the
// trace into duration (0: no pacing). progress, when non-nil, advances by one per op.
func (w *IndexerWorkload) RunIndexer(duration time.Duration, progress *Progress) (*IndexerRun, error) {
	cfg := w.cfg
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	icfg := indexer.DefaultConfig()
	icfg.Shards, icfg.WarmEvery = cfg.Shards, cfg.WarmEvery
	x, err := indexer.New(system, icfg)
	if err != nil {
		return nil, err
	}
	defer x.Stop()

	scale := 0.0
	if duration > 0 && w.span > 0 {
		scale = float64(duration) / float64(w.span)
	}
	type result struct {
		lat     []int64
		again   []int64
		matches int64
		err     error
	}
	results := make([]result, len(w.timeline))
	base := liveHeap()
	before := readRuntime()
	warm0 := x.Warmed()
	start := time.Now()
	var wg sync.WaitGroup
	for r := range w.timeline {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			tl := w.timeline[r]
			lat := make([]int64, 0, len(tl)*cfg.Duplicate)
			var again []int64
			var m prefix.Matches
			var hashes []uint64 // the query's hashes, just written as a router's are (it hashes the prompt before it asks)
			var matches int64
			var pending int64
			for i := range tl {
				e := &tl[i]
				if scale > 0 && (i == 0 || e.at != tl[i-1].at) {
					if d := time.Duration(float64(e.at)*scale) - time.Since(start); d > 0 {
						time.Sleep(d)
					}
				}
				hashes = append(hashes[:0], w.local[e.req]...)
				local := hashes
				for d := 0; d < cfg.Duplicate; d++ {
					id := uint64(e.worker) + uint64(d)*uint64(cfg.Workers) + 1
					q0 := time.Now()
					x.Match(local, &m)
					lat = append(lat, time.Since(q0).Nanoseconds())
					if cfg.Again {
						q1 := time.Now()
						x.Match(local, &m)
						again = append(again, time.Since(q1).Nanoseconds())
					}
					matches += int64(m.Len())
					switch {
					case e.nOps == 0:
					case cfg.MaxBatchBlocks > 0:
						for k := range e.ops {
							if err := x.Apply(&indexer.Apply{WorkerID: id, Ops: e.ops[k : k+1]}); err != nil {
								results[r].err = err
								return
							}
						}
					default:
						if err := x.Apply(&indexer.Apply{WorkerID: id, Ops: e.ops}); err != nil {
							results[r].err = err
							return
						}
					}
				}
				pending += int64(1+e.nOps) * int64(cfg.Duplicate)
				if progress != nil && pending >= 256 {
					progress.Add(pending)
					pending = 0
				}
			}
			if progress != nil {
				progress.Add(pending)
			}
			results[r] = result{lat: lat, again: again, matches: matches}
		}(r)
	}
	wg.Wait()
	x.Flush()
	elapsed := time.Since(start)
	warm1 := x.Warmed()

	after := readRuntime().atEnd()
	quiet := make([]float64, len(w.local))
	floor := make([]float64, len(w.local))
	var m prefix.Matches
	for pass := range floorPasses {
		for i, local := range w.local {
			q0 := time.Now()
			x.Match(local, &m)
			us := float64(time.Since(q0).Nanoseconds()) / 1e3
			if pass == 0 {
				quiet[i], floor[i] = us, us
			}
			floor[i] = min(floor[i], us)
		}
	}

	var cold []float64
	if cfg.ColdMB > 0 {
		cold = coldFloor(x, w.local, cfg.ColdMB)
	}

	heap := liveHeap() - base
	k := int64(cfg.Duplicate)
	run := &IndexerRun{IndexBytes: heap, Positions: x.Positions(), QuiescentMicros: Summarize(quiet), FloorMicros: Summarize(floor),
		ColdFloorMicros: Summarize(cold), Runtime: after.since(before), LoadAvg: ThisMachine().LoadAvg, OfferedSeconds: duration.Seconds(), ElapsedSeconds: elapsed.Seconds(),
		Workers: cfg.Workers * cfg.Duplicate, Queries: w.Queries * k, Events: w.Events * k,
		QueryBlocks: w.QueryBlocks * k, StoredBlocks: w.StoredBlocks * k, RemovedBlocks: w.RemovedBlocks * k,
		IndexEntries: x.Size(), Warming: warmingOf(warm0, warm1, elapsed)}
	var all, again []int64
	var matches int64
	for _, res := range results {
		if res.err != nil {
			return nil, res.err
		}
		all = append(all, res.lat...)
		again = append(again, res.again...)
		matches += res.matches
	}
	ops := float64(run.Queries + run.Events)
	blocks := float64(run.QueryBlocks + run.StoredBlocks)
	run.OpsPerSec = ops / elapsed.Seconds()
	run.BlocksPerSec = blocks / elapsed.Seconds()
	run.EventBlocksPerSec = float64(run.StoredBlocks+run.RemovedBlocks) / elapsed.Seconds()
	if duration > 0 {
		run.OfferedOpsPerSec = ops / duration.Seconds()
		run.OfferedBlocksPerSec = blocks / duration.Seconds()
		run.KeepingUp = elapsed <= duration*11/10
	}
	run.latencies = NanosToMicros(all)
	run.QueryMicros = Summarize(run.latencies)
	run.AgainMicros = Summarize(NanosToMicros(again))
	if run.Queries > 0 {
		run.MeanMatches = float64(matches) / float64(run.Queries)
	}
	if run.IndexEntries > 0 {
		run.BytesPerEntry = float64(run.IndexBytes) / float64(run.IndexEntries)
	}
	return run, nil
}

// Warming is what the indexer's warmer (indexer.Config.WarmEvery) did during a timed run: the shard
// views it read, the mean time a view took, and its share of one core over the run.
type Warming struct {
	Views         uint64  `json:"views"`
	MicrosPerView float64 `json:"us_per_view"`
	CorePercent   float64 `json:"core_percent"`
}

// warmingOf is the warming between two counts taken elapsed apart.
func warmingOf(a, b indexer.WarmStats, elapsed time.Duration) Warming {
	w := Warming{Views: b.Views - a.Views}
	busy := b.Busy - a.Busy
	if w.Views > 0 {
		w.MicrosPerView = float64(busy.Nanoseconds()) / 1e3 / float64(w.Views)
	}
	if elapsed > 0 {
		w.CorePercent = 100 * float64(busy) / float64(elapsed)
	}
	return w
}

// floorPasses is how many times the quiescent replay runs; FloorMicros keeps each query's fastest.
const floorPasses = 3

// coldFloor replays every request floorPasses times against x, each time after writing mb MiB of other
// memory (a line in every 64 bytes), and returns each request's fastest time in µs.
func coldFloor(x *indexer.Indexer, local [][]uint64, mb int) []float64 {
	other := make([]uint64, mb<<20/8)
	best := make([]float64, len(local))
	var m prefix.Matches
	for pass := range floorPasses {
		for i, q := range local {
			for j := 0; j < len(other); j += 8 {
				other[j]++
			}
			q0 := time.Now()
			x.Match(q, &m)
			us := float64(time.Since(q0).Nanoseconds()) / 1e3
			if pass == 0 || us < best[i] {
				best[i] = us
			}
		}
	}
	return best
}

// liveHeap returns the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// SweepDurations returns steps durations from hi down to lo, evenly spaced in log scale (offered rate
// rises step by step).
func SweepDurations(hi, lo time.Duration, steps int) []time.Duration {
	if steps < 2 || hi <= lo {
		return []time.Duration{hi}
	}
	out := make([]time.Duration, steps)
	r := math.Log(float64(lo) / float64(hi))
	for i := range out {
		out[i] = time.Duration(float64(hi) * math.Exp(r*float64(i)/float64(steps-1))).Round(time.Millisecond)
	}
	return out
}

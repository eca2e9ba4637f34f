package prefix

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"
)

// storeEvent is one stored event of the synthetic workload.
type storeEvent struct {
	w         WorkerKey
	parent    uint64
	hasParent bool
	blocks    []Block
}

// workload is a conversation-like fleet state: system prompts shared by everybody, conversations that
// extend turn by turn and fork (regenerations, shared few-shot prefixes), each conversation cached on one
// worker or a few, one long hot conversation cached in full on an eighth of the workers, and one
// "staircase" conversation that worker w caches to depth 2+510w/(W-1), the worst case for a compressed
// tree (every worker ends its run at a different node).
type workload struct {
	workers int
	events  []storeEvent // store events of at most 16 blocks, interleaved across workers
	blocks  int          // Σ blocks over events = (block, worker) entries of the built index
	convQ   [][]uint64   // 512-block queries: a random conversation (partly cached, then new blocks)
	chainQ  []uint64     // 512-block query that the hot conversation's holders match in full
	stairQ  []uint64     // 512-block query that every worker matches to a different depth: W nodes, W dropouts
}

var (
	workloadMu    sync.Mutex
	workloadCache = map[int]*workload{}
)

// getWorkload returns the workload for a worker count, built once per process: about 4,096 cached blocks
// per worker, so 256 workers give about 1 M (block, worker) entries.
func getWorkload(workers int) *workload {
	workloadMu.Lock()
	defer workloadMu.Unlock()
	if wl, ok := workloadCache[workers]; ok {
		return wl
	}
	wl := genWorkload(workers, 4096, 1)
	workloadCache[workers] = wl
	return wl
}

type conv struct {
	local []uint64
	eh    []uint64
}

func genWorkload(workers, perWorker int, seed uint64) *workload {
	const queryLen = 512
	rng := rand.New(rand.NewPCG(seed, 2))
	sys := make([][]uint64, 32)
	for i := range sys {
		sys[i] = randHashes(rng, nil, 16+rng.IntN(112))
	}
	var convs []*conv
	newConv := func() *conv {
		var local []uint64
		if len(convs) > 0 && rng.IntN(10) < 3 { // a fork of an earlier conversation past its system prompt
			base := convs[rng.IntN(len(convs))].local
			local = slices.Clone(base[:len(base)/4+rng.IntN(len(base)/2)])
		} else {
			// Zipf-like: a few system prompts serve most conversations.
			local = slices.Clone(sys[min(len(sys)-1, int(rng.ExpFloat64()*4))])
		}
		local = randHashes(rng, local, queryLen+48+rng.IntN(100)-len(local))
		c := &conv{local: local, eh: make([]uint64, len(local))}
		prev := uint64(0x5eed)
		for i, h := range local {
			prev = mix(prev ^ h)
			c.eh[i] = prev
		}
		convs = append(convs, c)
		return c
	}
	hot := newConv()
	wl := &workload{workers: workers}
	perW := make([][]storeEvent, workers)
	held := make([]map[uint64]bool, workers)
	count := make([]int, workers)
	// cache appends to worker w's events the blocks of c up to n that w does not hold yet, 16 a store.
	cache := func(w int, c *conv, n int) {
		i := 0
		for i < n && held[w][c.eh[i]] {
			i++
		}
		key := WorkerKey{WorkerID: uint64(1000 + w/2), DPRank: uint32(w % 2)}
		for i < n {
			j := min(n, i+16)
			ev := storeEvent{w: key}
			if i > 0 {
				ev.parent, ev.hasParent = c.eh[i-1], true
			}
			for k := i; k < j; k++ {
				ev.blocks = append(ev.blocks, Block{EngineHash: c.eh[k], LocalHash: c.local[k]})
				held[w][c.eh[k]] = true
			}
			perW[w] = append(perW[w], ev)
			count[w] += j - i
			i = j
		}
	}
	stair := newConv()
	for w := range workers {
		held[w] = map[uint64]bool{}
		if w%8 == 0 {
			cache(w, hot, len(hot.local))
		}
		cache(w, stair, 2+w*(queryLen-2)/(workers-1))
	}
	for w := range workers {
		for count[w] < perWorker {
			var c *conv
			if rng.IntN(10) < 6 || len(convs) < 8 {
				c = newConv()
			} else {
				c = convs[rng.IntN(len(convs))] // also cached elsewhere (load balancing, replicas)
			}
			cache(w, c, min(len(c.local), 32+rng.IntN(len(c.local)-32+1), perWorker-count[w]+64))
		}
	}
	// Interleave the workers' event streams as a fleet would.
	next := make([]int, workers)
	for left := workers; left > 0; {
		w := rng.IntN(workers)
		if next[w] == len(perW[w]) {
			if next[w] >= 0 {
				next[w] = -1
				left--
			}
			continue
		}
		if next[w] < 0 {
			continue
		}
		ev := perW[w][next[w]]
		next[w]++
		wl.events = append(wl.events, ev)
		wl.blocks += len(ev.blocks)
	}
	for range 1000 {
		c := convs[rng.IntN(len(convs))]
		wl.convQ = append(wl.convQ, c.local[:queryLen])
	}
	wl.chainQ = hot.local[:queryLen]
	wl.stairQ = stair.local[:queryLen]
	return wl
}

func randHashes(rng *rand.Rand, dst []uint64, n int) []uint64 {
	for range n {
		dst = append(dst, rng.Uint64())
	}
	return dst
}

// build applies every event to a fresh index and returns it with the heap bytes it holds (after GC).
func (wl *workload) build() (*Index, uint64) {
	ix := New()
	heap := measureHeap(func() {
		for _, ev := range wl.events {
			if err := ix.Store(ev.w, ev.parent, ev.hasParent, ev.blocks); err != nil {
				panic(err)
			}
		}
	})
	return ix, heap
}

// measureHeap returns how much more heap is live (after GC) once fn has run; fn must keep what it builds
// reachable from outside.
func measureHeap(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return after.HeapAlloc - before.HeapAlloc
}

// percentiles returns the p50 and p99 of durations in microseconds; it sorts d.
func percentiles(d []time.Duration) (p50, p99 float64) {
	slices.Sort(d)
	us := func(x time.Duration) float64 { return float64(x) / float64(time.Microsecond) }
	return us(d[len(d)/2]), us(d[len(d)*99/100])
}

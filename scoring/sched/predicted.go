package sched

import (
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// predicted is predict-on-route (--router-predicted-ttl-secs): every decision is remembered for the TTL,
// and a request's overlap with a worker is the larger of the primary index's (the engines' events) and
// what recent decisions predict. It closes the window between a decision and the worker's KV events for
// it: a follow-up request (an agent's next turn, best-of-N fan-out) arriving before those events still
// finds the prefix. Predictions never enter the primary index: the engines' own hashes differ from the
// router's chain keys.
//
// It is a map from a prompt prefix's chain hash (scoring.ChainHashes: the hash of block i names blocks
// 0..i) to the worker the latest decision sent that prefix to, at marks every predictStride blocks and at
// each routed prompt's last block, only beyond what the chosen worker already held (its overlap at the
// decision): a mark at block i says "this worker holds blocks 0..i". A query probes the request's own
// mark positions above the best overlap the primary index already gives (scores), so an exact repeat
// (fan-out, retry) is credited in full and a grown prefix (an agent's next turn) to within
// predictStride−1 blocks. A decision costs at most blocks/predictStride map writes (none when its worker
// already held the prompt) and a query a few lookups, where the side index this replaces (a prefix tree
// with a TTL per block) cost ~15 µs per 8k-token decision.
type predicted struct {
	ttl   time.Duration
	marks map[uint64]predMark
	// fifo holds every mark in insertion order (= expiry order: the TTL is one for all); head is the
	// first live entry.
	fifo []predEntry
	head int
}

// predictStride is the spacing of a prediction's marks in blocks: 8 bounds a decision's map work to
// blocks/8 operations and the credit a grown prefix loses to 7 blocks (a few percent of a long prompt,
// against which the uncached suffix, the load and the rest of the cost are weighed anyway).
const predictStride = 8

// predictMaxMarks bounds the marks held (the oldest go first beyond it): 2^19 marks are ~20 MB and a
// 5 s TTL's worth of 1,000 fresh 8k-token prompts per second.
const predictMaxMarks = 1 << 19

type predMark struct {
	worker scoring.WorkerKey
	exp    int64 // unix nanoseconds; the mark of a later decision replaces it
}

type predEntry struct {
	chain uint64
	exp   int64
}

func newPredicted(ttl time.Duration) *predicted {
	p := &predicted{}
	p.setTTL(ttl)
	return p
}

// setTTL turns prediction on (ttl > 0), off, or changes its TTL; a change starts it empty.
func (p *predicted) setTTL(ttl time.Duration) {
	if ttl == p.ttl && (ttl <= 0) == (p.marks == nil) {
		return
	}
	p.ttl, p.marks, p.fifo, p.head = ttl, nil, nil, 0
	if ttl > 0 {
		p.marks = make(map[uint64]predMark)
	}
}

func (p *predicted) on() bool { return p.marks != nil }

// scores appends to *dst, per worker, the longest prefix of chain that recent decisions predict it
// holds, among those longer than floor blocks (the best the primary index gives anyone); nil when off,
// empty or nothing longer is predicted.
//
// The probes: the request's last block (an exact repeat: best-of-N, a retry), then the first stride mark
// above the floor; a miss there means no recent decision continued this prefix past what the engines
// already report (a decision marks every stride from what its worker held), so a fresh prompt costs two
// lookups. On a hit the marks run contiguously up to where the recorded prompt ends: a galloping search
// finds that end in O(log(blocks/stride)) lookups.
func (p *predicted) scores(chain []uint64, floor uint32, dst *[]prefix.Score) []prefix.Score {
	n := len(chain)
	if len(p.marks) == 0 || n <= int(floor) {
		return nil
	}
	out := (*dst)[:0]
	probe := func(i int) bool {
		m, ok := p.marks[chain[i]]
		if !ok {
			return false
		}
		for j := range out {
			if out[j].Worker == prefix.WorkerKey(m.worker) {
				out[j].Blocks = max(out[j].Blocks, uint32(i+1))
				return true
			}
		}
		out = append(out, prefix.Score{Worker: prefix.WorkerKey(m.worker), Blocks: uint32(i + 1)})
		return true
	}
	defer func() { *dst = out }()
	if probe(n - 1) {
		return out
	}
	lo := (int(floor)+predictStride)/predictStride*predictStride - 1 // first mark above the floor
	if lo >= n-1 || !probe(lo) {
		return out
	}
	hi := n - 1 // a miss (probed above)
	for step := predictStride; ; step *= 2 {
		j := lo + step
		if j >= hi {
			break
		}
		if !probe(j) {
			hi = j
			break
		}
		lo = j
	}
	for hi-lo > predictStride {
		// At least one stride up: with hi−lo under two strides the halved span rounds to 0, and a mid of
		// lo (a hit) would never move lo.
		mid := lo + max((hi-lo)/(2*predictStride), 1)*predictStride
		if probe(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return out
}

// record remembers that worker k was sent chain, of which it held the first held blocks.
func (p *predicted) record(now time.Time, k scoring.WorkerKey, chain []uint64, held int) {
	if p.marks == nil || held >= len(chain) {
		return
	}
	exp := now.Add(p.ttl).UnixNano()
	mark := func(i int) {
		h := chain[i]
		p.marks[h] = predMark{worker: k, exp: exp}
		p.fifo = append(p.fifo, predEntry{chain: h, exp: exp})
	}
	n := len(chain)
	for i := (held+predictStride)/predictStride*predictStride - 1; i < n-1; i += predictStride {
		mark(i)
	}
	mark(n - 1)
	for len(p.fifo)-p.head > predictMaxMarks {
		p.drop()
	}
	p.compact()
}

// drop forgets the oldest entry (its mark, unless a later decision renewed it).
func (p *predicted) drop() {
	e := p.fifo[p.head]
	if m, ok := p.marks[e.chain]; ok && m.exp == e.exp {
		delete(p.marks, e.chain)
	}
	p.head++
}

// compact reclaims the FIFO's consumed front once it is most of the slice.
func (p *predicted) compact() {
	if p.head > 1024 && p.head*2 > len(p.fifo) {
		p.fifo = p.fifo[:copy(p.fifo, p.fifo[p.head:])]
		p.head = 0
	}
}

// expireDue forgets the marks whose TTL passed (one comparison when none is due).
func (p *predicted) expireDue(now time.Time) {
	if p.head == len(p.fifo) {
		return
	}
	t := now.UnixNano()
	for p.head < len(p.fifo) && p.fifo[p.head].exp <= t {
		p.drop()
	}
	if p.head == len(p.fifo) {
		p.fifo, p.head = p.fifo[:0], 0
	} else {
		p.compact()
	}
}

// removeWorker forgets a worker rank's marks.
func (p *predicted) removeWorker(k scoring.WorkerKey) {
	for h, m := range p.marks {
		if m.worker == k {
			delete(p.marks, h)
		}
	}
}

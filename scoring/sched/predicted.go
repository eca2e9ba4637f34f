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
	// seq numbers the decisions recorded and the worker ranks removed, in order. A removed rank's marks
	// are not deleted but outdated: removed holds the seq of its removal, and a mark of that rank with an
	// older seq is no mark (a pass over every mark held the machine 3.0–3.8 ms per rank of a worker
	// leaving with 262,144 marks, 0.2–0.3 µs now: BenchmarkPredictedWorkerLeaving). gone lists the
	// removals in seq order, so each is forgotten once the fifo holds no older mark.
	seq     uint64
	removed map[scoring.WorkerKey]uint64
	gone    []predRemoval
}

// predRemoval is a rank's removal in gone.
type predRemoval struct {
	k   scoring.WorkerKey
	seq uint64
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
	seq    uint64 // the decision's; the mark of a later decision replaces it
}

type predEntry struct {
	chain uint64
	exp   int64
	seq   uint64
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
	p.ttl, p.marks, p.fifo, p.head, p.removed, p.gone = ttl, nil, nil, 0, nil, nil
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
		if !ok || p.outdated(m) {
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
	p.seq++
	seq := p.seq
	mark := func(i int) {
		h := chain[i]
		p.marks[h] = predMark{worker: k, seq: seq}
		p.fifo = append(p.fifo, predEntry{chain: h, exp: exp, seq: seq})
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

// drop forgets the oldest entry (its mark, unless a later decision renewed it), and the removals older
// than every entry left.
func (p *predicted) drop() {
	e := p.fifo[p.head]
	if m, ok := p.marks[e.chain]; ok && m.seq == e.seq {
		delete(p.marks, e.chain)
	}
	p.head++
	for len(p.gone) > 0 && (p.head == len(p.fifo) || p.gone[0].seq < p.fifo[p.head].seq) {
		if r := p.gone[0]; p.removed[r.k] == r.seq {
			delete(p.removed, r.k)
		}
		p.gone = p.gone[1:]
	}
}

// outdated reports whether m is the mark of a rank removed since it was made.
func (p *predicted) outdated(m predMark) bool {
	if len(p.removed) == 0 {
		return false
	}
	r, ok := p.removed[m.worker]
	return ok && m.seq < r
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

// removeWorker forgets a worker rank's marks: they are outdated at once and leave with their TTL.
func (p *predicted) removeWorker(k scoring.WorkerKey) {
	if p.marks == nil {
		return
	}
	if p.head == len(p.fifo) { // no mark at all
		return
	}
	p.seq++
	if p.removed == nil {
		p.removed = make(map[scoring.WorkerKey]uint64)
	}
	p.removed[k] = p.seq
	p.gone = append(p.gone, predRemoval{k: k, seq: p.seq})
}

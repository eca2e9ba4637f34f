package prefix

import "slices"

// Chunk sums let a query skip reading the runs it matches. Depths are cut into chunks of chunkLen
// positions (chunk c holds depths [c·chunkLen, (c+1)·chunkLen)); a node keeps, for every chunk that lies
// whole inside its run, the sum over the chunk's positions of term(local hash, position in the chunk).
// A query computes the same sums over its own hashes, once, for every view it is run against (Query),
// and compares a run chunk by chunk: one word per 64 positions instead of 64, where a long run of a
// conversation is otherwise compared in full, from memory, in every shard that holds it. The run's
// unaligned ends (up to 63 positions before its first whole chunk and after its last) have a partial sum
// each (node.head, node.tail: the same terms over those positions alone), compared when the query covers
// them; only a chunk or an end whose sums differ is compared hash by hash. A conversation's next turn
// covers the stored run and goes on past its end, which is rarely on a chunk boundary: the tail's sum
// spares reading its last positions from memory (docs/benchmarks.md, "Edge sums").
//
// The sum is multilinear: Σ h_i·m_i mod 2^64 over the chunk's positions i, each with its own random odd
// multiplier m_i. Equal hashes give equal sums. One differing hash always changes the sum (m_i is odd, so
// d·m_i ≢ 0 for d ≢ 0 mod 2^64); several give equal sums with probability about 2^-64 for random hashes
// (local hashes are 64-bit hash outputs), the same order as two blocks' local hashes colliding, which the
// index already takes as equality. Blocks swapped inside a chunk collide only when their hashes differ
// by a multiple of 2^(64-v), v the 2-adic valuation of m_i - m_j (a few bits). An earlier term, the
// 128-bit product folded to 64 bits, cost 2–3 times as much in scalar code and has no vector form; this
// one is eight lanes per AVX-512DQ multiply (chunksum_amd64.s), the same value in scalar code elsewhere.
//
// A position's depth never changes, so splits hand the whole chunks of the tail over as they are and a
// merge appends the child's; only a chunk that straddles a merged boundary or a run's growing end is
// summed again, by Seal, before the index's view is published. The edges' sums are recomputed by every
// Seal of a node written since the last (at most 126 terms), and any write clears them until then.
const (
	chunkBits = 6
	chunkLen  = 1 << chunkBits
)

// chunkMul is the odd multiplier of each position of a chunk (splitmix64 outputs).
var chunkMul = func() (m [chunkLen]uint64) {
	x := uint64(0x243f6a8885a308d3)
	for i := range m {
		x += 0x9e3779b97f4a7c15
		z := (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		m[i] = (z ^ (z >> 31)) | 1
	}
	return m
}()

// chunkSum returns the sum of the chunk whose hashes are h[:chunkLen].
func chunkSum(h []uint64) uint64 { return partialSum(h[:chunkLen], 0) }

// chunkKernel selects the vector chunk sum where the CPU has it; tests switch it off to compare.
var chunkKernel = haveChunkKernel

// chunkSums writes to out the sums of the len(out) consecutive chunks that start at h[0].
func chunkSums(out, h []uint64) {
	if len(out) == 0 {
		return
	}
	h = h[:len(out)*chunkLen]
	if chunkKernel {
		chunkSumsAVX512(&h[0], len(out), &chunkMul, &out[0])
		return
	}
	for c := range out {
		out[c] = chunkSum(h[c*chunkLen:])
	}
}

// firstChunk is the first chunk that starts at or after depth start.
func firstChunk(start uint32) uint32 { return (start + chunkLen - 1) >> chunkBits }

// wholeChunks is the number of chunks that lie whole inside n positions from depth start.
func wholeChunks(start uint32, n int) int {
	f, end := firstChunk(start), (start+uint32(n))>>chunkBits
	if end <= f {
		return 0
	}
	return int(end - f)
}

// mergeSums gives node nd, which has just absorbed child cd's run at offset base, the sums of its whole
// chunks as far as both halves had them: the chunk straddling base (when there is one) is summed here,
// then cd's are appended. A half with missing sums leaves the rest to Seal.
func mergeSums(nd *node, base int, cd *node) {
	if len(nd.sums) < wholeChunks(nd.start, base) {
		return
	}
	f := firstChunk(nd.start)
	cf := firstChunk(cd.start)
	for c := f + uint32(len(nd.sums)); c < cf; c++ {
		off := int(c<<chunkBits - nd.start)
		if off+chunkLen > len(nd.hashes) {
			return
		}
		nd.sums = append(nd.sums, chunkSum(nd.hashes[off:]))
	}
	nd.sums = append(nd.sums, cd.sums...)
}

// seal sums the whole chunks of nd's run that have no sum yet, and its edges: head, the positions after
// the first and before the first chunk boundary; tail, the positions after the last whole chunk (a run
// with no whole chunk: from the boundary it crosses, or after its first position when it starts on one).
func (nd *node) seal() {
	k, n := len(nd.sums), wholeChunks(nd.start, len(nd.hashes))
	if k < n {
		off := int((firstChunk(nd.start)+uint32(k))<<chunkBits - nd.start)
		nd.sums = slices.Grow(nd.sums, n-k)[:n]
		chunkSums(nd.sums[k:], nd.hashes[off:])
	}
	nd.head, nd.tail, nd.edges = 0, 0, true
	l := len(nd.hashes)
	a, t := edgeBounds(nd.start, l, n)
	if a > 1 {
		nd.head = partialSum(nd.hashes[1:a], nd.start+1)
	}
	if t < l {
		nd.tail = partialSum(nd.hashes[t:], nd.start+uint32(t))
	}
}

// edgeBounds returns where the edges of a run of l positions from depth start, with n whole chunks,
// lie: the head is positions [1, a), the tail [t, l) (empty when t ≥ l). seal sums them and matchRun
// compares a short run's by the same bounds.
func edgeBounds(start uint32, l, n int) (a, t int) {
	a = min(headLen(start), l)
	return a, max(a+n*chunkLen, 1)
}

// headLen is the number of positions of a run from depth start before its first whole chunk.
func headLen(start uint32) int { return int(firstChunk(start)<<chunkBits - start) }

// partialSum is the sum of the positions h, which lie inside one chunk from depth (or offset in the
// chunk) at: the chunk sum's terms of those positions alone (of all of them: chunkSum).
func partialSum(h []uint64, at uint32) uint64 {
	m := chunkMul[at&(chunkLen-1):]
	m = m[:len(h)]
	var s0, s1, s2, s3 uint64
	i := 0
	for ; i+3 < len(h); i += 4 {
		s0 += h[i] * m[i]
		s1 += h[i+1] * m[i+1]
		s2 += h[i+2] * m[i+2]
		s3 += h[i+3] * m[i+3]
	}
	for ; i < len(h); i++ {
		s0 += h[i] * m[i]
	}
	return s0 + s1 + s2 + s3
}

// Seal brings the chunk sums of the nodes written since the last Sync up to date, so that queries of the
// index's own view compare their runs by chunk. Only an index with a view (NewView) records which nodes
// it wrote; an index without one never has sums and compares runs hash by hash. Sync seals first.
// Cost: summing the positions appended or merged since the last Seal.
func (ix *Index) Seal() {
	for _, n := range ix.dirty {
		// A node sealed since its last write (edges set; touch clears them) is left alone: Sync seals
		// again while readers are in the index's view, and rewriting a field they read, even with its
		// own value, is a data race.
		if nd := &ix.nodes[n]; nd.live && !nd.edges {
			nd.seal()
		}
	}
}

// queryBatch is how many chunks a Query sums at least per call of the kernel.
const queryBatch = 8

// queryChunks bounds the chunk sums a Query keeps: 16,384 blocks. Runs beyond are compared hash by hash.
const queryChunks = 256

// Query is a request's local hashes with their chunk sums, computed as far as a walk needs them and kept
// for the next view the query runs against: a sharded indexer computes them once per request, not once
// per shard. The zero value needs Reset. It lives on the caller's stack (2 KiB).
type Query struct {
	hashes []uint64
	n      int // sums computed
	sums   [queryChunks]uint64
}

// Reset prepares q for the query local.
func (q *Query) Reset(local []uint64) { q.hashes, q.n = local, 0 }

// Hashes returns the query's local hashes.
func (q *Query) Hashes() []uint64 { return q.hashes }

// chunk returns the sum of chunk c of the query, which must lie whole inside it; false when c is beyond
// what a Query keeps.
func (q *Query) chunk(c uint32) (uint64, bool) {
	if c >= queryChunks {
		return 0, false
	}
	if q.n <= int(c) {
		// A walk that compares one chunk by sum usually compares the next ones too: sum ahead in
		// batches, as far as the query has whole chunks.
		end := min(max(int(c)+1, q.n+queryBatch), queryChunks, len(q.hashes)>>chunkBits)
		chunkSums(q.sums[q.n:end], q.hashes[q.n<<chunkBits:])
		q.n = end
	}
	return q.sums[c], true
}

// minSummedRun is the shortest comparison matchRun makes by chunk sums. With the vector kernel, summing a
// query's hashes costs about 0.1 ns a hash, once for every shard; comparing them 0.1–0.3 ns when the run
// is in the cache and 0.85 ns when it comes from memory (AMD EPYC, one core), in every shard: a single
// chunk is worth comparing by sum. Without the kernel (0.6 ns a hash) only long runs are.
var minSummedRun = func() int {
	if chunkKernel {
		return chunkLen
	}
	return 8 * chunkLen
}()

// minEdgeRun is the longest run without a whole chunk that matchRun compares hash by hash even when the
// query covers it: a cache line of hashes, which the walk ahead has already asked for (its second
// position), where two partial sums cost more than the compare (BenchmarkFindMatches, W=256 q=chain: a
// path of 256 two-position nodes, 1.9–2.2 → 2.2–2.6 µs with every such run summed).
const minEdgeRun = 8

// matchRun returns how many leading positions of nd's run the query matches from depth nd.start, where
// the walk found nd by its first hash (so at least 1). Whole chunks are compared by sum; the unaligned
// head, the chunk that differs, and what follows the last summed chunk are compared hash by hash.
func matchRun(nd *node, q *Query) int {
	run, rest := nd.hashes, q.hashes[nd.start:]
	whole := len(rest) >= len(run) // the query covers the run: its tail may be compared by sum
	k := min(len(run), len(rest))
	run, rest = run[:k], rest[:k]
	off := 1 // run[0] matched through the child lookup
	if len(nd.sums) > 0 && k >= minSummedRun {
		f := firstChunk(nd.start)
		if a := headLen(nd.start); a > 1 {
			if !nd.edges || partialSum(rest[1:a], nd.start+1) != nd.head {
				if m := commonPrefix(run[1:a], rest[1:a]); m < a-1 {
					return 1 + m
				}
			}
			off = a
		} else {
			off = a // 0 or 1: the first chunk starts at the run's start or its second position
		}
		i := 0
		for ; i < len(nd.sums); i++ {
			end := off + chunkLen
			if end > k {
				break
			}
			qs, ok := q.chunk(f + uint32(i))
			if !ok {
				break
			}
			if qs != nd.sums[i] {
				return off + commonPrefix(run[off:end], rest[off:end])
			}
			off = end
		}
		if i == len(nd.sums) && whole && nd.edges && partialSum(rest[off:], 0) == nd.tail {
			return k
		}
	} else if k > minEdgeRun && whole && nd.edges && len(nd.sums) == 0 {
		// A short run (no whole chunk), which the query covers: its edges' sums compare all of it but the
		// first position, so that a path of short nodes does not read their runs from memory, a page each.
		a, t := edgeBounds(nd.start, k, 0)
		if (a <= 1 || partialSum(rest[1:a], nd.start+1) == nd.head) && partialSum(rest[t:], nd.start+uint32(t)) == nd.tail {
			return k
		}
	}
	return off + commonPrefix(run[off:], rest[off:])
}

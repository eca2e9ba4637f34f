//go:build !amd64

package scoring

// haveBatchHash: the batched block hash is amd64 assembly only (xxh3batch_amd64.s).
const haveBatchHash = false

func hashChainBatch(tokens []uint32, seed, prev uint64, start bool, local, chain []uint64) (int, uint64) {
	return 0, prev
}

const haveBatchAVX512 = false

var batchWide = false

func batchBlocks() int { return 8 }

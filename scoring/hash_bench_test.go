package scoring

import (
	"math/rand/v2"
	"testing"
)

func randTokens(n int) []uint32 {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]uint32, n)
	for i := range out {
		out[i] = rng.Uint32N(150_000)
	}
	return out
}

// BenchmarkBlockHash: one op hashes one 16-token block (64 bytes) with the default seed.
func BenchmarkBlockHash(b *testing.B) {
	tokens := randTokens(16)
	b.Run("T=16", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(4 * 16)
		var sink uint64
		for range b.N {
			sink += BlockHash(tokens, nil, Seed)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/block")
		_ = sink
	})
}

// BenchmarkPromptHashes: one op computes the local hashes and their prefix chain of a 512-block prompt of
// 16-token blocks (8,192 tokens), as the request path does before querying the prefix index: in two
// passes, fused, the local hashes alone, and (for comparison) local plus Dynamo's sequence hashes.
func BenchmarkPromptHashes(b *testing.B) {
	const blocks, blockSize = 512, 16
	tokens := randTokens(blocks * blockSize)
	local := make([]uint64, 0, blocks)
	seq := make([]uint64, 0, blocks)
	b.Run("B=512/T=16", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(4 * blocks * blockSize)
		for range b.N {
			local = LocalBlockHashes(local[:0], tokens, blockSize, Seed, nil)
			seq = ChainHashes(seq[:0], local)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/prompt")
	})
	b.Run("B=512/T=16/fused", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			local, seq = PromptHashes(local[:0], seq[:0], tokens, blockSize, Seed)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/prompt")
	})
	b.Run("B=512/T=16/sequence-hashes", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			local = LocalBlockHashes(local[:0], tokens, blockSize, Seed, nil)
			seq = SequenceHashes(seq[:0], local)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/prompt")
	})
	b.Run("B=512/T=16/local-only", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			local = LocalBlockHashes(local[:0], tokens, blockSize, Seed, nil)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block")
	})
}

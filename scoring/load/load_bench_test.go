package load

import (
	"strconv"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

func benchPrompt(blocks int, salt uint32) []uint64 {
	toks := make([]uint32, blocks*16)
	for i := range toks {
		toks[i] = uint32(i) + salt<<20
	}
	return scoring.SequenceHashes(nil, scoring.LocalBlockHashes(nil, toks, 16, scoring.Seed, nil))
}

// BenchmarkAddFree: one op is AddRequest + Free of a 512-block (8k-token) request on a worker that already
// has 32 other active requests.
func BenchmarkAddFree(b *testing.B) {
	for _, reuse := range []bool{true, false} {
		b.Run("B=512/reuse="+strconv.FormatBool(reuse), func(b *testing.B) {
			c := DefaultConfig()
			c.AssumeKVReuse = reuse
			tr := New(c)
			for i := range 32 {
				_ = tr.AddRequest(Request{ID: "bg" + strconv.Itoa(i), SeqHashes: benchPrompt(512, uint32(i+1)), ISL: 8192, Now: t0})
			}
			seq := benchPrompt(512, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_ = tr.AddRequest(Request{ID: "r", SeqHashes: seq, ISL: 8192, OverlapBlocks: 100, Now: t0})
				tr.Free("r")
			}
		})
	}
}

// BenchmarkProjection: one op is the additional-blocks projection of a 512-block request against a worker
// holding 32 active 512-block requests, half of the query's prefix active.
func BenchmarkProjection(b *testing.B) {
	tr := New(DefaultConfig())
	for i := range 32 {
		_ = tr.AddRequest(Request{ID: "bg" + strconv.Itoa(i), SeqHashes: benchPrompt(512, uint32(i+1)), ISL: 8192, Now: t0})
	}
	half := benchPrompt(512, 0)
	_ = tr.AddRequest(Request{ID: "half", SeqHashes: half[:256], Now: t0})
	b.Run("binary/B=512", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_ = tr.Projection(half, true)
		}
	})
}

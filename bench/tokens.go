package bench

import (
	"fmt"

	"github.com/kvroute/kvroute/scoring"
)

// Blocks turns trace hash ids into token ids: each id becomes a deterministic block of BlockSize tokens
// (same id, same tokens, on every run and machine), and a prompt is its ids' blocks concatenated and cut
// to the request's input length. Because Mooncake ids are prefix-chained, equal id prefixes give equal
// token prefixes, which is all KV reuse needs.
type Blocks struct {
	// BlockSize is the tokens per hash id (--trace-block-size). Default 512.
	BlockSize int
	// Vocab bounds the token ids to [0, Vocab); pick the served model's vocabulary so the prompts are
	// valid ids. Default 32,000 (the smallest fixture vocabulary).
	Vocab uint32
	// Seed selects the token mapping; two seeds give unrelated tokens for the same id. Default 42.
	Seed uint64
}

// DefaultBlocks returns the defaults.
func DefaultBlocks() Blocks { return Blocks{BlockSize: TraceBlockSize, Vocab: 32000, Seed: 42} }

// Validate checks the configuration.
func (b *Blocks) Validate() error {
	if b.BlockSize <= 0 {
		return fmt.Errorf("bench: trace block size %d must be positive", b.BlockSize)
	}
	if b.Vocab < 2 {
		return fmt.Errorf("bench: vocabulary %d too small", b.Vocab)
	}
	return nil
}

// splitmix64 is a strong 64-bit mixer: consecutive inputs give independent-looking outputs.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// AppendBlock appends the first n tokens (n ≤ BlockSize) of id's block to dst.
func (b *Blocks) AppendBlock(dst []uint32, id uint64, n int) []uint32 {
	base := splitmix64(b.Seed ^ splitmix64(id))
	for j := 0; j < n; j++ {
		dst = append(dst, uint32(splitmix64(base+uint64(j))%uint64(b.Vocab)))
	}
	return dst
}

// AppendPrompt appends r's prompt tokens: its ids' blocks, the last cut so the prompt is
// min(InputLength, len(HashIDs) × BlockSize) tokens long.
func (b *Blocks) AppendPrompt(dst []uint32, r *Request) []uint32 {
	left := r.InputLength
	for _, id := range r.HashIDs {
		if left <= 0 {
			break
		}
		n := min(left, b.BlockSize)
		dst = b.AppendBlock(dst, id, n)
		left -= n
	}
	return dst
}

// PromptLen is len(AppendPrompt(nil, r)) without building it.
func (b *Blocks) PromptLen(r *Request) int {
	return min(r.InputLength, len(r.HashIDs)*b.BlockSize)
}

// Chunk is one KV block of an engine whose block size divides into trace blocks: it names trace block
// Index of a request's HashIDs, sub-block Sub.
type Chunk struct {
	ID  uint64
	Sub int
}

// Key is a compact identity for the chunk's tokens given the prefix-chained id (ids are dense and far
// below 2^48 in every published trace).
func (c Chunk) Key() uint64 { return c.ID<<16 | uint64(c.Sub) }

// AppendChunks appends the full engine blocks of r's prompt for an engine block size bs, which must
// divide BlockSize (CheckEngineBlock): a trace block holds BlockSize/bs engine blocks. The trailing
// partial engine block is dropped, as the engine does.
func (b *Blocks) AppendChunks(dst []Chunk, r *Request, bs int) []Chunk {
	per := b.BlockSize / bs
	full := b.PromptLen(r) / bs
	for i := 0; i < full; i++ {
		dst = append(dst, Chunk{ID: r.HashIDs[i/per], Sub: i % per})
	}
	return dst
}

// ChunkHash is the router's local hash of one chunk: XXH3 over its tokens with Dynamo's seed.
func (b *Blocks) ChunkHash(c Chunk, bs int, buf []uint32) (uint64, []uint32) {
	buf = b.AppendBlock(buf[:0], c.ID, (c.Sub+1)*bs)
	return scoring.BlockHash(buf[c.Sub*bs:], nil, scoring.Seed), buf
}

// CheckEngineBlock validates an engine block size against the trace block size.
func (b *Blocks) CheckEngineBlock(bs int) error {
	if bs <= 0 || b.BlockSize%bs != 0 {
		return fmt.Errorf("bench: block size %d must divide the trace block size %d", bs, b.BlockSize)
	}
	return nil
}

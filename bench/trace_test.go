package bench

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	convOnce  sync.Once
	convTrace *Trace
	convErr   error
	convPath  string
)

// conversationTrace returns the shared Mooncake conversation trace (loaded once per test binary), or
// skips. $KVROUTE_TRACE overrides the path. Callers must not modify it.
func conversationTrace(t testing.TB) *Trace {
	t.Helper()
	convOnce.Do(func() {
		convPath = os.Getenv("KVROUTE_TRACE")
		if convPath == "" {
			convPath = filepath.Join("..", "..", "shared", "traces", "mooncake_conversation_trace.jsonl")
		}
		convTrace, convErr = LoadTrace(convPath)
	})
	if errors.Is(convErr, os.ErrNotExist) {
		t.Skipf("trace not found at %s (set KVROUTE_TRACE)", convPath)
	}
	if convErr != nil {
		t.Fatal(convErr)
	}
	return convTrace
}

const tinyTrace = `{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 0, "input_length": 1100, "output_length": 6, "hash_ids": [0, 1, 2]}

{"timestamp": 1500, "input_length": 300, "output_length": 7, "hash_ids": [3]}
{"timestamp": 900, "output_length": 8, "hash_ids": [0, 4]}
`

func TestReadTrace(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(tinyTrace))
	if err != nil {
		t.Fatal(err)
	}
	var ts []int64
	for _, r := range tr.Requests {
		ts = append(ts, r.Timestamp)
	}
	if !slices.Equal(ts, []int64{0, 0, 900, 1500}) {
		t.Fatalf("timestamps %v", ts)
	}
	if tr.Requests[2].InputLength != 1024 {
		t.Fatalf("missing input_length gives %d, want 2 × 512", tr.Requests[2].InputLength)
	}
	if n := len(tr.FirstMinutes(time.Second).Requests); n != 3 {
		t.Fatalf("first second: %d requests", n)
	}
	tests := []struct{ name, in string }{
		{"not json", "{\"timestamp\": 0,"},
		{"negative", `{"timestamp": -1, "input_length": 1, "hash_ids": [1]}`},
		{"wrong type", `{"timestamp": "x"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadTrace(strings.NewReader(tc.in)); !errors.Is(err, ErrBadTrace) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

func TestArrivalsDeterministic(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(tinyTrace))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := tr.Arrivals(ReplayConfig{Speedup: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 0, 450 * time.Millisecond, 750 * time.Millisecond}
	for i, a := range plain {
		if a.At != want[i] || a.Index != i {
			t.Fatalf("arrival %d = %+v, want %v", i, a, want[i])
		}
	}
	cfg := ReplayConfig{Speedup: 1.5, Jitter: 0.5, Seed: 7}
	a1, _ := tr.Arrivals(cfg)
	a2, _ := tr.Arrivals(cfg)
	if !slices.Equal(a1, a2) {
		t.Fatalf("same seed, different arrivals:\n%v\n%v", a1, a2)
	}
	cfg.Seed = 8
	a3, _ := tr.Arrivals(cfg)
	if slices.Equal(a1, a3) {
		t.Fatal("another seed should move jittered arrivals")
	}
	if _, err := tr.Arrivals(ReplayConfig{Speedup: 0}); err == nil {
		t.Fatal("zero speedup accepted")
	}
}

func TestBlocksDeterministic(t *testing.T) {
	b := DefaultBlocks()
	r1 := Request{InputLength: 700, HashIDs: []uint64{0, 1}}
	r2 := Request{InputLength: 1100, HashIDs: []uint64{0, 1, 2}}
	p1 := b.AppendPrompt(nil, &r1)
	p2 := b.AppendPrompt(nil, &r2)
	if len(p1) != 700 || len(p2) != 1100 || b.PromptLen(&r1) != 700 {
		t.Fatalf("lengths %d %d", len(p1), len(p2))
	}
	if !slices.Equal(p1, p2[:700]) {
		t.Fatal("equal hash-id prefixes must give equal token prefixes")
	}
	if slices.Equal(p2[:512], p2[512:1024]) {
		t.Fatal("different ids gave the same block")
	}
	again := DefaultBlocks()
	if !slices.Equal(p2, again.AppendPrompt(nil, &r2)) {
		t.Fatal("same seed, different tokens")
	}
	other := DefaultBlocks()
	other.Seed = 43
	if slices.Equal(p2[:512], other.AppendPrompt(nil, &r2)[:512]) {
		t.Fatal("another seed should give other tokens")
	}
	for _, tok := range p2 {
		if tok >= b.Vocab {
			t.Fatalf("token %d outside the vocabulary", tok)
		}
	}
	// Engine blocks of 64: the partial trace block contributes its full engine blocks only.
	chunks := b.AppendChunks(nil, &r1, 64)
	if len(chunks) != 700/64 || chunks[8] != (Chunk{ID: 1, Sub: 0}) || chunks[9] != (Chunk{ID: 1, Sub: 1}) {
		t.Fatalf("chunks %v", chunks)
	}
	h, _ := b.ChunkHash(chunks[9], 64, nil)
	h2, _ := b.ChunkHash(Chunk{ID: 1, Sub: 1}, 64, make([]uint32, 5))
	if h != h2 {
		t.Fatal("chunk hash not deterministic")
	}
}

// TestConversationFirstTenMinutes pins the figures the e2e acceptance is stated in: the first 10 minutes
// of the conversation trace hold 1,756 requests with about 28 % unbounded-oracle reuse.
func TestConversationFirstTenMinutes(t *testing.T) {
	tr := conversationTrace(t)
	if n := len(tr.Requests); n != 12031 {
		t.Fatalf("%d requests, want 12,031", n)
	}
	first := tr.FirstMinutes(10 * time.Minute)
	if n := len(first.Requests); n != 1756 {
		t.Fatalf("first 10 minutes: %d requests, want 1,756", n)
	}
	o := Oracle{Blocks: DefaultBlocks(), BlockSize: 64}
	u, err := o.UnboundedHitRate(first)
	if err != nil {
		t.Fatal(err)
	}
	// Measured: 28.9 % of 64-token blocks and of prompt tokens (28.4 % of whole 512-token trace blocks).
	if u.HitRate < 0.27 || u.HitRate > 0.30 || u.BlockHitRate < 0.27 || u.BlockHitRate > 0.30 {
		t.Fatalf("unbounded oracle %+v, want about 28 %%", u)
	}
	t.Logf("unbounded oracle, first 10 min: %.2f %% tokens, %.2f %% blocks", 100*u.HitRate, 100*u.BlockHitRate)
	// A pool as large as the whole trace is the unbounded oracle.
	p, err := o.PooledHitRate(first, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if p.HitTokens != u.HitTokens {
		t.Fatalf("huge pool %d hit tokens, unbounded %d", p.HitTokens, u.HitTokens)
	}
}

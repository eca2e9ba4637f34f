package load

import (
	"errors"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

var t0 = time.Unix(1_000_000, 0)

func chain(tokens ...uint32) []uint64 {
	local := scoring.LocalBlockHashes(nil, tokens, 2, scoring.Seed, nil)
	return scoring.SequenceHashes(nil, local)
}

func newTracker(mod func(*Config)) *Tracker {
	c := DefaultConfig()
	c.BlockSize = 2
	if mod != nil {
		mod(&c)
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return New(c)
}

func TestLifecycle(t *testing.T) {
	a := chain(1, 2, 3, 4, 5, 6, 7, 8) // 4 blocks
	b := chain(1, 2, 3, 4, 9, 9)       // shares 2 blocks with a
	tests := []struct {
		name                string
		mod                 func(*Config)
		afterA, afterB      Snapshot
		afterPrefill, after Snapshot
		projB               uint64
	}{
		{
			name:         "reuse dedupes shared prefix",
			afterA:       Snapshot{ActivePrefillTokens: 6, ActiveDecodeBlocks: 4, UniqueBlocks: 4, ActiveRequests: 1, PrefillingRequests: 1},
			afterB:       Snapshot{ActivePrefillTokens: 6 + 2, ActiveDecodeBlocks: 5, UniqueBlocks: 5, ActiveRequests: 2, PrefillingRequests: 2},
			afterPrefill: Snapshot{ActivePrefillTokens: 2, ActiveDecodeBlocks: 5, UniqueBlocks: 5, ActiveRequests: 2, PrefillingRequests: 1},
			after:        Snapshot{ActivePrefillTokens: 2, ActiveDecodeBlocks: 3, UniqueBlocks: 3, ActiveRequests: 1, PrefillingRequests: 1},
			projB:        1,
		},
		{
			name:         "no reuse counts every block",
			mod:          func(c *Config) { c.AssumeKVReuse = false },
			afterA:       Snapshot{ActivePrefillTokens: 6, ActiveDecodeBlocks: 4, UniqueBlocks: 4, ActiveRequests: 1, PrefillingRequests: 1},
			afterB:       Snapshot{ActivePrefillTokens: 8, ActiveDecodeBlocks: 7, UniqueBlocks: 7, ActiveRequests: 2, PrefillingRequests: 2},
			afterPrefill: Snapshot{ActivePrefillTokens: 2, ActiveDecodeBlocks: 7, UniqueBlocks: 7, ActiveRequests: 2, PrefillingRequests: 1},
			after:        Snapshot{ActivePrefillTokens: 2, ActiveDecodeBlocks: 3, UniqueBlocks: 3, ActiveRequests: 1, PrefillingRequests: 1},
			projB:        3,
		},
		{
			name:         "no prefill tracking",
			mod:          func(c *Config) { c.TrackPrefillTokens = false },
			afterA:       Snapshot{ActiveDecodeBlocks: 4, UniqueBlocks: 4, ActiveRequests: 1},
			afterB:       Snapshot{ActiveDecodeBlocks: 5, UniqueBlocks: 5, ActiveRequests: 2},
			afterPrefill: Snapshot{ActiveDecodeBlocks: 5, UniqueBlocks: 5, ActiveRequests: 2},
			after:        Snapshot{ActiveDecodeBlocks: 3, UniqueBlocks: 3, ActiveRequests: 1},
			projB:        1,
		},
		{
			name:         "stride 2",
			mod:          func(c *Config) { c.Stride = 2 },
			afterA:       Snapshot{ActivePrefillTokens: 6, ActiveDecodeBlocks: 4, UniqueBlocks: 2, ActiveRequests: 1, PrefillingRequests: 1},
			afterB:       Snapshot{ActivePrefillTokens: 8, ActiveDecodeBlocks: 4, UniqueBlocks: 2, ActiveRequests: 2, PrefillingRequests: 2},
			afterPrefill: Snapshot{ActivePrefillTokens: 2, ActiveDecodeBlocks: 4, UniqueBlocks: 2, ActiveRequests: 2, PrefillingRequests: 1},
			after:        Snapshot{ActivePrefillTokens: 2, ActiveDecodeBlocks: 2, UniqueBlocks: 1, ActiveRequests: 1, PrefillingRequests: 1},
			projB:        0, // b's one full stride group (blocks 0,1) is active; its last block is dropped
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(tc.mod)
			must(t, tr.AddRequest(Request{ID: "a", SeqHashes: a, ISL: 8, OverlapBlocks: 1, Now: t0}))
			check(t, "after a", tr.Snapshot(), tc.afterA)
			reuse := tr.Config().AssumeKVReuse
			if got := tr.Projection(b, reuse); got != tc.projB {
				t.Errorf("projection of b = %d, want %d", got, tc.projB)
			}
			must(t, tr.AddRequest(Request{ID: "b", SeqHashes: b, ISL: 6, OverlapBlocks: 2, Now: t0}))
			check(t, "after b", tr.Snapshot(), tc.afterB)
			if !tr.MarkPrefillCompleted("a") || !tr.MarkPrefillCompleted("a") {
				t.Fatal("mark prefill of active request")
			}
			check(t, "after prefill a", tr.Snapshot(), tc.afterPrefill)
			if !tr.Free("a") || tr.Free("a") {
				t.Fatal("free reports presence")
			}
			check(t, "after free a", tr.Snapshot(), tc.after)
			tr.Free("b")
			check(t, "idle", tr.Snapshot(), Snapshot{})
		})
	}
}

func TestDuplicateAndExpiry(t *testing.T) {
	tr := newTracker(nil)
	must(t, tr.AddRequest(Request{ID: "a", SeqHashes: chain(1, 2), ISL: 2, Now: t0}))
	if err := tr.AddRequest(Request{ID: "a", Now: t0}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	// The lazy sweep before a later add drops "a" and reports it; right after, it is rate-limited.
	late := t0.Add(scoring.DefaultStaleExpiry + time.Second)
	if got := tr.MaybeExpire(late); len(got) != 1 || got[0] != "a" {
		t.Fatalf("swept %v", got)
	}
	if got := tr.MaybeExpire(late.Add(time.Second)); got != nil {
		t.Fatalf("sweep not rate-limited: %v", got)
	}
	must(t, tr.AddRequest(Request{ID: "b", ISL: 4, Now: late}))
	if tr.Active("a") || !tr.Active("b") {
		t.Fatal("stale request not swept")
	}
	if got := tr.Expire(t0.Add(3 * scoring.DefaultStaleExpiry)); len(got) != 1 || got[0] != "b" {
		t.Fatalf("expired %v", got)
	}
	check(t, "empty", tr.Snapshot(), Snapshot{})
}

func TestOutputBlocks(t *testing.T) {
	tr := newTracker(func(c *Config) { c.TrackOutputBlocks = true })
	must(t, tr.AddRequest(Request{ID: "a", SeqHashes: chain(1, 2), ISL: 2, ExpectedOutputTokens: 8, Now: t0}))
	must(t, tr.AddRequest(Request{ID: "b", SeqHashes: chain(1, 2), ISL: 2, Now: t0}))
	tr.RecordOutput("a", 4) // 2 blocks × (1 − 4/8)
	tr.RecordOutput("b", 5) // 2 blocks × 1
	if got := tr.Snapshot().ActiveDecodeBlocks; got != 1+1+2 {
		t.Fatalf("decode blocks %v, want 4", got)
	}
	tr.Free("a")
	if got := tr.Snapshot().ActiveDecodeBlocks; got != 1+2 {
		t.Fatalf("decode blocks %v, want 3", got)
	}
}

// n sequences sharing one prompt: the prompt's blocks and prefill are charged once, the request counts n
// active sequences, and each sequence's output blocks count (the reported tokens are all sequences').
func TestSequencesSharePrefill(t *testing.T) {
	tr := newTracker(func(c *Config) { c.TrackOutputBlocks = true })
	one := newTracker(func(c *Config) { c.TrackOutputBlocks = true })
	p := chain(1, 2, 3, 4, 5, 6, 7, 8) // 4 blocks
	must(t, tr.AddRequest(Request{ID: "n3", SeqHashes: p, ISL: 8, Sequences: 3, Now: t0}))
	must(t, one.AddRequest(Request{ID: "n1", SeqHashes: p, ISL: 8, Now: t0}))
	check(t, "n=3 routed", tr.Snapshot(), Snapshot{ActivePrefillTokens: 8, ActiveDecodeBlocks: 4, UniqueBlocks: 4, ActiveRequests: 3, PrefillingRequests: 1})
	tr.MarkPrefillCompleted("n3")
	tr.RecordOutput("n3", 12) // 4 tokens per sequence: 2 blocks each
	one.RecordOutput("n1", 4)
	if got, single := tr.Snapshot().ActiveDecodeBlocks, one.Snapshot().ActiveDecodeBlocks; got != 4+6 || single != 4+2 {
		t.Errorf("decode blocks n=3 %v (want 10), n=1 %v (want 6)", got, single)
	}
	tr.Free("n3")
	check(t, "freed", tr.Snapshot(), Snapshot{})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, what string, got, want Snapshot) {
	t.Helper()
	if got != want {
		t.Errorf("%s: snapshot %+v, want %+v", what, got, want)
	}
}

// TestSharing: how many of a request's leading blocks are active and how many active requests hold all
// of them, over a worker whose chains branch (a holds 1-2-3-4, b 1-2-5, c 1-2-3-6).
func TestSharing(t *testing.T) {
	tr := newTracker(nil)
	must(t, tr.AddRequest(Request{ID: "a", SeqHashes: chain(1, 1, 2, 2, 3, 3, 4, 4), ISL: 8, Now: t0}))
	must(t, tr.AddRequest(Request{ID: "b", SeqHashes: chain(1, 1, 2, 2, 5, 5), ISL: 6, Now: t0}))
	must(t, tr.AddRequest(Request{ID: "c", SeqHashes: chain(1, 1, 2, 2, 3, 3, 6, 6), ISL: 8, Now: t0}))
	tests := []struct {
		name             string
		q                []uint64
		blocks, requests int
	}{
		{"a and c hold three blocks", chain(1, 1, 2, 2, 3, 3, 7, 7), 3, 2},
		{"everyone holds two", chain(1, 1, 2, 2, 9, 9), 2, 3},
		{"a alone holds all four", chain(1, 1, 2, 2, 3, 3, 4, 4), 4, 1},
		{"inside a shared edge", chain(1, 1), 1, 3},
		{"nothing", chain(8, 8), 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if b, n := tr.Sharing(tc.q); int(b) != tc.blocks || n != tc.requests {
				t.Errorf("Sharing = %d blocks, %d requests; want %d, %d", b, n, tc.blocks, tc.requests)
			}
		})
	}
	tr.Free("a")
	tr.Free("b")
	tr.Free("c")
	if b, n := tr.Sharing(chain(1, 1, 2, 2)); b != 0 || n != 0 {
		t.Errorf("idle worker: Sharing = %d, %d", b, n)
	}
}

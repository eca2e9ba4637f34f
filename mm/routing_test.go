package mm

import (
	"slices"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// TestVector10Expansion is the expansion vector of Dynamo's lightseek_mm/routing.rs unit test.
func TestVector10Expansion(t *testing.T) {
	a, b := Hash(0xaaaa), Hash(0xbbbb)
	r, reason := Expand(nil, []uint32{10, 99, 11, 99, 12}, 99, []Entry{{Hash: a, NumTokens: 2}, {Hash: b, NumTokens: 3}}, 1, true, 4, DefaultLimits())
	if reason != FallbackNone {
		t.Fatal(reason)
	}
	pA, pB := a.Pad(), b.Pad()
	want := []uint32{1, 10, pA, pA, 11, pB, pB, pB, 12, 0, 0, 0}
	if !slices.Equal(r.Tokens, want) || r.ExpandedLen != 9 {
		t.Fatalf("got %v len %d, want %v len 9", r.Tokens, r.ExpandedLen, want)
	}
	if ids := r.HexIDs(); !slices.Equal(ids, []string{"000000000000aaaa", "000000000000bbbb"}) {
		t.Fatalf("hex ids %v", ids)
	}
}

// TestVector11ViaExpansion: the frontend view of vector #11 hashes to the normalized event hash.
func TestVector11ViaExpansion(t *testing.T) {
	h := Hash(9533257059414191570)
	if h.Pad() != 49115154 {
		t.Fatalf("pad %d", h.Pad())
	}
	r, reason := Expand(nil, []uint32{10, 20, 151655}, 151655, []Entry{{Hash: h, NumTokens: 2}}, 0, false, 4, DefaultLimits())
	if reason != FallbackNone {
		t.Fatal(reason)
	}
	got := scoring.LocalBlockHashes(nil, r.Tokens, 4, scoring.Seed, nil)
	if len(got) != 1 || got[0] != 71881790567603244 {
		t.Fatalf("block hashes %v, want [71881790567603244]", got)
	}
	if got[0] == 7076040045504640663 {
		t.Fatal("hashed the raw image token")
	}
}

// TestVector5Legacy: the legacy side channel reproduces vector #5 through scoring.LocalBlockHashes.
func TestVector5Legacy(t *testing.T) {
	infos, err := BlockMMInfos(4, 4, []Hash{0x1234}, [][2]int{{1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	got := scoring.LocalBlockHashes(nil, []uint32{1, 2, 3, 4}, 4, scoring.Seed, infos)
	if got[0] != 669095413716296041 {
		t.Fatalf("got %d", got[0])
	}
}

func TestExpandIdentity(t *testing.T) {
	toks := []uint32{5, 6, 99, 7, 8, 9, 10, 11}
	hash := func(h Hash) []uint64 {
		r, reason := Expand(nil, toks, 99, []Entry{{Hash: h, NumTokens: 9}}, 0, false, 4, DefaultLimits())
		if reason != FallbackNone {
			t.Fatal(reason)
		}
		return scoring.LocalBlockHashes(nil, r.Tokens, 4, scoring.Seed, nil)
	}
	if !slices.Equal(hash(1), hash(1)) {
		t.Fatal("same image, different hashes")
	}
	if slices.Equal(hash(1), hash(2)) {
		t.Fatal("different images, same hashes")
	}
	// Swapping two images changes the hashes.
	two := []uint32{5, 99, 6, 99, 7}
	r1, _ := Expand(nil, two, 99, []Entry{{Hash: 1, NumTokens: 4}, {Hash: 2, NumTokens: 4}}, 0, false, 4, DefaultLimits())
	r2, _ := Expand(nil, two, 99, []Entry{{Hash: 2, NumTokens: 4}, {Hash: 1, NumTokens: 4}}, 0, false, 4, DefaultLimits())
	if slices.Equal(scoring.LocalBlockHashes(nil, r1.Tokens, 4, 1337, nil), scoring.LocalBlockHashes(nil, r2.Tokens, 4, 1337, nil)) {
		t.Fatal("swapped order gives the same hashes")
	}
}

func TestExpandFallbacks(t *testing.T) {
	toks := []uint32{1, 99, 2}
	tests := []struct {
		name    string
		tokens  []uint32
		entries []Entry
		bs      int
		lim     Limits
		want    FallbackReason
	}{
		{"ok", toks, []Entry{{Hash: 1, NumTokens: 3}}, 4, DefaultLimits(), FallbackNone},
		{"no entries", toks, nil, 4, DefaultLimits(), FallbackCountMismatch},
		{"fewer placeholders", toks, []Entry{{Hash: 1, NumTokens: 3}, {Hash: 2, NumTokens: 3}}, 4, DefaultLimits(), FallbackCountMismatch},
		{"more placeholders", []uint32{99, 99}, []Entry{{Hash: 1, NumTokens: 3}}, 4, DefaultLimits(), FallbackCountMismatch},
		{"zero block size", toks, []Entry{{Hash: 1, NumTokens: 3}}, 0, DefaultLimits(), FallbackBadBlockSize},
		{"zero count", toks, []Entry{{Hash: 1, NumTokens: 0}}, 4, DefaultLimits(), FallbackTooLong},
		{"above MAX_MM_ROUTING_TOKENS", toks, []Entry{{Hash: 1, NumTokens: MaxRoutingTokens}}, 4, DefaultLimits(), FallbackTooLong},
		{"padded above bound", toks, []Entry{{Hash: 1, NumTokens: 15}}, 16, Limits{MaxRoutingTokens: 17}, FallbackTooLong},
		{"exactly at bound", toks, []Entry{{Hash: 1, NumTokens: 14}}, 16, Limits{MaxRoutingTokens: 16}, FallbackNone},
		{"above max expanded prompt", toks, []Entry{{Hash: 1, NumTokens: 30}}, 4, Limits{MaxExpandedPromptLen: 31}, FallbackTooLong},
		{"huge counts do not overflow", toks, []Entry{{Hash: 1, NumTokens: int(^uint(0) >> 1)}}, 4, DefaultLimits(), FallbackTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, got := Expand(nil, tc.tokens, 99, tc.entries, 0, false, tc.bs, tc.lim)
			if got != tc.want {
				t.Fatalf("reason %s, want %s", got, tc.want)
			}
			if got != FallbackNone && (r.Tokens != nil || r.Hashes != nil) {
				t.Fatal("a fallback must return neither tokens nor hashes (atomicity)")
			}
			if got == FallbackNone && (len(r.Tokens)%tc.bs != 0 || len(r.Hashes) != len(tc.entries)) {
				t.Fatalf("tokens %d hashes %d", len(r.Tokens), len(r.Hashes))
			}
		})
	}
	// The worker-bound tokens are never modified.
	if !slices.Equal(toks, []uint32{1, 99, 2}) {
		t.Fatal("input tokens modified")
	}
}

func TestFallbackReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range FallbackReasons() {
		s := r.String()
		if s == "" || s == "unknown" || s == "none" || seen[s] {
			t.Fatalf("bad or duplicate label %q", s)
		}
		seen[s] = true
	}
	if len(seen) != int(numFallbackReasons)-1 {
		t.Fatal("missing reasons")
	}
}

func TestBlockMMInfos(t *testing.T) {
	infos, err := BlockMMInfos(10, 4, []Hash{7, 8}, [][2]int{{2, 5}, {5, 6}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]uint64{{7}, {7, 8}, nil}
	if len(infos) != 3 || !slices.Equal(infos[0], want[0]) || !slices.Equal(infos[1], want[1]) || infos[2] != nil {
		t.Fatalf("got %v", infos)
	}
	for _, bad := range [][2]int{{-1, 2}, {3, 3}, {5, 11}} {
		if _, err := BlockMMInfos(10, 4, []Hash{1}, [][2]int{bad}); err == nil {
			t.Errorf("range %v accepted", bad)
		}
	}
	if _, err := BlockMMInfos(10, 0, nil, nil); err == nil {
		t.Error("zero block size accepted")
	}
}

func TestSplitImageRuns(t *testing.T) {
	const I = 9
	tests := []struct {
		name   string
		tokens []uint32
		counts []int
		want   [][2]int
		ok     bool
	}{
		{"two separated", []uint32{1, I, I, 2, I, I, I}, []int{2, 3}, [][2]int{{1, 3}, {4, 7}}, true},
		{"two adjacent split greedily", []uint32{I, I, I, I, I}, []int{2, 3}, [][2]int{{0, 2}, {2, 5}}, true},
		{"run too short", []uint32{I, 1, I, I}, []int{2, 2}, nil, false},
		{"leftover image", []uint32{I, I}, []int{2, 1}, nil, false},
		{"extra run", []uint32{I, 1, I}, []int{1}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := SplitImageRuns(tc.tokens, I, tc.counts)
			if ok != tc.ok || (ok && !slices.Equal(got, tc.want)) {
				t.Fatalf("got %v %v", got, ok)
			}
		})
	}
}

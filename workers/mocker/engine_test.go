package mocker

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func testEngine(t *testing.T, mod func(*EngineConfig)) *Engine {
	t.Helper()
	cfg := DefaultEngineConfig()
	cfg.BlockSize = 4
	cfg.NumGPUBlocks = 64
	cfg.MaxNumBatchedTokens = 64
	cfg.MaxNumSeqs = 8
	if mod != nil {
		mod(&cfg)
	}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// runUntilIdle steps the engine on a virtual clock and returns, per request, the virtual time of its first
// token and of its completion, plus every event.
type runLog struct {
	now    time.Duration
	first  map[string]time.Duration
	done   map[string]time.Duration
	cached map[string]int
	events []KVEvent
	steps  int
}

func newRunLog() *runLog {
	return &runLog{first: map[string]time.Duration{}, done: map[string]time.Duration{}, cached: map[string]int{}}
}

func (l *runLog) run(t *testing.T, e *Engine) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 1_000_000 {
			t.Fatal("engine did not go idle")
		}
		res := e.Step()
		if res.Idle {
			return
		}
		l.steps++
		l.now += res.Duration
		l.events = append(l.events, res.Events...)
		for _, p := range res.Progress {
			if p.First {
				l.first[p.ID] = l.now
			}
			if p.Done {
				l.done[p.ID] = l.now
				l.cached[p.ID] = p.CachedTokens
			}
		}
	}
}

// mirror applies events the way a router's worker actor does: refcount by engine hash.
type mirror map[BlockHash]int

func (m mirror) apply(t *testing.T, evs []KVEvent) {
	t.Helper()
	for _, ev := range evs {
		switch ev.Kind {
		case EventStored:
			if len(ev.Tokens) != len(ev.Hashes)*ev.BlockSize || len(ev.Extra) != len(ev.Hashes) {
				t.Fatalf("stored event shape: %d hashes, %d tokens, %d extra", len(ev.Hashes), len(ev.Tokens), len(ev.Extra))
			}
			if ev.HasParent && m[ev.Parent] == 0 {
				t.Fatalf("stored event's parent %x is not cached", ev.Parent)
			}
			for _, h := range ev.Hashes {
				m[h]++
			}
		case EventRemoved:
			for _, h := range ev.Hashes {
				if m[h] == 0 {
					t.Fatalf("removed %x which is not cached", h)
				}
				m[h]--
				if m[h] == 0 {
					delete(m, h)
				}
			}
		case EventCleared:
			clear(m)
		}
	}
}

func truth(e *Engine) mirror {
	m := mirror{}
	for _, b := range e.CachedBlocks(nil) {
		m[BlockHash(b.Hash)]++
	}
	return m
}

func TestSecondIdenticalRequestFasterByModel(t *testing.T) {
	tests := []struct {
		name      string
		blockSize int
		prompt    int
		speedup   float64
	}{
		{"bs16/L1024", 16, 1024, 1},
		{"bs64/L1000/x10", 64, 1000, 10},
		{"bs4/L37", 4, 37, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine(t, func(c *EngineConfig) {
				c.BlockSize, c.NumGPUBlocks, c.MaxNumBatchedTokens, c.SpeedupRatio = tc.blockSize, 1024, 8192, tc.speedup
			})
			p := seq(100, tc.prompt)
			l := newRunLog()
			if err := e.Add(Request{ID: "a", Prompt: p, MaxTokens: 1}); err != nil {
				t.Fatal(err)
			}
			l.run(t, e)
			start := l.now
			if got, want := e.PrefixHitTokens(Request{Prompt: p}), (tc.prompt-1)/tc.blockSize*tc.blockSize; got != want {
				t.Fatalf("PrefixHitTokens %d, want %d", got, want)
			}
			if err := e.Add(Request{ID: "b", Prompt: p, MaxTokens: 1}); err != nil {
				t.Fatal(err)
			}
			l.run(t, e)
			ttftA, ttftB := l.first["a"], l.first["b"]-start
			hit := (tc.prompt - 1) / tc.blockSize * tc.blockSize
			if l.cached["a"] != 0 || l.cached["b"] != hit {
				t.Fatalf("cached tokens a=%d b=%d, want 0 and %d", l.cached["a"], l.cached["b"], hit)
			}
			wantA := StepDuration(tc.prompt, 0, 0, tc.speedup, 1)
			wantB := StepDuration(tc.prompt-hit, 0, 0, tc.speedup, 1)
			if ttftA != wantA || ttftB != wantB {
				t.Fatalf("ttft a=%v b=%v, want %v and %v", ttftA, ttftB, wantA, wantB)
			}
			if saved := ttftA - ttftB; saved <= 0 {
				t.Fatalf("second request not faster: saved %v", saved)
			}
			st := e.Stats()
			if st.PrefixQueries != uint64(2*tc.prompt) || st.PrefixHits != uint64(hit) {
				t.Fatalf("prefix stats queries=%d hits=%d", st.PrefixQueries, st.PrefixHits)
			}
		})
	}
}

func TestTimingPolynomials(t *testing.T) {
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"prefill 1024", PrefillMillis(1024), 32.4907},
		{"prefill 8192", PrefillMillis(8192), 169.1369},
		{"decode 0", DecodeMillis(0), 5.74},
		{"decode 0.5", DecodeMillis(0.5), 26.31},
		{"decode 1", DecodeMillis(1), 34.01},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := tc.got - tc.want; d > 1e-3 || d < -1e-3 {
				t.Fatalf("got %.4f want %.4f", tc.got, tc.want)
			}
		})
	}
}

func TestStoredEventsChainAndDecodeBlocks(t *testing.T) {
	e := testEngine(t, nil)
	// 6 prompt tokens + 7 generated: blocks [0,4) [4,8) [8,12) are full by the last decode step that computes
	// token 11 (token 12, the last sampled one, is never computed).
	if err := e.Add(Request{ID: "a", Prompt: seq(10, 6), MaxTokens: 7}); err != nil {
		t.Fatal(err)
	}
	l := newRunLog()
	l.run(t, e)
	var stored []KVEvent
	for _, ev := range l.events {
		if ev.Kind == EventStored {
			stored = append(stored, ev)
		}
	}
	if len(stored) != 3 {
		t.Fatalf("got %d stored events, want 3 (one per step that filled a block)", len(stored))
	}
	if stored[0].HasParent || !stored[1].HasParent || stored[1].Parent != stored[0].Hashes[0] || stored[2].Parent != stored[1].Hashes[0] {
		t.Fatalf("chain broken: %+v", stored)
	}
	if !slices.Equal(stored[0].Tokens, seq(10, 4)) {
		t.Fatalf("block 0 tokens %v", stored[0].Tokens)
	}
	// Block 1 holds prompt tokens 14,15 and two generated ones.
	if !slices.Equal(stored[1].Tokens[:2], []uint32{14, 15}) {
		t.Fatalf("block 1 tokens %v", stored[1].Tokens)
	}
	if got := len(e.CachedBlocks(nil)); got != 3 {
		t.Fatalf("%d cached blocks, want 3", got)
	}
}

func TestEvictionOrderAndRemovedBeforeStored(t *testing.T) {
	e := testEngine(t, func(c *EngineConfig) { c.NumGPUBlocks = 4 })
	l := newRunLog()
	must(t, e.Add(Request{ID: "a", Prompt: seq(0, 9), MaxTokens: 1})) // 2 full blocks + 1 partial
	l.run(t, e)
	aStored := l.events[0].Hashes // a's two full blocks, in chain order
	l.events = nil
	must(t, e.Add(Request{ID: "b", Prompt: seq(1000, 13), MaxTokens: 1})) // 4 blocks: evicts a's 2 blocks
	l.run(t, e)
	kinds := make([]EventKind, len(l.events))
	for i, ev := range l.events {
		kinds[i] = ev.Kind
	}
	want := []EventKind{EventRemoved, EventRemoved, EventStored}
	if !slices.Equal(kinds, want) {
		t.Fatalf("event kinds %v, want %v", kinds, want)
	}
	// a's blocks were freed tail first, so its second (leaf) block is evicted before its first.
	if l.events[0].Hashes[0] != aStored[1] || l.events[1].Hashes[0] != aStored[0] {
		t.Fatalf("evicted %x then %x, want leaf %x then root %x", l.events[0].Hashes[0], l.events[1].Hashes[0], aStored[1], aStored[0])
	}
}

func TestImageBlocksCarryExtraKeys(t *testing.T) {
	e := testEngine(t, nil)
	id := "3f2a000000000000000000000000000000000000000000000000000000000000"
	prompt := seq(1, 14)
	for i := 3; i < 9; i++ {
		prompt[i] = 151655
	}
	must(t, e.Add(Request{ID: "a", Prompt: prompt, MaxTokens: 1, MM: []MMItem{{ID: id, Offset: 3, Length: 6}}}))
	l := newRunLog()
	l.run(t, e)
	ev := l.events[0]
	want := []*ExtraKeys{{MM: []MMKey{{id, 3}}}, {MM: []MMKey{{id, -1}}}, {MM: []MMKey{{id, -5}}}}
	if len(ev.Extra) != 3 {
		t.Fatalf("extra %v", ev.Extra)
	}
	for i := range want {
		if fmt.Sprint(*ev.Extra[i]) != fmt.Sprint(*want[i]) {
			t.Fatalf("block %d extra %v, want %v", i, *ev.Extra[i], *want[i])
		}
	}
	// The same tokens with another image do not hit the cache.
	must(t, e.Add(Request{ID: "b", Prompt: prompt, MaxTokens: 1, MM: []MMItem{{ID: "other", Offset: 3, Length: 6}}}))
	l.run(t, e)
	if l.cached["b"] != 0 {
		t.Fatalf("different image hit %d tokens", l.cached["b"])
	}
}

func TestResetPrefixCache(t *testing.T) {
	e := testEngine(t, nil)
	must(t, e.Add(Request{ID: "a", Prompt: seq(0, 9), MaxTokens: 1}))
	if err := e.ResetPrefixCache(); !errors.Is(err, ErrResetBusy) {
		// a is waiting, not holding blocks yet: the reset succeeds in vLLM too.
		if err != nil {
			t.Fatal(err)
		}
	}
	e.TakeEvents()
	l := newRunLog()
	l.run(t, e)
	must(t, e.ResetPrefixCache())
	evs := e.TakeEvents()
	if len(evs) != 1 || evs[0].Kind != EventCleared || len(e.CachedBlocks(nil)) != 0 {
		t.Fatalf("events %v, %d cached", evs, len(e.CachedBlocks(nil)))
	}
}

func TestRandomWorkloadMirrorMatchesTruth(t *testing.T) {
	tests := []struct {
		name    string
		blocks  int
		maxSeqs int
	}{
		{"heavy-eviction", 24, 4},
		{"preemption", 12, 8},
		{"roomy", 512, 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine(t, func(c *EngineConfig) { c.NumGPUBlocks, c.MaxNumSeqs, c.MaxNumBatchedTokens = tc.blocks, tc.maxSeqs, 16 })
			rng := rand.New(rand.NewPCG(1, 2))
			prefixes := [][]uint32{seq(0, 20), seq(500, 12), seq(900, 7)}
			m := mirror{}
			done := 0
			for i := range 300 {
				p := slices.Clone(prefixes[rng.IntN(len(prefixes))])
				p = append(p, seq(10_000+rng.IntN(50)*7, 1+rng.IntN(10))...)
				must(t, e.Add(Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: 1 + rng.IntN(12)}))
				for range 1 + rng.IntN(4) {
					res := e.Step()
					m.apply(t, res.Events)
					for _, pr := range res.Progress {
						if pr.Done {
							done++
						}
					}
				}
				if i == 150 {
					for e.HasWork() {
						m.apply(t, e.Step().Events)
					}
					must(t, e.ResetPrefixCache())
					m.apply(t, e.TakeEvents())
				}
			}
			for e.HasWork() {
				res := e.Step()
				m.apply(t, res.Events)
			}
			if got := truth(e); !maps_equal(got, m) {
				t.Fatalf("mirror (%d hashes) differs from truth (%d hashes)", len(m), len(got))
			}
			st := e.Stats()
			if tc.name != "roomy" && st.Evictions == 0 {
				t.Fatal("no eviction pressure")
			}
			if tc.name == "preemption" && st.Preemptions == 0 {
				t.Fatal("no preemption")
			}
			if st.UsedBlocks != 0 || st.FinishedRequests != 300 {
				t.Fatalf("leak: used %d finished %d", st.UsedBlocks, st.FinishedRequests)
			}
		})
	}
}

func maps_equal(a, b mirror) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestChunkedPrefillAndBudget(t *testing.T) {
	e := testEngine(t, func(c *EngineConfig) { c.MaxNumBatchedTokens = 8 })
	must(t, e.Add(Request{ID: "a", Prompt: seq(0, 20), MaxTokens: 2}))
	res := e.Step()
	if res.PrefillTokens != 8 || len(res.Progress) != 0 {
		t.Fatalf("first chunk %d tokens, progress %v", res.PrefillTokens, res.Progress)
	}
	if got := res.Duration; got != StepDuration(8, 0, float64(2)/64, 1, 1) {
		t.Fatalf("duration %v", got)
	}
	e.Step()
	res = e.Step()
	if res.PrefillTokens != 4 || len(res.Progress) != 1 || !res.Progress[0].First {
		t.Fatalf("last chunk %d tokens, progress %v", res.PrefillTokens, res.Progress)
	}
	res = e.Step()
	if res.Decodes != 1 || !res.Progress[0].Done {
		t.Fatalf("decode step %+v", res)
	}
}

// TestPendingPrefill: the prefill not started counts a running prompt's chunks to come (not the one in
// flight) and a waiting prompt less its cached prefix.
func TestPendingPrefill(t *testing.T) {
	e := testEngine(t, func(c *EngineConfig) { c.MaxNumBatchedTokens = 8 })
	must(t, e.Add(Request{ID: "a", Prompt: seq(0, 20), MaxTokens: 2}))
	if got := e.PendingPrefill(); got != 20 {
		t.Fatalf("before any step %d, want 20", got)
	}
	e.Step()
	if got := e.PendingPrefill(); got != 12 {
		t.Fatalf("after the first chunk %d, want 12", got)
	}
	e.Step()
	e.Step() // a's last chunk: prefilled, decoding
	if got := e.PendingPrefill(); got != 0 {
		t.Fatalf("after a's prefill %d, want 0", got)
	}
	// b shares a's first 16 tokens (4 cached blocks of 4) and waits behind the budget of c.
	must(t, e.Add(Request{ID: "c", Prompt: seq(100, 30), MaxTokens: 1}))
	must(t, e.Add(Request{ID: "b", Prompt: append(seq(0, 16), seq(200, 6)...), MaxTokens: 1}))
	if got := e.PendingPrefill(); got != 30+6 {
		t.Fatalf("c and b waiting %d, want 36 (b's 16 cached tokens not counted)", got)
	}
}

func TestMaxNumSeqs(t *testing.T) {
	e := testEngine(t, func(c *EngineConfig) { c.MaxNumSeqs = 2 })
	for i := range 5 {
		must(t, e.Add(Request{ID: fmt.Sprint(i), Prompt: seq(i*100, 3), MaxTokens: 5}))
	}
	e.Step()
	if st := e.Stats(); st.Running != 2 || st.Waiting != 3 {
		t.Fatalf("running %d waiting %d", st.Running, st.Waiting)
	}
}

func TestAddRejects(t *testing.T) {
	e := testEngine(t, func(c *EngineConfig) { c.NumGPUBlocks = 2 })
	tests := []struct {
		name string
		req  Request
	}{
		{"empty", Request{ID: "x", MaxTokens: 1}},
		{"zero max tokens", Request{ID: "x", Prompt: seq(0, 2)}},
		{"too long", Request{ID: "x", Prompt: seq(0, 8), MaxTokens: 1}},
		// prompt + max_tokens wraps past the int range: it must not pass as short.
		{"max tokens near the int range", Request{ID: "x", Prompt: seq(0, 2), MaxTokens: math.MaxInt - 1}},
		{"mm outside", Request{ID: "x", Prompt: seq(0, 2), MaxTokens: 1, MM: []MMItem{{ID: "i", Offset: 1, Length: 5}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.Add(tc.req); !errors.Is(err, ErrBadRequest) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestExtraKeysIsolateCache: the same tokens under another LoRA, cache salt or image identity never hit
// each other's blocks, and the extra keys say why (vLLM's lora + mm + salt order).
func TestExtraKeysIsolateCache(t *testing.T) {
	prompt := seq(1, 13)
	tests := []struct {
		name   string
		req    Request
		block0 string
		block1 string
	}{
		{"plain", Request{}, "<nil>", "<nil>"},
		{"lora", Request{LoraName: "ad"}, "&{ad [] }", "&{ad [] }"},
		{"salt", Request{CacheSalt: "s1"}, "&{ [] s1}", "<nil>"},
		{"lora+salt", Request{LoraName: "ad", CacheSalt: "s1"}, "&{ad [] s1}", "&{ad [] }"},
		{"image", Request{MM: []MMItem{{ID: "img", Offset: 2, Length: 4}}}, "&{ [{img 2}] }", "&{ [{img -2}] }"},
	}
	e := testEngine(t, nil)
	seen := map[BlockHash]string{}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.ID, req.Prompt, req.MaxTokens = fmt.Sprint(i), prompt, 1
			must(t, e.Add(req))
			l := newRunLog()
			l.run(t, e)
			if l.cached[req.ID] != 0 {
				t.Fatalf("hit %d tokens of another variant", l.cached[req.ID])
			}
			ev := l.events[0]
			if got := []string{fmt.Sprint(ev.Extra[0]), fmt.Sprint(ev.Extra[1])}; got[0] != tc.block0 || got[1] != tc.block1 {
				t.Fatalf("extra keys %v, want [%s %s]", got, tc.block0, tc.block1)
			}
			for _, h := range ev.Hashes {
				if other, ok := seen[h]; ok {
					t.Fatalf("hash shared with %s", other)
				}
				seen[h] = tc.name
			}
		})
	}
}

func TestAbortFreesBlocks(t *testing.T) {
	e := testEngine(t, func(c *EngineConfig) { c.MaxNumSeqs = 1 })
	must(t, e.Add(Request{ID: "a", Prompt: seq(0, 9), MaxTokens: 5}))
	must(t, e.Add(Request{ID: "b", Prompt: seq(100, 9), MaxTokens: 5}))
	e.Step()
	if st := e.Stats(); st.UsedBlocks != 3 || st.Running != 1 || st.Waiting != 1 {
		t.Fatalf("before abort %+v", st)
	}
	if !e.Abort("a") || !e.Abort("b") || e.Abort("a") {
		t.Fatal("abort results")
	}
	if st := e.Stats(); st.UsedBlocks != 0 || e.HasWork() || len(e.CachedBlocks(nil)) != 2 {
		t.Fatalf("after abort %+v, %d cached", st, len(e.CachedBlocks(nil)))
	}
}

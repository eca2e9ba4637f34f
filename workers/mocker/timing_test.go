package mocker

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestFittedTiming drives an engine with a fitted Timing: a cold prefill pays attention over its own
// tokens only, a prefix-hit prefill pays for the cached context it attends to, and a decode step pays
// per request and per token of context read.
func TestFittedTiming(t *testing.T) {
	tm := &Timing{PrefillBaseMs: 5, PrefillPerTokenMs: 0.03, PrefillAttnMsPerMPair: 1.5, DecodeBaseMs: 6, DecodePerSeqMs: 0.05, DecodePerKTokenMs: 0.04}
	cfg := DefaultEngineConfig()
	cfg.BlockSize = 16
	cfg.Timing = tm
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]uint32, 1000)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

	// Cold prefill of 1000 tokens: T = 1000, A = 1000·500.
	if err := e.Add(Request{ID: "a", Prompt: prompt, MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	res := e.Step()
	if want := ms(5 + 0.03*1000 + 1.5*1000*500/1e6); res.Duration != want || res.PrefillPairs != 1000*500 {
		t.Fatalf("cold prefill %v (pairs %v), want %v", res.Duration, res.PrefillPairs, want)
	}
	// Decode of a: D = 1, C = 1000 computed tokens.
	res = e.Step()
	if want := ms(6 + 0.05 + 0.04*1000/1e3); res.Duration != want || res.DecodeContext != 1000 {
		t.Fatalf("decode %v (context %d), want %v", res.Duration, res.DecodeContext, want)
	}
	// Same prompt again: 992 tokens cached (62 blocks of 16), 8 computed after a context of 992.
	if err := e.Add(Request{ID: "b", Prompt: prompt, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	res = e.Step()
	want := ms(5 + 0.03*8 + 1.5*8*(992+4)/1e6)
	if res.Duration != want || res.PrefillTokens != 8 {
		t.Fatalf("cached prefill %v (%d tokens), want %v", res.Duration, res.PrefillTokens, want)
	}
	// The polynomial would have charged the same 8 tokens less than the fitted model's attention term
	// makes it pay for a long context: the context term is what the polynomial cannot express.
	if p, _ := tm.Millis(StepInputs{PrefillTokens: 8, PrefillPairs: 8 * (1e5 + 4)}); p <= 5+0.03*8+1 {
		t.Fatalf("attention over a 100k context adds %.3f ms, want > 1", p-5-0.03*8)
	}
}

func TestTimingValidate(t *testing.T) {
	tests := []struct {
		name string
		tm   Timing
		ok   bool
	}{
		{"fitted", Timing{PrefillPerTokenMs: 0.03, DecodeBaseMs: 6}, true},
		{"negative", Timing{PrefillPerTokenMs: -1, DecodeBaseMs: 6}, false},
		{"nan", Timing{PrefillPerTokenMs: math.NaN(), DecodeBaseMs: 6}, false},
		{"free prefill", Timing{DecodeBaseMs: 6}, false},
		{"free decode", Timing{PrefillPerTokenMs: 0.03}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultEngineConfig()
			cfg.Timing = &tc.tm
			err := cfg.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadConfig)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestSetSpeed: a speed change applies from the next step on.
func TestSetSpeed(t *testing.T) {
	e, err := NewEngine(DefaultEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]uint32, 600)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	if err := e.Add(Request{ID: "a", Prompt: prompt, MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	if got, want := e.Step().Duration, StepDuration(600, 0, 0, 1, 1); got != want {
		t.Fatalf("prefill %v, want %v", got, want)
	}
	if err := e.SetSpeed(0, 1); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("SetSpeed(0) = %v", err)
	}
	if err := e.SetSpeed(0.5, 2); err != nil {
		t.Fatal(err)
	}
	occ := float64(e.Stats().UsedBlocks) / float64(e.Stats().Blocks)
	if got, want := e.Step().Duration, StepDuration(0, 1, occ, 0.5, 2); got != want {
		t.Fatalf("decode after SetSpeed %v, want %v", got, want)
	}
}

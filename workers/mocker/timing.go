package mocker

import (
	"fmt"
	"time"
)

// Dynamo's default polynomial timing model, in milliseconds before the speedup ratio.

// PrefillMillis is the duration of a prefill pass over t new tokens (t = sum over the batch's prefilling
// requests of their tokens computed this step; cached tokens are not computed).
func PrefillMillis(t int) float64 {
	x := float64(t)
	return 4.209989e-07*x*x + 1.518344e-02*x + 16.50142
}

// DecodeMillis is the duration of one decode step at KV occupancy p = active / total (clamped to [0,1]),
// at least 1 ms.
func DecodeMillis(p float64) float64 {
	p = min(max(p, 0), 1)
	return max(1, -25.74*p*p+54.01*p+5.74)
}

// StepDuration combines the two parts of a mixed step the way Dynamo's vLLM mocker does: a step that
// carries prefill tokens pays the prefill polynomial, a step that carries decodes pays the decode
// polynomial, a mixed step pays both. Each part is divided by its speedup ratio.
func StepDuration(prefillTokens, decodes int, occupancy, speedup, decodeSpeedup float64) time.Duration {
	ms := 0.0
	if prefillTokens > 0 {
		ms += PrefillMillis(prefillTokens) / speedup
	}
	if decodes > 0 {
		ms += DecodeMillis(occupancy) / (speedup * decodeSpeedup)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// Timing is a step-time model with the terms Dynamo's polynomial lacks, for engine profiles fitted to
// measurements of real engines (bench/lab): attention over the cached context in prefill, and decode
// cost that grows with the batch and with the context each decoding request reads. A step costs
//
//	prefill_ms = PrefillBaseMs + PrefillPerTokenMs·T + PrefillAttnMsPerMPair·A/10⁶        (T > 0)
//	decode_ms  = DecodeBaseMs + DecodePerSeqMs·D + DecodePerKTokenMs·C/10³                 (D > 0)
//
// where T is the prefill tokens computed this step, A = Σ over prefill chunks of n·(c + n/2) (query ×
// key token pairs of causal attention: a chunk of n new tokens after c tokens already in the cache), D
// the decoding requests and C = Σ of their context lengths in tokens (KV read per step). A mixed step
// pays both parts; each is divided by its speedup ratio as StepDuration does.
type Timing struct {
	// PrefillBaseMs is the fixed cost of a step that prefills (kernel launches, a pass over the weights).
	PrefillBaseMs float64
	// PrefillPerTokenMs is the linear (GEMM) cost per new token.
	PrefillPerTokenMs float64
	// PrefillAttnMsPerMPair is the attention cost per million (query, key) token pairs.
	PrefillAttnMsPerMPair float64
	// DecodeBaseMs is the cost of a decode step at batch 1 with no context: reading the weights.
	DecodeBaseMs float64
	// DecodePerSeqMs is the extra cost per decoding request (sampling, per-sequence overheads).
	DecodePerSeqMs float64
	// DecodePerKTokenMs is the cost of reading 1,000 tokens of KV cache once.
	DecodePerKTokenMs float64
}

// Validate reports a negative or non-finite coefficient, or a model that can give an empty step.
func (t *Timing) Validate() error {
	for _, v := range []float64{t.PrefillBaseMs, t.PrefillPerTokenMs, t.PrefillAttnMsPerMPair, t.DecodeBaseMs, t.DecodePerSeqMs, t.DecodePerKTokenMs} {
		if !(v >= 0) || v > 1e9 {
			return fmt.Errorf("%w: timing coefficient %v must be finite and not negative", ErrBadConfig, v)
		}
	}
	if t.PrefillBaseMs+t.PrefillPerTokenMs <= 0 || t.DecodeBaseMs+t.DecodePerSeqMs <= 0 {
		return fmt.Errorf("%w: timing must give prefill and decode steps a positive cost", ErrBadConfig)
	}
	return nil
}

// StepInputs are what one step did, as a timing model sees it.
type StepInputs struct {
	// PrefillTokens is T, PrefillPairs A, Decodes D and DecodeContext C of the Timing formula.
	PrefillTokens int
	PrefillPairs  float64
	Decodes       int
	DecodeContext int
}

// Millis returns the step's cost in milliseconds before the speedup ratios: prefill and decode parts.
func (t *Timing) Millis(in StepInputs) (prefill, decode float64) {
	if in.PrefillTokens > 0 {
		prefill = t.PrefillBaseMs + t.PrefillPerTokenMs*float64(in.PrefillTokens) + t.PrefillAttnMsPerMPair*in.PrefillPairs/1e6
	}
	if in.Decodes > 0 {
		decode = t.DecodeBaseMs + t.DecodePerSeqMs*float64(in.Decodes) + t.DecodePerKTokenMs*float64(in.DecodeContext)/1e3
	}
	return prefill, decode
}

// Duration is the step's simulated length: each part divided by its speedup ratio, as StepDuration.
func (t *Timing) Duration(in StepInputs, speedup, decodeSpeedup float64) time.Duration {
	p, d := t.Millis(in)
	ms := p/speedup + d/(speedup*decodeSpeedup)
	return time.Duration(ms * float64(time.Millisecond))
}

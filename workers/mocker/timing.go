package mocker

import "time"

// Dynamo's default polynomial timing model (spec/mocker.md §5.1), in milliseconds before the speedup ratio.

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

package kvevents

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dialect is one family of publishers' variant of the wire format. Decode
// reads every dialect without being told which; AppendDialect writes each, for the compatibility tests,
// the mocker and the golden fixtures (testdata/dialect_*.hex).
type Dialect uint8

const (
	// DialectVLLM is current vLLM (PR #42892, v0.26+): tagged-map events in the positional batch
	// [ts, events, dp_rank]. AppendBatch with LayoutMap.
	DialectVLLM Dialect = iota
	// DialectVLLMArray is vLLM before the map PR (v0.11–v0.25): tagged-array events, trailing unset
	// optional fields dropped. AppendBatch with LayoutArray.
	DialectVLLMArray
	// DialectVLLMv09 is vLLM v0.9.0: the 2-element batch [ts, events] (no dp rank), BlockStored with its five
	// original fields, BlockRemoved with its hashes only.
	DialectVLLMv09
	// DialectSim is llm-d-inference-sim's positional layout: tagged-array events with the fields up to
	// lora_name, and 0 for "no parent" (llm-d's adapter reads 0 so) where vLLM writes None.
	DialectSim
	// DialectSGLang is SGLang's publisher (python/sglang/srt/disaggregation/kv_events.py): tagged-array
	// events up to medium (BlockRemoved: hashes and medium), in [ts, events, attn_dp_rank].
	DialectSGLang
	numDialects
)

// Dialects lists every dialect, for test matrices.
func Dialects() []Dialect {
	out := make([]Dialect, numDialects)
	for i := range out {
		out[i] = Dialect(i)
	}
	return out
}

func (d Dialect) String() string {
	switch d {
	case DialectVLLM:
		return "vllm"
	case DialectVLLMArray:
		return "vllm-array"
	case DialectVLLMv09:
		return "vllm-v0.9"
	case DialectSim:
		return "llm-d-sim"
	case DialectSGLang:
		return "sglang"
	}
	return fmt.Sprintf("dialect(%d)", uint8(d))
}

// ParseDialect reads a dialect name as String writes it.
func ParseDialect(s string) (Dialect, error) {
	for _, d := range Dialects() {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown dialect %q", ErrConfig, s)
}

// AppendDialect appends the encoding of b as publishers of dialect d write it. Fields a dialect does not
// have are not written (so a v0.9 or SGLang batch loses b's medium, LoRA name, extra keys...), and
// DialectVLLMv09 drops the dp rank.
func AppendDialect(dst []byte, b *Batch, d Dialect) []byte {
	layout, sh, withDP := LayoutArray, shape{}, b.HasDPRank
	switch d {
	case DialectVLLM:
		layout = LayoutMap
	case DialectVLLMv09:
		sh, withDP = shape{storedFields: 5, removedFields: 1}, false
	case DialectSim:
		sh = shape{storedFields: 7, removedFields: 2, zeroParent: true}
	case DialectSGLang:
		sh = shape{storedFields: 6, removedFields: 2}
	}
	n := 2
	if withDP {
		n = 3
	}
	dst = appendArrayHeader(dst, n)
	dst = append(dst, 0xcb)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(b.TS))
	dst = appendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		dst = appendEvent(dst, &b.Events[i], layout, sh)
	}
	if withDP {
		dst = appendUint(dst, uint64(b.DPRank))
	}
	return dst
}

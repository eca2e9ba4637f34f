package mm

import (
	"fmt"

	"github.com/kvroute/kvroute/scoring"
)

// FallbackReason says why a request with images is routed on its text prefix only. The zero value
// means multimodal routing applies. The values are stable metric labels (String).
type FallbackReason uint8

// Fallback reasons, in the order the frontend meets them.
const (
	FallbackNone FallbackReason = iota
	// FallbackUnknownModel: the model has no counter or no resolvable placeholder (Spec.Enabled false).
	FallbackUnknownModel
	// FallbackUserUUID: an image part carries a client uuid (an opaque key cannot be a content hash).
	FallbackUserUUID
	// FallbackBadURL: an image URL cannot be parsed, or its scheme cannot be probed (s3://, gs://).
	FallbackBadURL
	// FallbackBlocked: the SSRF guard refused an image URL.
	FallbackBlocked
	// FallbackProbeFailed: size discovery failed (non-206 reply, unparsable header, transport error).
	FallbackProbeFailed
	// FallbackLimits: more images or more total pixels than the per-request bounds.
	FallbackLimits
	// FallbackCountMismatch: the number of placeholder tokens differs from the number of images.
	FallbackCountMismatch
	// FallbackTooLong: the expanded routing tokens exceed MaxRoutingTokens or MaxExpandedPromptLen.
	FallbackTooLong
	// FallbackBadBlockSize: block size zero or negative.
	FallbackBadBlockSize
	// FallbackUnsupportedFamily: the model's family is recognised but not routed on images
	// (Spec.Unsupported: Phi-3-vision, Kimi-K3, Phi-4-multimodal, Qwen3-Omni).
	FallbackUnsupportedFamily
	// FallbackTooLarge: an image download passed a byte bound (ErrTooLarge); refused, never routed.
	FallbackTooLarge
	// FallbackBusy: the process had no room for an image download or decode in time (ErrBusy); refused for a
	// retry, never routed.
	FallbackBusy
	numFallbackReasons
)

var fallbackNames = [numFallbackReasons]string{
	"none", "unknown_model", "user_uuid", "bad_url", "blocked", "probe_failed", "limits",
	"count_mismatch", "too_long", "bad_block_size", "unsupported_family", "too_large", "busy",
}

// String is the metric label of the reason.
func (r FallbackReason) String() string {
	if r < numFallbackReasons {
		return fallbackNames[r]
	}
	return "unknown"
}

// FallbackReasons lists every reason except FallbackNone, for pre-registering metric label values.
func FallbackReasons() []FallbackReason {
	out := make([]FallbackReason, 0, numFallbackReasons-1)
	for r := FallbackNone + 1; r < numFallbackReasons; r++ {
		out = append(out, r)
	}
	return out
}

// MaxRoutingTokens is Dynamo's MAX_MM_ROUTING_TOKENS: the bound on the padded routing length.
const MaxRoutingTokens = 1_048_576

// Limits bound the routing-token expansion.
type Limits struct {
	// MaxRoutingTokens bounds the block-padded routing length. Default MaxRoutingTokens (1 048 576).
	MaxRoutingTokens int
	// MaxExpandedPromptLen bounds the expanded length before padding, typically the model's context
	// length: a longer prompt cannot run, so routing it on images is pointless. 0 means no bound.
	MaxExpandedPromptLen int
}

// DefaultLimits returns Dynamo's bounds.
func DefaultLimits() Limits { return Limits{MaxRoutingTokens: MaxRoutingTokens} }

// Entry is one image as expansion needs it: its identity and its placeholder count.
type Entry struct {
	Hash      Hash
	NumTokens int
	// shape is the image's structured replacement (Llama-4, Pixtral); nil for N × pad.
	shape *shape
}

// Routing is the multimodal routing view of a request (Dynamo MmRoutingInfo with empty
// block_mm_infos), built together with the ids forwarded to workers.
type Routing struct {
	// Tokens are the routing token ids: the worker-bound tokens with each placeholder expanded to
	// NumTokens copies of its image's pad value, the BOS prepended when the model's rule says so, and
	// zeros up to a block multiple. Hash them with scoring.LocalBlockHashes and no legacy MM info.
	Tokens []uint32
	// ExpandedLen is the length before the zero padding (expanded_prompt_len).
	ExpandedLen int
	// Hashes are the images' mm_hash values in prompt order; HexIDs their %016x forms (extra_args
	// mm_hashes, SGLang, TRT-LLM) and Hash.VLLMUUID the vLLM uuid.
	Hashes []Hash
}

// HexIDs returns the %016x wire ids in image order.
func (r *Routing) HexIDs() []string {
	out := make([]string, len(r.Hashes))
	for i, h := range r.Hashes {
		out[i] = h.HexID()
	}
	return out
}

// Pad is the hash's pad value (scoring.PadValue): the token that stands for each of its positions.
func (h Hash) Pad() uint32 { return scoring.PadValue(uint64(h)) }

// Expand builds the routing view. tokens are the worker-bound ids (not
// modified); find is Spec.ImageTokenID; entries are the images in prompt order; bos is prepended when
// hasBOS. The result is all or nothing: on any failure Routing is empty and the reason says why, and
// the caller must then forward no image ids either. dst, when it has capacity, is reused for Tokens.
func Expand(dst, tokens []uint32, find uint32, entries []Entry, bos uint32, hasBOS bool, blockSize int, lim Limits) (Routing, FallbackReason) {
	if blockSize <= 0 {
		return Routing{}, FallbackBadBlockSize
	}
	if len(entries) == 0 {
		return Routing{}, FallbackCountMismatch
	}
	// One scan records the placeholder positions (on the stack for up to 32 images).
	var posBuf [32]int
	pos := posBuf[:0]
	for i, t := range tokens {
		if t == find {
			if len(pos) == len(entries) {
				return Routing{}, FallbackCountMismatch
			}
			pos = append(pos, i)
		}
	}
	if len(pos) != len(entries) {
		return Routing{}, FallbackCountMismatch
	}
	maxTokens := lim.MaxRoutingTokens
	if maxTokens <= 0 || maxTokens > MaxRoutingTokens {
		maxTokens = MaxRoutingTokens
	}
	// Checked length: every term is bounded by maxTokens before it is added, so nothing overflows.
	n := len(tokens) - len(entries)
	if hasBOS {
		n++
	}
	for _, e := range entries {
		if e.NumTokens <= 0 || e.NumTokens > maxTokens || n > maxTokens {
			return Routing{}, FallbackTooLong
		}
		n += e.NumTokens
	}
	if n > maxTokens || (lim.MaxExpandedPromptLen > 0 && n > lim.MaxExpandedPromptLen) {
		return Routing{}, FallbackTooLong
	}
	padded := (n + blockSize - 1) / blockSize * blockSize
	if padded > maxTokens {
		return Routing{}, FallbackTooLong
	}
	out := dst[:0]
	if cap(out) < padded {
		out = make([]uint32, 0, padded)
	}
	if hasBOS {
		out = append(out, bos)
	}
	hashes := make([]Hash, len(entries))
	prev := 0
	for i, e := range entries {
		out = append(out, tokens[prev:pos[i]]...)
		hashes[i] = e.Hash
		pad := e.Hash.Pad()
		start := len(out)
		if e.shape != nil && e.shape.layout != LayoutFlat {
			if out = e.shape.write(out, pad, e.NumTokens); len(out)-start != e.NumTokens {
				panic("mm: structured image replacement length differs from its NumTokens")
			}
		} else {
			out = out[:start+e.NumTokens]
			for k := start; k < len(out); k++ {
				out[k] = pad
			}
		}
		prev = pos[i] + 1
	}
	out = append(out, tokens[prev:]...)
	out = out[:padded]
	clear(out[n:])
	return Routing{Tokens: out, ExpandedLen: n, Hashes: hashes}, FallbackNone
}

// BlockMMInfos is the legacy block_mm_infos side channel (the TRT-LLM MM router
// worker's build_block_mm_infos): for each of ceil(numTokens/blockSize) blocks, the mm_hash of every
// image range [s, e) that overlaps it, in image order; nil for blocks without images. Pass it as the
// blockMM argument of scoring.LocalBlockHashes, with routing tokens that keep the real image token id.
func BlockMMInfos(numTokens, blockSize int, hashes []Hash, ranges [][2]int) ([][]uint64, error) {
	if blockSize <= 0 || numTokens < 0 {
		return nil, fmt.Errorf("mm: block_mm_infos: bad block size %d or token count %d", blockSize, numTokens)
	}
	if len(hashes) != len(ranges) {
		return nil, fmt.Errorf("mm: block_mm_infos: %d hashes for %d ranges", len(hashes), len(ranges))
	}
	nb := (numTokens + blockSize - 1) / blockSize
	out := make([][]uint64, nb)
	for k, r := range ranges {
		s, e := r[0], r[1]
		if s < 0 || e <= s || e > numTokens {
			return nil, fmt.Errorf("mm: block_mm_infos: range [%d, %d) outside %d tokens", s, e, numTokens)
		}
		for b := s / blockSize; b <= (e-1)/blockSize; b++ {
			out[b] = append(out[b], uint64(hashes[k]))
		}
	}
	return out, nil
}

// SplitImageRuns finds the [start, end) range of each image in processor-expanded tokens: contiguous
// runs of imageTok are split greedily into consecutive images of counts[i] tokens; every run must be
// filled exactly. ok is false when the runs and the counts disagree.
func SplitImageRuns(tokens []uint32, imageTok uint32, counts []int) (ranges [][2]int, ok bool) {
	ranges = make([][2]int, 0, len(counts))
	k := 0
	for i := 0; i < len(tokens); {
		if tokens[i] != imageTok {
			i++
			continue
		}
		j := i
		for j < len(tokens) && tokens[j] == imageTok {
			j++
		}
		for pos := i; pos < j; {
			if k >= len(counts) || counts[k] <= 0 || pos+counts[k] > j {
				return nil, false
			}
			ranges = append(ranges, [2]int{pos, pos + counts[k]})
			pos += counts[k]
			k++
		}
		i = j
	}
	if k != len(counts) {
		return nil, false
	}
	return ranges, true
}

// VLLMUUIDs returns the 64-character uuids for vLLM's image parts, in image order.
func (r *Routing) VLLMUUIDs() []string {
	out := make([]string, len(r.Hashes))
	for i, h := range r.Hashes {
		out[i] = h.VLLMUUID()
	}
	return out
}

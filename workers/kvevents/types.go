package kvevents

import (
	"errors"

	"github.com/kvroute/kvroute/scoring"
)

// ErrMalformed is the class of every payload or frame that does not parse as a vLLM KV event batch.
// Callers test with errors.Is; the wrapped message says what was wrong and where.
var ErrMalformed = errors.New("kvevents: malformed payload")

// Kind is the event class, taken from the msgspec tag ("type" key or array element 0).
type Kind uint8

const (
	// KindUnknown is the zero Kind; decoded batches never contain it (unknown tags are skipped).
	KindUnknown Kind = iota
	// Stored is vLLM's BlockStored: full blocks newly cached on the engine.
	Stored
	// Removed is BlockRemoved: cached blocks evicted for reuse.
	Removed
	// Cleared is AllBlocksCleared: the prefix cache was reset.
	Cleared
)

// Tag returns the msgspec tag value (the vLLM class name) of k.
func (k Kind) Tag() string {
	switch k {
	case Stored:
		return "BlockStored"
	case Removed:
		return "BlockRemoved"
	case Cleared:
		return "AllBlocksCleared"
	}
	return ""
}

func (k Kind) String() string {
	if t := k.Tag(); t != "" {
		return t
	}
	return "Unknown"
}

// Layout selects the msgpack shape of events inside a batch. The batch itself is always the positional
// array [ts, events, dp_rank].
type Layout uint8

const (
	// LayoutMap is current vLLM (PR #42892, v0.26+): each event a tagged map, "type" first.
	LayoutMap Layout = iota
	// LayoutArray is legacy vLLM and SGLang: each event a tagged array, trailing defaults dropped.
	LayoutArray
	// LayoutTRTLLM is TensorRT-LLM's JSON event list (trtllm.go), not msgpack: AppendBatch writes it
	// whole, and subscribers recognise it by its leading '['.
	LayoutTRTLLM
)

// ExtraKind says how one extra_keys entry was encoded.
type ExtraKind uint8

const (
	// ExtraMM is a multimodal entry (identifier, offset_in_block): Str is the identifier, Int the offset,
	// which is negative for blocks continuing an image that started in an earlier block.
	ExtraMM ExtraKind = iota
	// ExtraString is a bare string: a LoRA name, a cache salt, or (older vLLM) an mm identifier.
	ExtraString
	// ExtraBytes is a bin value (prompt-embedding digests); Str holds the raw bytes.
	ExtraBytes
	// ExtraInt is a bare integer in Int.
	ExtraInt
	// ExtraRaw is any other shape; Str holds its msgpack encoding verbatim so the encoder can write it back.
	ExtraRaw
)

// ExtraKey is one element of a block's extra-keys tuple.
type ExtraKey struct {
	Kind ExtraKind
	Str  string
	Int  int64
}

// Event is one KV cache event. Fields not used by a Kind stay zero. Optional wire fields that can be None
// carry a Has* flag; strings use "" for None (vLLM never sends an empty medium, LoRA name or spec kind).
type Event struct {
	Kind Kind

	// BlockHashes are the engine's opaque block hashes in chain order (Stored, Removed). Ints are kept as
	// their uint64 bit pattern (negative i64 reinterpreted); bin digests contribute their low 8 bytes read
	// big-endian, the value vLLM sends in int mode.
	BlockHashes []uint64
	// ParentHash is the hash of the block before BlockHashes[0]; HasParent is false for None (block 0)
	// and for 0, the "no parent" of llm-d-inference-sim and llm-d's adapter.
	ParentHash uint64
	HasParent  bool
	// TokenIDs are all tokens of the stored blocks, concatenated.
	TokenIDs []uint32
	// BlockSize is the block size of the emitting KV-cache group.
	BlockSize int
	// LoraID is the deprecated adapter id.
	LoraID    int64
	HasLoraID bool
	// Medium is "GPU" from the block pool, "CPU" etc. from offloading connectors; "" for None.
	Medium string
	// Tier is Medium parsed into a storage tier (scoring.ParseMedium); MediumDevice when absent.
	Tier     scoring.Medium
	LoraName string
	// ExtraKeys has one entry per block (nil for None); ExtraKeys itself is nil when the field is None
	// or absent.
	ExtraKeys [][]ExtraKey
	// GroupIdx is the KV-cache group (hybrid models).
	GroupIdx    int
	HasGroupIdx bool
	// SpecKind is kv_cache_spec_kind, e.g. "full_attention".
	SpecKind string
	// SlidingWindow is kv_cache_spec_sliding_window.
	SlidingWindow    int
	HasSlidingWindow bool
	// Locality, Ownership and SessionID are the newest optional string fields ("" for None).
	Locality  string
	Ownership string
	SessionID string

	// Reuse buffers for ExtraKeys: ExtraKeys[i] are sub-slices of ekFlat.
	ekBlocks [][]ExtraKey
	ekFlat   []ExtraKey
	ekSpans  []ekSpan
}

type ekSpan struct {
	start, end int32 // end < 0 means the block's entry is None
}

// reset clears e for reuse while keeping its buffers.
func (e *Event) reset() {
	*e = Event{
		BlockHashes: e.BlockHashes[:0],
		TokenIDs:    e.TokenIDs[:0],
		ekBlocks:    e.ekBlocks[:0],
		ekFlat:      e.ekFlat[:0],
		ekSpans:     e.ekSpans[:0],
	}
}

// Batch is one published message: the events of one engine step.
type Batch struct {
	// TS is the engine's time.time() when it built the batch, in seconds.
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank of the publishing engine; HasDPRank is false when the batch had
	// only two elements (v0.9) or sent None.
	DPRank    uint32
	HasDPRank bool
	// Skipped counts events with an unknown tag that Decode passed over.
	Skipped int

	intern [4]string // recently decoded strings (mm identifiers repeat block after block)
	next   int
}

// Reset empties b, keeping its buffers.
func (b *Batch) Reset() {
	b.TS, b.DPRank, b.HasDPRank, b.Skipped = 0, 0, false, 0
	b.Events = b.Events[:0]
}

// appendEvent extends b.Events by one reset event, reusing a previous event's buffers when possible.
func (b *Batch) appendEvent() *Event {
	if len(b.Events) < cap(b.Events) {
		b.Events = b.Events[:len(b.Events)+1]
	} else {
		b.Events = append(b.Events, Event{})
	}
	e := &b.Events[len(b.Events)-1]
	e.reset()
	return e
}

// internBytes returns s as a string, reusing a recent identical string to avoid an allocation.
func (b *Batch) internBytes(s []byte) string {
	switch string(s) {
	case "":
		return ""
	case "GPU":
		return "GPU"
	case "CPU":
		return "CPU"
	case "full_attention":
		return "full_attention"
	case "sliding_window":
		return "sliding_window"
	}
	for _, c := range b.intern {
		if c == string(s) {
			return c
		}
	}
	str := string(s)
	b.intern[b.next] = str
	b.next = (b.next + 1) % len(b.intern)
	return str
}

// PartialBlocks counts the blocks of a Stored event whose tokens on the wire are fewer than BlockSize:
// the blocks from the first short one to the end, as Dynamo's "Block not published" rule drops them.
func PartialBlocks(e *Event) int {
	if e.Kind != Stored || e.BlockSize <= 0 {
		return 0
	}
	full := len(e.TokenIDs) / e.BlockSize
	if full >= len(e.BlockHashes) {
		return 0
	}
	return len(e.BlockHashes) - full
}

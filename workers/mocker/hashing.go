package mocker

import (
	"encoding/binary"
	"fmt"

	"github.com/goccy/go-json"

	"github.com/zeebo/xxh3"
)

// BlockHash is an engine block hash. Like vLLM's, it chains over (parent hash, block tokens, extra keys);
// unlike vLLM's it is XXH3-64 with EngineConfig.HashSeed, which is allowed: the router treats engine hashes as
// opaque and re-keys blocks from token_ids.
type BlockHash uint64

// MMItem places one multimodal item (an image) in a prompt: its identity (a 64-hex content hash or the
// chat part's uuid) and the placeholder run [Offset, Offset+Length) it occupies.
type MMItem struct {
	ID     string
	Offset int
	Length int
}

// MMKey is one multimodal entry of a block's extra keys: the item's identity and its offset relative to the
// block start (negative for continuation blocks), as current vLLM hashes it.
type MMKey struct {
	ID     string
	Offset int
}

// ExtraKeys is the tuple vLLM hashes together with a block, in vLLM's order: LoRA name, multimodal entries,
// cache salt (block 0 only). A nil *ExtraKeys is vLLM's None.
type ExtraKeys struct {
	LoraName  string
	MM        []MMKey
	CacheSalt string
}

// Len is the number of tuple elements on the wire.
func (k *ExtraKeys) Len() int {
	if k == nil {
		return 0
	}
	n := len(k.MM)
	if k.LoraName != "" {
		n++
	}
	if k.CacheSalt != "" {
		n++
	}
	return n
}

// blockExtraKeys computes the extra keys of block idx (tokens [idx*bs, (idx+1)*bs)) of a request, or nil.
// mm must be sorted by offset.
func blockExtraKeys(idx, bs int, lora, salt string, mm []MMItem) *ExtraKeys {
	start, end := idx*bs, (idx+1)*bs
	var k *ExtraKeys
	get := func() *ExtraKeys {
		if k == nil {
			k = &ExtraKeys{}
		}
		return k
	}
	if lora != "" {
		get().LoraName = lora
	}
	for _, it := range mm {
		if it.Offset >= end {
			break
		}
		if it.Offset+it.Length > start {
			kk := get()
			kk.MM = append(kk.MM, MMKey{ID: it.ID, Offset: it.Offset - start})
		}
	}
	if idx == 0 && salt != "" {
		get().CacheSalt = salt
	}
	return k
}

// hashBlock chains one block: XXH3-64(seed) over a presence byte and the parent, the tokens as u32le and the
// length-prefixed extra keys.
func hashBlock(seed uint64, parent BlockHash, hasParent bool, tokens []uint32, extra *ExtraKeys) BlockHash {
	var stack [1024]byte
	buf := stack[:0]
	if hasParent {
		buf = append(buf, 1)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(parent))
	} else {
		buf = append(buf, 0)
	}
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(tokens)))
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	if extra != nil {
		buf = appendString(buf, extra.LoraName)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(extra.MM)))
		for _, m := range extra.MM {
			buf = appendString(buf, m.ID)
			buf = binary.LittleEndian.AppendUint64(buf, uint64(int64(m.Offset)))
		}
		buf = appendString(buf, extra.CacheSalt)
	}
	return BlockHash(xxh3.HashSeed(buf, seed))
}

func appendString(buf []byte, s string) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(s)))
	return append(buf, s...)
}

// MarshalJSON writes the tuple as vLLM's events carry it: [lora_name?, [mm_id, offset]..., cache_salt?].
func (k *ExtraKeys) MarshalJSON() ([]byte, error) {
	if k == nil {
		return []byte("null"), nil
	}
	parts := make([]any, 0, k.Len())
	if k.LoraName != "" {
		parts = append(parts, k.LoraName)
	}
	for _, m := range k.MM {
		parts = append(parts, []any{m.ID, m.Offset})
	}
	if k.CacheSalt != "" {
		parts = append(parts, k.CacheSalt)
	}
	return json.Marshal(parts)
}

// UnmarshalJSON reads MarshalJSON's form back. A bare string is taken as the LoRA name when it comes
// before any mm entry and as the cache salt otherwise (a LoRA-less salted block 0 therefore reads back as
// a LoRA name; the router never needs to tell them apart).
func (k *ExtraKeys) UnmarshalJSON(b []byte) error {
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	*k = ExtraKeys{}
	for _, p := range parts {
		var s string
		if err := json.Unmarshal(p, &s); err == nil {
			if len(k.MM) == 0 && k.LoraName == "" {
				k.LoraName = s
			} else {
				k.CacheSalt = s
			}
			continue
		}
		var pair []json.RawMessage
		if err := json.Unmarshal(p, &pair); err != nil || len(pair) != 2 {
			return fmt.Errorf("mocker: extra key %s is neither a string nor a pair", p)
		}
		var m MMKey
		if err := json.Unmarshal(pair[0], &m.ID); err != nil {
			return err
		}
		if err := json.Unmarshal(pair[1], &m.Offset); err != nil {
			return err
		}
		k.MM = append(k.MM, m)
	}
	return nil
}

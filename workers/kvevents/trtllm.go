package kvevents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// TensorRT-LLM's KV cache events are the JSON form its KVCacheEventSerializer gives the executor's
// KVCacheEvent objects (what LLM.get_kv_cache_events returns, and what Dynamo's TRT-LLM publisher
// reads):
//
//	[ {"event_id": N, "window_size": W, "attention_dp_rank": R?, "data": DATA}, ... ]
//
//	DATA = {"type": "stored", "parent_hash": H | null, "blocks": [
//	          {"type": "stored_block", "block_hash": H,
//	           "tokens": [{"type": "unique_token", "token_id": T, "token_extra_id": E}, ...],
//	           "lora_id": L | null, "cache_level": C, "priority": P,
//	           "mm_keys": [{"type": "mm_key", "hash": "<hex digest>", "start_offset": O}, ...]}, ...]}
//	     | {"type": "removed", "block_hashes": [H, ...]}
//	     | {"type": "created", "num_blocks_per_cache_level": [...]}
//	     | {"type": "updated", "block_hash": H, ...}
//
// A block hash H is an integer (the engine's size_t) or, with a digest hash algorithm, a hex string.
// mm_keys carry, per block, the multimodal items overlapping it: "hash" is the item's hex digest, the
// 16-hex id the frontend forwarded as the item's multi_modal_uuid when the engine took one, and
// start_offset its start within the block. kvroute maps them to ExtraMM keys (identifier, offset), so
// the router's mm re-keying reads TRT-LLM and vLLM events alike.

// trtEvent is one serialized TensorRT-LLM KV cache event.
type trtEvent struct {
	DPRank *uint32 `json:"attention_dp_rank"`
	Data   trtData `json:"data"`
}

type trtData struct {
	Type        string            `json:"type"`
	ParentHash  json.RawMessage   `json:"parent_hash"`
	Blocks      []trtBlock        `json:"blocks"`
	BlockHashes []json.RawMessage `json:"block_hashes"`
}

type trtBlock struct {
	BlockHash json.RawMessage `json:"block_hash"`
	Tokens    []struct {
		TokenID int64 `json:"token_id"`
	} `json:"tokens"`
	LoraID *int64 `json:"lora_id"`
	MMKeys []struct {
		Type        string `json:"type"`
		Hash        string `json:"hash"`
		StartOffset int64  `json:"start_offset"`
	} `json:"mm_keys"`
}

// maxTRTLLMPayload bounds one TensorRT-LLM event payload (JSON is several times larger than msgpack).
const maxTRTLLMPayload = 64 << 20

// IsTRTLLM reports whether payload looks like a TensorRT-LLM JSON event list rather than a vLLM msgpack
// batch: its first non-space byte is '[' (a msgpack batch starts with a fixarray header, 0x90-0x9f, or
// 0xdc/0xdd).
func IsTRTLLM(payload []byte) bool {
	p := bytes.TrimLeft(payload, " \t\r\n")
	return len(p) > 0 && p[0] == '['
}

// DecodeTRTLLM decodes a TensorRT-LLM JSON event list into b (reset first). Stored and removed events
// become Stored and Removed; "created" (a fresh engine cache) becomes Cleared; "updated" (cache level
// or priority changes) and unknown types are counted in b.Skipped. blockSize is the engine's
// tokens_per_block (the JSON carries none). Every failure wraps ErrMalformed.
func DecodeTRTLLM(payload []byte, blockSize int, b *Batch) error {
	b.Reset()
	if len(payload) > maxTRTLLMPayload {
		return fmt.Errorf("%w: trtllm payload of %d bytes", ErrMalformed, len(payload))
	}
	var evs []trtEvent
	if err := json.Unmarshal(payload, &evs); err != nil {
		return fmt.Errorf("%w: trtllm json: %v", ErrMalformed, err)
	}
	for i := range evs {
		e := &evs[i]
		if e.DPRank != nil {
			b.DPRank, b.HasDPRank = *e.DPRank, true
		}
		var ev Event
		switch e.Data.Type {
		case "stored":
			ev.Kind = Stored
			ev.BlockSize = blockSize
			if h, ok, err := trtHash(e.Data.ParentHash); err != nil {
				return fmt.Errorf("%w: event %d parent_hash: %v", ErrMalformed, i, err)
			} else if ok {
				ev.ParentHash, ev.HasParent = h, true
			}
			anyMM := false
			for j := range e.Data.Blocks {
				blk := &e.Data.Blocks[j]
				h, ok, err := trtHash(blk.BlockHash)
				if err != nil || !ok {
					return fmt.Errorf("%w: event %d block %d: block_hash %s", ErrMalformed, i, j, blk.BlockHash)
				}
				ev.BlockHashes = append(ev.BlockHashes, h)
				for _, t := range blk.Tokens {
					if t.TokenID < 0 || t.TokenID > 1<<32-1 {
						return fmt.Errorf("%w: event %d block %d: token id %d", ErrMalformed, i, j, t.TokenID)
					}
					ev.TokenIDs = append(ev.TokenIDs, uint32(t.TokenID))
				}
				if blk.LoraID != nil {
					ev.LoraID, ev.HasLoraID = *blk.LoraID, true
				}
				var keys []ExtraKey
				for _, k := range blk.MMKeys {
					if k.Type != "mm_key" || k.Hash == "" {
						continue
					}
					keys = append(keys, ExtraKey{Kind: ExtraMM, Str: mmKeyID(k.Hash), Int: k.StartOffset})
					anyMM = true
				}
				ev.ExtraKeys = append(ev.ExtraKeys, keys)
			}
			if !anyMM {
				ev.ExtraKeys = nil
			}
		case "removed":
			ev.Kind = Removed
			for j, raw := range e.Data.BlockHashes {
				h, ok, err := trtHash(raw)
				if err != nil || !ok {
					return fmt.Errorf("%w: event %d removed hash %d: %s", ErrMalformed, i, j, raw)
				}
				ev.BlockHashes = append(ev.BlockHashes, h)
			}
		case "created":
			ev.Kind = Cleared
		default:
			b.Skipped++
			continue
		}
		b.Events = append(b.Events, ev)
	}
	return nil
}

// mmKeyID turns an mm_key hash into the identifier form BlockMMHashes reads (64 hex digits, the first
// 16 being the mm_hash): a 16-hex id the frontend forwarded is padded as vLLM's uuid is; a 64-hex
// digest (the engine's own content hash) is kept; anything else is kept verbatim and ignored later.
func mmKeyID(h string) string {
	if len(h) == 16 {
		return h + "000000000000000000000000000000000000000000000000"
	}
	return h
}

// trtHash reads a block hash: an unsigned or signed integer (bit pattern kept) or a hex digest (its
// first 16 hex digits). ok is false for null.
func trtHash(raw json.RawMessage) (uint64, bool, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return 0, false, nil
	}
	if s[0] == '"' {
		var hex string
		if err := json.Unmarshal(raw, &hex); err != nil {
			return 0, false, err
		}
		if len(hex) > 16 {
			hex = hex[:16]
		}
		v, err := strconv.ParseUint(hex, 16, 64)
		return v, err == nil, err
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u, true, nil
	}
	i, err := strconv.ParseInt(s, 10, 64)
	return uint64(i), err == nil, err
}

// decodeTRTLLMRouterBlocks decodes with the router's block size: TensorRT-LLM's events do not carry
// tokens_per_block, and Rekey uses the router's when an event has none.
func decodeTRTLLMRouterBlocks(payload []byte, b *Batch) error { return DecodeTRTLLM(payload, 0, b) }

// AppendTRTLLM appends b as TensorRT-LLM's JSON event list: Stored as "stored" (one stored_block per
// block hash, its tokens and mm_keys; multimodal identifiers are sent as TensorRT-LLM echoes a
// forwarded multi_modal_uuid, 16 hex digits), Removed as "removed", Cleared as "created". event_id
// counts from 0 within the batch; the ZMQ frame's sequence number orders batches.
func AppendTRTLLM(dst []byte, b *Batch) []byte {
	dst = append(dst, '[')
	n := 0
	for i := range b.Events {
		e := &b.Events[i]
		if e.Kind == KindUnknown {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"event_id":`...)
		dst = strconv.AppendInt(dst, int64(n), 10)
		n++
		if b.HasDPRank {
			dst = append(dst, `,"attention_dp_rank":`...)
			dst = strconv.AppendUint(dst, uint64(b.DPRank), 10)
		}
		dst = append(dst, `,"data":{"type":`...)
		switch e.Kind {
		case Stored:
			dst = appendTRTLLMStored(dst, e)
		case Removed:
			dst = append(dst, `"removed","block_hashes":[`...)
			for j, h := range e.BlockHashes {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = strconv.AppendUint(dst, h, 10)
			}
			dst = append(dst, ']')
		case Cleared:
			dst = append(dst, `"created","num_blocks_per_cache_level":[]`...)
		}
		dst = append(dst, "}}"...)
	}
	return append(dst, ']')
}

// appendTRTLLMStored appends the data of a stored event after its "type": the parent and each block with
// its tokens (split by the event's block size, else evenly) and its image keys.
func appendTRTLLMStored(dst []byte, e *Event) []byte {
	dst = append(dst, `"stored","parent_hash":`...)
	if e.HasParent {
		dst = strconv.AppendUint(dst, e.ParentHash, 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"blocks":[`...)
	bs := e.BlockSize
	if bs <= 0 && len(e.BlockHashes) > 0 {
		bs = len(e.TokenIDs) / len(e.BlockHashes)
	}
	for j, h := range e.BlockHashes {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"stored_block","block_hash":`...)
		dst = strconv.AppendUint(dst, h, 10)
		dst = append(dst, `,"tokens":[`...)
		lo, hi := min(j*bs, len(e.TokenIDs)), min((j+1)*bs, len(e.TokenIDs))
		for k, t := range e.TokenIDs[lo:hi] {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":"unique_token","token_id":`...)
			dst = strconv.AppendUint(dst, uint64(t), 10)
			dst = append(dst, `,"token_extra_id":0}`...)
		}
		dst = append(dst, `],"lora_id":null,"cache_level":0,"priority":35,"mm_keys":[`...)
		if j < len(e.ExtraKeys) {
			dst = appendTRTLLMKeys(dst, e.ExtraKeys[j])
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, ']')
}

// appendTRTLLMKeys appends a block's image keys as TRT-LLM mm_key objects (other extra keys have no
// TRT-LLM form and are left out). A 16-hex identifier (the multi_modal_uuid the frontend forwarded to a
// worker registered with engine=trtllm) is echoed as it is, as TensorRT-LLM echoes the uuid it was
// given; a 64-hex one as its first 16 digits.
func appendTRTLLMKeys(dst []byte, keys []ExtraKey) []byte {
	m := 0
	for _, k := range keys {
		id, ok := ParseMMIdentifier(k.Str)
		if k.Kind == ExtraMM && !ok && len(k.Str) == 16 {
			id, ok = ParseMMIdentifier(mmKeyID(k.Str))
		}
		if k.Kind != ExtraMM || !ok {
			continue
		}
		if m > 0 {
			dst = append(dst, ',')
		}
		m++
		dst = append(dst, `{"type":"mm_key","hash":"`...)
		dst = appendHex16(dst, id)
		dst = append(dst, `","start_offset":`...)
		dst = strconv.AppendInt(dst, k.Int, 10)
		dst = append(dst, '}')
	}
	return dst
}

func appendHex16(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for i := 60; i >= 0; i -= 4 {
		dst = append(dst, digits[(v>>uint(i))&15])
	}
	return dst
}

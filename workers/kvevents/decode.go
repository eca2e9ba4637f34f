package kvevents

import (
	"encoding/binary"
	"math"

	"github.com/kvroute/kvroute/scoring"
)

// Decode parses one vLLM KV event payload into b, reusing b's slices. It accepts the current layout
// (positional batch, tagged-map events), the legacy one (tagged-array events of any length at least the
// required fields, 2- or 3-element batches) and a map-shaped batch. Events with an unknown tag are
// skipped and counted in b.Skipped; unknown map keys are ignored. Errors wrap ErrMalformed; on error b
// holds a partial batch. The decoded strings do not alias payload, which the caller may reuse.
func Decode(payload []byte, b *Batch) error {
	b.Reset()
	d := decoder{buf: payload}
	if err := d.batch(b); err != nil {
		return err
	}
	if d.pos != len(d.buf) {
		return d.fail("trailing bytes after batch")
	}
	return nil
}

// batch decodes the outer EventBatch: a positional array (or, defensively, a map).
func (d *decoder) batch(b *Batch) error {
	c, err := d.peek()
	if err != nil {
		return err
	}
	if isMap(c) {
		return d.batchMap(b)
	}
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	if n < 2 {
		return d.fail("batch array shorter than [ts, events]")
	}
	if b.TS, err = d.float(); err != nil {
		return err
	}
	if err = d.events(b); err != nil {
		return err
	}
	if n >= 3 {
		if err = d.dpRank(b); err != nil {
			return err
		}
	}
	for i := 3; i < n; i++ {
		if err = d.skip(0); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) batchMap(b *Batch) error {
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	var haveEvents bool
	for i := 0; i < n; i++ {
		k, err := d.str()
		if err != nil {
			return err
		}
		switch string(k) {
		case "ts":
			b.TS, err = d.float()
		case "events":
			haveEvents = true
			err = d.events(b)
		case "data_parallel_rank", "dp_rank", "attn_dp_rank":
			err = d.dpRank(b)
		default:
			err = d.skip(0)
		}
		if err != nil {
			return err
		}
	}
	if !haveEvents {
		return d.fail("batch map without events")
	}
	return nil
}

func (d *decoder) dpRank(b *Batch) error {
	if d.nilNext() {
		return nil
	}
	u, neg, err := d.integer()
	if err != nil {
		return err
	}
	if neg || u > math.MaxUint32 {
		return d.fail("dp rank out of range")
	}
	b.DPRank, b.HasDPRank = uint32(u), true
	return nil
}

func (d *decoder) events(b *Batch) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		c, err := d.peek()
		if err != nil {
			return err
		}
		e := b.appendEvent()
		switch {
		case isMap(c):
			err = d.eventMap(b, e)
		case isArray(c):
			err = d.eventArray(b, e)
		default:
			err = d.fail("event is neither map nor array")
		}
		if err != nil {
			return err
		}
		if e.Kind == KindUnknown {
			b.Events = b.Events[:len(b.Events)-1]
			b.Skipped++
		}
	}
	return nil
}

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return Stored
	case "BlockRemoved":
		return Removed
	case "AllBlocksCleared":
		return Cleared
	}
	return KindUnknown
}

// eventMap decodes a tagged-map event; keys may come in any order, unknown keys are skipped.
func (d *decoder) eventMap(b *Batch, e *Event) error {
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	var haveTag bool
	for i := 0; i < n; i++ {
		k, err := d.str()
		if err != nil {
			return err
		}
		if string(k) == "type" {
			tag, err := d.str()
			if err != nil {
				return err
			}
			e.Kind, haveTag = kindOf(tag), true
			continue
		}
		if err := d.field(b, e, string(k)); err != nil {
			return err
		}
	}
	if !haveTag {
		return d.fail("event map without type")
	}
	return nil
}

// Positional field names of the legacy array layout, after the tag.
var (
	storedFields  = [...]string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality", "ownership", "session_id"}
	removedFields = [...]string{"block_hashes", "medium", "group_idx", "locality", "ownership"}
)

// Minimum legacy array lengths including the tag: v0.9's BlockStored had five fields, BlockRemoved one.
const (
	minStoredArray  = 6
	minRemovedArray = 2
)

func (d *decoder) eventArray(b *Batch, e *Event) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	if n < 1 {
		return d.fail("empty event array")
	}
	tag, err := d.str()
	if err != nil {
		return err
	}
	e.Kind = kindOf(tag)
	var names []string
	switch e.Kind {
	case Stored:
		if n < minStoredArray {
			return d.fail("BlockStored array too short")
		}
		names = storedFields[:]
	case Removed:
		if n < minRemovedArray {
			return d.fail("BlockRemoved array too short")
		}
		names = removedFields[:]
	}
	for i := 1; i < n; i++ {
		if i-1 < len(names) {
			err = d.field(b, e, names[i-1])
		} else {
			err = d.skip(0)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// field decodes one named event field into e; unknown names are skipped.
func (d *decoder) field(b *Batch, e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		e.BlockHashes, err = d.hashes(e.BlockHashes[:0])
	case "parent_block_hash":
		if d.nilNext() {
			e.ParentHash, e.HasParent = 0, false
			return nil
		}
		e.ParentHash, err = d.hash()
		// 0 is "no parent" for llm-d-inference-sim and llm-d's own adapter (positional layout); a real
		// chained hash of 0 has probability 2^-64, so both layouts read it so.
		e.HasParent = err == nil && e.ParentHash != 0
	case "token_ids":
		e.TokenIDs, err = d.tokens(e.TokenIDs[:0])
	case "block_size":
		e.BlockSize, err = d.intv()
	case "lora_id":
		if d.nilNext() {
			e.LoraID, e.HasLoraID = 0, false
			return nil
		}
		e.LoraID, err = d.int64v()
		e.HasLoraID = err == nil
	case "medium":
		e.Medium, err = d.optString(b)
		e.Tier = scoring.ParseMedium(e.Medium)
	case "lora_name":
		e.LoraName, err = d.optString(b)
	case "extra_keys":
		err = d.extraKeys(b, e)
	case "group_idx":
		e.GroupIdx, e.HasGroupIdx, err = d.optInt()
	case "kv_cache_spec_kind":
		e.SpecKind, err = d.optString(b)
	case "kv_cache_spec_sliding_window":
		e.SlidingWindow, e.HasSlidingWindow, err = d.optInt()
	case "locality":
		e.Locality, err = d.optString(b)
	case "ownership":
		e.Ownership, err = d.optString(b)
	case "session_id":
		e.SessionID, err = d.optString(b)
	default:
		err = d.skip(0)
	}
	return err
}

func (d *decoder) hashes(dst []uint64) ([]uint64, error) {
	n, err := d.arrayLen()
	if err != nil {
		return dst, err
	}
	if cap(dst) < n {
		dst = make([]uint64, 0, n)
	}
	for i := 0; i < n; i++ {
		h, err := d.hash()
		if err != nil {
			return dst, err
		}
		dst = append(dst, h)
	}
	return dst, nil
}

func (d *decoder) tokens(dst []uint32) ([]uint32, error) {
	n, err := d.arrayLen()
	if err != nil {
		return dst, err
	}
	if cap(dst) < n {
		dst = make([]uint32, n)
	} else {
		dst = dst[:n]
	}
	buf, pos := d.buf, d.pos
	for i := range dst {
		// Fast path: positive fixint, uint8, uint16 and uint32 cover every real vocabulary.
		if pos < len(buf) {
			switch c := buf[pos]; {
			case c <= 0x7f:
				dst[i] = uint32(c)
				pos++
				continue
			case c == 0xcd && pos+3 <= len(buf):
				dst[i] = uint32(buf[pos+1])<<8 | uint32(buf[pos+2])
				pos += 3
				continue
			case c == 0xce && pos+5 <= len(buf):
				dst[i] = binary.BigEndian.Uint32(buf[pos+1:])
				pos += 5
				continue
			}
		}
		d.pos = pos
		u, neg, err := d.integer()
		if err != nil {
			return dst[:i], err
		}
		if neg || u > math.MaxUint32 {
			return dst[:i], d.fail("token id out of range")
		}
		dst[i] = uint32(u)
		pos = d.pos
	}
	d.pos = pos
	return dst, nil
}

// extraKeys decodes list[tuple | None] | None, one entry per block, into e.ExtraKeys.
func (d *decoder) extraKeys(b *Batch, e *Event) error {
	e.ExtraKeys = nil
	if d.nilNext() {
		return nil
	}
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	spans := e.ekSpans[:0]
	flat := e.ekFlat[:0]
	for i := 0; i < n; i++ {
		if d.nilNext() {
			spans = append(spans, ekSpan{start: int32(len(flat)), end: -1})
			continue
		}
		start := len(flat)
		c, err := d.peek()
		if err != nil {
			return err
		}
		if isArray(c) {
			m, err := d.arrayLen()
			if err != nil {
				return err
			}
			for j := 0; j < m; j++ {
				k, err := d.extraKey(b)
				if err != nil {
					return err
				}
				flat = append(flat, k)
			}
		} else {
			// Not a tuple: keep the lone value as a one-element tuple.
			k, err := d.extraKey(b)
			if err != nil {
				return err
			}
			flat = append(flat, k)
		}
		spans = append(spans, ekSpan{start: int32(start), end: int32(len(flat))})
	}
	blocks := e.ekBlocks[:0]
	if blocks == nil {
		blocks = [][]ExtraKey{} // an empty list is not None
	}
	for _, s := range spans {
		switch {
		case s.end < 0:
			blocks = append(blocks, nil)
		case s.end == s.start:
			blocks = append(blocks, []ExtraKey{}) // an empty tuple is not None; no allocation
		default:
			blocks = append(blocks, flat[s.start:s.end:s.end])
		}
	}
	e.ekSpans, e.ekFlat, e.ekBlocks = spans, flat, blocks
	e.ExtraKeys = blocks
	return nil
}

// extraKey decodes one element of a block's extra-keys tuple.
func (d *decoder) extraKey(b *Batch) (ExtraKey, error) {
	start := d.pos
	c, err := d.peek()
	if err != nil {
		return ExtraKey{}, err
	}
	switch {
	case c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb:
		s, err := d.str()
		return ExtraKey{Kind: ExtraString, Str: b.internBytes(s)}, err
	case c == 0xc4 || c == 0xc5 || c == 0xc6:
		s, err := d.bin()
		return ExtraKey{Kind: ExtraBytes, Str: string(s)}, err
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		u, neg, err := d.integer()
		if err == nil && (neg || u <= math.MaxInt64) {
			return ExtraKey{Kind: ExtraInt, Int: int64(u)}, nil
		}
		if err != nil {
			return ExtraKey{}, err
		}
	case c == 0x92 && d.pos+1 < len(d.buf):
		// (identifier, offset): the multimodal shape.
		d.pos++
		s, err := d.str()
		if err == nil {
			off, err := d.int64v()
			if err == nil {
				return ExtraKey{Kind: ExtraMM, Str: b.internBytes(s), Int: off}, nil
			}
		}
		d.pos = start
	}
	if err := d.skip(1); err != nil {
		return ExtraKey{}, err
	}
	return ExtraKey{Kind: ExtraRaw, Str: string(d.buf[start:d.pos])}, nil
}

package kvevents

import (
	"encoding/binary"
	"fmt"
	"math"
)

// maxSkipDepth bounds the nesting the decoder follows while skipping unknown values, so hostile input
// cannot exhaust the stack.
const maxSkipDepth = 32

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

// decoder is a zero-copy msgpack reader over one payload. Every length read from the input is checked
// against the bytes that remain, so no allocation exceeds the payload size.
type decoder struct {
	buf []byte
	pos int
}

func (d *decoder) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrMalformed, what, d.pos)
}

func (d *decoder) peek() (byte, error) {
	if d.pos >= len(d.buf) {
		return 0, d.fail("unexpected end")
	}
	return d.buf[d.pos], nil
}

// take returns the next n bytes.
func (d *decoder) take(n int) ([]byte, error) {
	if n < 0 || n > len(d.buf)-d.pos {
		return nil, d.fail("length exceeds payload")
	}
	s := d.buf[d.pos : d.pos+n]
	d.pos += n
	return s, nil
}

// length reads a big-endian length of size bytes (1, 2 or 4).
func (d *decoder) length(size int) (int, error) {
	s, err := d.take(size)
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return int(s[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(s)), nil
	}
	return int(binary.BigEndian.Uint32(s)), nil
}

// nilNext consumes a nil and reports true if the next value is nil.
func (d *decoder) nilNext() bool {
	if d.pos < len(d.buf) && d.buf[d.pos] == 0xc0 {
		d.pos++
		return true
	}
	return false
}

func isArray(c byte) bool { return c&0xf0 == 0x90 || c == 0xdc || c == 0xdd }
func isMap(c byte) bool   { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }

// arrayLen reads an array header; a length is capped by the remaining bytes (each element takes one).
func (d *decoder) arrayLen() (int, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	d.pos++
	var n int
	switch {
	case c&0xf0 == 0x90:
		n = int(c & 0x0f)
	case c == 0xdc:
		n, err = d.length(2)
	case c == 0xdd:
		n, err = d.length(4)
	default:
		d.pos--
		return 0, d.fail("expected array")
	}
	if err != nil {
		return 0, err
	}
	if n > len(d.buf)-d.pos {
		return 0, d.fail("array length exceeds payload")
	}
	return n, nil
}

// mapLen reads a map header; each entry takes at least two bytes.
func (d *decoder) mapLen() (int, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	d.pos++
	var n int
	switch {
	case c&0xf0 == 0x80:
		n = int(c & 0x0f)
	case c == 0xde:
		n, err = d.length(2)
	case c == 0xdf:
		n, err = d.length(4)
	default:
		d.pos--
		return 0, d.fail("expected map")
	}
	if err != nil {
		return 0, err
	}
	if n > (len(d.buf)-d.pos)/2 {
		return 0, d.fail("map length exceeds payload")
	}
	return n, nil
}

// str reads a string and returns its bytes without copying.
func (d *decoder) str() ([]byte, error) {
	c, err := d.peek()
	if err != nil {
		return nil, err
	}
	d.pos++
	var n int
	switch {
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n, err = d.length(1)
	case c == 0xda:
		n, err = d.length(2)
	case c == 0xdb:
		n, err = d.length(4)
	default:
		d.pos--
		return nil, d.fail("expected string")
	}
	if err != nil {
		return nil, err
	}
	return d.take(n)
}

// binLen reads a bin header (c4..c6) and returns the payload bytes.
func (d *decoder) bin() ([]byte, error) {
	c, err := d.peek()
	if err != nil {
		return nil, err
	}
	d.pos++
	var n int
	switch c {
	case 0xc4:
		n, err = d.length(1)
	case 0xc5:
		n, err = d.length(2)
	case 0xc6:
		n, err = d.length(4)
	default:
		d.pos--
		return nil, d.fail("expected bin")
	}
	if err != nil {
		return nil, err
	}
	return d.take(n)
}

// integer reads any msgpack int. For negative values neg is true and u holds the int64 bit pattern.
func (d *decoder) integer() (u uint64, neg bool, err error) {
	c, err := d.peek()
	if err != nil {
		return 0, false, err
	}
	d.pos++
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	}
	var s []byte
	switch c {
	case 0xcc, 0xd0:
		s, err = d.take(1)
	case 0xcd, 0xd1:
		s, err = d.take(2)
	case 0xce, 0xd2:
		s, err = d.take(4)
	case 0xcf, 0xd3:
		s, err = d.take(8)
	default:
		d.pos--
		return 0, false, d.fail("expected integer")
	}
	if err != nil {
		return 0, false, err
	}
	switch c {
	case 0xcc:
		return uint64(s[0]), false, nil
	case 0xcd:
		return uint64(binary.BigEndian.Uint16(s)), false, nil
	case 0xce:
		return uint64(binary.BigEndian.Uint32(s)), false, nil
	case 0xcf:
		return binary.BigEndian.Uint64(s), false, nil
	case 0xd0:
		v := int64(int8(s[0]))
		return uint64(v), v < 0, nil
	case 0xd1:
		v := int64(int16(binary.BigEndian.Uint16(s)))
		return uint64(v), v < 0, nil
	case 0xd2:
		v := int64(int32(binary.BigEndian.Uint32(s)))
		return uint64(v), v < 0, nil
	}
	v := int64(binary.BigEndian.Uint64(s))
	return uint64(v), v < 0, nil
}

// int64v reads an int that must fit in int64.
func (d *decoder) int64v() (int64, error) {
	u, neg, err := d.integer()
	if err != nil {
		return 0, err
	}
	if !neg && u > math.MaxInt64 {
		return 0, d.fail("integer overflows int64")
	}
	return int64(u), nil
}

// intv reads a non-negative int that fits in an int32 (sizes, ranks, group ids).
func (d *decoder) intv() (int, error) {
	u, neg, err := d.integer()
	if err != nil {
		return 0, err
	}
	if neg || u > math.MaxInt32 {
		return 0, d.fail("integer out of range")
	}
	return int(u), nil
}

// hash reads a block hash: any int (bit pattern kept) or bin (low 8 bytes, big-endian).
func (d *decoder) hash() (uint64, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	if c == 0xc4 || c == 0xc5 || c == 0xc6 {
		s, err := d.bin()
		if err != nil {
			return 0, err
		}
		var h uint64
		if len(s) > 8 {
			s = s[len(s)-8:]
		}
		for _, x := range s {
			h = h<<8 | uint64(x)
		}
		return h, nil
	}
	u, _, err := d.integer()
	return u, err
}

// float reads ts: float64, float32 or an int.
func (d *decoder) float() (float64, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xcb:
		d.pos++
		s, err := d.take(8)
		if err != nil {
			return 0, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(s)), nil
	case 0xca:
		d.pos++
		s, err := d.take(4)
		if err != nil {
			return 0, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(s))), nil
	}
	u, neg, err := d.integer()
	if err != nil {
		return 0, d.fail("expected float")
	}
	if neg {
		return float64(int64(u)), nil
	}
	return float64(u), nil
}

// optString reads a string or nil ("").
func (d *decoder) optString(b *Batch) (string, error) {
	if d.nilNext() {
		return "", nil
	}
	s, err := d.str()
	if err != nil {
		return "", err
	}
	return b.internBytes(s), nil
}

// optInt reads an int or nil.
func (d *decoder) optInt() (int, bool, error) {
	if d.nilNext() {
		return 0, false, nil
	}
	v, err := d.intv()
	return v, err == nil, err
}

// skip passes over one value of any type.
func (d *decoder) skip(depth int) error {
	if depth > maxSkipDepth {
		return d.fail("nesting too deep")
	}
	c, err := d.peek()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		d.pos++
		return nil
	case c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb:
		_, err = d.str()
		return err
	case c == 0xc4 || c == 0xc5 || c == 0xc6:
		_, err = d.bin()
		return err
	case isArray(c):
		n, err := d.arrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isMap(c):
		n, err := d.mapLen()
		if err != nil {
			return err
		}
		for i := 0; i < 2*n; i++ {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	d.pos++
	var n int
	switch c {
	case 0xcc, 0xd0:
		n = 1
	case 0xcd, 0xd1:
		n = 2
	case 0xce, 0xd2, 0xca:
		n = 4
	case 0xcf, 0xd3, 0xcb:
		n = 8
	case 0xd4:
		n = 2 // fixext1: type + 1
	case 0xd5:
		n = 3
	case 0xd6:
		n = 5
	case 0xd7:
		n = 9
	case 0xd8:
		n = 17
	case 0xc7, 0xc8, 0xc9: // ext8/16/32: length, then type byte, then data
		size := 1 << (c - 0xc7) // 1, 2, 4
		l, err := d.length(size)
		if err != nil {
			return err
		}
		n = l + 1
	default:
		d.pos--
		return d.fail("invalid type byte")
	}
	_, err = d.take(n)
	return err
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
		e.HasParent = err == nil
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

package kvevents

import (
	"encoding/binary"
	"math"
)

// AppendBatch appends the msgpack encoding of b to dst, byte for byte as vLLM's msgspec encoder writes
// it:
//   - the batch is the positional array [ts, events, dp_rank]; ts is always float64; dp_rank is dropped
//     (a 2-element array) only when HasDPRank is false, as omit_defaults drops a trailing None;
//   - LayoutMap events are maps with "type" first and fields in declaration order; required fields are
//     always written (None as nil), optional ones only when set;
//   - LayoutArray events are [tag, fields...] with only the trailing unset optional fields dropped;
//   - non-negative ints use the smallest unsigned form, negative ones the smallest signed form.
//
// Strings that are "" are written as None (see Event). Hashes are written as ints.
func AppendBatch(dst []byte, b *Batch, layout Layout) []byte {
	if layout == LayoutTRTLLM {
		return AppendTRTLLM(dst, b)
	}
	n := 2
	if b.HasDPRank {
		n = 3
	}
	dst = appendArrayHeader(dst, n)
	dst = append(dst, 0xcb)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(b.TS))
	dst = appendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		dst = AppendEvent(dst, &b.Events[i], layout)
	}
	if b.HasDPRank {
		dst = appendUint(dst, uint64(b.DPRank))
	}
	return dst
}

// AppendEvent appends one event in the given layout. An event of KindUnknown has no vLLM class and is
// written as nil.
func AppendEvent(dst []byte, e *Event, layout Layout) []byte {
	return appendEvent(dst, e, layout, shape{})
}

// shape is how a dialect departs from current vLLM when it writes an event (dialect.go).
type shape struct {
	// fields caps the fields written after the tag in the array layout (0: all of them).
	storedFields, removedFields int
	// zeroParent writes "no parent" as 0 instead of None.
	zeroParent bool
}

func appendEvent(dst []byte, e *Event, layout Layout, sh shape) []byte {
	if e.Kind == KindUnknown {
		return append(dst, 0xc0)
	}
	fields := eventFields(e)
	if layout == LayoutArray {
		last := len(fields)
		for last > 0 && fields[last-1].optional && !fields[last-1].set(e) {
			last--
		}
		if limit := sh.limit(e.Kind); limit > 0 && last > limit {
			last = limit
		}
		dst = appendArrayHeader(dst, 1+last)
		dst = appendStr(dst, e.Kind.Tag())
		for _, f := range fields[:last] {
			if sh.zeroParent && f.name == "parent_block_hash" && !e.HasParent {
				dst = append(dst, 0x00)
				continue
			}
			dst = f.write(dst, e)
		}
		return dst
	}
	n := 1
	for _, f := range fields {
		if !f.optional || f.set(e) {
			n++
		}
	}
	dst = appendMapHeader(dst, n)
	dst = appendStr(dst, "type")
	dst = appendStr(dst, e.Kind.Tag())
	for _, f := range fields {
		if !f.optional || f.set(e) {
			dst = appendStr(dst, f.name)
			dst = f.write(dst, e)
		}
	}
	return dst
}

func (sh shape) limit(k Kind) int {
	switch k {
	case Stored:
		return sh.storedFields
	case Removed:
		return sh.removedFields
	}
	return 0
}

// fieldSpec is one struct field of vLLM's event classes, in declaration order.
type fieldSpec struct {
	name     string
	optional bool // has a default (None) and is omitted when unset
	set      func(*Event) bool
	write    func([]byte, *Event) []byte
}

func eventFields(e *Event) []fieldSpec {
	switch e.Kind {
	case Stored:
		return storedSpec[:]
	case Removed:
		return removedSpec[:]
	}
	return nil
}

func always(*Event) bool { return true }

func writeHashes(dst []byte, e *Event) []byte {
	dst = appendArrayHeader(dst, len(e.BlockHashes))
	for _, h := range e.BlockHashes {
		dst = appendUint(dst, h)
	}
	return dst
}

func writeMedium(dst []byte, e *Event) []byte { return appendOptStr(dst, e.Medium) }

func writeGroup(dst []byte, e *Event) []byte {
	if !e.HasGroupIdx {
		return append(dst, 0xc0)
	}
	return appendInt(dst, int64(e.GroupIdx))
}

func strField(name string, get func(*Event) string) fieldSpec {
	return fieldSpec{
		name: name, optional: true,
		set:   func(e *Event) bool { return get(e) != "" },
		write: func(dst []byte, e *Event) []byte { return appendOptStr(dst, get(e)) },
	}
}

var storedSpec = [...]fieldSpec{
	{name: "block_hashes", set: always, write: writeHashes},
	{name: "parent_block_hash", set: always, write: func(dst []byte, e *Event) []byte {
		if !e.HasParent {
			return append(dst, 0xc0)
		}
		return appendUint(dst, e.ParentHash)
	}},
	{name: "token_ids", set: always, write: func(dst []byte, e *Event) []byte {
		dst = appendArrayHeader(dst, len(e.TokenIDs))
		for _, t := range e.TokenIDs {
			dst = appendUint(dst, uint64(t))
		}
		return dst
	}},
	{name: "block_size", set: always, write: func(dst []byte, e *Event) []byte {
		return appendInt(dst, int64(e.BlockSize))
	}},
	{name: "lora_id", set: always, write: func(dst []byte, e *Event) []byte {
		if !e.HasLoraID {
			return append(dst, 0xc0)
		}
		return appendInt(dst, e.LoraID)
	}},
	{name: "medium", set: always, write: writeMedium},
	{name: "lora_name", set: always, write: func(dst []byte, e *Event) []byte {
		return appendOptStr(dst, e.LoraName)
	}},
	{name: "extra_keys", optional: true, set: func(e *Event) bool { return e.ExtraKeys != nil }, write: writeExtraKeys},
	{name: "group_idx", optional: true, set: func(e *Event) bool { return e.HasGroupIdx }, write: writeGroup},
	strField("kv_cache_spec_kind", func(e *Event) string { return e.SpecKind }),
	{name: "kv_cache_spec_sliding_window", optional: true, set: func(e *Event) bool { return e.HasSlidingWindow },
		write: func(dst []byte, e *Event) []byte {
			if !e.HasSlidingWindow {
				return append(dst, 0xc0)
			}
			return appendInt(dst, int64(e.SlidingWindow))
		}},
	strField("locality", func(e *Event) string { return e.Locality }),
	strField("ownership", func(e *Event) string { return e.Ownership }),
	strField("session_id", func(e *Event) string { return e.SessionID }),
}

var removedSpec = [...]fieldSpec{
	{name: "block_hashes", set: always, write: writeHashes},
	{name: "medium", set: always, write: writeMedium},
	{name: "group_idx", optional: true, set: func(e *Event) bool { return e.HasGroupIdx }, write: writeGroup},
	strField("locality", func(e *Event) string { return e.Locality }),
	strField("ownership", func(e *Event) string { return e.Ownership }),
}

func writeExtraKeys(dst []byte, e *Event) []byte {
	if e.ExtraKeys == nil {
		return append(dst, 0xc0)
	}
	dst = appendArrayHeader(dst, len(e.ExtraKeys))
	for _, blk := range e.ExtraKeys {
		if blk == nil {
			dst = append(dst, 0xc0)
			continue
		}
		dst = appendArrayHeader(dst, len(blk))
		for _, k := range blk {
			dst = appendExtraKey(dst, k)
		}
	}
	return dst
}

func appendExtraKey(dst []byte, k ExtraKey) []byte {
	switch k.Kind {
	case ExtraMM:
		dst = append(dst, 0x92)
		dst = appendStr(dst, k.Str)
		return appendInt(dst, k.Int)
	case ExtraString:
		return appendStr(dst, k.Str)
	case ExtraBytes:
		return appendBin(dst, k.Str)
	case ExtraInt:
		return appendInt(dst, k.Int)
	}
	if k.Str == "" {
		return append(dst, 0xc0)
	}
	return append(dst, k.Str...)
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}

func appendStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

func appendOptStr(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, 0xc0)
	}
	return appendStr(dst, s)
}

func appendBin(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n <= math.MaxUint8:
		dst = append(dst, 0xc4, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xc5), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xc6), uint32(n))
	}
	return append(dst, s...)
}

func appendArrayHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

func appendMapHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
}

package kvevents

import (
	"encoding/binary"
	"fmt"
	"math"
)

// maxSkipDepth bounds the nesting the decoder follows while skipping unknown values, so hostile input
// cannot exhaust the stack.
const maxSkipDepth = 32

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
	return d.headerLen(0x90, 0xdc, 0xdd, 1, "array")
}

// mapLen reads a map header; each entry takes at least two bytes.
func (d *decoder) mapLen() (int, error) {
	return d.headerLen(0x80, 0xde, 0xdf, 2, "map")
}

// headerLen reads an array or map header: the fix form (high nibble fix, length in the low one), then
// the 16- and 32-bit forms. A length whose elements, per bytes each at least, would run past the payload
// fails.
func (d *decoder) headerLen(fix, c16, c32 byte, per int, what string) (int, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	d.pos++
	var n int
	switch {
	case c&0xf0 == fix:
		n = int(c & 0x0f)
	case c == c16:
		n, err = d.length(2)
	case c == c32:
		n, err = d.length(4)
	default:
		d.pos--
		return 0, d.fail("expected " + what)
	}
	if err != nil {
		return 0, err
	}
	if n*per > len(d.buf)-d.pos {
		return 0, d.fail(what + " length exceeds payload")
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

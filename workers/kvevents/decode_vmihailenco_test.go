package kvevents

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// vmDecoder is the alternative decoder the hand-written one was benchmarked against: the same Batch filled
// through vmihailenco/msgpack/v5's streaming API (a reused Decoder over a reset bytes.Reader). It lives in
// a test file because it lost (doc.go has the numbers); TestVMDecoderAgrees keeps it honest.
type vmDecoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

func newVMDecoder() *vmDecoder {
	v := &vmDecoder{}
	v.dec = msgpack.NewDecoder(&v.r)
	return v
}

func (v *vmDecoder) Decode(payload []byte, b *Batch) error {
	b.Reset()
	v.r.Reset(payload)
	v.dec.Reset(&v.r)
	d := v.dec
	n, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n < 2 {
		return fmt.Errorf("%w: short batch", ErrMalformed)
	}
	if b.TS, err = d.DecodeFloat64(); err != nil {
		return err
	}
	ne, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	for i := 0; i < ne; i++ {
		c, err := d.PeekCode()
		if err != nil {
			return err
		}
		e := b.appendEvent()
		if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
			err = v.eventMap(e)
		} else {
			err = v.eventArray(e)
		}
		if err != nil {
			return err
		}
		if e.Kind == KindUnknown {
			b.Events = b.Events[:len(b.Events)-1]
			b.Skipped++
		}
	}
	if n >= 3 {
		if c, _ := d.PeekCode(); c == msgpcode.Nil {
			_ = d.DecodeNil()
		} else {
			r, err := d.DecodeUint32()
			if err != nil {
				return err
			}
			b.DPRank, b.HasDPRank = r, true
		}
	}
	for i := 3; i < n; i++ {
		if err := d.Skip(); err != nil {
			return err
		}
	}
	return nil
}

func (v *vmDecoder) eventMap(e *Event) error {
	n, err := v.dec.DecodeMapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := v.dec.DecodeString()
		if err != nil {
			return err
		}
		if k == "type" {
			tag, err := v.dec.DecodeString()
			if err != nil {
				return err
			}
			e.Kind = kindOf([]byte(tag))
			continue
		}
		if err := v.field(e, k); err != nil {
			return err
		}
	}
	return nil
}

func (v *vmDecoder) eventArray(e *Event) error {
	n, err := v.dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	tag, err := v.dec.DecodeString()
	if err != nil {
		return err
	}
	e.Kind = kindOf([]byte(tag))
	var names []string
	switch e.Kind {
	case Stored:
		names = storedFields[:]
	case Removed:
		names = removedFields[:]
	}
	for i := 1; i < n; i++ {
		if i-1 < len(names) {
			err = v.field(e, names[i-1])
		} else {
			err = v.dec.Skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (v *vmDecoder) isNil() bool {
	if c, _ := v.dec.PeekCode(); c == msgpcode.Nil {
		_ = v.dec.DecodeNil()
		return true
	}
	return false
}

func (v *vmDecoder) hash() (uint64, error) {
	c, err := v.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32 {
		s, err := v.dec.DecodeBytes()
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
	return v.dec.DecodeUint64()
}

func (v *vmDecoder) optString() (string, error) {
	if v.isNil() {
		return "", nil
	}
	return v.dec.DecodeString()
}

func (v *vmDecoder) field(e *Event, name string) error {
	d := v.dec
	var err error
	switch name {
	case "block_hashes":
		n, err := d.DecodeArrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			h, err := v.hash()
			if err != nil {
				return err
			}
			e.BlockHashes = append(e.BlockHashes, h)
		}
	case "parent_block_hash":
		if !v.isNil() {
			e.ParentHash, err = v.hash()
			e.HasParent = true
		}
	case "token_ids":
		n, err := d.DecodeArrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			t, err := d.DecodeUint32()
			if err != nil {
				return err
			}
			e.TokenIDs = append(e.TokenIDs, t)
		}
	case "block_size":
		e.BlockSize, err = d.DecodeInt()
	case "lora_id":
		if !v.isNil() {
			e.LoraID, err = d.DecodeInt64()
			e.HasLoraID = true
		}
	case "medium":
		e.Medium, err = v.optString()
	case "lora_name":
		e.LoraName, err = v.optString()
	case "extra_keys":
		if v.isNil() {
			return nil
		}
		n, err := d.DecodeArrayLen()
		if err != nil {
			return err
		}
		e.ExtraKeys = e.ekBlocks[:0]
		for i := 0; i < n; i++ {
			if v.isNil() {
				e.ExtraKeys = append(e.ExtraKeys, nil)
				continue
			}
			m, err := d.DecodeArrayLen()
			if err != nil {
				return err
			}
			blk := make([]ExtraKey, 0, m)
			for j := 0; j < m; j++ {
				c, _ := d.PeekCode()
				if msgpcode.IsFixedArray(c) {
					if _, err := d.DecodeArrayLen(); err != nil {
						return err
					}
					id, err := d.DecodeString()
					if err != nil {
						return err
					}
					off, err := d.DecodeInt64()
					if err != nil {
						return err
					}
					blk = append(blk, ExtraKey{Kind: ExtraMM, Str: id, Int: off})
				} else {
					s, err := d.DecodeString()
					if err != nil {
						return err
					}
					blk = append(blk, ExtraKey{Kind: ExtraString, Str: s})
				}
			}
			e.ExtraKeys = append(e.ExtraKeys, blk)
		}
		e.ekBlocks = e.ExtraKeys
	case "group_idx":
		if !v.isNil() {
			e.GroupIdx, err = d.DecodeInt()
			e.HasGroupIdx = true
		}
	case "kv_cache_spec_kind":
		e.SpecKind, err = v.optString()
	case "kv_cache_spec_sliding_window":
		if !v.isNil() {
			e.SlidingWindow, err = d.DecodeInt()
			e.HasSlidingWindow = true
		}
	default:
		err = d.Skip()
	}
	return err
}

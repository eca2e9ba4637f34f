package transfer

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/kvroute/kvroute/mm"
)

// Kind names the transport of a descriptor.
type Kind string

// Descriptor kinds.
const (
	KindShm Kind = "shm"
	KindNet Kind = "net"
)

// Descriptor tells a worker where one preprocessed image is and how to verify it. It travels as the
// "mm_kwargs" member of the image's content part (doc.go, "Wire format"):
//
//	{"type":"image_url","image_url":{"url":"…"},"uuid":"…",
//	 "mm_kwargs":{"kind":"shm","name":"kvroute_mm_4242_0123456789ab","length":12648512,
//	              "dtype":"float32","shape":[8160,1536],"grid_thw":[1,68,120],
//	              "mm_hash":"9f86d081884c7d65","checksum":"1b2c…"}}
//
// A net descriptor carries addr, buffer and token instead of name.
type Descriptor struct {
	Kind Kind `json:"kind"`
	// Name is the shared-memory segment's file name under /dev/shm (shm only).
	Name string `json:"name,omitempty"`
	// Addr is the transfer agent's host:port; Buffer its buffer id; Token the one-time pull token (net only).
	Addr   string `json:"addr,omitempty"`
	Buffer uint32 `json:"buffer,omitempty"`
	Token  string `json:"token,omitempty"`
	// Length is the encoded item's size in bytes (64-byte header plus payload).
	Length int64 `json:"length"`
	// DType is "float32"; Shape is pixel_values' [rows, cols]; GridTHW is image_grid_thw.
	DType   string `json:"dtype"`
	Shape   [2]int `json:"shape"`
	GridTHW [3]int `json:"grid_thw"`
	// MMHash is the image's mm_hash (mm.Hash.HexID); Checksum is XXH3-64 of the payload, 16 hex digits.
	MMHash   string `json:"mm_hash"`
	Checksum string `json:"checksum"`
}

// shmNameRE is the only segment name a receiver opens: the descriptor comes from the network, and a
// free-form name would let a request read any file under the shm directory (or outside it via "..").
var shmNameRE = regexp.MustCompile(`^kvroute_mm_([0-9]{1,10})_[0-9a-f]{12}$`)

func newDescriptor(kind Kind, t *Tensor, sum uint64) Descriptor {
	return Descriptor{
		Kind: kind, Length: int64(t.EncodedLen()), DType: DTypeFloat32,
		Shape: [2]int{t.Rows, t.Cols}, GridTHW: t.GridTHW,
		MMHash: t.Hash.HexID(), Checksum: fmt.Sprintf("%016x", sum),
	}
}

// Validate checks the fields a receiver relies on before any I/O.
func (d *Descriptor) Validate() error {
	switch d.Kind {
	case KindShm:
		if !shmNameRE.MatchString(d.Name) {
			return fmt.Errorf("%w: segment name %q", ErrBadDescriptor, d.Name)
		}
	case KindNet:
		if d.Addr == "" || len(d.Token) != 2*tokenLen {
			return fmt.Errorf("%w: net descriptor needs addr and a %d-hex-digit token", ErrBadDescriptor, 2*tokenLen)
		}
	default:
		return fmt.Errorf("%w: kind %q", ErrBadDescriptor, d.Kind)
	}
	if d.DType != DTypeFloat32 || d.Shape[0] <= 0 || d.Shape[1] <= 0 ||
		d.Length != headerSize+4*int64(d.Shape[0])*int64(d.Shape[1]) {
		return fmt.Errorf("%w: dtype %q shape %v length %d", ErrBadDescriptor, d.DType, d.Shape, d.Length)
	}
	if _, err := strconv.ParseUint(d.Checksum, 16, 64); err != nil || len(d.Checksum) != 16 {
		return fmt.Errorf("%w: checksum %q", ErrBadDescriptor, d.Checksum)
	}
	return nil
}

// matches compares a decoded header with the descriptor.
func (d *Descriptor) matches(t *Tensor, sum uint64) error {
	if d.Shape != [2]int{t.Rows, t.Cols} || d.GridTHW != t.GridTHW || fmt.Sprintf("%016x", sum) != d.Checksum {
		return fmt.Errorf("%w: item does not match descriptor", ErrCorrupt)
	}
	if d.MMHash != "" {
		if h, err := mm.ParseHexID(d.MMHash); err != nil || h != t.Hash {
			return fmt.Errorf("%w: mm_hash %s, item has %s", ErrCorrupt, d.MMHash, t.Hash.HexID())
		}
	}
	return nil
}

package transfer

import (
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"

	"github.com/zeebo/xxh3"

	"github.com/kvroute/kvroute/mm"
)

// Tensor is one preprocessed image: pixel_values [Rows, Cols] float32, row-major, and image_grid_thw.
// Rows = T*H*W of GridTHW; Cols = channels*temporal_patch*patch*patch (doc.go, "Layout").
type Tensor struct {
	Rows, Cols int
	GridTHW    [3]int
	Hash       mm.Hash
	// Data is the row-major pixel_values, len Rows*Cols.
	Data []float32
}

// Bytes is the tensor's payload as little-endian float32 bytes, without copying.
func (t *Tensor) Bytes() []byte { return f32Bytes(t.Data) }

// Checksum is XXH3-64 (seed 0) of Bytes.
func (t *Tensor) Checksum() uint64 { return xxh3.Hash(t.Bytes()) }

// Encoded item layout (shared-memory segment and network buffer alike), little endian:
//
//	off  size  field
//	  0     4  magic "KVMM"
//	  4     2  format version (1)
//	  6     1  dtype (1 = float32)
//	  7     1  ndim (2)
//	  8     8  rows
//	 16     8  cols
//	 24    12  grid_thw (3 × u32)
//	 36     4  reserved (0)
//	 40     8  mm_hash
//	 48     8  checksum: XXH3-64 of the payload
//	 56     8  payload length in bytes (rows*cols*4)
//	 64     …  payload: pixel_values, row-major float32
const (
	headerSize    = 64
	formatVersion = 1
	dtypeFloat32  = 1
	// DTypeFloat32 is the descriptor's dtype string.
	DTypeFloat32 = "float32"
)

var magic = [4]byte{'K', 'V', 'M', 'M'}

// EncodedLen is the size of the encoded item: header plus payload.
func (t *Tensor) EncodedLen() int { return headerSize + 4*len(t.Data) }

// encodeHeader writes the header for payload checksum sum into b[:headerSize].
func (t *Tensor) encodeHeader(b []byte, sum uint64) {
	le := binary.LittleEndian
	copy(b[0:4], magic[:])
	le.PutUint16(b[4:], formatVersion)
	b[6] = dtypeFloat32
	b[7] = 2
	le.PutUint64(b[8:], uint64(t.Rows))
	le.PutUint64(b[16:], uint64(t.Cols))
	for i, g := range t.GridTHW {
		le.PutUint32(b[24+4*i:], uint32(g))
	}
	le.PutUint32(b[36:], 0)
	le.PutUint64(b[40:], uint64(t.Hash))
	le.PutUint64(b[48:], sum)
	le.PutUint64(b[56:], uint64(4*len(t.Data)))
}

// EncodeTo writes the encoded item into b (len(b) >= EncodedLen) and returns the payload checksum.
func (t *Tensor) EncodeTo(b []byte) uint64 {
	payload := t.Bytes()
	sum := xxh3.Hash(payload)
	t.encodeHeader(b, sum)
	copy(b[headerSize:], payload)
	return sum
}

// decodeHeader parses and checks an item header against the descriptor (when non-nil) and returns the
// tensor without data, the header's payload checksum and the payload length.
func decodeHeader(b []byte, d *Descriptor) (Tensor, uint64, int, error) {
	if len(b) < headerSize {
		return Tensor{}, 0, 0, fmt.Errorf("%w: %d bytes, shorter than the header", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	if [4]byte(b[0:4]) != magic || le.Uint16(b[4:]) != formatVersion || b[6] != dtypeFloat32 || b[7] != 2 {
		return Tensor{}, 0, 0, fmt.Errorf("%w: bad magic, version or dtype", ErrCorrupt)
	}
	rows, cols := le.Uint64(b[8:]), le.Uint64(b[16:])
	n := le.Uint64(b[56:])
	if rows > 1<<32 || cols > 1<<20 || n != rows*cols*4 {
		return Tensor{}, 0, 0, fmt.Errorf("%w: payload %d bytes for %d×%d", ErrCorrupt, n, rows, cols)
	}
	t := Tensor{Rows: int(rows), Cols: int(cols), Hash: mm.Hash(le.Uint64(b[40:]))}
	for i := range t.GridTHW {
		t.GridTHW[i] = int(le.Uint32(b[24+4*i:]))
	}
	sum := le.Uint64(b[48:])
	if d != nil {
		if err := d.matches(&t, sum); err != nil {
			return Tensor{}, 0, 0, err
		}
	}
	return t, sum, int(n), nil
}

// readItem reads an encoded item from r straight into a new tensor (one copy: the payload lands in
// Data) and verifies it against d: header fields, shape, mm_hash and the payload checksum.
func readItem(r io.Reader, d *Descriptor) (Tensor, error) {
	if d == nil {
		// The descriptor bounds the allocation: a header alone could claim petabytes.
		return Tensor{}, fmt.Errorf("%w: no descriptor", ErrBadDescriptor)
	}
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Tensor{}, fmt.Errorf("%w: read header: %v", ErrUnavailable, err)
	}
	t, sum, n, err := decodeHeader(hdr[:], d)
	if err != nil {
		return Tensor{}, err
	}
	if int64(headerSize+n) != d.Length {
		return Tensor{}, fmt.Errorf("%w: item length %d, descriptor says %d", ErrCorrupt, headerSize+n, d.Length)
	}
	t.Data = make([]float32, n/4)
	payload := f32Bytes(t.Data)
	if _, err := io.ReadFull(r, payload); err != nil {
		return Tensor{}, fmt.Errorf("%w: read payload: %v", ErrUnavailable, err)
	}
	if got := xxh3.Hash(payload); got != sum {
		return Tensor{}, fmt.Errorf("%w: checksum %016x, header says %016x", ErrCorrupt, got, sum)
	}
	return t, nil
}

// f32Bytes views a float32 slice as its bytes. The package requires a little-endian host (checked in
// init), so the view is the wire layout.
func f32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

func init() {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) != 1 {
		panic("transfer: big-endian hosts are not supported")
	}
}

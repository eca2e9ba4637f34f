package mm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/gif"
	"image/png"
	"testing"
	"time"

	"golang.org/x/image/tiff"
)

// jpegBits writes entropy-coded bits MSB first with JPEG's byte stuffing (0xFF → 0xFF 0x00).
type jpegBits struct {
	out  []byte
	acc  uint32
	nacc int
}

func (w *jpegBits) put(v uint32, n int) {
	for i := n - 1; i >= 0; i-- {
		w.acc = w.acc<<1 | (v>>uint(i))&1
		w.nacc++
		if w.nacc == 8 {
			w.out = append(w.out, byte(w.acc))
			if byte(w.acc) == 0xFF {
				w.out = append(w.out, 0)
			}
			w.acc, w.nacc = 0, 0
		}
	}
}

// flush pads the last byte with ones.
func (w *jpegBits) flush() []byte {
	for w.nacc != 0 {
		w.put(1, 1)
	}
	return w.out
}

func jpegSegment(b []byte, marker byte, payload ...byte) []byte {
	b = append(b, 0xFF, marker)
	b = binary.BigEndian.AppendUint16(b, uint16(len(payload)+2))
	return append(b, payload...)
}

// progressiveJPEG builds a valid progressive JPEG of w×h with comps components (all at full
// resolution): one DC scan a component (one bit a block, every coefficient 0) followed by acScans AC
// scans of the first component that each skip every block with end-of-band runs of 32767 blocks (15
// bits a run), so each scan costs the decoder a pass over every block for a few bytes of file.
func progressiveJPEG(w, h, comps, acScans int) []byte {
	b := []byte{0xFF, 0xD8}
	q := make([]byte, 65)
	for i := 1; i < 65; i++ {
		q[i] = 1
	}
	b = jpegSegment(b, 0xDB, q...)
	sof := []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(comps)}
	for c := 1; c <= comps; c++ {
		sof = append(sof, byte(c), 0x11, 0)
	}
	b = jpegSegment(b, 0xC2, sof...)
	dc := append([]byte{0x00, 1}, make([]byte, 15)...)
	b = jpegSegment(b, 0xC4, append(dc, 0x00)...) // DC table 0: one code "0" for category 0
	ac := append([]byte{0x10, 1}, make([]byte, 15)...)
	b = jpegSegment(b, 0xC4, append(ac, 0xE0)...) // AC table 0: one code "0" for EOBRUN 2^14 + 14 bits
	blocks := ((w + 7) / 8) * ((h + 7) / 8)
	var dcBits jpegBits
	for i := 0; i < blocks; i++ {
		dcBits.put(0, 1)
	}
	dcData := dcBits.flush()
	for c := 1; c <= comps; c++ {
		b = jpegSegment(b, 0xDA, 1, byte(c), 0x00, 0, 0, 0x00)
		b = append(b, dcData...)
	}
	var acBits jpegBits
	for left := blocks; left > 0; left -= 32767 {
		acBits.put(0, 1)
		acBits.put(1<<14-1, 14) // run 32767
	}
	acData := acBits.flush()
	for s := 0; s < acScans; s++ {
		b = jpegSegment(b, 0xDA, 1, 1, 0x00, 1, 63, 0x00)
		b = append(b, acData...)
	}
	return append(b, 0xFF, 0xD9)
}

// tinyGIF is a GIF of a w×h screen and frame whose image data is one byte.
func tinyGIF(w, h int) []byte {
	b := []byte("GIF89a")
	b = binary.LittleEndian.AppendUint16(b, uint16(w))
	b = binary.LittleEndian.AppendUint16(b, uint16(h))
	b = append(b, 0x80, 0, 0, 0, 0, 0, 255, 255, 255, 0x2C, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(w))
	b = binary.LittleEndian.AppendUint16(b, uint16(h))
	return append(b, 0, 2, 1, 0x04, 0, 0x3B)
}

func encodeGIF(tb testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := gif.Encode(&b, testImage(w, h), nil); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// A progressive JPEG whose scans each skip every block costs its decoder a pass over the image per scan
// for a few bytes of file (1000 scans of 4096×4096 in 68 KB took 9.2 s): past MaxJPEGScanBlocks it is
// refused before decoding, at once; a JPEG within it decodes. The bound scales with the image.
func TestDecodeRefusesJPEGScanBomb(t *testing.T) {
	bomb := progressiveJPEG(4096, 4096, 1, 1000)
	start := time.Now()
	var err error
	n := allocated(func() { _, _, err = DecodeImage(bomb) })
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("%d-byte jpeg of 1001 scans: %v, want ErrLimit", len(bomb), err)
	}
	if d := time.Since(start); n > 1<<20 || d > 2*time.Second {
		t.Fatalf("refusing it allocated %d bytes and took %v", n, d)
	}
	if _, sz, err := DecodeImage(progressiveJPEG(512, 256, 3, 9)); err != nil || sz != (Size{512, 256}) {
		t.Fatalf("a progressive jpeg of 12 scans: %v %v", sz, err)
	}
	tests := []struct {
		w, h, scans int
		ok          bool
	}{
		{4096, 4096, 128, true}, // 262144 blocks: 128 scans
		{4096, 4096, 129, false},
		{8192, 8192, 32, true}, // the largest image: minJPEGScans
		{8192, 8192, 33, false},
		{1024, 1024, 2048, true}, // a smaller image: as many as its blocks allow
		{1024, 1024, 2049, false},
	}
	for _, tc := range tests {
		b := progressiveJPEG(tc.w, tc.h, 1, tc.scans-1)
		err := plausibleSize(b, FormatJPEG, Size{uint32(tc.w), uint32(tc.h)})
		if (err == nil) != tc.ok {
			t.Errorf("%dx%d with %d scans: %v, want ok=%v", tc.w, tc.h, tc.scans, err, tc.ok)
		}
	}
}

// A GIF is LZW data, which expands at most lzwMaxRatio times: a file too small for the screen it
// declares is refused before the decoder allocates the frame (a 34-byte 8192×8192 file allocated
// 64 MiB); a real one decodes.
func TestDecodeRefusesGIFBomb(t *testing.T) {
	bomb := tinyGIF(8192, 8192)
	var err error
	n := allocated(func() { _, _, err = DecodeImage(bomb) })
	if !errors.Is(err, ErrHeader) || n > 1<<20 {
		t.Fatalf("%d-byte 8192x8192 gif: %v after %d bytes allocated, want ErrHeader", len(bomb), err, n)
	}
	if _, sz, err := DecodeImage(encodeGIF(t, 640, 480)); err != nil || sz != (Size{640, 480}) {
		t.Fatalf("a real gif: %v %v", sz, err)
	}
}

// decodeCost charges an image's decode by the bytes its decoder holds: a pixel is 8 bytes (RGBA and
// its HWC copy); progressive colour JPEGs (coefficients), 16-bit PNGs and TIFFs cost more, capped at
// the whole budget.
func TestDecodeCost(t *testing.T) {
	var png16 bytes.Buffer
	if err := png.Encode(&png16, image.NewRGBA64(image.Rect(0, 0, 8, 4))); err != nil {
		t.Fatal(err)
	}
	var tif bytes.Buffer
	if err := tiff.Encode(&tif, testImage(8, 4), nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		sz   Size
		want uint64
	}{
		{"png", encodePNG(t, 8, 4), Size{8, 4}, 32},
		{"png 16-bit", png16.Bytes(), Size{8, 4}, 64},
		{"baseline jpeg", encodeJPEG(t, 8, 4), Size{8, 4}, 32},
		{"progressive gray jpeg", progressiveJPEG(8, 4, 1, 1), Size{8, 4}, 32},
		{"progressive colour jpeg", progressiveJPEG(8, 4, 3, 1), Size{8, 4}, 96},
		{"tiff", tif.Bytes(), Size{8, 4}, 64},
		{"capped", progressiveJPEG(8, 4, 3, 1), Size{8192, 8192}, MaxDecodePixelsInFlight},
	}
	for _, tc := range tests {
		if got := decodeCost(tc.data, SniffFormat(tc.data), tc.sz); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

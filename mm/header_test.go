package mm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"testing"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
)

func testImage(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(x), uint8(y), uint8(x + y), 255})
		}
	}
	return img
}

func encodePNG(tb testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, testImage(w, h)); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(tb testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, testImage(w, h), nil); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// jpegWithMetadata inserts n APP1 segments of 65533 payload bytes after SOI, pushing SOF past n*64 KiB.
func jpegWithMetadata(tb testing.TB, w, h, n int) []byte {
	j := encodeJPEG(tb, w, h)
	out := append([]byte{}, j[:2]...)
	for i := 0; i < n; i++ {
		out = append(out, 0xff, 0xe1, 0xff, 0xff)
		out = append(out, make([]byte, 0xffff-2)...)
	}
	return append(out, j[2:]...)
}

// webpVP8X builds a minimal extended-format WebP header with the given canvas.
func webpVP8X(w, h int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00")
	b = append(b, 0, 0, 0, 0)
	b = append(b, byte(w-1), byte((w-1)>>8), byte((w-1)>>16), byte(h-1), byte((h-1)>>8), byte((h-1)>>16))
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

// webpVP8L builds a minimal lossless WebP header.
func webpVP8L(w, h int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8L\x05\x00\x00\x00\x2f")
	v := uint32(w-1) | uint32(h-1)<<14
	b = binary.LittleEndian.AppendUint32(b, v)
	b = append(b, 0) // pad to even chunk size
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

// webpVP8 builds a minimal lossy WebP key-frame header.
func webpVP8(w, h int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8 \x0a\x00\x00\x00")
	b = append(b, 0x10, 0x00, 0x00, 0x9d, 0x01, 0x2a) // key frame, version 0, shown; start code
	b = binary.LittleEndian.AppendUint16(b, uint16(w))
	b = binary.LittleEndian.AppendUint16(b, uint16(h))
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

func TestHeaderSize(t *testing.T) {
	var gifBuf, bmpBuf, tiffBuf bytes.Buffer
	pal := image.NewPaletted(image.Rect(0, 0, 33, 17), []color.Color{color.Black, color.White})
	if err := gif.Encode(&gifBuf, pal, nil); err != nil {
		t.Fatal(err)
	}
	if err := bmp.Encode(&bmpBuf, testImage(31, 7)); err != nil {
		t.Fatal(err)
	}
	if err := tiff.Encode(&tiffBuf, testImage(12, 34), nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		f    Format
		w, h uint32
	}{
		{"png", encodePNG(t, 640, 480), FormatPNG, 640, 480},
		{"jpeg", encodeJPEG(t, 337, 511), FormatJPEG, 337, 511},
		{"jpeg big metadata", jpegWithMetadata(t, 64, 48, 2), FormatJPEG, 64, 48},
		{"gif", gifBuf.Bytes(), FormatGIF, 33, 17},
		{"webp vp8x", webpVP8X(4000, 3000), FormatWebP, 4000, 3000},
		{"webp vp8l", webpVP8L(1999, 1125), FormatWebP, 1999, 1125},
		{"webp vp8", webpVP8(600, 400), FormatWebP, 600, 400},
		{"bmp", bmpBuf.Bytes(), FormatBMP, 31, 7},
		{"tiff", tiffBuf.Bytes(), FormatTIFF, 12, 34},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sz, f, err := HeaderSize(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if f != tc.f || sz != (Size{tc.w, tc.h}) {
				t.Fatalf("got %s %v", f, sz)
			}
		})
	}
}

func TestHeaderSizeErrors(t *testing.T) {
	png := encodePNG(t, 10, 10)
	big := jpegWithMetadata(t, 64, 48, 2)
	tests := []struct {
		name  string
		data  []byte
		short bool
	}{
		{"empty", nil, true},
		{"truncated png", png[:20], true},
		{"jpeg metadata beyond 64 KiB", big[:65536], true},
		{"unknown", []byte("this is not an image at all"), false},
		{"avif", append([]byte("\x00\x00\x00\x1cftypavif"), make([]byte, 32)...), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := HeaderSize(tc.data)
			if !errors.Is(err, ErrHeader) || IsShort(err) != tc.short {
				t.Fatalf("err %v short %v", err, IsShort(err))
			}
		})
	}
}

func TestJPEGHeaderEnd(t *testing.T) {
	j := encodeJPEG(t, 8, 8)
	need, ok := JPEGHeaderEnd(j)
	if !ok || need > len(j) {
		t.Fatalf("plain jpeg: %d %v", need, ok)
	}
	if _, _, err := HeaderSize(j[:need]); err != nil {
		t.Fatalf("prefix of %d bytes: %v", need, err)
	}
	big := jpegWithMetadata(t, 8, 8, 3)
	need, ok = JPEGHeaderEnd(big[:65536])
	if !ok || need <= 65536 {
		t.Fatalf("big: %d %v", need, ok)
	}
	// Walking with the requested prefix converges to the frame header within a few steps.
	for steps := 0; ; steps++ {
		n, ok := JPEGHeaderEnd(big[:min(need, len(big))])
		if !ok || steps > 8 {
			t.Fatal("did not converge")
		}
		if n <= need {
			need = n
			break
		}
		need = n
	}
	if _, _, err := HeaderSize(big[:need]); err != nil {
		t.Fatalf("prefix of %d: %v", need, err)
	}
	if _, ok := JPEGHeaderEnd([]byte("nope")); ok {
		t.Fatal("non-jpeg accepted")
	}
}

func TestParseDataURI(t *testing.T) {
	p := encodePNG(t, 3, 2)
	b64 := base64.StdEncoding.EncodeToString(p)
	tests := []struct {
		name    string
		uri     string
		max     int
		mime    string
		wantErr bool
		data    []byte
	}{
		{"base64 png", "data:image/png;base64," + b64, 0, "image/png", false, p},
		{"raw payload not percent-decoded", "data:text/plain,a%20b", 0, "text/plain", false, []byte("a%20b")},
		{"no mime", "data:;base64,AAAA", 0, "", false, []byte{0, 0, 0}},
		{"no comma", "data:image/png;base64", 0, "", true, nil},
		{"bad base64", "data:image/png;base64,!!!!", 0, "", true, nil},
		{"padding required", "data:image/png;base64,AAA", 0, "", true, nil},
		{"too long", "data:image/png;base64," + b64, 30, "", true, nil},
		{"not data", "https://x/y", 0, "", true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDataURI(tc.uri, tc.max)
			if tc.wantErr {
				if !errors.Is(err, ErrBadDataURI) {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err != nil || d.MediaType != tc.mime || !bytes.Equal(d.Data, tc.data) {
				t.Fatalf("got %+v %v", d, err)
			}
		})
	}
	if got := RedactDataURI("data:image/png;base64," + b64); got != "data:image/png,<redacted>" {
		t.Fatalf("redacted %q", got)
	}
}

func TestDecodeImageContentHash(t *testing.T) {
	// A 2x1 RGB PNG holding bytes 00..05 hashes to vector #9's shape [1, 2, 3].
	img := image.NewRGBA(image.Rect(0, 0, 2, 1))
	img.Pix = []byte{0, 1, 2, 255, 3, 4, 5, 255}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	h, sz, err := DecodeImage(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if h != 0x7a9bbcb11a898630 || sz != (Size{2, 1}) {
		t.Fatalf("got %#x %v", uint64(h), sz)
	}
	// Gray keeps one channel.
	g := image.NewGray(image.Rect(0, 0, 3, 1))
	g.Pix = []byte{7, 8, 9}
	b.Reset()
	_ = png.Encode(&b, g)
	h, _, err = DecodeImage(b.Bytes())
	want, _ := ContentHash(1, 3, 1, []byte{7, 8, 9})
	if err != nil || h != want {
		t.Fatalf("gray: %#x %v, want %#x", uint64(h), err, uint64(want))
	}
	// Same pixels in two lossless encodings (both opaque RGB) share the hash.
	h1, _, _ := DecodeImage(encodePNG(t, 20, 10))
	var bb bytes.Buffer
	_ = bmp.Encode(&bb, testImage(20, 10))
	h2, _, err := DecodeImage(bb.Bytes())
	if err != nil || h1 != h2 {
		t.Fatalf("png vs bmp: %#x %#x %v", uint64(h1), uint64(h2), err)
	}
	// TIFF with an alpha channel is RGBA: four channels, another hash (as in the Rust decoder).
	var tb bytes.Buffer
	_ = tiff.Encode(&tb, testImage(20, 10), nil)
	if h3, _, err := DecodeImage(tb.Bytes()); err != nil || h3 == h1 {
		t.Fatalf("tiff rgba: %#x %v", uint64(h3), err)
	}
}

// TestDecodeImageBomb: a tiny file declaring huge dimensions is refused before decoding.
func TestDecodeImageBomb(t *testing.T) {
	if _, _, err := DecodeImage(webpVP8X(16000, 16000)); !errors.Is(err, ErrLimit) {
		t.Fatalf("err %v", err)
	}
}

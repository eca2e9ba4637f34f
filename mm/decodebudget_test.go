package mm

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"testing"
	"time"
)

// pngChunk appends one PNG chunk (length, type, data, CRC).
func pngChunk(b []byte, typ string, data []byte) []byte {
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(data)))
	b = append(b, l[:]...)
	c := append([]byte(typ), data...)
	b = append(b, c...)
	binary.BigEndian.PutUint32(l[:], crc32.ChecksumIEEE(c))
	return append(b, l[:]...)
}

// pngBomb is a PNG whose IHDR declares w×h 8-bit RGBA pixels and whose IDAT holds n zero bytes of
// scanline data, compressed: far too little for the declared image (a decompression bomb's shape).
func pngBomb(tb testing.TB, w, h uint32, n int) []byte {
	b := []byte("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6
	b = pngChunk(b, "IHDR", ihdr)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	if _, err := zw.Write(make([]byte, n)); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	b = pngChunk(b, "IDAT", z.Bytes())
	return pngChunk(b, "IEND", nil)
}

// allocated is the bytes f allocates.
func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// A small PNG declaring a large image is refused from its header and file size: before the check, this
// 8192×8192 file of a few hundred bytes made Go's decoder allocate its 256 MiB image first.
func TestDecodeRefusesPNGBomb(t *testing.T) {
	bomb := pngBomb(t, 8192, 8192, 1<<10)
	var err error
	n := allocated(func() { _, _, err = DecodeImage(bomb) })
	if !errors.Is(err, ErrHeader) {
		t.Fatalf("%d-byte 8192x8192 png: %v, want ErrHeader", len(bomb), err)
	}
	if n > 1<<20 {
		t.Fatalf("refusing a %d-byte png allocated %d bytes", len(bomb), n)
	}
	// A real image of the same shape, as small as DEFLATE makes it, still decodes.
	ok := pngBomb(t, 512, 512, 512*(1+512*4))
	if _, sz, err := DecodeImage(ok); err != nil || sz != (Size{512, 512}) {
		t.Fatalf("a complete %d-byte 512x512 png: %v %v", len(ok), sz, err)
	}
}

// With --frontend-decoding a request whose images declare more than MaxTotalPixels is refused before any
// of them is decoded (ErrLimit, FallbackLimits). Before, each image was decoded first and the sum read
// after: this one, plausible in size but corrupt, failed in the decoder (FallbackProbeFailed) after
// allocating its 4 M pixels.
func TestResolveDecodingRefusesTotalBeforeDecoding(t *testing.T) {
	img := pngBomb(t, 2048, 2048, 0)
	img = append(img[:len(img)-12], make([]byte, 2048*(1+2048*4)/deflateMaxRatio+1)...) // IEND → padding: a corrupt file of plausible size
	cfg := DefaultResolveConfig()
	cfg.FrontendDecoding, cfg.MaxTotalPixels = true, 1<<20
	r, _ := newTestResolver(t, qwen3Spec(), cfg)
	data := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img)
	images, reason := resolve(t, r, Part{URL: data})
	if reason != FallbackLimits || !errors.Is(images[0].Err, ErrLimit) {
		t.Fatalf("reason %s, err %v; want limits before decoding", reason, images[0].Err)
	}
}

// The process's decoding budget admits decodes while they fit, holds the next until room is given back,
// and gives up with the caller's context (ErrLimit) or after its wait (ErrBusy).
func TestBudget(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	if err := b.take(ctx, 60); err != nil {
		t.Fatal(err)
	}
	if err := b.takePixels(ctx, 101, time.Hour); !errors.Is(err, ErrLimit) {
		t.Fatalf("more than the budget: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- b.take(ctx, 50) }()
	select {
	case err := <-got:
		t.Fatalf("took 50 with 60 of 100 in use: %v", err)
	default:
	}
	b.give(60)
	if err := <-got; err != nil || b.inUse() != 50 {
		t.Fatalf("after give: %v, in use %d", err, b.inUse())
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := b.takePixels(cctx, 60, time.Hour); !errors.Is(err, ErrLimit) || errors.Is(err, ErrBusy) {
		t.Fatalf("the request ended while waiting: %v", err)
	}
	start := time.Now()
	if err := b.takePixels(ctx, 60, 20*time.Millisecond); !errors.Is(err, ErrBusy) || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("no room within the wait: %v after %v", err, time.Since(start))
	}
	b.give(50)
	if b.inUse() != 0 {
		t.Fatalf("in use %d after every give", b.inUse())
	}
}

package mm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// MaxDecodePixelsInFlight bounds the pixels being decoded at once across the process, for
// --frontend-decoding (two images at MaxDecodePixels: about 1 GiB of decoder buffers and HWC copies at
// worst). A decode waits for room at most ProbeConfig.FetchBudgetWait (ErrBusy after); without the bound, a request of
// MaxImages small files each declaring MaxDecodePixels allocated every buffer at once (32 × 64 M
// pixels), whatever the request's MaxTotalPixels, which is summed only after decoding.
const MaxDecodePixelsInFlight = 2 * MaxDecodePixels

// budget is a counting semaphore of units (pixels being decoded, bytes being downloaded): take waits
// until n fits or ctx ends.
type budget struct {
	mu   sync.Mutex
	used uint64
	max  uint64
	wake chan struct{} // closed and replaced on every give
}

func newBudget(max uint64) *budget {
	return &budget{max: max, wake: make(chan struct{})}
}

// errOverBudget: the amount asked for is more than the whole budget, so waiting cannot help.
var errOverBudget = errors.New("more than the whole budget")

// take reserves n units, waiting while they do not fit. It fails at once with errOverBudget when n
// exceeds the budget, and with ctx's error when ctx ends first; callers wrap both in their class.
func (b *budget) take(ctx context.Context, n uint64) error {
	if n > b.max {
		return errOverBudget
	}
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *budget) give(n uint64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// inUse is the units taken now.
func (b *budget) inUse() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// takePixels reserves a decode's pixels in the process's decoding budget, waiting at most wait for room
// (ErrBusy after, as a download waits for bytes: a decode queued longer would hold its download's bytes
// and its client's connection with the process at its bound).
func (b *budget) takePixels(ctx context.Context, n uint64, wait time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	err := b.take(wctx, n)
	cancel()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errOverBudget):
		return fmt.Errorf("%w: %d pixels exceed the decoding budget of %d", ErrLimit, n, b.max)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: waiting to decode: %v", ErrLimit, ctx.Err()) // the request ended first
	default:
		return fmt.Errorf("%w: no room to decode %d pixels among %d within %v", ErrBusy, n, b.max, wait)
	}
}

// deflateMaxRatio is DEFLATE's largest expansion: a 258-byte match coded in 2 bits.
const deflateMaxRatio = 1032

// lzwMaxRatio is GIF LZW's largest expansion, output bytes per input byte: a code of w bits names a
// string of at most 2^w bytes (the table holds at most 2^w entries) and w is at most 12, so one bit
// yields at most 4096/12 bytes.
const lzwMaxRatio = 4096 * 8 / 12

// MaxJPEGScanBlocks bounds the work of a JPEG's scans, in 8×8 blocks visited: the number of scans
// times the blocks of the image. Go's decoder passes over every block of a component in every scan,
// and a progressive scan can skip them all in a few bytes (end-of-band runs of 32767 blocks), so a
// 68 KB file of 1000 scans of a 4096×4096 image took 9.2 s to decode. 1<<25 (about 1 s) admits 32
// scans of the largest decodable image and 128 of a 16 M pixel one; encoders write 6 to 10 scans
// (libjpeg's progression), rarely more than 20.
const MaxJPEGScanBlocks = 1 << 25

// minJPEGScans is the number of scans any JPEG within MaxDecodePixels may have, whatever its size.
const minJPEGScans = 32

// plausibleSize refuses an image whose file cannot hold what its header declares, or that would cost
// its decoder far more than its size suggests, before anything is decoded:
//
//   - PNG: Go's decoder allocates the whole image when the first IDAT chunk starts, so without this a
//     100-byte file declaring 8192×8192 costs 256 MiB before it fails on its missing data. The bound is
//     exact: the filtered scanlines are DEFLATE data, which expands at most deflateMaxRatio times.
//   - GIF: the same for LZW (lzwMaxRatio), checked against the logical screen: Go's decoder allocates
//     the first frame (within the screen) before reading its data, 64 MiB for a 34-byte file
//     declaring 8192×8192. A degenerate file whose first frame is much smaller than its screen can be
//     refused too (routed on its text then).
//   - JPEG: more scans than MaxJPEGScanBlocks allows (jpegScans), a CPU bomb a file size cannot bound.
//
// JPEG's and WebP's entropy coding can skip whole runs of blocks in a few bits, and a TIFF's strips
// may share one compressed block, so no file size bounds their pixels; the pixel budgets
// (decodeCost) hold their memory.
func plausibleSize(data []byte, f Format, sz Size) error {
	switch f {
	case FormatPNG:
		return plausiblePNG(data, sz)
	case FormatGIF:
		if need := sz.Pixels() / lzwMaxRatio; uint64(len(data)) < need {
			return fmt.Errorf("%w: %dx%d gif of %d bytes cannot hold its pixels (at least %d bytes)", ErrHeader, sz.W, sz.H, len(data), need)
		}
	case FormatJPEG:
		blocks := uint64((sz.W+7)/8) * uint64((sz.H+7)/8)
		limit := int(max(minJPEGScans, MaxJPEGScanBlocks/max(blocks, 1)))
		if scans, _, _ := jpegScans(data, limit); scans > limit {
			return fmt.Errorf("%w: %dx%d jpeg with more than %d scans", ErrLimit, sz.W, sz.H, limit)
		}
	}
	return nil
}

func plausiblePNG(data []byte, sz Size) error {
	if len(data) < 29 {
		return nil
	}
	// IHDR: width, height (8 bytes from offset 16), bit depth (24), colour type (25).
	depth, ct := uint64(data[24]), data[25]
	samples := map[byte]uint64{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ct]
	if samples == 0 || depth == 0 || binary.BigEndian.Uint32(data[16:]) != sz.W || binary.BigEndian.Uint32(data[20:]) != sz.H {
		return nil // the decoder refuses it
	}
	raw := uint64(sz.H) * (1 + (uint64(sz.W)*samples*depth+7)/8)
	if need := raw / deflateMaxRatio; uint64(len(data)) < need {
		return fmt.Errorf("%w: %dx%d png of %d bytes cannot hold its pixels (at least %d bytes)", ErrHeader, sz.W, sz.H, len(data), need)
	}
	return nil
}

// jpegScans walks a JPEG's marker segments, skipping entropy-coded data, and returns its number of
// start-of-scan segments, the components of its frame and whether the frame is progressive. It stops
// early once the count passes limit, and at the end of the data or a broken structure (the decoder
// then refuses the file).
func jpegScans(b []byte, limit int) (scans, comps int, progressive bool) {
	i := 2
	for i+4 <= len(b) && scans <= limit {
		if b[i] != 0xff {
			return
		}
		m := b[i+1]
		switch {
		case m == 0xff: // fill byte
			i++
			continue
		case m == 0x01 || m >= 0xd0 && m <= 0xd8:
			i += 2
			continue
		case m == 0xd9:
			return
		}
		end := i + 2 + int(binary.BigEndian.Uint16(b[i+2:]))
		if end < i+4 || end > len(b) {
			return
		}
		switch {
		case m == 0xc2 || m == 0xc6 || m == 0xca || m == 0xce:
			progressive = true
			fallthrough
		case m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc:
			if end-i >= 10 {
				comps = int(b[i+9])
			}
		case m == 0xda:
			scans++
			// The entropy-coded data runs to the next marker: 0xFF followed by neither a stuffed zero
			// nor a restart marker.
			j := end
			for {
				k := bytes.IndexByte(b[j:], 0xff)
				if k < 0 || j+k+1 >= len(b) {
					return
				}
				j += k
				if c := b[j+1]; c != 0 && (c < 0xd0 || c > 0xd7) {
					break
				}
				j += 2
			}
			i = j
			continue
		}
		i = end
	}
	return
}

// decodeCost is what decoding an image of sz charges the process's decoding budget, in pixels of the
// usual cost (about 8 bytes of decoder buffers and HWC copy each, as an 8-bit RGBA PNG): a progressive
// JPEG keeps 4 bytes of coefficients per pixel and component besides the image (18 bytes a pixel for
// colour), and 16-bit PNGs and TIFFs decode to 8-byte pixels (12 with the copy). The cost is capped at
// the whole budget, so such an image waits for every other decode instead of being refused.
func decodeCost(data []byte, f Format, sz Size) uint64 {
	weight := uint64(1)
	switch f {
	case FormatJPEG:
		if _, comps, progressive := jpegScans(data, 1); progressive {
			weight = (uint64(comps)*5 + 3 + 7) / 8 // coefficients, image, HWC copy
		}
	case FormatPNG:
		if len(data) > 24 && data[24] == 16 {
			weight = 2
		}
	case FormatTIFF:
		weight = 2 // 16-bit samples are not known before decoding; the strips add their buffers
	}
	return min(sz.Pixels()*max(weight, 1), MaxDecodePixelsInFlight)
}

package mm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// MaxDecodePixelsInFlight bounds the pixels being decoded at once across the process, for
// --frontend-decoding (two images at MaxDecodePixels: about 1 GiB of decoder buffers and HWC copies at
// worst). A decode waits for room, within its request's context; without the bound, a request of
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

// takePixels reserves a decode's pixels in the process's decoding budget.
func (b *budget) takePixels(ctx context.Context, n uint64) error {
	switch err := b.take(ctx, n); {
	case err == nil:
		return nil
	case errors.Is(err, errOverBudget):
		return fmt.Errorf("%w: %d pixels exceed the decoding budget of %d", ErrLimit, n, b.max)
	default:
		return fmt.Errorf("%w: waiting to decode: %v", ErrLimit, err)
	}
}

// deflateMaxRatio is DEFLATE's largest expansion: a 258-byte match coded in 2 bits.
const deflateMaxRatio = 1032

// plausibleSize refuses a PNG whose file is too small to hold the pixels its header declares: Go's
// decoder allocates the whole image when the first IDAT chunk starts, so without this a 100-byte file
// declaring 8192×8192 costs 256 MiB before it fails on its missing data. The bound is exact: the
// filtered scanlines are DEFLATE data, which expands at most deflateMaxRatio times. Other formats
// (JPEG's and WebP's entropy coding can skip whole runs of blocks in a few bits) have no such bound;
// the pixel budgets hold them.
func plausibleSize(data []byte, f Format, sz Size) error {
	if f != FormatPNG || len(data) < 29 {
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

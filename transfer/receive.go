package transfer

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"time"
)

// Receiver is the worker side: it reads the item a descriptor names and verifies it.
type Receiver struct {
	// ShmDir is where segments are opened. Default DefaultShmDir.
	ShmDir string
	// DialTimeout bounds the TCP connect to a transfer agent. Default 2 s: an unreachable agent must
	// cost little, since the URL fallback follows.
	DialTimeout time.Duration
	// IOTimeout bounds a whole pull after connect. Default 30 s.
	IOTimeout time.Duration
	// MaxBytes bounds an item's length: the allocation happens before the bytes are verified, and the
	// descriptor comes with a request. Default DefaultMaxItemBytes.
	MaxBytes int64
}

// DefaultMaxItemBytes bounds one received item: 512 MiB, above Qwen3-VL's largest image (max_pixels
// 16,777,216 → 65,536 patches × 6 KiB = 384 MiB of float32) and far below what a forged length could ask.
const DefaultMaxItemBytes = 512 << 20

// Receive reads the item of d with the default Receiver.
func Receive(ctx context.Context, d Descriptor) (Tensor, error) {
	var r Receiver
	return r.Receive(ctx, d)
}

// Receive reads the item d names and verifies header, shape, mm_hash and checksum against d. Errors:
// ErrBadDescriptor, ErrUnavailable (segment gone, agent unreachable: fall back to the URL), ErrRefused,
// ErrCorrupt. The shm segment is never unlinked here (the sender owns it); a network pull is
// acknowledged only after verification, so the agent frees the buffer at once.
func (r *Receiver) Receive(ctx context.Context, d Descriptor) (Tensor, error) {
	if err := d.Validate(); err != nil {
		return Tensor{}, err
	}
	limit := r.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxItemBytes
	}
	if d.Length > limit {
		return Tensor{}, fmt.Errorf("%w: item of %d bytes exceeds %d", ErrBadDescriptor, d.Length, limit)
	}
	switch d.Kind {
	case KindShm:
		dir := r.ShmDir
		if dir == "" {
			dir = DefaultShmDir
		}
		return readShm(dir, &d)
	default:
		return r.pull(ctx, &d)
	}
}

func (r *Receiver) pull(ctx context.Context, d *Descriptor) (Tensor, error) {
	dt, it := r.DialTimeout, r.IOTimeout
	if dt <= 0 {
		dt = 2 * time.Second
	}
	if it <= 0 {
		it = 30 * time.Second
	}
	tok, err := hex.DecodeString(d.Token)
	if err != nil || len(tok) != tokenLen {
		return Tensor{}, fmt.Errorf("%w: token", ErrBadDescriptor)
	}
	dialer := net.Dialer{Timeout: dt}
	c, err := dialer.DialContext(ctx, "tcp", d.Addr)
	if err != nil {
		return Tensor{}, fmt.Errorf("%w: dial agent: %v", ErrUnavailable, err)
	}
	defer c.Close()
	deadline := time.Now().Add(it)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var req [pullReqLen]byte
	copy(req[0:4], pullMagic[:])
	req[4] = pullVersion
	binary.LittleEndian.PutUint32(req[5:], d.Buffer)
	copy(req[9:], tok)
	if _, err := c.Write(req[:]); err != nil {
		return Tensor{}, fmt.Errorf("%w: send pull: %v", ErrUnavailable, err)
	}
	var hdr [9]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return Tensor{}, fmt.Errorf("%w: read reply: %v", ErrUnavailable, err)
	}
	if hdr[0] != statusOK {
		return Tensor{}, fmt.Errorf("%w: buffer %d", ErrRefused, d.Buffer)
	}
	n := binary.LittleEndian.Uint64(hdr[1:])
	if int64(n) != d.Length {
		return Tensor{}, fmt.Errorf("%w: agent sends %d bytes, descriptor says %d", ErrCorrupt, n, d.Length)
	}
	t, err := readItem(c, d)
	if err != nil {
		return Tensor{}, err
	}
	_, _ = c.Write([]byte{ackByte})
	return t, nil
}

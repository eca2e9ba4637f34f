package mm

import (
	"fmt"
	"io"
	"sync/atomic"
)

// DefaultMaxRequestBytes bounds the image bytes one request downloads with --frontend-decoding
// (--mm-max-request-image-bytes): 128 MiB, two images at the 64 MiB bound or dozens of photographs.
// Without it one request could name MaxImages × DefaultMaxDecodeBytes (2 GiB).
const DefaultMaxRequestBytes = 128 << 20

// DefaultMaxFetchBytesInFlight is ProbeConfig.MaxFetchBytesInFlight's default (512 MiB).
const DefaultMaxFetchBytesInFlight = 512 << 20

// requestBytes counts the bytes one request's downloads have read, against its bound. The request's
// images download concurrently, each adding as it reads, so the total passes the bound by at most one
// read per image before every download stops.
type requestBytes struct {
	n   atomic.Int64
	max int64
}

func newRequestBytes(max int64) *requestBytes { return &requestBytes{max: max} }

// left is what the request may still read (0 when nothing).
func (a *requestBytes) left() int64 { return max(0, a.max-a.n.Load()) }

func (a *requestBytes) overErr(n int64) error {
	return fmt.Errorf("%w: the request's images need more than %d bytes (%d more asked)", ErrTooLarge, a.max, n)
}

// countingReader adds every read to its request's count and fails once the count passes the bound.
type countingReader struct {
	r    io.Reader
	acct *requestBytes
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.acct.n.Add(int64(n)) > c.acct.max {
		return n, c.acct.overErr(int64(n))
	}
	return n, err
}

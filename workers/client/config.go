package client

import (
	"errors"
	"fmt"
	"time"
)

// ErrBadConfig is the class of Config.Validate errors.
var ErrBadConfig = errors.New("client: bad config")

// Config configures the connections to one worker. One Config usually serves the whole fleet.
type Config struct {
	// MaxConns bounds the requests in flight to one worker, each on its own connection (HTTP/1.1); a
	// request beyond it waits for a slot or its context. Open connections stay below MaxConns +
	// MaxIdleConns. Default 1024: above a vLLM
	// server's max_num_seqs (256 by default) plus streaming clients that read slowly.
	MaxConns int
	// MaxIdleConns bounds the idle connections kept for reuse per worker. Default 256.
	MaxIdleConns int
	// DialTimeout bounds a TCP connect. Default 2s: a worker that does not accept within it is treated as
	// down and the request goes to another worker.
	DialTimeout time.Duration
	// WriteTimeout bounds writing one request. Default 10s.
	WriteTimeout time.Duration
	// ResponseTimeout bounds the wait for response headers. A non-streaming vLLM response sends its
	// headers only when generation ends, so this bounds the whole generation. Default 10m.
	ResponseTimeout time.Duration
	// StreamIdleTimeout bounds the gap between two bytes of a streamed body. Default 5m (a long
	// prefill under load sends nothing for a while).
	StreamIdleTimeout time.Duration
	// IdleConnTimeout closes a pooled connection unused for this long, before the worker's own idle
	// timeout would (vLLM's uvicorn: 5s keep-alive). Default 4s.
	IdleConnTimeout time.Duration
	// MaxResponseBodySize bounds a non-streaming response body. Default 64 MiB.
	MaxResponseBodySize int
	// APIKey, when set, is sent on every call as "Authorization: Bearer <key>" (a worker started with
	// vLLM's --api-key). Per worker: the pool gives each endpoint its worker's key. Never logged.
	APIKey string
	// ReadBufferSize is the per-connection read buffer. Default 16 KiB; a longer SSE line grows a
	// separate buffer.
	ReadBufferSize int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		MaxConns:            1024,
		MaxIdleConns:        256,
		DialTimeout:         2 * time.Second,
		WriteTimeout:        10 * time.Second,
		ResponseTimeout:     10 * time.Minute,
		StreamIdleTimeout:   5 * time.Minute,
		IdleConnTimeout:     4 * time.Second,
		MaxResponseBodySize: 64 << 20,
		ReadBufferSize:      16 << 10,
	}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxConns == 0 {
		c.MaxConns = d.MaxConns
	}
	if c.MaxIdleConns == 0 {
		c.MaxIdleConns = d.MaxIdleConns
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = d.ResponseTimeout
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = d.StreamIdleTimeout
	}
	if c.IdleConnTimeout == 0 {
		c.IdleConnTimeout = d.IdleConnTimeout
	}
	if c.MaxResponseBodySize == 0 {
		c.MaxResponseBodySize = d.MaxResponseBodySize
	}
	if c.ReadBufferSize == 0 {
		c.ReadBufferSize = d.ReadBufferSize
	}
	return c
}

// Validate reports the first invalid field (after defaults), wrapped in ErrBadConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxConns < 1:
		return fmt.Errorf("%w: MaxConns %d < 1", ErrBadConfig, c.MaxConns)
	case c.MaxIdleConns < 0:
		return fmt.Errorf("%w: MaxIdleConns %d < 0", ErrBadConfig, c.MaxIdleConns)
	case c.DialTimeout < 0, c.WriteTimeout < 0, c.ResponseTimeout < 0, c.StreamIdleTimeout < 0, c.IdleConnTimeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrBadConfig)
	case c.MaxResponseBodySize < 1:
		return fmt.Errorf("%w: MaxResponseBodySize %d < 1", ErrBadConfig, c.MaxResponseBodySize)
	case c.ReadBufferSize < 512:
		return fmt.Errorf("%w: ReadBufferSize %d < 512", ErrBadConfig, c.ReadBufferSize)
	}
	return nil
}

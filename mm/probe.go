package mm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/routine"
)

// ProbeConfig configures the image size probe. The defaults are Dynamo's.
type ProbeConfig struct {
	// Timeout bounds each Range request, connect to last byte. Default 10 s (Dynamo DIM_FETCH_TIMEOUT);
	// a slow image server then costs one request at most this long, never the router's latency budget
	// beyond it.
	Timeout time.Duration
	// SmallRange is the first prefix fetched, in bytes (Range: bytes=0-4095). Default 4096: enough
	// for every PNG, GIF, WebP, BMP and most JPEG headers.
	SmallRange int
	// LargeRange is the one retry when the small prefix does not hold the header (bytes=0-65535).
	// Default 65536.
	LargeRange int
	// MaxHeaderBytes bounds further fetches for JPEG files whose metadata (EXIF thumbnail, ICC profile)
	// pushes the frame header past LargeRange: the prober walks the marker segments and fetches at
	// least up to the header, doubling each time, while that stays within this bound. Default 1 MiB.
	// 0 disables them (Dynamo's behaviour: "image header parse failed after 64KB").
	MaxHeaderBytes int
	// MaxRedirects bounds redirects per request, each re-checked by the SSRF guard. Default 3.
	MaxRedirects int
	// CacheEntries is the size cache capacity (mm_hash → W×H, about 80 bytes each with the map slot).
	// Default 100 000 (Dynamo's moka cache). The cache is split in 16 shards by hash, each evicting
	// its own least recently used entry, so eviction is LRU per shard rather than global.
	CacheEntries int
	// CacheTTL is how long a size stays cached. Default 24 h. Errors are never cached.
	CacheTTL time.Duration
	// MaxDataURIBytes bounds the length of a data: URI read in memory. Default 32 MiB.
	MaxDataURIBytes int
	// MaxFetchBytesInFlight bounds the image bytes downloaded whole (--frontend-decoding, --mm-transfer)
	// and held at once across the process (--mm-image-bytes-in-flight). Each download reserves its
	// Content-Length, or its most (the image's and the request's byte bounds) when the server sends
	// none, before reading the body, trims the reservation to what it read, and gives it back once the
	// image is decoded (Decode) or handed over (Fetch). Default 512 MiB: eight images at the 64 MiB
	// bound, hundreds of ordinary ones.
	MaxFetchBytesInFlight int64
	// FetchBudgetWait bounds how long a download waits for room in MaxFetchBytesInFlight, and a decode
	// for room in MaxDecodePixelsInFlight, before its request is refused with ErrBusy (429 with Retry-After at the HTTP edge). Default 2 s: it absorbs
	// a burst, while a longer wait would hold client connections open with memory already at its bound.
	FetchBudgetWait time.Duration
	// AllowHosts are the --media-allow-hosts values (host names, IPs or CIDRs) that the SSRF guard
	// admits although they are internal. Default none.
	AllowHosts []string
}

// DefaultProbeConfig returns Dynamo's settings.
func DefaultProbeConfig() ProbeConfig {
	return ProbeConfig{
		Timeout:         10 * time.Second,
		SmallRange:      4096,
		LargeRange:      65536,
		MaxHeaderBytes:  1 << 20,
		MaxRedirects:    3,
		CacheEntries:    100_000,
		CacheTTL:        24 * time.Hour,
		MaxDataURIBytes: DefaultMaxDataURIBytes,

		MaxFetchBytesInFlight: DefaultMaxFetchBytesInFlight,
		FetchBudgetWait:       2 * time.Second,
	}
}

// Validate reports the first invalid field.
func (c ProbeConfig) Validate() error {
	switch {
	case c.Timeout <= 0:
		return errors.New("mm: probe Timeout must be positive")
	case c.SmallRange <= 0 || c.LargeRange < c.SmallRange:
		return errors.New("mm: probe ranges must satisfy 0 < SmallRange <= LargeRange")
	case c.MaxHeaderBytes < 0:
		return errors.New("mm: probe MaxHeaderBytes must not be negative")
	case c.MaxRedirects < 0:
		return errors.New("mm: probe MaxRedirects must not be negative")
	case c.CacheEntries <= 0 || c.CacheTTL <= 0:
		return errors.New("mm: probe cache needs positive CacheEntries and CacheTTL")
	case c.MaxDataURIBytes <= 0:
		return errors.New("mm: probe MaxDataURIBytes must be positive")
	case c.MaxFetchBytesInFlight <= 0 || c.FetchBudgetWait <= 0:
		return errors.New("mm: probe MaxFetchBytesInFlight and FetchBudgetWait must be positive")
	}
	_, err := NewGuard(c.AllowHosts)
	return err
}

// ProbeStats are cumulative counters of a Prober, for metrics.
type ProbeStats struct {
	Hits, Misses, Shared       uint64 // cache hits, misses that fetched, misses that joined a fetch in flight
	Requests                   uint64 // HTTP Range requests sent
	Errors                     uint64 // failed probes (not cached)
	NoRange, Blocked, HeaderKO uint64 // failures by class: non-206, SSRF guard, header unparsable
	Busy                       uint64 // downloads and decodes refused for want of room (ErrBusy)
}

// Prober discovers image sizes: data: URIs in memory, http(s) URLs by Range requests, with a
// single-flight LRU cache keyed by mm_hash. Safe for concurrent use; the cache and the in-flight map
// are its only shared state (each under its own lock).
type Prober struct {
	cfg    ProbeConfig
	client *http.Client
	cache  *sizeCache

	mu       sync.Mutex
	inflight map[Hash]*flight // fetches in flight, by mm_hash; guarded by mu
	closed   bool             // guarded by mu
	flights  routine.Group    // fetch goroutines

	hits, misses, shared, requests, errs, noRange, blocked, headerKO, busy atomic.Uint64

	// decoding is the pixels of --frontend-decoding decodes in flight (MaxDecodePixelsInFlight).
	decoding *budget
	// fetching is the bytes of whole downloads in flight (MaxFetchBytesInFlight).
	fetching *budget
}

type flight struct {
	done chan struct{}
	size Size
	err  error
	// waiters counts the callers still waiting (guarded by Prober.mu); the last one to give up cancels
	// the fetch, which then serves nobody.
	waiters int
	cancel  context.CancelFunc
}

// NewProber builds a prober. clk drives the cache TTL (nil means the wall clock). transport, when
// non-nil, replaces the guarded HTTP transport (tests only: it bypasses the SSRF guard).
func NewProber(cfg ProbeConfig, clk clock.Clock, transport http.RoundTripper) (*Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	guard, _ := NewGuard(cfg.AllowHosts)
	if transport == nil {
		dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
		transport = &http.Transport{
			Proxy:                 nil, // a proxy would move the connect-time check to the proxy's address
			DialContext:           guard.dialContext(dialer),
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
			DisableCompression:    true, // byte ranges of the file itself, not of a gzip stream
		}
	}
	maxRedirects := cfg.MaxRedirects
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrFetch, maxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("%w: redirect to %s", ErrUnsupportedScheme, req.URL.Scheme)
			}
			return guard.CheckHost(req.URL.Hostname())
		},
	}
	return &Prober{
		cfg:      cfg,
		client:   client,
		cache:    newSizeCache(cfg.CacheEntries, cfg.CacheTTL, clock.Or(clk)),
		inflight: make(map[Hash]*flight),
		decoding: newBudget(MaxDecodePixelsInFlight),
		fetching: newBudget(uint64(cfg.MaxFetchBytesInFlight)),
	}, nil
}

// Stats returns the counters so far.
func (p *Prober) Stats() ProbeStats {
	return ProbeStats{
		Hits: p.hits.Load(), Misses: p.misses.Load(), Shared: p.shared.Load(), Requests: p.requests.Load(),
		Errors: p.errs.Load(), NoRange: p.noRange.Load(), Blocked: p.blocked.Load(), HeaderKO: p.headerKO.Load(),
		Busy: p.busy.Load(),
	}
}

// FetchBytesInFlight is the image bytes reserved now by whole downloads (at most
// ProbeConfig.MaxFetchBytesInFlight).
func (p *Prober) FetchBytesInFlight() int64 { return int64(p.fetching.inUse()) }

// CacheLen is the number of cached sizes.
func (p *Prober) CacheLen() int { return p.cache.len() }

// Size returns the (W, H) of the image at rawURL whose identity is h. A cached size is returned at
// once; otherwise the first caller for h starts one fetch (single flight) in a goroutine tracked by the
// Prober, and every caller waits for its result or for its own ctx, whichever comes first. The fetch
// itself is bounded by the configured timeout, not by any caller's ctx, so a cancelled request does not
// fail the others sharing it; when every waiter has given up (their clients left) the fetch is cancelled
// and forgotten, so the next caller starts afresh. Errors reach every waiter and are not cached.
func (p *Prober) Size(ctx context.Context, rawURL string, h Hash) (Size, error) {
	if sz, ok := p.cache.get(h); ok {
		p.hits.Add(1)
		return sz, nil
	}
	p.mu.Lock()
	f, ok := p.inflight[h]
	if ok {
		p.shared.Add(1)
	} else {
		if p.closed {
			p.mu.Unlock()
			return Size{}, ErrClosed
		}
		fctx, cancel := context.WithCancel(context.Background())
		f = &flight{done: make(chan struct{}), cancel: cancel}
		p.inflight[h] = f
		p.misses.Add(1)
		p.flights.Go(sizeProbe, func() { p.runFlight(fctx, h, rawURL, f) })
	}
	f.waiters++
	p.mu.Unlock()
	select {
	case <-f.done:
		return f.size, f.err
	case <-ctx.Done():
		p.mu.Lock()
		if f.waiters--; f.waiters == 0 {
			f.cancel()
			if p.inflight[h] == f {
				delete(p.inflight, h)
			}
		}
		p.mu.Unlock()
		return Size{}, fmt.Errorf("%w: %w", ErrFetch, ctx.Err())
	}
}

// sizeProbe is one fetch of an image's header, shared by every waiter of its mm_hash; Close joins it.
var sizeProbe = routine.Named("mm.size-probe")

func (p *Prober) runFlight(ctx context.Context, h Hash, rawURL string, f *flight) {
	defer f.cancel()
	f.size, f.err = p.sizeUncached(ctx, rawURL)
	switch {
	case f.err == nil:
		p.cache.put(h, f.size)
	case ctx.Err() == nil: // not abandoned by every waiter
		p.countError(f.err)
	}
	p.mu.Lock()
	if p.inflight[h] == f {
		delete(p.inflight, h)
	}
	p.mu.Unlock()
	close(f.done)
}

// cached returns a cached size without starting a fetch (the resolver's fast path).
func (p *Prober) cached(h Hash) (Size, bool) {
	sz, ok := p.cache.get(h)
	if ok {
		p.hits.Add(1)
	}
	return sz, ok
}

// Close refuses new fetches and waits for those in flight (each bounded by the timeout).
func (p *Prober) Close() {
	p.mu.Lock()
	p.closed = true
	p.flights.Stop()
	p.mu.Unlock()
	p.flights.Wait()
}

func (p *Prober) countError(err error) {
	p.errs.Add(1)
	switch {
	case errors.Is(err, ErrNoRange):
		p.noRange.Add(1)
	case errors.Is(err, ErrBlockedAddress):
		p.blocked.Add(1)
	case errors.Is(err, ErrHeader):
		p.headerKO.Add(1)
	}
}

func (p *Prober) sizeUncached(ctx context.Context, rawURL string) (Size, error) {
	scheme, _, _ := strings.Cut(rawURL, ":")
	switch strings.ToLower(strings.TrimSpace(scheme)) {
	case "data":
		d, err := ParseDataURI(strings.TrimSpace(rawURL), p.cfg.MaxDataURIBytes)
		if err != nil {
			return Size{}, err
		}
		sz, _, err := HeaderSize(d.Data)
		return sz, err
	case "http", "https":
		return p.probeHTTP(ctx, rawURL)
	}
	return Size{}, fmt.Errorf("%w: %q", ErrUnsupportedScheme, scheme)
}

func (p *Prober) probeHTTP(ctx context.Context, rawURL string) (Size, error) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil {
		return Size{}, fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	b, err := p.getRange(ctx, u.String(), p.cfg.SmallRange)
	if err != nil {
		return Size{}, err
	}
	sz, _, herr := HeaderSize(b)
	if herr == nil {
		return sz, nil
	}
	if b, err = p.getRange(ctx, u.String(), p.cfg.LargeRange); err != nil {
		return Size{}, err
	}
	sz, f, herr := HeaderSize(b)
	if herr == nil {
		return sz, nil
	}
	// JPEG with large metadata before the frame header: walk the marker segments and fetch further,
	// at least doubling each time (64 KiB → 1 MiB in at most four more requests).
	for f == FormatJPEG && IsShort(herr) && len(b) >= p.cfg.LargeRange {
		need, ok := JPEGHeaderEnd(b)
		if !ok || need <= len(b) || need > p.cfg.MaxHeaderBytes {
			break
		}
		n := min(max(need, 2*len(b)), p.cfg.MaxHeaderBytes)
		prev := len(b)
		if b, err = p.getRange(ctx, u.String(), n); err != nil {
			return Size{}, err
		}
		if sz, _, herr = HeaderSize(b); herr == nil {
			return sz, nil
		}
		if len(b) <= prev { // the file ended
			break
		}
	}
	return Size{}, fmt.Errorf("%w (after %d bytes)", herr, len(b))
}

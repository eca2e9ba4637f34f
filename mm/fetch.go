package mm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Fetch downloads (http/https, through the SSRF guard and redirect checks of the size probe) or reads
// (data:) a whole image file, up to maxBytes (0: DefaultMaxDecodeBytes), bounded by the probe timeout.
// It is what transfer.Sender needs to preprocess an image in the frontend; unlike Size nothing is
// cached or shared between callers. The download holds its bytes in MaxFetchBytesInFlight while it
// reads and gives them back when Fetch returns. Errors wrap ErrBadURL, ErrBadDataURI,
// ErrUnsupportedScheme, ErrBlockedAddress, ErrFetch, ErrTooLarge or ErrBusy.
func (p *Prober) Fetch(ctx context.Context, rawURL string, maxBytes int) ([]byte, error) {
	data, release, err := p.fetch(ctx, rawURL, maxBytes, nil)
	release()
	return data, err
}

// fetch is Fetch for a request whose downloads are counted in acct (nil: not counted); the bytes stay
// reserved in MaxFetchBytesInFlight until release is called (never nil).
func (p *Prober) fetch(ctx context.Context, rawURL string, maxBytes int, acct *requestBytes) (data []byte, release func(), err error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxDecodeBytes
	}
	raw := strings.TrimSpace(rawURL)
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "data":
		// The payload came in the request body, bounded by the body's limits: nothing is downloaded.
		d, err := ParseDataURI(raw, p.cfg.MaxDataURIBytes)
		if err != nil {
			return nil, noRelease, err
		}
		return d.Data, noRelease, nil
	case "http", "https":
	default:
		return nil, noRelease, fmt.Errorf("%w: %q", ErrUnsupportedScheme, scheme)
	}
	return p.download(ctx, raw, maxBytes, acct)
}

func noRelease() {}

// send is the package's one guarded GET: every image byte read from a URL (Size's range probes,
// Fetch, Decode) comes through it, so the SSRF guard (the client's dialer and redirect check) and the
// request counter apply alike. rangeN > 0 asks for bytes [0, rangeN). The caller closes the body.
func (p *Prober) send(ctx context.Context, rawURL string, rangeN int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	if rangeN > 0 {
		req.Header.Set("Range", "bytes=0-"+strconv.Itoa(rangeN-1))
	}
	p.requests.Add(1)
	resp, err := p.client.Do(req)
	if err != nil {
		if errors.Is(err, ErrBlockedAddress) || errors.Is(err, ErrUnsupportedScheme) {
			return nil, unwrapURLError(err)
		}
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	return resp, nil
}

// getRange asks for bytes [0, rangeN) within the probe timeout, wants 206 (ErrNoRange otherwise, the
// body unread) and returns at most rangeN bytes, fewer when the file is shorter.
func (p *Prober) getRange(ctx context.Context, rawURL string, rangeN int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	resp, err := p.send(ctx, rawURL, rangeN)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return nil, fmt.Errorf("%w: status %d", ErrNoRange, resp.StatusCode)
	}
	buf := make([]byte, rangeN)
	m, err := io.ReadFull(resp.Body, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: read: %v", ErrFetch, err)
	}
	return buf[:m], nil
}

// download GETs a whole body (200 wanted) within the probe timeout, at most limit bytes and at most
// what acct has left. Once the response headers are in, it reserves the body's bytes in
// MaxFetchBytesInFlight (the Content-Length, else the most it may read), waiting at most
// FetchBudgetWait (ErrBusy after), and only then reads; the reservation is trimmed to the bytes read
// and held until release. A declared length past a bound is refused before reading.
func (p *Prober) download(ctx context.Context, rawURL string, limit int, acct *requestBytes) ([]byte, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	resp, err := p.send(ctx, rawURL, 0)
	if err != nil {
		return nil, noRelease, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, noRelease, fmt.Errorf("%w: status %d", ErrFetch, resp.StatusCode)
	}
	most := int64(limit)
	if cl := resp.ContentLength; cl > most {
		return nil, noRelease, fmt.Errorf("%w: image of %d bytes, more than %d", ErrTooLarge, cl, limit)
	}
	if acct != nil {
		left := acct.left()
		if cl := resp.ContentLength; cl > left {
			return nil, noRelease, acct.overErr(cl)
		}
		most = min(most, left)
	}
	want := most
	if resp.ContentLength >= 0 {
		want = resp.ContentLength
	}
	wctx, wcancel := context.WithTimeout(ctx, p.cfg.FetchBudgetWait)
	err = p.fetching.take(wctx, uint64(want))
	wcancel()
	switch {
	case errors.Is(err, errOverBudget):
		return nil, noRelease, fmt.Errorf("%w: %d bytes, more than the %d bytes in flight allowed", ErrTooLarge, want, p.cfg.MaxFetchBytesInFlight)
	case err != nil && ctx.Err() != nil:
		return nil, noRelease, fmt.Errorf("%w: waiting for room to download: %v", ErrFetch, ctx.Err()) // the request ended first
	case err != nil:
		p.busy.Add(1)
		return nil, noRelease, fmt.Errorf("%w: no room for %d bytes among %d in flight within %v", ErrBusy, want, p.cfg.MaxFetchBytesInFlight, p.cfg.FetchBudgetWait)
	}
	var body io.Reader = resp.Body
	if acct != nil {
		body = &countingReader{r: body, acct: acct}
	}
	data, err := readAtMost(body, want, resp.ContentLength >= 0)
	if err == nil && acct != nil && acct.n.Load() > acct.max {
		err = acct.overErr(int64(len(data))) // the read that passed the bound also completed the body
	}
	if err != nil {
		p.fetching.give(uint64(want))
		if errors.Is(err, ErrTooLarge) {
			return nil, noRelease, err
		}
		return nil, noRelease, fmt.Errorf("%w: read: %v", ErrFetch, err)
	}
	if int64(len(data)) > want {
		p.fetching.give(uint64(want))
		if want == int64(limit) {
			return nil, noRelease, fmt.Errorf("%w: image larger than %d bytes", ErrTooLarge, limit)
		}
		return nil, noRelease, acct.overErr(int64(len(data)))
	}
	p.fetching.give(uint64(want - int64(len(data))))
	var once sync.Once
	return data, func() { once.Do(func() { p.fetching.give(uint64(len(data))) }) }, nil
}

// readAtMost reads r to its end, at most n+1 bytes (one more than n says the body is longer). With a
// known length (exact) the buffer is allocated once.
func readAtMost(r io.Reader, n int64, exact bool) ([]byte, error) {
	if exact {
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(io.LimitReader(r, n+1))
}

// unwrapURLError keeps the class sentinel of an error returned through *url.Error and net.OpError.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, ue.URL, ue.Err)
	}
	return err
}

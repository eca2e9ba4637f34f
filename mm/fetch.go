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
)

// Fetch downloads (http/https, through the SSRF guard and redirect checks of the size probe) or reads
// (data:) a whole image file, up to maxBytes (0: DefaultMaxDecodeBytes), bounded by the probe timeout.
// It is what transfer.Sender needs to preprocess an image in the frontend; unlike Size nothing is
// cached or shared between callers. Errors wrap ErrBadURL, ErrBadDataURI, ErrUnsupportedScheme,
// ErrBlockedAddress, ErrFetch or ErrLimit.
func (p *Prober) Fetch(ctx context.Context, rawURL string, maxBytes int) ([]byte, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxDecodeBytes
	}
	raw := strings.TrimSpace(rawURL)
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "data":
		d, err := ParseDataURI(raw, p.cfg.MaxDataURIBytes)
		if err != nil {
			return nil, err
		}
		return d.Data, nil
	case "http", "https":
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedScheme, scheme)
	}
	return p.get(ctx, raw, 0, maxBytes)
}

// get is the package's one guarded GET: every image byte read from a URL (Size's range probes, Fetch,
// Decode) comes through it, so the SSRF guard (the client's dialer and redirect check), the timeout and
// the request counter apply alike. rangeN > 0 asks for bytes [0, rangeN), wants 206 (ErrNoRange
// otherwise, the body unread) and returns at most rangeN bytes, fewer when the file is shorter. rangeN
// == 0 wants 200 and the whole body, at most limit bytes (ErrLimit beyond).
func (p *Prober) get(ctx context.Context, rawURL string, rangeN, limit int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
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
	defer resp.Body.Close()
	if rangeN > 0 {
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
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: status %d", ErrFetch, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read: %v", ErrFetch, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: image larger than %d bytes", ErrLimit, limit)
	}
	return data, nil
}

// unwrapURLError keeps the class sentinel of an error returned through *url.Error and net.OpError.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, ue.URL, ue.Err)
	}
	return err
}

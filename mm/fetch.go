package mm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadURL, err)
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
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: status %d", ErrFetch, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read: %v", ErrFetch, err)
	}
	if len(data) > maxBytes {
		return nil, fmt.Errorf("%w: image larger than %d bytes", ErrLimit, maxBytes)
	}
	return data, nil
}

package mocker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"image"
	_ "image/gif"  // image.DecodeConfig formats
	_ "image/jpeg" //
	_ "image/png"  //
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/mm"
)

// ImageTokens is Qwen2/3-VL's placeholder count for an image of w×h pixels: smart_resize to multiples of
// patch·merge within [MinPixels, MaxPixels], then one token per merge×merge patches.
func (m *Model) ImageTokens(w, h int) int {
	factor := float64(m.PatchSize * m.MergeSize)
	fh, fw := float64(h), float64(w)
	hb := max(factor, math.RoundToEven(fh/factor)*factor)
	wb := max(factor, math.RoundToEven(fw/factor)*factor)
	if hb*wb > float64(m.MaxPixels) {
		beta := math.Sqrt(fh * fw / float64(m.MaxPixels))
		hb = max(factor, math.Floor(fh/beta/factor)*factor)
		wb = max(factor, math.Floor(fw/beta/factor)*factor)
	} else if hb*wb < float64(m.MinPixels) {
		beta := math.Sqrt(float64(m.MinPixels) / (fh * fw))
		hb = math.Ceil(fh*beta/factor) * factor
		wb = math.Ceil(fw*beta/factor) * factor
	}
	p := float64(m.PatchSize)
	return int(hb/p) * int(wb/p) / (m.MergeSize * m.MergeSize)
}

// imageResolver finds an image's size and identity. Sizes are remembered by identity, so a later part
// that carries only a uuid (vLLM's processor-cache case) still expands correctly.
//
// Fetches go through the frontend's SSRF guard (mm.Guard): the URL is screened as the frontend screens
// it (WHATWG host parsing, so numeric IPv4 forms are addresses), and every connection's resolved address
// is checked again at connect time, so a redirect or a changed DNS answer cannot reach an internal host.
type imageResolver struct {
	guard  *mm.Guard
	client *fasthttp.Client
	mu     sync.Mutex
	sizes  map[string][2]int
}

func newImageResolver(guard *mm.Guard) *imageResolver {
	dial := guard.DialContext(&net.Dialer{Timeout: 10 * time.Second})
	return &imageResolver{
		guard: guard,
		client: &fasthttp.Client{ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxResponseBodySize: 64 << 20,
			Dial: func(addr string) (net.Conn, error) { return dial(context.Background(), "tcp", addr) }},
		sizes: map[string][2]int{},
	}
}

// resolve returns the identity (the uuid, else the sha256 hex of the encoded image bytes: 64 hex digits
// like vLLM's blake3 identifiers) and the pixel size of one image part.
func (r *imageResolver) resolve(p ChatPart) (id string, w, h int, err error) {
	if p.UUID != "" {
		r.mu.Lock()
		sz, ok := r.sizes[p.UUID]
		r.mu.Unlock()
		if ok {
			return p.UUID, sz[0], sz[1], nil
		}
	}
	if p.URL == "" {
		return "", 0, 0, fmt.Errorf("%w: image part without url and with an unknown uuid", ErrBadRequest)
	}
	data, err := r.fetch(p.URL)
	if err != nil {
		return "", 0, 0, err
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return "", 0, 0, fmt.Errorf("%w: image: %v", ErrBadRequest, err)
	}
	id = p.UUID
	if id == "" {
		sum := sha256.Sum256(data)
		id = hex.EncodeToString(sum[:])
	}
	r.mu.Lock()
	r.sizes[id] = [2]int{cfg.Width, cfg.Height}
	r.mu.Unlock()
	return id, cfg.Width, cfg.Height, nil
}

func (r *imageResolver) fetch(url string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(url, "data:"); ok {
		meta, payload, found := strings.Cut(rest, ",")
		if !found {
			return nil, fmt.Errorf("%w: malformed data URI", ErrBadRequest)
		}
		if strings.HasSuffix(meta, ";base64") {
			data, err := base64.StdEncoding.DecodeString(payload)
			if err != nil {
				return nil, fmt.Errorf("%w: data URI: %v", ErrBadRequest, err)
			}
			return data, nil
		}
		return []byte(payload), nil
	}
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("%w: unsupported image url scheme", ErrBadRequest)
	}
	if err := r.guard.CheckURL(context.Background(), url); err != nil {
		return nil, fmt.Errorf("%w: image url refused: %v", ErrBadRequest, err)
	}
	status, body, err := r.client.GetTimeout(nil, url, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w: image fetch: %v", ErrBadRequest, err)
	}
	if status != fasthttp.StatusOK {
		return nil, fmt.Errorf("%w: image fetch: HTTP %d", ErrBadRequest, status)
	}
	return body, nil
}

package mm

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
)

// Part is one image_url content part of a request, in prompt order across messages.
type Part struct {
	// URL is image_url.url as the client sent it.
	URL string
	// UUID is the part's client-supplied uuid, "" when absent. Any uuid disables multimodal routing
	// for the request.
	UUID string
}

// Image is the per-image outcome of Resolve.
type Image struct {
	Hash      Hash
	Source    IdentitySource
	Size      Size
	NumTokens int
	// Err is this image's failure (identity, SSRF guard, probe or decode), nil on success.
	Err error
	// Data is the encoded image as downloaded for --frontend-decoding (nil otherwise): the one download
	// of the image, which the transfer stage preprocesses instead of fetching the URL again. The caller
	// drops it once that stage has run.
	Data []byte
}

// ResolveConfig bounds the per-request image work.
type ResolveConfig struct {
	// MaxImages is the most images one request may carry and still be routed on them (--mm-max-images).
	// Default 32: above Dynamo's per-model modality limits (10 for Qwen and Kimi), so it only stops
	// abuse.
	MaxImages int
	// MaxTotalPixels bounds the sum of W*H over a request's images (--mm-max-total-pixels). Default
	// 1<<28 (268 M pixels, e.g. 16 images of 4096×4096).
	MaxTotalPixels uint64
	// FrontendDecoding makes the identity the content hash of the decoded pixels (--frontend-decoding):
	// each image is downloaded whole and decoded; the size comes from the decoded tensor.
	FrontendDecoding bool
	// MaxDecodeBytes bounds one image download in FrontendDecoding mode. Default 64 MiB.
	MaxDecodeBytes int
	// MaxRequestBytes bounds the bytes all of one request's image downloads read in FrontendDecoding
	// mode (--mm-max-request-image-bytes); past it the request is refused (ErrTooLarge, 413). Default
	// DefaultMaxRequestBytes (128 MiB). data: URIs are not counted: they came in the request body.
	MaxRequestBytes int64
	// DataURIAsString identifies a data: URI by its whole string, as Dynamo's default path does
	// (HashDataURIString; --mm-data-uri-identity uri), instead of by its decoded payload (the default:
	// the same bytes under any MIME label are one image). Not used with FrontendDecoding, whose identity
	// is the decoded pixels.
	DataURIAsString bool
}

// DefaultResolveConfig returns the defaults documented on the fields.
func DefaultResolveConfig() ResolveConfig {
	return ResolveConfig{MaxImages: 32, MaxTotalPixels: 1 << 28, MaxDecodeBytes: DefaultMaxDecodeBytes,
		MaxRequestBytes: DefaultMaxRequestBytes}
}

// Validate reports the first invalid field.
func (c ResolveConfig) Validate() error {
	if c.MaxImages <= 0 || c.MaxTotalPixels == 0 || c.MaxDecodeBytes <= 0 || c.MaxRequestBytes <= 0 {
		return errors.New("mm: ResolveConfig needs positive MaxImages, MaxTotalPixels, MaxDecodeBytes and MaxRequestBytes")
	}
	return nil
}

// Resolver runs the per-image work of a request (identity → size → token count) and builds the
// routing view. It holds no per-request state; safe for concurrent use by any number of request
// actors. The Spec is fixed at construction (one model per Resolver).
type Resolver struct {
	spec   Spec
	prober *Prober
	cfg    ResolveConfig
}

// NewResolver builds a resolver for one model.
func NewResolver(spec Spec, prober *Prober, cfg ResolveConfig) (*Resolver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if prober == nil {
		return nil, errors.New("mm: NewResolver needs a Prober")
	}
	return &Resolver{spec: spec, prober: prober, cfg: cfg}, nil
}

// Spec is the model's resolved setup.
func (r *Resolver) Spec() *Spec { return &r.spec }

// Prober is the prober the resolver sizes and downloads images with.
func (r *Resolver) Prober() *Prober { return r.prober }

// Resolve computes every image's identity, size and token count. Cached sizes are read inline (the
// warm path starts no goroutine); the misses run concurrently, one goroutine each (at most MaxImages),
// and are joined before Resolve returns, so the caller hashes only complete results. ctx bounds the
// wait: a cancelled request stops waiting while shared fetches finish for the others.
//
// The reason is FallbackNone when every image resolved within the bounds; otherwise the first
// failure's class (the per-image errors stay in the result for logs). images reuses dst.
func (r *Resolver) Resolve(ctx context.Context, parts []Part, dst []Image) (images []Image, reason FallbackReason) {
	if len(parts) == 0 {
		return dst[:0], FallbackNone
	}
	if !r.spec.Enabled {
		if r.spec.Unsupported {
			return dst[:0], FallbackUnsupportedFamily
		}
		return dst[:0], FallbackUnknownModel
	}
	for _, p := range parts {
		if p.UUID != "" {
			return dst[:0], FallbackUserUUID
		}
	}
	if len(parts) > r.cfg.MaxImages {
		return dst[:0], FallbackLimits
	}
	images = dst[:0]
	if cap(images) < len(parts) {
		images = make([]Image, 0, len(parts))
	}
	images = images[:len(parts)]
	var misses [8]int
	todo := misses[:0]
	for i, p := range parts {
		im := &images[i]
		*im = Image{}
		if r.cfg.FrontendDecoding {
			todo = append(todo, i)
			continue
		}
		if IsDataURI(p.URL) {
			// One decode gives identity and size; the payload is in hand, so there is nothing to cache.
			im.Source = SourceDataURI
			if r.cfg.DataURIAsString {
				im.Source = SourceURL
			}
			im.Hash, im.Size, im.Err = DataImage(p.URL, r.prober.cfg.MaxDataURIBytes, r.cfg.DataURIAsString)
			continue
		}
		im.Hash, im.Source, im.Err = HashURL(p.URL)
		if im.Err != nil {
			continue
		}
		if sz, ok := r.prober.cached(im.Hash); ok {
			im.Size = sz
			continue
		}
		todo = append(todo, i)
	}
	var rb *requestBudget
	if r.cfg.FrontendDecoding && len(todo) > 0 {
		rb = r.newRequestBudget()
	}
	switch len(todo) {
	case 0:
	case 1:
		r.resolveOne(ctx, parts[todo[0]].URL, &images[todo[0]], rb)
	default:
		r.fanOut(ctx, parts, images, todo, rb)
	}
	var pixels uint64
	for i := range images {
		im := &images[i]
		if im.Err != nil {
			return images, reasonOf(im.Err)
		}
		pixels += im.Size.Pixels()
		im.NumTokens = r.spec.NumTokens(im.Size)
	}
	if pixels > r.cfg.MaxTotalPixels {
		return images, FallbackLimits
	}
	return images, FallbackNone
}

// fanOut resolves images[i] for every i in todo, one goroutine each, and waits for all of them. The
// indices are copied so that the caller's stack scratch does not escape (the warm path stays
// allocation-free).
func (r *Resolver) fanOut(ctx context.Context, parts []Part, images []Image, todo []int, rb *requestBudget) {
	idx := slices.Clone(todo)
	var wg sync.WaitGroup
	labels := pprof.Labels("mm", "resolve-image")
	for _, i := range idx {
		wg.Add(1)
		go pprof.Do(ctx, labels, func(ctx context.Context) {
			defer wg.Done()
			r.resolveOne(ctx, parts[i].URL, &images[i], rb)
		})
	}
	wg.Wait()
}

// requestBudget is one request's bounds for --frontend-decoding: the bytes its downloads read
// (MaxRequestBytes) and the images' header pixels summed as their downloads complete, so that a
// request past MaxTotalPixels decodes nothing more (the sum after decoding came too late to bound
// memory).
type requestBudget struct {
	bytes  *requestBytes
	pixels atomic.Uint64
	max    uint64
}

func (r *Resolver) newRequestBudget() *requestBudget {
	return &requestBudget{bytes: newRequestBytes(r.cfg.MaxRequestBytes), max: r.cfg.MaxTotalPixels}
}

// admit adds an image's header pixels to the request's sum and refuses them past the bound.
func (b *requestBudget) admit(sz Size) error {
	if t := b.pixels.Add(sz.Pixels()); t > b.max {
		return fmt.Errorf("%w: the request's images declare %d pixels, more than %d", ErrLimit, t, b.max)
	}
	return nil
}

func (r *Resolver) resolveOne(ctx context.Context, url string, im *Image, rb *requestBudget) {
	if r.cfg.FrontendDecoding {
		im.Hash, im.Size, im.Data, im.Err = r.prober.decode(ctx, url, r.cfg.MaxDecodeBytes, rb.bytes, rb.admit)
		im.Source = SourceDecodedBytes
		return
	}
	im.Size, im.Err = r.prober.Size(ctx, url, im.Hash)
}

// reasonOf maps a per-image error to its fallback class.
func reasonOf(err error) FallbackReason {
	switch {
	case errors.Is(err, ErrBadURL), errors.Is(err, ErrUnsupportedScheme), errors.Is(err, ErrBadDataURI):
		return FallbackBadURL
	case errors.Is(err, ErrBlockedAddress):
		return FallbackBlocked
	case errors.Is(err, ErrLimit):
		return FallbackLimits
	case errors.Is(err, ErrTooLarge):
		return FallbackTooLarge
	case errors.Is(err, ErrBusy):
		return FallbackBusy
	}
	return FallbackProbeFailed
}

// Route expands tokens with the resolved images (see Expand): the routing view and the ids to forward,
// together or not at all. images must be Resolve's result with FallbackNone.
func (r *Resolver) Route(dst, tokens []uint32, images []Image, blockSize int, lim Limits) (Routing, FallbackReason) {
	if !r.spec.Enabled {
		if r.spec.Unsupported {
			return Routing{}, FallbackUnsupportedFamily
		}
		return Routing{}, FallbackUnknownModel
	}
	var buf [8]Entry
	var shapes [8]shape
	entries := buf[:0]
	for i, im := range images {
		if im.Err != nil {
			return Routing{}, reasonOf(im.Err)
		}
		e := Entry{Hash: im.Hash, NumTokens: im.NumTokens}
		if r.spec.Layout != LayoutFlat {
			sh := r.spec.shapeOf(im.Size)
			if i < len(shapes) {
				shapes[i] = sh
				e.shape = &shapes[i]
			} else {
				e.shape = &sh
			}
		}
		entries = append(entries, e)
	}
	return Expand(dst, tokens, r.spec.ImageTokenID, entries, r.spec.BOS, r.spec.HasBOS, blockSize, lim)
}

// String is a short description of a resolved image for logs; data: URIs never appear.
func (im Image) String() string {
	if im.Err != nil {
		return fmt.Sprintf("image(%s err=%v)", im.Source, im.Err)
	}
	return fmt.Sprintf("image(%s %s %dx%d n=%d)", im.Source, im.Hash.HexID(), im.Size.W, im.Size.H, im.NumTokens)
}

// RouteLegacy builds the block_mm_infos view of a request, for workers whose
// events are hashed with their images' mm_hash suffix rather than normalized to pad values: the routing
// tokens are the engine's own prompt (each image's replacement written with RunTokenID, as Route
// places it), and blockMM[b] lists the mm_hash of every image overlapping block b. Hash with
// scoring.LocalBlockHashes(tokens[:ExpandedLen], bs, seed, blockMM). Same gating as Route.
func (r *Resolver) RouteLegacy(dst, tokens []uint32, images []Image, blockSize int, lim Limits) (Routing, [][]uint64, FallbackReason) {
	rt, reason := r.Route(dst, tokens, images, blockSize, lim)
	if reason != FallbackNone {
		return rt, nil, reason
	}
	// Expand put image k at the k-th placeholder, shifted by the BOS and the growth of earlier images.
	ranges := make([][2]int, 0, len(images))
	shift, k := 0, 0
	if r.spec.HasBOS {
		shift = 1
	}
	var buf []uint32
	for i, t := range tokens {
		if t != r.spec.ImageTokenID || k >= len(images) {
			continue
		}
		s := i + shift
		n := images[k].NumTokens
		buf = r.spec.AppendImage(buf[:0], images[k].Size, r.spec.RunTokenID)
		if len(buf) != n || s+n > rt.ExpandedLen {
			return Routing{}, nil, FallbackCountMismatch
		}
		copy(rt.Tokens[s:], buf)
		ranges = append(ranges, [2]int{s, s + n})
		shift += n - 1
		k++
	}
	blockMM, err := BlockMMInfos(rt.ExpandedLen, blockSize, rt.Hashes, ranges)
	if err != nil {
		return Routing{}, nil, FallbackCountMismatch
	}
	return rt, blockMM, FallbackNone
}

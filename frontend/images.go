package frontend

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"

	json "github.com/goccy/go-json"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/internal/netlimit"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/transfer"
)

// MMConfig turns on multimodal KV routing: images are identified (mm_hash), sized (Range probe) and
// expanded into pad-value routing tokens, so repeated images route to the worker that holds their blocks.
type MMConfig struct {
	Resolver *mm.Resolver
	// Transfer, when set, preprocesses each image in the frontend and hands the tensor (mm_kwargs) to
	// the chosen worker over shared memory or the network (--mm-transfer).
	Transfer *transfer.Sender
	// Limits bound the routing view (block-padded length, expanded prompt length).
	Limits mm.Limits
	// Inline bounds the downloaded image bytes the worker-bound bodies of requests in flight carry as
	// data: URIs (--frontend-decoding), shared by every model's API; nil: DefaultInlineBytes for this
	// API alone. An image that does not fit keeps its URL (the worker fetches it).
	Inline *InlineBudget
}

// DefaultInlineBytes is the default bound on the data: URI bytes held in the worker-bound bodies of the
// requests in flight (512 MiB): each request keeps its body, for migration, until it ends, so without a
// bound a few kilobytes of request naming large images could pin maxInlineBytes each for a whole
// generation, times every request in flight.
const DefaultInlineBytes = 512 << 20

// InlineBudget counts the data: URI bytes the requests in flight hold (a try, never a wait: an image
// that does not fit keeps its URL); nil: no bound.
type InlineBudget = netlimit.Budget

// NewInlineBudget bounds the inline bytes held at once to max.
func NewInlineBudget(max int64) *InlineBudget { return netlimit.NewBudget(max) }

// mmMetrics count multimodal routing outcomes.
type mmMetrics struct {
	fallbacks *prometheus.CounterVec
	images    prometheus.Counter
	routed    prometheus.Counter
	transfers *prometheus.CounterVec
}

func newMMMetrics(reg prometheus.Registerer) *mmMetrics {
	m := &mmMetrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_mm_routing_fallback_total",
			Help: "Requests with images routed on their text prefix only, by reason."}, []string{"reason"}),
		images: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_mm_images_total", Help: "Images seen in chat requests."}),
		routed: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_mm_routed_requests_total",
			Help: "Requests routed on their images (pad-value routing tokens, uuids forwarded)."}),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_mm_transfers_total",
			Help: "mm_kwargs handoffs by path: shm, net, or failed (the worker fetches the URL)."}, []string{"path"}),
	}
	reg.MustRegister(m.fallbacks, m.images, m.routed, m.transfers)
	for _, r := range mm.FallbackReasons() {
		if r == mm.FallbackBlocked || r == mm.FallbackLimits || r == mm.FallbackTooLarge || r == mm.FallbackBusy {
			continue // refused (400, 413, 429), counted in kvroute_media_refused_total, never a fallback
		}
		m.fallbacks.WithLabelValues(r.String())
	}
	m.fallbacks.WithLabelValues("other_media")
	return m
}

// maxScreenedMedia bounds the media URLs of one request that the guard checks (each may cost a DNS
// lookup); a request with more is refused.
const maxScreenedMedia = 256

// screenMedia runs the SSRF guard over every media URL of a chat request: the worker fetches what the
// frontend forwards, so a URL to an internal address is refused here (400), before routing, whether or
// not the part carries a uuid and whether or not multimodal routing is on. Nothing is fetched.
func (a *OpenAIAPI) screenMedia(j *job) error {
	if j.chat == nil || len(j.chat.Media) == 0 {
		return nil
	}
	if len(j.chat.Media) > maxScreenedMedia {
		return errorf(ErrBadRequest, "%d media parts exceed the limit of %d", len(j.chat.Media), maxScreenedMedia)
	}
	for _, p := range j.chat.Media {
		if p.URL == "" {
			continue
		}
		if err := a.Cfg.MediaGuard.CheckURL(j.ctx, p.URL); err != nil {
			a.countRefused("blocked")
			return errorf(ErrBadRequest, "messages[%d].content[%d]: media URL refused: %v (internal addresses are not fetched; allow them with --media-allow-hosts)", p.Message, p.Part, err)
		}
	}
	return nil
}

// imageWork is the per-request image stage: started before tokenization; its result reaches the request
// actor as an imagesResolved message. images and reason are written by the resolving goroutine before
// it sends the message and read by the actor after it receives it.
type imageWork struct {
	media  []openai.MediaPart // the image parts, in prompt order
	images []mm.Image
	reason mm.FallbackReason
	other  bool // the request also carries media kvroute does not route on (video, audio)
}

// startImages resolves the request's images concurrently with tokenization and calls resolved (from
// another goroutine) when they are; nil when there are none or multimodal routing is off. pending is
// false when nothing was started (the result is already in w).
func (a *OpenAIAPI) startImages(ctx context.Context, j *job, resolved func()) (w *imageWork, pending bool) {
	if a.MM == nil || j.chat == nil || len(j.chat.Media) == 0 {
		return nil, false
	}
	w = &imageWork{}
	parts := make([]mm.Part, 0, len(j.chat.Media))
	for _, p := range j.chat.Media {
		if p.Type != "image_url" {
			w.other = true
			continue
		}
		w.media = append(w.media, p)
		parts = append(parts, mm.Part{URL: p.URL, UUID: p.UUID})
	}
	if a.mmMetrics != nil {
		a.mmMetrics.images.Add(float64(len(parts)))
	}
	if w.other || len(parts) == 0 {
		return w, false
	}
	imageStage.Go(func() {
		w.images, w.reason = a.MM.Resolver.Resolve(ctx, parts, nil)
		resolved()
	})
	return w, true
}

// A request's concurrent stages: each reports to the request actor (imagesResolved, transferReady), which
// waits for every report it expects, and each ends with the request's context.
var (
	imageStage    = routine.Named("frontend.image-stage")
	transferStage = routine.Named("frontend.transfer-stage")
)

// imageView is the routing view of a request with images: the tokens to hash (nil: route on the text
// tokens) and what to forward when routing on images.
type imageView struct {
	tokens []uint32
	isl    int
	uuids  []string
	// blockMM, when set, is the block_mm_infos side channel of tokens (every worker takes
	// mm_scheme=block_mm_infos): tokens are then hashed with it.
	blockMM [][]uint64
}

// routingView builds the routing tokens once the image stage has resolved: each image placeholder expanded to
// its token count of pad_value(mm_hash). A URL refused by the SSRF guard and images over the limits are
// the client's errors; other failures fall back to text-prefix routing, counted by reason.
func (a *OpenAIAPI) routingView(w *imageWork, tokens []uint32) (imageView, error) {
	if w == nil {
		return imageView{}, nil
	}
	reason := w.reason
	if w.other {
		a.countFallback("other_media")
		return imageView{}, nil
	}
	switch reason {
	case mm.FallbackBlocked:
		// The probe's connect-time check refused an address screenMedia let through (a DNS answer that
		// changed, a redirect to an internal address): refused as well, not routed on text.
		a.countRefused("blocked")
		return imageView{}, errorf(ErrBadRequest, "image URL refused: internal addresses are not fetched (allow them with --media-allow-hosts)")
	case mm.FallbackLimits:
		// Too many images, or more pixels than --mm-max-total-pixels (a header can claim any size: a
		// decompression bomb would cost the worker far more than this request is worth).
		a.countRefused("limits")
		return imageView{}, errorf(ErrBadRequest, "the request's images exceed the limits (--mm-max-images, --mm-max-total-pixels)")
	case mm.FallbackTooLarge:
		// --frontend-decoding: an image, or the request's images together, hold more bytes than the
		// frontend downloads for one request (--mm-max-request-image-bytes).
		a.countRefused("too_large")
		return imageView{}, errorf(ErrTooLarge, "the request's images are too large to download (%v)", firstErr(w.images))
	case mm.FallbackBusy:
		// --frontend-decoding: the process's image downloads were at --mm-image-bytes-in-flight, or its
		// decodes at their pixel budget, for longer than the wait: a retry soon finds room (Retry-After).
		a.countRefused("busy")
		return imageView{}, errorf(ErrTooMany, "the frontend is downloading or decoding as many images as it holds at once (%v); retry shortly", firstErr(w.images))
	}
	var rt mm.Routing
	var blockMM [][]uint64
	if reason == mm.FallbackNone {
		if a.R.Fleet.AllLegacyMM() {
			rt, blockMM, reason = a.MM.Resolver.RouteLegacy(nil, tokens, w.images, a.R.BlockSize(), a.MM.Limits)
		} else {
			rt, reason = a.MM.Resolver.Route(nil, tokens, w.images, a.R.BlockSize(), a.MM.Limits)
		}
	}
	if reason != mm.FallbackNone {
		a.countFallback(reason.String())
		return imageView{}, nil
	}
	// The zero padding of the tail makes a block that no engine ever stores; hash the expanded prompt.
	// Each engine takes the ids in the form Dynamo's backend for it forwards: vLLM a 64-character uuid,
	// SGLang and TensorRT-LLM the 16-hex mm_hash. The body is written before the worker is known (and a
	// migration may move it), so a fleet that mixes them gets vLLM's, which the others echo back too.
	uuids := rt.VLLMUUIDs()
	if a.R.Fleet.AllHexMMIDs() {
		uuids = rt.HexIDs()
	}
	return imageView{tokens: rt.Tokens[:rt.ExpandedLen], isl: rt.ExpandedLen, uuids: uuids, blockMM: blockMM}, nil
}

// firstErr is the first image's error (nil when none failed), for the client's message.
func firstErr(images []mm.Image) error {
	for _, im := range images {
		if im.Err != nil {
			return im.Err
		}
	}
	return nil
}

// maxInlineBytes bounds the data: URIs one worker-bound body carries (base64 text, all images of the
// request): an image downloaded with --frontend-decoding goes to the worker inline while the total stays
// within it; the rest keep their URL and the worker fetches them.
const maxInlineBytes = 32 << 20

// forwardImages writes the images' uuids (and mm_kwargs descriptors) into the worker-bound body, only
// when the request is routed on its images. An image the frontend downloaded (--frontend-decoding) is
// sent as a data: URI of the downloaded bytes in place of its URL, so the image server sees one
// download and the worker needs no access to it; any engine that takes data: URIs reads it.
func (a *OpenAIAPI) forwardImages(j *job, w *imageWork, v imageView, members [][]byte) {
	if v.tokens == nil {
		return
	}
	if members == nil {
		members = make([][]byte, len(w.media))
	}
	urls, held := inlineURLs(w.images, a.MM.Inline)
	body, err := openai.RewriteMedia(j.body, w.media, v.uuids, urls, "mm_kwargs", members)
	if err != nil {
		a.MM.Inline.Give(held)
		a.countFallback("rewrite_failed")
		return
	}
	j.body = body
	if held > 0 {
		// The body keeps the bytes until the request ends (a migration resends it).
		prev, budget := j.release, a.MM.Inline
		j.release = func() {
			if prev != nil {
				prev()
			}
			budget.Give(held)
		}
	}
	if a.mmMetrics != nil {
		a.mmMetrics.routed.Inc()
	}
}

// inlineURLs is the data: URI of each downloaded image ("" for the others, once the request's total
// would pass maxInlineBytes, or when budget has no room for it), and the bytes it reserved in budget;
// nil when no image is inlined.
func inlineURLs(images []mm.Image, budget *InlineBudget) (urls []string, held int64) {
	total := 0
	for i, im := range images {
		if im.Data == nil {
			continue
		}
		mime := http.DetectContentType(im.Data)
		if !strings.HasPrefix(mime, "image/") {
			mime = "application/octet-stream"
		}
		n := len("data:;base64,") + len(mime) + base64.StdEncoding.EncodedLen(len(im.Data))
		if total+n > maxInlineBytes || !budget.TryTake(int64(n)) {
			continue
		}
		if urls == nil {
			urls = make([]string, len(images))
		}
		total += n
		b := make([]byte, 0, n)
		b = append(append(append(b, "data:"...), mime...), ";base64,"...)
		urls[i] = string(base64.StdEncoding.AppendEncode(b, im.Data))
	}
	return urls, int64(total)
}

// dropData lets the downloaded image bytes go once nothing needs them (the request lives on while it
// streams).
func (w *imageWork) dropData() {
	if w == nil {
		return
	}
	for i := range w.images {
		w.images[i].Data = nil
	}
}

// startTransfers preprocesses each image and hands the tensor to a shared-memory segment or the
// transfer agent (--mm-transfer), concurrently with routing. Each image's outcome is reported (from its
// own goroutine) through ready: its mm_kwargs member and the release of its buffer, both nil when it
// failed (the worker then fetches the URL). It returns the number of reports to expect (0 when off or not
// routing on images; the image bytes are then dropped at once, else by the actor after the last report).
func (a *OpenAIAPI) startTransfers(ctx context.Context, w *imageWork, v imageView, ready func(i int, member []byte, release func())) int {
	if a.MM == nil || a.MM.Transfer == nil || v.tokens == nil {
		if v.tokens == nil {
			w.dropData() // not routed on images: nothing is forwarded (else forwardImages inlines them)
		}
		return 0
	}
	for i := range w.media {
		transferStage.Go(func() {
			// With --frontend-decoding the image was downloaded once already, for its identity: preprocess
			// those bytes rather than fetching the URL a second time.
			src := transfer.Source{URL: w.media[i].URL, Data: w.images[i].Data}
			d, release, err := a.MM.Transfer.Prepare(ctx, src, w.images[i].Hash)
			if err != nil {
				a.countTransfer("failed")
				ready(i, nil, nil)
				return
			}
			b, err := json.Marshal(d)
			if err != nil {
				release()
				ready(i, nil, nil)
				return
			}
			a.countTransfer(string(d.Kind))
			ready(i, b, release)
		})
	}
	return len(w.media)
}

func (a *OpenAIAPI) countTransfer(path string) {
	if a.mmMetrics != nil {
		a.mmMetrics.transfers.WithLabelValues(path).Inc()
	}
}

func (a *OpenAIAPI) countRefused(reason string) {
	if a.Metrics != nil {
		a.Metrics.mediaRefused.WithLabelValues(reason).Inc()
	}
}

func (a *OpenAIAPI) countFallback(reason string) {
	if a.mmMetrics != nil {
		a.mmMetrics.fallbacks.WithLabelValues(reason).Inc()
	}
}

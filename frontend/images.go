package frontend

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/mm"
)

// MMConfig turns on multimodal KV routing: images are identified (mm_hash), sized (Range probe) and
// expanded into pad-value routing tokens, so repeated images route to the worker that holds their blocks.
type MMConfig struct {
	Resolver *mm.Resolver
	// Limits bound the routing view (block-padded length, expanded prompt length).
	Limits mm.Limits
}

// mmMetrics count multimodal routing outcomes.
type mmMetrics struct {
	fallbacks *prometheus.CounterVec
	images    prometheus.Counter
	routed    prometheus.Counter
}

func newMMMetrics(reg prometheus.Registerer) *mmMetrics {
	m := &mmMetrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_mm_routing_fallback_total",
			Help: "Requests with images routed on their text prefix only, by reason."}, []string{"reason"}),
		images: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_mm_images_total", Help: "Images seen in chat requests."}),
		routed: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_mm_routed_requests_total",
			Help: "Requests routed on their images (pad-value routing tokens, uuids forwarded)."}),
	}
	reg.MustRegister(m.fallbacks, m.images, m.routed)
	for _, r := range mm.FallbackReasons() {
		m.fallbacks.WithLabelValues(r.String())
	}
	m.fallbacks.WithLabelValues("other_media")
	return m
}

// imageWork is the per-request image stage: started before tokenization, joined after it.
type imageWork struct {
	media  []openai.MediaPart // the image parts, in prompt order
	done   chan struct{}
	images []mm.Image
	reason mm.FallbackReason
	other  bool // the request also carries media kvroute does not route on (video, audio)
}

// startImages resolves the request's images concurrently with tokenization; nil when there are none or
// multimodal routing is off.
func (a *OpenAIAPI) startImages(ctx context.Context, j *job) *imageWork {
	if a.MM == nil || j.chat == nil || len(j.chat.Media) == 0 {
		return nil
	}
	w := &imageWork{done: make(chan struct{})}
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
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		w.images, w.reason = a.MM.Resolver.Resolve(ctx, parts, nil)
	}()
	return w
}

// routingView joins the image stage and builds the routing tokens: each image placeholder expanded to
// its token count of pad_value(mm_hash). It returns the tokens to hash (nil: route on the text tokens)
// and the body to forward (with the images' uuids when routing on them). A URL refused by the SSRF guard
// is the client's error.
func (a *OpenAIAPI) routingView(w *imageWork, j *job, tokens []uint32) (routing []uint32, isl int, err error) {
	if w == nil {
		return nil, 0, nil
	}
	<-w.done
	reason := w.reason
	if w.other {
		a.countFallback("other_media")
		return nil, 0, nil
	}
	switch reason {
	case mm.FallbackBlocked:
		return nil, 0, errorf(ErrBadRequest, "image URL refused: internal addresses are not fetched (allow them with --media-allow-hosts)")
	case mm.FallbackLimits:
		// Too many images, or more pixels than --mm-max-total-pixels (a header can claim any size: a
		// decompression bomb would cost the worker far more than this request is worth).
		a.countFallback(reason.String())
		return nil, 0, errorf(ErrBadRequest, "the request's images exceed the limits (--mm-max-images, --mm-max-total-pixels)")
	}
	var rt mm.Routing
	if reason == mm.FallbackNone {
		rt, reason = a.MM.Resolver.Route(nil, tokens, w.images, a.R.BlockSize(), a.MM.Limits)
	}
	if reason != mm.FallbackNone {
		a.countFallback(reason.String())
		return nil, 0, nil
	}
	body, err := openai.SetMediaUUIDs(j.body, w.media, rt.VLLMUUIDs())
	if err != nil {
		a.countFallback("rewrite_failed")
		return nil, 0, nil
	}
	j.body = body
	if a.mmMetrics != nil {
		a.mmMetrics.routed.Inc()
	}
	// The zero padding of the tail makes a block that no engine ever stores; hash the expanded prompt.
	return rt.Tokens[:rt.ExpandedLen], rt.ExpandedLen, nil
}

func (a *OpenAIAPI) countFallback(reason string) {
	if a.mmMetrics != nil {
		a.mmMetrics.fallbacks.WithLabelValues(reason).Inc()
	}
}

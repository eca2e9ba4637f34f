package frontend

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/mm"
)

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// imageServer serves generated PNGs on loopback. /img/<name> honours Range (206); /norange/<name>
// ignores it (200 with the whole body), as some CDNs do.
type imageServer struct {
	base string
	pngs map[string][]byte

	mu   sync.Mutex
	full map[string]int // whole-file GETs (no Range header) per name, from any client
	// hold, until closed, stops /hold/ downloads after half their body.
	hold chan struct{}
}

// fullGets is the number of whole-file downloads of name so far.
func (s *imageServer) fullGets(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.full[name]
}

func pngOf(w, h int, seed uint8) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{R: seed, G: uint8(x), B: uint8(y), A: 255})
		}
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}

func startImageServer(t *testing.T) *imageServer {
	t.Helper()
	s := &imageServer{pngs: map[string][]byte{
		"cat.png": pngOf(320, 240, 1), "dog.png": pngOf(320, 240, 2), "copy-of-cat.png": pngOf(320, 240, 1),
	}}
	mux := http.NewServeMux()
	s.full = map[string]int{}
	mux.HandleFunc("/img/", func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/img/")
		b, ok := s.pngs[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Range") == "" {
			s.mu.Lock()
			s.full[name]++
			s.mu.Unlock()
		}
		http.ServeContent(w, r, "x.png", time.Time{}, bytes.NewReader(b))
	})
	s.hold = make(chan struct{})
	mux.HandleFunc("/hold/", func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.pngs[strings.TrimPrefix(r.URL.Path, "/hold/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		testutil.WriteHeld(w, r, b, s.hold)
	})
	mux.HandleFunc("/norange/", func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.pngs[strings.TrimPrefix(r.URL.Path, "/norange/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.base = "http://" + ln.Addr().String()
	return s
}

func imageChat(model string, urls []string, text string) string {
	var parts []string
	for _, u := range urls {
		parts = append(parts, fmt.Sprintf(`{"type":"image_url","image_url":{"url":%q}}`, u))
	}
	parts = append(parts, fmt.Sprintf(`{"type":"text","text":%q}`, text))
	return fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":[%s]}],"nvext":{"return_routing":true}}`, model, strings.Join(parts, ","))
}

// noHeaders is a request without headers (for Pick).
type noHeaders struct{}

func (noHeaders) Peek(string) []byte { return nil }

// waitPickOverlap waits until the router would give body at least blocks of overlap: the request path
// runs up to the routing decision (Pick), is not dispatched, and is freed. It waits for the KV events of
// an earlier request to be indexed when the worker already held blocks (waitOverlap cannot tell).
func (s *stack) waitPickOverlap(t *testing.T, body string, blocks uint32) {
	t.Helper()
	var last uint32
	testutil.Until(t, testutil.DefaultWait, fmt.Sprintf("an overlap of %d blocks", blocks), func() string {
		p, err := s.api.Pick("/v1/chat/completions", noHeaders{}, []byte(body), PickOptions{})
		if err != nil {
			return err.Error()
		}
		last = p.Route.OverlapBlocks
		p.End(200)
		if last < blocks {
			return fmt.Sprintf("overlap %d", last)
		}
		return ""
	})
}

func overlapOf(r reply) int {
	n, _ := strconv.Atoi(r.overlap)
	return n
}

func TestE2EImageRouting(t *testing.T) {
	imgs := startImageServer(t)
	s := startStack(t, stackOpts{workers: 3, speedup: 100, mm: true, allowHosts: []string{"127.0.0.1"}})
	cat := imgs.base + "/img/cat.png"

	// 320×240 on Qwen3-VL is 80 image tokens (5 blocks of 16) — the first request warms one worker.
	first := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{cat}, "What is in this picture?"))
	if first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	s.waitOverlap(t, "", first.worker)
	// The same image with different text after it: same worker, and the overlap covers the image blocks.
	second := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{cat}, "Describe the colours, in detail please."))
	if second.status != 200 || second.worker != first.worker || overlapOf(second) < 5 {
		t.Fatalf("same image: worker %s (first %s), overlap %s", second.worker, first.worker, second.overlap)
	}
	// The worker agrees: it reused the cached image blocks.
	usage := second.body["usage"].(map[string]any)
	if cached := usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); cached < 80 {
		t.Fatalf("worker reused only %v tokens", cached)
	}

	// The same bytes under another URL: a different identity by default (URL identity), so no image overlap.
	copyURL := imgs.base + "/img/copy-of-cat.png"
	third := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{copyURL}, "What is in this picture?"))
	if third.status != 200 || overlapOf(third) >= overlapOf(second) {
		t.Fatalf("different URL matched the image: overlap %s", third.overlap)
	}

	// Swapping two images' order changes the hashes: the swapped prompt shares only the text before them.
	dog := imgs.base + "/img/dog.png"
	ab := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{cat, dog}, "Compare them."))
	if ab.status != 200 {
		t.Fatalf("two images: %d %s", ab.status, ab.raw)
	}
	s.waitPickOverlap(t, imageChat(s.name, []string{cat, dog}, "Compare them again."), 10) // both images' blocks indexed
	ab2 := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{cat, dog}, "Compare them again."))
	ba := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{dog, cat}, "Compare them."))
	if overlapOf(ab2) < 10 || overlapOf(ba) >= overlapOf(ab2) {
		t.Fatalf("order: same order overlap %s, swapped overlap %s", ab2.overlap, ba.overlap)
	}

	// A server that ignores Range: text-only routing, counted, and the request still succeeds.
	nr := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/norange/dog.png"}, "hi"))
	if nr.status != 200 {
		t.Fatalf("no-range server: %d %s", nr.status, nr.raw)
	}
	if n := counterValue(s.api.mmMetrics.fallbacks.WithLabelValues("probe_failed")); n != 1 {
		t.Fatalf("probe_failed fallbacks counted: %v", n)
	}
	if n := counterValue(s.api.mmMetrics.routed); n < 5 {
		t.Fatalf("requests routed on images: %v", n)
	}

	// A private address without the allow flag is refused with a 400.
	strict := startStack(t, stackOpts{workers: 1, speedup: 100, mm: true})
	blocked := strict.post(t, "/v1/chat/completions", imageChat(strict.name, []string{cat}, "hi"))
	if blocked.status != 400 {
		t.Fatalf("private address: %d %s", blocked.status, blocked.raw)
	}
}

func TestE2EImageFrontendDecoding(t *testing.T) {
	imgs := startImageServer(t)
	s := startStack(t, stackOpts{workers: 3, speedup: 100, mm: true, allowHosts: []string{"127.0.0.1"}, decode: true})
	first := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/img/cat.png"}, "What is in this picture?"))
	if first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	s.waitOverlap(t, "", first.worker)
	// Same pixels under another URL: the content hash is the identity, so it matches.
	second := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/img/copy-of-cat.png"}, "What is in this picture?"))
	if second.status != 200 || second.worker != first.worker || overlapOf(second) < 5 {
		t.Fatalf("same pixels, other URL: worker %s (first %s), overlap %s", second.worker, first.worker, second.overlap)
	}
}

// With --frontend-decoding the frontend's image downloads are bounded per request
// (--mm-max-request-image-bytes: 413) and across requests (--mm-image-bytes-in-flight: a request that
// finds no room within the wait gets 429 with Retry-After), both as OpenAI errors, and a request within
// both is served.
func TestE2EImageDownloadBudgets(t *testing.T) {
	imgs := startImageServer(t)
	one := len(imgs.pngs["cat.png"])
	s := startStack(t, stackOpts{workers: 1, speedup: 100, mm: true, allowHosts: []string{"127.0.0.1"}, decode: true,
		mmBudget: func(pc *mm.ProbeConfig, rc *mm.ResolveConfig) {
			rc.MaxRequestBytes = int64(one * 3 / 2)
			pc.MaxFetchBytesInFlight, pc.FetchBudgetWait = int64(one*3/2), 300*time.Millisecond
		}})
	checkErr := func(name string, r reply, status int, typ string) {
		t.Helper()
		e, _ := r.body["error"].(map[string]any)
		if r.status != status || e == nil || e["type"] != typ || e["code"] != float64(status) {
			t.Fatalf("%s: %d %s, want %d %s", name, r.status, r.raw, status, typ)
		}
	}
	if r := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/img/cat.png"}, "one")); r.status != 200 {
		t.Fatalf("one image: %d %s", r.status, r.raw)
	}
	two := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/img/cat.png", imgs.base + "/img/dog.png"}, "two"))
	checkErr("two images past the request's bytes", two, 413, "invalid_request_error")

	held := make(chan reply, 1)
	go func() {
		held <- s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/hold/cat.png"}, "held"))
	}()
	prober := s.api.MM.Resolver.Prober()
	testutil.Eventually(t, "the held download's reservation", func() bool { return prober.FetchBytesInFlight() == int64(one) })
	busy := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/img/dog.png"}, "busy"))
	checkErr("no room in flight", busy, 429, "rate_limit_error")
	if busy.header.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After")
	}
	close(imgs.hold)
	if r := <-held; r.status != 200 {
		t.Fatalf("held download: %d %s", r.status, r.raw)
	}
	if n := prober.FetchBytesInFlight(); n != 0 {
		t.Fatalf("%d image bytes still reserved", n)
	}
	for reason, want := range map[string]float64{"too_large": 1, "busy": 1} {
		if n := counterValue(s.api.Metrics.mediaRefused.WithLabelValues(reason)); n != want {
			t.Fatalf("kvroute_media_refused_total{reason=%q} = %v, want %v", reason, n, want)
		}
	}
}

// With --mm-transfer the frontend preprocesses each image and hands the tensor to the chosen worker; the
// simulated worker uses it instead of fetching the URL, and nothing is left behind once the response
// has ended.
func TestE2EImageTransfer(t *testing.T) {
	for _, mode := range []string{"shm", "net"} {
		t.Run(mode, func(t *testing.T) {
			imgs := startImageServer(t)
			s := startStack(t, stackOpts{workers: 1, speedup: 100, mm: true, allowHosts: []string{"127.0.0.1"}, transfer: mode})
			for i := 0; i < 3; i++ {
				r := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/img/cat.png"}, fmt.Sprint("look ", i)))
				if r.status != 200 {
					t.Fatalf("%d %s", r.status, r.raw)
				}
			}
			resp, err := http.Get(s.fleet.Workers[0].URL() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			var metrics bytes.Buffer
			_, _ = metrics.ReadFrom(resp.Body)
			resp.Body.Close()
			want := fmt.Sprintf(`path=%q} 3`, mode)
			if !strings.Contains(metrics.String(), want) {
				t.Fatalf("worker metrics lack %s:\n%s", want, grepLines(metrics.String(), "mm_kwargs"))
			}
			if n := counterValue(s.api.mmMetrics.transfers.WithLabelValues(mode)); n != 3 {
				t.Fatalf("frontend counted %v %s transfers", n, mode)
			}
			if live := s.sender.Live(); live != 0 {
				t.Fatalf("%d transfer items still held after the responses ended", live)
			}
			// A client may not choose where the worker reads from.
			evil := strings.Replace(imageChat(s.name, []string{imgs.base + "/img/cat.png"}, "x"), `"image_url":{`, `"mm_kwargs":{"kind":"net","addr":"10.0.0.1:1"},"image_url":{`, 1)
			if r := s.post(t, "/v1/chat/completions", evil); r.status != 400 {
				t.Fatalf("client-supplied mm_kwargs: %d %s", r.status, r.raw)
			}
		})
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The same image bytes sent as data: URIs under different MIME labels and parameters are one image: one
// identity (the decoded payload's hash), one worker, and the image blocks in the overlap — as much as an
// exact repeat of the first URI gets.
func TestE2EDataURISameBytesOneImage(t *testing.T) {
	s := startStack(t, stackOpts{workers: 3, speedup: 100, mm: true})
	b64 := base64.StdEncoding.EncodeToString(pngOf(320, 240, 7))
	const text = "What is in this picture?"
	first := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{"data:image/png;base64," + b64}, text))
	if first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	s.waitOverlap(t, "", first.worker)
	repeat := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{"data:image/png;base64," + b64}, text))
	// 320×240 on Qwen3-VL is 80 image tokens: the exact repeat covers at least those 5 blocks.
	if repeat.status != 200 || repeat.worker != first.worker || overlapOf(repeat) < 5 {
		t.Fatalf("exact repeat: worker %s (first %s), overlap %s", repeat.worker, first.worker, repeat.overlap)
	}
	for _, label := range []string{"image/jpeg", "application/octet-stream", "image/png;name=cat.png", ""} {
		r := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{"data:" + label + ";base64," + b64}, text))
		if r.status != 200 || r.worker != first.worker || overlapOf(r) != overlapOf(repeat) {
			t.Fatalf("label %q: worker %s (first %s), overlap %s (exact repeat %s)", label, r.worker, first.worker, r.overlap, repeat.overlap)
		}
		usage := r.body["usage"].(map[string]any)
		if cached := usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); cached < 80 {
			t.Fatalf("label %q: the worker reused only %v tokens", label, cached)
		}
	}
	// Other bytes under the first label: a different image, so its blocks are not in the overlap.
	other := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{"data:image/png;base64," + base64.StdEncoding.EncodeToString(pngOf(320, 240, 8))}, text))
	if other.status != 200 || overlapOf(other) >= overlapOf(repeat) {
		t.Fatalf("different bytes: overlap %s, repeat %s", other.overlap, repeat.overlap)
	}
	if n := counterValue(s.api.mmMetrics.routed); n != 7 {
		t.Fatalf("requests routed on images: %v, want 7", n)
	}
}

// With --frontend-decoding the frontend downloads each new image once: the same bytes give its identity
// and size, feed the mm_kwargs transfer when there is one, and go to the worker inline as a data: URI,
// so the worker fetches nothing, with or without --mm-transfer. The image server counts whole-file
// downloads from every client.
func TestE2EFrontendDecodingOneDownload(t *testing.T) {
	for _, mode := range []string{"", "shm"} {
		t.Run("transfer="+mode, func(t *testing.T) {
			imgs := startImageServer(t)
			s := startStack(t, stackOpts{workers: 2, speedup: 100, mm: true, allowHosts: []string{"127.0.0.1"}, decode: true, transfer: mode})
			for i, name := range []string{"cat.png", "dog.png"} {
				r := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{imgs.base + "/img/" + name}, "What is in this picture?"))
				if r.status != 200 {
					t.Fatalf("%s: %d %s", name, r.status, r.raw)
				}
				if n := imgs.fullGets(name); n != 1 {
					t.Fatalf("%s: %d whole downloads, want 1", name, n)
				}
				if mode == "" {
					continue
				}
				if n := counterValue(s.api.mmMetrics.transfers.WithLabelValues(mode)); n != float64(i+1) {
					t.Fatalf("%s: %v %s transfers", name, n, mode)
				}
			}
			if p := s.api.MM.Resolver.Prober().Stats(); p.Requests != 2 {
				t.Fatalf("the frontend sent %d image requests for two images", p.Requests)
			}
			if n := counterValue(s.api.mmMetrics.routed); n != 2 {
				t.Fatalf("routed on images: %v, want 2", n)
			}
			// The inlined bytes were held by the requests' bodies until they ended, then given back.
			testutil.Eventually(t, "the inline budget back to 0", func() bool { return s.api.MM.Inline.InUse() == 0 })
		})
	}
}

package mm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
)

// budgetServer serves images three ways: /cl/ with a Content-Length, /chunked/ without one, and /hold/
// with a Content-Length but only half the body until hold is closed.
type budgetServer struct {
	*httptest.Server
	files map[string][]byte
	hold  chan struct{}
	gets  sync.Map // path → *atomic.Int64
}

func newBudgetServer(t *testing.T, files map[string][]byte) *budgetServer {
	s := &budgetServer{files: files, hold: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := s.gets.LoadOrStore(r.URL.Path, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		mode, name, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		b, ok := s.files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		switch mode {
		case "cl":
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			_, _ = w.Write(b)
		case "chunked":
			_, _ = w.Write(b[:1])
			w.(http.Flusher).Flush() // headers out without a length: chunked
			_, _ = w.Write(b[1:])
		case "hold":
			testutil.WriteHeld(w, r, b, s.hold)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// requested reports whether path was asked for.
func (s *budgetServer) requested(path string) bool {
	n, ok := s.gets.Load(path)
	return ok && n.(*atomic.Int64).Load() > 0
}

func budgetProber(t *testing.T, inFlight int64, wait time.Duration) *Prober {
	cfg := DefaultProbeConfig()
	cfg.Timeout = 10 * time.Second
	cfg.AllowHosts = []string{"127.0.0.1"}
	cfg.MaxFetchBytesInFlight, cfg.FetchBudgetWait = inFlight, wait
	p, err := NewProber(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func decodingResolver(t *testing.T, p *Prober, requestBytes int64) *Resolver {
	cfg := DefaultResolveConfig()
	cfg.FrontendDecoding, cfg.MaxRequestBytes = true, requestBytes
	r, err := NewResolver(qwen3Spec(), p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// With --frontend-decoding one request's downloads together read at most MaxRequestBytes: past it the
// request is refused (ErrTooLarge, FallbackTooLarge), whether the server declares lengths or not, and a
// request within it resolves. A declared length past the image's own bound is refused before reading.
func TestRequestImageBytes(t *testing.T) {
	files := map[string][]byte{}
	for i := 0; i < 3; i++ {
		files[fmt.Sprint(i, ".png")] = encodePNG(t, 200, 100+i)
	}
	size := len(files["0.png"])
	srv := newBudgetServer(t, files)
	for _, mode := range []string{"cl", "chunked"} {
		t.Run(mode, func(t *testing.T) {
			p := budgetProber(t, DefaultMaxFetchBytesInFlight, 2*time.Second)
			r := decodingResolver(t, p, int64(size*5/2)) // two images, not three
			two := urls(srv.URL, "/"+mode+"/0.png", "/"+mode+"/1.png")
			if images, reason := resolve(t, r, two...); reason != FallbackNone {
				t.Fatalf("two images within the bound: %s %v", reason, images)
			}
			three := urls(srv.URL, "/"+mode+"/0.png", "/"+mode+"/1.png", "/"+mode+"/2.png")
			images, reason := resolve(t, r, three...)
			if reason != FallbackTooLarge || !errors.Is(firstImageErr(images), ErrTooLarge) {
				t.Fatalf("three images past the bound: %s %v", reason, images)
			}
			if n := p.fetching.inUse(); n != 0 {
				t.Fatalf("%d bytes still reserved after the requests", n)
			}
		})
	}
	p := budgetProber(t, DefaultMaxFetchBytesInFlight, 2*time.Second)
	if _, err := p.Fetch(context.Background(), srv.URL+"/cl/0.png", size-1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("declared length past the image bound: %v", err)
	}
	if _, err := p.Fetch(context.Background(), srv.URL+"/chunked/0.png", size-1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("undeclared length past the image bound: %v", err)
	}
}

func firstImageErr(images []Image) error {
	for _, im := range images {
		if im.Err != nil {
			return im.Err
		}
	}
	return nil
}

// The process's image bytes in flight never pass MaxFetchBytesInFlight: a download that finds no room
// waits at most FetchBudgetWait and fails with ErrBusy (FallbackBusy), one that finds room within it
// proceeds, and an image larger than the whole budget is refused at once (ErrTooLarge).
func TestImageBytesInFlight(t *testing.T) {
	a, b := encodePNG(t, 200, 100), encodePNG(t, 200, 101)
	srv := newBudgetServer(t, map[string][]byte{"a.png": a, "b.png": b})
	const wait = 500 * time.Millisecond
	p := budgetProber(t, int64(len(b)+len(b)/4), wait) // room for one image, not two
	r := decodingResolver(t, p, DefaultMaxRequestBytes)

	held := make(chan FallbackReason, 1)
	go func() {
		_, reason := resolve(t, r, Part{URL: srv.URL + "/hold/a.png"})
		held <- reason
	}()
	testutil.Eventually(t, "the held download's reservation", func() bool { return p.fetching.inUse() == uint64(len(a)) })

	start := time.Now()
	images, reason := resolve(t, r, Part{URL: srv.URL + "/cl/b.png"})
	if reason != FallbackBusy || !errors.Is(images[0].Err, ErrBusy) || p.Stats().Busy != 1 {
		t.Fatalf("no room: %s %v, busy %d", reason, images, p.Stats().Busy)
	}
	if d := time.Since(start); d < wait || d > wait+5*time.Second {
		t.Fatalf("refused after %v, want the %v wait", d, wait)
	}
	if n := p.fetching.inUse(); n != uint64(len(a)) {
		t.Fatalf("%d bytes in flight after the refusal, want %d", n, len(a))
	}
	// A request that ends while it waits is not a refusal for want of room.
	ctx, cancel := context.WithTimeout(context.Background(), wait/10)
	images, _ = r.Resolve(ctx, []Part{{URL: srv.URL + "/cl/b.png"}}, nil)
	cancel()
	if !errors.Is(images[0].Err, ErrFetch) || p.Stats().Busy != 1 {
		t.Fatalf("a request ended while waiting: %v, busy %d", images[0].Err, p.Stats().Busy)
	}

	// A download that finds room within its wait goes ahead.
	p2 := budgetProber(t, int64(len(b)+len(b)/4), 10*time.Second)
	r2 := decodingResolver(t, p2, DefaultMaxRequestBytes)
	srv2 := newBudgetServer(t, map[string][]byte{"a.png": a, "b.png": b})
	first := make(chan FallbackReason, 1)
	go func() {
		_, reason := resolve(t, r2, Part{URL: srv2.URL + "/hold/a.png"})
		first <- reason
	}()
	testutil.Eventually(t, "the held download's reservation", func() bool { return p2.fetching.inUse() == uint64(len(a)) })
	second := make(chan FallbackReason, 1)
	go func() {
		_, reason := resolve(t, r2, Part{URL: srv2.URL + "/cl/b.png"})
		second <- reason
	}()
	testutil.Eventually(t, "the second download's request", func() bool { return srv2.requested("/cl/b.png") })
	close(srv2.hold)
	if got := <-first; got != FallbackNone {
		t.Fatalf("held download: %s", got)
	}
	if got := <-second; got != FallbackNone {
		t.Fatalf("waiting download: %s", got)
	}
	if n := p2.fetching.inUse(); n != 0 {
		t.Fatalf("%d bytes reserved after both requests", n)
	}

	close(srv.hold)
	if got := <-held; got != FallbackNone {
		t.Fatalf("held download: %s", got)
	}
	if n := p.fetching.inUse(); n != 0 {
		t.Fatalf("%d bytes reserved after every request", n)
	}

	small := budgetProber(t, int64(len(a)/2), wait)
	if _, err := small.Fetch(context.Background(), srv.URL+"/cl/a.png", 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("an image larger than the whole budget: %v", err)
	}
}

// A decode that finds no room among the pixels being decoded waits at most FetchBudgetWait and fails
// with ErrBusy (FallbackBusy, counted busy), as a download does; with room it decodes.
func TestDecodeBusy(t *testing.T) {
	a := encodePNG(t, 200, 100)
	srv := newBudgetServer(t, map[string][]byte{"a.png": a})
	const wait = 100 * time.Millisecond
	p := budgetProber(t, DefaultMaxFetchBytesInFlight, wait)
	r := decodingResolver(t, p, DefaultMaxRequestBytes)
	if err := p.decoding.take(context.Background(), MaxDecodePixelsInFlight); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	images, reason := resolve(t, r, Part{URL: srv.URL + "/cl/a.png"})
	if reason != FallbackBusy || !errors.Is(images[0].Err, ErrBusy) || p.Stats().Busy != 1 {
		t.Fatalf("no room to decode: %s %v, busy %d", reason, images, p.Stats().Busy)
	}
	if d := time.Since(start); d < wait {
		t.Fatalf("refused after %v, before the %v wait", d, wait)
	}
	if n := p.fetching.inUse(); n != 0 {
		t.Fatalf("%d bytes still reserved after the refusal", n)
	}
	p.decoding.give(MaxDecodePixelsInFlight)
	if images, reason := resolve(t, r, Part{URL: srv.URL + "/cl/a.png"}); reason != FallbackNone || images[0].Err != nil {
		t.Fatalf("with room: %s %v", reason, images)
	}
}

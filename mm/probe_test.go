package mm

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/testutil"
)

// imageServer is a loopback HTTP server of image files that honours Range (http.ServeContent) and
// records what it was asked.
type imageServer struct {
	*httptest.Server
	files    map[string][]byte
	requests atomic.Int64
	mu       sync.Mutex
	ranges   []string
	gate     chan struct{} // when non-nil, every request waits for it to close
	fail     atomic.Int64  // answer this many requests with 500 first
	ignore   bool          // answer 200 with the whole body, ignoring Range
}

func newImageServer(t testing.TB, files map[string][]byte) *imageServer {
	s := &imageServer{files: files}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *imageServer) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.mu.Lock()
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if s.fail.Load() > 0 {
		s.fail.Add(-1)
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	}
	data, ok := s.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if s.ignore {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(data)
		return
	}
	http.ServeContent(w, r, r.URL.Path, time.Time{}, bytes.NewReader(data))
}

func (s *imageServer) rangesSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ranges...)
}

func newTestProber(t testing.TB, clk clock.Clock, allow ...string) *Prober {
	cfg := DefaultProbeConfig()
	cfg.Timeout = 5 * time.Second
	cfg.AllowHosts = allow
	p, err := NewProber(cfg, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func probe(t testing.TB, p *Prober, url string) (Size, error) {
	t.Helper()
	h, _, err := HashURL(url)
	if err != nil {
		return Size{}, err // a malformed data: URI fails at its identity already
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Size(ctx, url, h)
}

func TestProbeRangeRequests(t *testing.T) {
	srv := newImageServer(t, map[string][]byte{
		"/a.png":    encodePNG(t, 640, 480),
		"/b.jpg":    encodeJPEG(t, 337, 511),
		"/big.jpg":  jpegWithMetadata(t, 100, 50, 2),
		"/huge.jpg": jpegWithMetadata(t, 100, 50, 20),
		"/t.txt":    []byte(strings.Repeat("not an image ", 10)),
	})
	p := newTestProber(t, nil, "127.0.0.1")
	tests := []struct {
		path     string
		want     Size
		ranges   []string
		errClass error
	}{
		{"/a.png", Size{640, 480}, []string{"bytes=0-4095"}, nil},
		{"/b.jpg", Size{337, 511}, []string{"bytes=0-4095"}, nil},
		{"/big.jpg", Size{100, 50}, []string{"bytes=0-4095", "bytes=0-65535", "bytes=0-131071", "bytes=0-262143"}, nil},
		{"/huge.jpg", Size{}, []string{"bytes=0-4095", "bytes=0-65535", "bytes=0-131071", "bytes=0-262143", "bytes=0-524287", "bytes=0-1048575"}, ErrHeader},
		{"/t.txt", Size{}, []string{"bytes=0-4095", "bytes=0-65535"}, ErrHeader},
		{"/missing.png", Size{}, []string{"bytes=0-4095"}, ErrNoRange},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			before := len(srv.rangesSeen())
			sz, err := probe(t, p, srv.URL+tc.path)
			if tc.errClass != nil {
				if !errors.Is(err, tc.errClass) {
					t.Fatalf("err %v, want %v", err, tc.errClass)
				}
			} else if err != nil || sz != tc.want {
				t.Fatalf("got %v %v", sz, err)
			}
			got := srv.rangesSeen()[before:]
			if strings.Join(got, " ") != strings.Join(tc.ranges, " ") {
				t.Fatalf("ranges %v, want %v", got, tc.ranges)
			}
		})
	}
	// A second probe of a good image is a cache hit: no request.
	n := srv.requests.Load()
	if sz, err := probe(t, p, srv.URL+"/a.png"); err != nil || sz != (Size{640, 480}) || srv.requests.Load() != n {
		t.Fatalf("warm probe: %v %v, %d requests", sz, err, srv.requests.Load()-n)
	}
	st := p.Stats()
	if st.Hits != 1 || st.Errors != 3 || st.NoRange != 1 || st.HeaderKO != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestProbeIgnoresRange: a 200 reply fails the probe without reading the body.
func TestProbeIgnoresRange(t *testing.T) {
	big := append(encodePNG(t, 64, 64), make([]byte, 8<<20)...)
	srv := newImageServer(t, map[string][]byte{"/a.png": big})
	srv.ignore = true
	p := newTestProber(t, nil, "127.0.0.1")
	_, err := probe(t, p, srv.URL+"/a.png")
	if !errors.Is(err, ErrNoRange) {
		t.Fatalf("err %v", err)
	}
	if srv.requests.Load() != 1 {
		t.Fatalf("%d requests, want 1 (no retry)", srv.requests.Load())
	}
}

func TestProbeErrorsNotCached(t *testing.T) {
	srv := newImageServer(t, map[string][]byte{"/a.png": encodePNG(t, 10, 20)})
	srv.fail.Store(1)
	p := newTestProber(t, nil, "127.0.0.1")
	if _, err := probe(t, p, srv.URL+"/a.png"); !errors.Is(err, ErrNoRange) {
		t.Fatalf("first: %v", err)
	}
	if sz, err := probe(t, p, srv.URL+"/a.png"); err != nil || sz != (Size{10, 20}) {
		t.Fatalf("second: %v %v", sz, err)
	}
	if p.CacheLen() != 1 {
		t.Fatalf("cache len %d", p.CacheLen())
	}
}

func TestProbeSingleFlight(t *testing.T) {
	srv := newImageServer(t, map[string][]byte{"/a.png": encodePNG(t, 30, 40)})
	gate := make(chan struct{})
	srv.gate = gate
	p := newTestProber(t, nil, "127.0.0.1")
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sz, err := probe(t, p, srv.URL+"/a.png")
			if err == nil && sz != (Size{30, 40}) {
				err = errors.New("wrong size")
			}
			errs <- err
		}()
	}
	// Wait until the one fetch reached the server and every caller joined it, then release.
	deadline := time.Now().Add(5 * time.Second)
	for srv.requests.Load() < 1 || p.Stats().Shared+p.Stats().Misses < n {
		if time.Now().After(deadline) {
			t.Fatalf("callers did not join: %+v", p.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := srv.requests.Load(); got != 1 {
		t.Fatalf("%d requests, want 1", got)
	}
}

// TestProbeWaiterCancel: a caller whose ctx ends stops waiting; the shared fetch still completes and
// is cached for the others.
// A waiter that gives up does not fail the others sharing its fetch; when the last one gives up (every
// client left) the fetch is cancelled and forgotten, and the next caller starts a new one.
func TestProbeWaiterCancel(t *testing.T) {
	tests := []struct {
		name         string
		stay         bool  // a second waiter keeps waiting
		wantRequests int64 // image requests in all
	}{
		{"another waiter stays", true, 1},
		{"last waiter leaves", false, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newImageServer(t, map[string][]byte{"/a.png": encodePNG(t, 5, 6)})
			gate := make(chan struct{})
			srv.gate = gate
			p := newTestProber(t, nil, "127.0.0.1")
			url := srv.URL + "/a.png"
			h, _, _ := HashURL(url)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { _, err := p.Size(ctx, url, h); done <- err }()
			testutil.Eventually(t, "the fetch", func() bool { return srv.requests.Load() >= 1 })
			stayed := make(chan error, 1)
			if tc.stay {
				go func() { _, err := p.Size(context.Background(), url, h); stayed <- err }()
				testutil.Eventually(t, "the second waiter", func() bool { return p.Stats().Shared == 1 })
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v", err)
			}
			close(gate)
			if tc.stay {
				if err := <-stayed; err != nil {
					t.Fatalf("the waiter that stayed: %v", err)
				}
			} else if _, err := p.Size(context.Background(), url, h); err != nil {
				t.Fatalf("the next caller: %v", err)
			}
			if n := srv.requests.Load(); n != tc.wantRequests {
				t.Fatalf("%d image requests, want %d", n, tc.wantRequests)
			}
			if p.CacheLen() != 1 {
				t.Fatal("size not cached")
			}
		})
	}
}

func TestProbeCacheTTL(t *testing.T) {
	srv := newImageServer(t, map[string][]byte{"/a.png": encodePNG(t, 7, 8)})
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	p := newTestProber(t, clk, "127.0.0.1")
	url := srv.URL + "/a.png"
	for _, step := range []struct {
		advance  time.Duration
		requests int64
	}{{0, 1}, {time.Hour, 1}, {23*time.Hour - time.Second, 1}, {time.Second, 2}, {time.Minute, 2}} {
		clk.Advance(step.advance)
		if _, err := probe(t, p, url); err != nil {
			t.Fatal(err)
		}
		if got := srv.requests.Load(); got != step.requests {
			t.Fatalf("after +%v: %d requests, want %d", step.advance, got, step.requests)
		}
	}
}

func TestSizeCacheLRU(t *testing.T) {
	c := newSizeCache(sizeCacheShards*2, time.Hour, clock.Wall{})
	// Keys in shard 0: multiples of the shard count.
	k := func(i int) Hash { return Hash(i * sizeCacheShards) }
	c.put(k(1), Size{1, 1})
	c.put(k(2), Size{2, 2})
	c.get(k(1)) // k(2) is now the least recent
	c.put(k(3), Size{3, 3})
	if _, ok := c.get(k(2)); ok {
		t.Fatal("LRU entry not evicted")
	}
	for _, i := range []int{1, 3} {
		if sz, ok := c.get(k(i)); !ok || sz.W != uint32(i) {
			t.Fatalf("entry %d lost", i)
		}
	}
}

func TestProbeDataURI(t *testing.T) {
	p := newTestProber(t, nil)
	uri := "data:image/png;base64," + base64.StdEncoding.EncodeToString(encodePNG(t, 123, 45))
	sz, err := probe(t, p, uri)
	if err != nil || sz != (Size{123, 45}) {
		t.Fatalf("%v %v", sz, err)
	}
	if _, err := probe(t, p, "data:image/png;base64,@@@@"); !errors.Is(err, ErrBadDataURI) {
		t.Fatalf("bad base64: %v", err)
	}
	if _, err := probe(t, p, "s3://bucket/a.png"); !errors.Is(err, ErrUnsupportedScheme) {
		t.Fatalf("s3: %v", err)
	}
}

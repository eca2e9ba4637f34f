package frontend

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/testutil"
)

// hangServer serves one PNG under /range/ (Range requests held), /get/ (whole-file GETs held, ranges
// answered) and /img/ (nothing held). A held request waits until its caller goes away and is counted
// when it arrives and when it is cancelled.
type hangServer struct {
	base               string
	png                []byte
	arrived, cancelled atomic.Int32
}

func startHangServer(t *testing.T) *hangServer {
	t.Helper()
	s := &hangServer{png: pngOf(320, 240, 7)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ranged := r.Header.Get("Range") != ""
		hold := (ranged && strings.HasPrefix(r.URL.Path, "/range/")) || (!ranged && strings.HasPrefix(r.URL.Path, "/get/"))
		if hold {
			s.arrived.Add(1)
			select {
			case <-r.Context().Done():
				s.cancelled.Add(1)
			case <-time.After(time.Minute): // bounded: a broken cancellation fails the test, not the run
			}
			return
		}
		http.ServeContent(w, r, "x.png", time.Time{}, bytes.NewReader(s.png))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.base = "http://" + ln.Addr().String()
	return s
}

// postAndHangUp sends body to the frontend on a raw connection, waits for arrived, and closes the
// connection without reading an answer.
func postAndHangUp(t *testing.T, base, body string, arrived func() bool) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	testutil.Eventually(t, "the request in flight", arrived)
	_ = c.Close()
}

// A client that disconnects mid-request cancels what the request has in flight: the image fetch of the
// size probe, the mm_kwargs transfer's download, the worker call. Each stage is held open by its server
// until the request's context ends; without the client watch they would run to their own timeouts (10 s
// probe, 30 s request, a 2000-token generation at real speed). One stack serves the cases (a stack costs
// seconds to start under the race detector) and, with a request that completes, checks that the
// frontend's stages are timed into histograms beside the router's.
func TestClientGoneCancelsStages(t *testing.T) {
	const within = 3 * time.Second
	img := startHangServer(t)
	reg := prometheus.NewRegistry()
	s := startStack(t, stackOpts{workers: 1, speedup: 1, mm: true, allowHosts: []string{"127.0.0.1"}, transfer: "shm", registry: reg})
	tests := []struct {
		name, body, what string
		inFlight         func() bool
		cancelled        func() bool
	}{
		{"image fetch", imageChat(s.name, []string{img.base + "/range/cat.png"}, "look"), "the probe's range request cancelled",
			func() bool { return img.arrived.Load() == 1 }, func() bool { return img.cancelled.Load() == 1 }},
		{"transfer", imageChat(s.name, []string{img.base + "/get/cat.png"}, "look"), "the transfer's download cancelled",
			func() bool { return img.arrived.Load() == 2 }, func() bool { return img.cancelled.Load() == 2 }},
		{"worker call", `{"model":"` + s.name + `","max_tokens":2000,"ignore_eos":true,"messages":[{"role":"user","content":"write at length"}]}`,
			"the worker call cancelled", func() bool { return s.fleet.Workers[0].Stats(0).Running == 1 }, func() bool { return s.router.ActiveRequests() == 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			postAndHangUp(t, s.base, tc.body, tc.inFlight)
			testutil.Within(t, within, tc.what, tc.cancelled)
			testutil.Within(t, within, "the request ended", func() bool { return s.api.InFlight() == 0 })
			if live := s.sender.Live(); live != 0 {
				t.Fatalf("%d transfer items held after the request ended", live)
			}
		})
	}
	t.Run("stages timed", func(t *testing.T) {
		if r := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img.base + "/img/cat.png"}, "look")); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]uint64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if h := m.GetHistogram(); h != nil {
					counts[mf.GetName()] += h.GetSampleCount()
				}
			}
		}
		// parse and tokenize: every request so far; images: those whose image stage finished while their
		// client waited (the transfer case's and this one: the first left while its probe hung); the
		// routing decision: the three that got that far (the transfer case routes while its download runs,
		// the worker call, this one).
		for name, want := range map[string]uint64{"kvroute_frontend_overhead_parse_ms": 4, "kvroute_frontend_overhead_tokenize_ms": 4,
			"kvroute_frontend_overhead_images_ms": 2, "dynamo_router_overhead_total_ms": 3} {
			if counts[name] != want {
				t.Errorf("%s observed %d times, want %d", name, counts[name], want)
			}
		}
	})
}

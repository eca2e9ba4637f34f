package client

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/mocker"
)

// startMocker starts a simulated vLLM worker on 127.0.0.1 (no KV events) with block size 16.
func startMocker(t *testing.T, mod func(*mocker.WorkerConfig)) *mocker.Worker {
	t.Helper()
	cfg := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig()}
	cfg.Engine.BlockSize = 16
	cfg.Engine.NumGPUBlocks = 256
	cfg.Engine.SpeedupRatio = 1000
	cfg.ServedModelName = "m"
	if mod != nil {
		mod(&cfg)
	}
	w, err := mocker.StartWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func newEndpoint(t *testing.T, url string, cfg Config) *Endpoint {
	t.Helper()
	e, err := NewEndpoint(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

var longPrompt = strings.Repeat("the quick brown fox jumps over the lazy dog ", 8)

func chatBody(stream bool, maxTokens int) []byte {
	s := `{"model":"m","messages":[{"role":"user","content":"` + longPrompt + `"}],"max_tokens":` + itoa(maxTokens)
	if stream {
		s += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return []byte(s + "}")
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestDoMockerChatAndCompletion(t *testing.T) {
	w := startMocker(t, nil)
	e := newEndpoint(t, w.URL(), Config{})
	ctx := context.Background()
	var resp Response
	for i := range 3 {
		if err := e.Do(ctx, &Request{Path: "/v1/chat/completions", Body: chatBody(false, 4)}, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Status != 200 || !resp.HasUsage || resp.Usage.CompletionTokens != 4 || resp.Usage.PromptTokens < 300 {
			t.Fatalf("request %d: status %d usage %+v body %s", i, resp.Status, resp.Usage, resp.Body)
		}
		if string(resp.ContentType) != "application/json" || !strings.Contains(string(resp.Body), `"chat.completion"`) {
			t.Fatalf("content type %q body %s", resp.ContentType, resp.Body)
		}
		// The same prompt again hits the worker's prefix cache: whole blocks of it.
		if cached := resp.Usage.CachedTokens(); i > 0 && (cached == 0 || cached%16 != 0) {
			t.Fatalf("request %d: cached tokens %d", i, cached)
		}
	}
	if err := e.Do(ctx, &Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":[1,2,3,4,5],"max_tokens":3}`)}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || resp.Usage.PromptTokens != 5 || resp.Usage.CompletionTokens != 3 {
		t.Fatalf("completion: %d %+v", resp.Status, resp.Usage)
	}
	// A 4xx is the request's fault: a normal response to forward, not an error.
	if err := e.Do(ctx, &Request{Path: "/v1/completions", Body: []byte(`{"model":"m"}`)}, &resp); err != nil || resp.Status != 400 {
		t.Fatalf("bad request: err %v status %d", err, resp.Status)
	}
	if st := e.Stats(); st.Dials != 1 || st.Reuses != 4 || st.Active != 0 || st.Idle != 1 {
		t.Fatalf("sequential requests should share one connection: %+v", st)
	}
}

func TestStreamMocker(t *testing.T) {
	w := startMocker(t, nil)
	e := newEndpoint(t, w.URL(), Config{})
	for _, tc := range []struct {
		name, path string
		body       []byte
	}{
		{"chat", "/v1/chat/completions", chatBody(true, 5)},
		{"completion", "/v1/completions", []byte(`{"model":"m","prompt":"` + longPrompt + `","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)},
		{"chat again", "/v1/chat/completions", chatBody(true, 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var firsts atomic.Int32
			s, err := e.Stream(context.Background(), &Request{Path: tc.path, Body: tc.body}, func() { firsts.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Status() != 200 || !strings.HasPrefix(string(s.ContentType()), "text/event-stream") {
				t.Fatalf("status %d content type %q", s.Status(), s.ContentType())
			}
			var events, firstAt, usageAt, doneAt int
			var raw strings.Builder
			for {
				ev, err := s.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				events++
				raw.Write(ev.Raw)
				if !strings.HasPrefix(string(ev.Raw), "data: ") || !strings.HasSuffix(string(ev.Raw), "\n\n") {
					t.Fatalf("event not passed through as received: %q", ev.Raw)
				}
				if ev.FirstToken {
					if firstAt != 0 {
						t.Fatal("two first-token events")
					}
					firstAt = events
					if firsts.Load() != 1 {
						t.Fatalf("callback not called before Next returned the first token event")
					}
				}
				if ev.HasUsage {
					usageAt = events
				}
				if ev.Done {
					doneAt = events
				}
			}
			u, ok := s.Usage()
			if !ok || u.CompletionTokens != 5 || u.PromptTokens == 0 {
				t.Fatalf("usage %+v %v", u, ok)
			}
			if tc.name == "chat again" && u.CachedTokens() == 0 {
				t.Fatalf("repeated prompt: no cached tokens")
			}
			// chat: role chunk, 5 tokens, usage, [DONE]; completions: no role chunk.
			want := 7
			if tc.name != "completion" {
				want = 8
			}
			wantFirst := want - 6
			if events != want || firstAt != wantFirst || usageAt != want-1 || doneAt != want || firsts.Load() != 1 {
				t.Fatalf("events %d first %d usage %d done %d callbacks %d\n%s", events, firstAt, usageAt, doneAt, firsts.Load(), raw.String())
			}
		})
	}
	if st := e.Stats(); st.Dials != 1 {
		t.Fatalf("streams read to the end should reuse the connection: %+v", st)
	}
}

// TestCancelAbortsWorkerRequest: a client disconnect (context canceled) closes the upstream connection,
// and the worker aborts the request, as vLLM does.
func TestCancelAbortsWorkerRequest(t *testing.T) {
	w := startMocker(t, func(c *mocker.WorkerConfig) { c.Engine.SpeedupRatio = 1 })
	e := newEndpoint(t, w.URL(), Config{})
	for _, stream := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		req := &Request{Path: "/v1/chat/completions", Body: chatBody(stream, 3000)}
		done := make(chan error, 1)
		go func() {
			if !stream {
				var resp Response
				done <- e.Do(ctx, req, &resp)
				return
			}
			s, err := e.Stream(ctx, req, nil)
			if err != nil {
				done <- err
				return
			}
			defer s.Close()
			for {
				if _, err := s.Next(); err != nil {
					done <- err
					return
				}
			}
		}()
		testutil.Eventually(t, "the worker to run the request", func() bool { return w.Stats(0).Running == 1 })
		cancel()
		err := <-done
		if !errors.Is(err, ErrCanceled) || !errors.Is(err, context.Canceled) || Retryable(err) {
			t.Fatalf("stream=%v: %v", stream, err)
		}
		if !stream {
			// The mocker notices a disconnect only when it writes (streaming); vLLM aborts both kinds.
			continue
		}
		testutil.Eventually(t, "the worker to abort the request", func() bool { return w.Idle() })
	}
	if st := e.Stats(); st.Active != 0 || st.Idle != 0 {
		t.Fatalf("canceled connections must be closed, not pooled: %+v", st)
	}
}

func TestMockerHealthAndMetrics(t *testing.T) {
	w := startMocker(t, func(c *mocker.WorkerConfig) { c.DPSize = 2 })
	e := newEndpoint(t, w.URL(), Config{})
	ctx := context.Background()
	if err := e.Health(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := e.ScrapeMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.BlockSize != 16 || m.NumGPUBlocks != 256 || len(m.Engines) != 2 || m.Running != 0 || m.KVUsage != 0 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestMetricsSeeRunningRequest(t *testing.T) {
	w := startMocker(t, func(c *mocker.WorkerConfig) { c.Engine.SpeedupRatio = 1 })
	e := newEndpoint(t, w.URL(), Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := e.Stream(ctx, &Request{Path: "/v1/chat/completions", Body: chatBody(true, 3000)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testutil.Eventually(t, "running=1 in /metrics", func() bool {
		m, err := e.ScrapeMetrics(context.Background())
		return err == nil && m.Running == 1 && m.KVUsage > 0
	})
	if st := e.Stats(); st.Dials != 2 {
		t.Fatalf("a scrape during a stream needs a second connection: %+v", st)
	}
}

// TestHeadersReachWorker: Request.Headers go out as given (vLLM reads X-data-parallel-rank).
func TestHeadersReachWorker(t *testing.T) {
	w := startMocker(t, func(c *mocker.WorkerConfig) { c.DPSize = 2 })
	e := newEndpoint(t, w.URL(), Config{})
	var resp Response
	req := &Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":[1,2,3],"max_tokens":2}`),
		Headers: []Header{{Key: "X-data-parallel-rank", Value: "1"}}}
	if err := e.Do(context.Background(), req, &resp); err != nil || resp.Status != 200 {
		t.Fatalf("%v %d %s", err, resp.Status, resp.Body)
	}
	if w.Stats(1).PromptTokens != 3 || w.Stats(0).PromptTokens != 0 {
		t.Fatalf("rank 0 %+v rank 1 %+v", w.Stats(0), w.Stats(1))
	}
}

// TestStopAtDoneReusesConnection: a caller that stops reading at [DONE] (without waiting for EOF) still
// gets its connection pooled.
func TestStopAtDoneReusesConnection(t *testing.T) {
	w := startMocker(t, nil)
	e := newEndpoint(t, w.URL(), Config{})
	for range 3 {
		s, err := e.Stream(context.Background(), &Request{Path: "/v1/chat/completions", Body: chatBody(true, 3)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Done {
				break
			}
		}
		s.Close()
	}
	if st := e.Stats(); st.Dials != 1 || st.Reuses != 2 {
		t.Fatalf("stats %+v", st)
	}
}

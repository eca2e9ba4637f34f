package mocker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/goccy/go-json"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// recorder is an EventPublisher that encodes each batch as the ZMQ publisher would and keeps the
// decoded copies.
type recorder struct {
	mu      sync.Mutex
	layout  kvevents.Layout
	batches []*kvevents.Batch
	raw     [][]byte
}

func (r *recorder) Publish(b *kvevents.Batch) error {
	raw := kvevents.AppendBatch(nil, b, r.layout)
	var d kvevents.Batch
	if err := kvevents.Decode(raw, &d); err != nil {
		return err
	}
	r.mu.Lock()
	r.batches = append(r.batches, &d)
	r.raw = append(r.raw, raw)
	r.mu.Unlock()
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) snapshot() []*kvevents.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*kvevents.Batch(nil), r.batches...)
}

// wireMirror applies decoded batches as the router's worker actor does: refcount per engine hash, and
// the block's content (tokens, parent, image identities in extra keys) from the BlockStored that announced
// it.
type wireMirror map[uint64]*mirrorBlock

type mirrorBlock struct {
	count   int
	content string // tokens, parent and extra keys, printed
}

// fataler is the part of testing.T that wireMirror.apply needs.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func blockContent(tokens []uint32, parent *uint64, extra string) string {
	p := "none"
	if parent != nil {
		p = fmt.Sprint(*parent)
	}
	return fmt.Sprint(tokens, " parent=", p, " extra=", extra)
}

func wireExtra(keys []kvevents.ExtraKey) string {
	if keys == nil {
		return "null"
	}
	var ek ExtraKeys
	for _, k := range keys {
		switch k.Kind {
		case kvevents.ExtraMM:
			ek.MM = append(ek.MM, MMKey{ID: k.Str, Offset: int(k.Int)})
		case kvevents.ExtraString:
			if len(ek.MM) == 0 && ek.LoraName == "" {
				ek.LoraName = k.Str
			} else {
				ek.CacheSalt = k.Str
			}
		}
	}
	b, _ := json.Marshal(&ek)
	return string(b)
}

func (m wireMirror) apply(t fataler, b *kvevents.Batch) {
	t.Helper()
	for i := range b.Events {
		ev := &b.Events[i]
		switch ev.Kind {
		case kvevents.Stored:
			if len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
				t.Fatalf("stored %d hashes with %d tokens of block size %d", len(ev.BlockHashes), len(ev.TokenIDs), ev.BlockSize)
			}
			var parent *uint64
			if ev.HasParent {
				p := ev.ParentHash
				parent = &p
			}
			for j, h := range ev.BlockHashes {
				var extra []kvevents.ExtraKey
				if j < len(ev.ExtraKeys) {
					extra = ev.ExtraKeys[j]
				}
				c := blockContent(ev.TokenIDs[j*ev.BlockSize:(j+1)*ev.BlockSize], parent, wireExtra(extra))
				e := m[h]
				if e == nil {
					e = &mirrorBlock{content: c}
					m[h] = e
				} else if e.content != c {
					t.Fatalf("hash %x announced twice with different content", h)
				}
				e.count++
				hh := h
				parent = &hh
			}
		case kvevents.Removed:
			for _, h := range ev.BlockHashes {
				e := m[h]
				if e == nil {
					t.Fatalf("removed unknown hash %x", h)
				}
				if e.count--; e.count == 0 {
					delete(m, h)
				}
			}
		case kvevents.Cleared:
			clear(m)
		}
	}
}

func truthOf(blocks []CachedBlock) wireMirror {
	m := wireMirror{}
	for _, b := range blocks {
		extra := "null"
		if b.ExtraKeys != nil {
			raw, _ := json.Marshal(b.ExtraKeys)
			extra = string(raw)
		}
		c := blockContent(b.TokenIDs, b.Parent, extra)
		if e := m[b.Hash]; e != nil {
			e.count++
		} else {
			m[b.Hash] = &mirrorBlock{count: 1, content: c}
		}
	}
	return m
}

func equalMirrors(a, b wireMirror) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w := b[k]; w == nil || w.count != v.count || w.content != v.content {
			return false
		}
	}
	return true
}

type testWorker struct {
	*Worker
	rec []*recorder
}

func startTestWorker(t *testing.T, mod func(*WorkerConfig)) *testWorker {
	t.Helper()
	cfg := WorkerConfig{Engine: DefaultEngineConfig()}
	cfg.Engine.BlockSize = 16
	cfg.Engine.NumGPUBlocks = 256
	cfg.Engine.SpeedupRatio = 1000
	if mod != nil {
		mod(&cfg)
	}
	tw := &testWorker{}
	cfg.NewPublisher = func(rank int) (EventPublisher, error) {
		r := &recorder{}
		tw.rec = append(tw.rec, r)
		return r, nil
	}
	w, err := StartWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tw.Worker = w
	t.Cleanup(func() { w.Close() })
	return tw
}

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

type completionResp struct {
	Choices []struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func TestHTTPCompletionsPrefixReuseInUsageAndMetrics(t *testing.T) {
	w := startTestWorker(t, nil)
	prompt := seq(1000, 200)
	var got []completionResp
	for range 2 {
		status, body := postJSON(t, w.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 5})
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		var r completionResp
		must(t, json.Unmarshal(body, &r))
		got = append(got, r)
	}
	if got[0].Usage.PromptTokensDetails.CachedTokens != 0 || got[1].Usage.PromptTokensDetails.CachedTokens != 192 {
		t.Fatalf("cached tokens %d then %d, want 0 then 192", got[0].Usage.PromptTokensDetails.CachedTokens, got[1].Usage.PromptTokensDetails.CachedTokens)
	}
	if got[1].Usage.PromptTokens != 200 || got[1].Usage.CompletionTokens != 5 || got[1].Choices[0].FinishReason != "length" || len(got[1].Choices[0].Text) != 5 {
		t.Fatalf("response %+v", got[1])
	}
	_, metrics := getBody(t, w.URL()+"/metrics")
	for _, want := range []string{
		`vllm:prefix_cache_queries_total{engine="0",model_name="kvroute-mocker"} 400.0`,
		`vllm:prefix_cache_hits_total{engine="0",model_name="kvroute-mocker"} 192.0`,
		`vllm:cache_config_info{block_size="16",`,
		`num_gpu_blocks="256"`,
		`vllm:num_requests_running{engine="0",model_name="kvroute-mocker"} 0.0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="kvroute-mocker"} 0.0`,
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="kvroute-mocker"} 2.0`,
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="kvroute-mocker"} 2.0`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("metrics lack %q:\n%s", want, metrics)
		}
	}
}

func TestHTTPStreamingSSE(t *testing.T) {
	w := startTestWorker(t, nil)
	tests := []struct {
		name string
		path string
		body map[string]any
	}{
		{"completions", "/v1/completions", map[string]any{"prompt": "hello world", "max_tokens": 7, "stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{"chat", "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 7, "stream": true, "stream_options": map[string]any{"include_usage": true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(tc.body)
			resp, err := http.Post(w.URL()+tc.path, "application/json", bytes.NewReader(b))
			must(t, err)
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("content type %q", ct)
			}
			sc := bufio.NewScanner(resp.Body)
			var chunks []map[string]any
			done := false
			for sc.Scan() {
				line := sc.Text()
				if line == "" {
					continue
				}
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					t.Fatalf("line %q", line)
				}
				if data == "[DONE]" {
					done = true
					break
				}
				var c map[string]any
				must(t, json.Unmarshal([]byte(data), &c))
				chunks = append(chunks, c)
			}
			if !done {
				t.Fatal("no [DONE]")
			}
			text, finish := 0, 0
			var usage map[string]any
			for _, c := range chunks {
				if u, ok := c["usage"].(map[string]any); ok {
					usage = u
				}
				for _, ch := range c["choices"].([]any) {
					m := ch.(map[string]any)
					if m["finish_reason"] == "length" {
						finish++
					}
					if s, ok := m["text"].(string); ok && s != "" {
						text++
					}
					if d, ok := m["delta"].(map[string]any); ok && d["content"] != "" {
						text++
					}
				}
			}
			if text != 7 || finish != 1 || usage == nil || usage["completion_tokens"].(float64) != 7 {
				t.Fatalf("text chunks %d finish %d usage %v", text, finish, usage)
			}
		})
	}
}

func TestHTTPAdminEndpoints(t *testing.T) {
	w := startTestWorker(t, nil)
	if status, _ := getBody(t, w.URL()+"/health"); status != 200 {
		t.Fatalf("health %d", status)
	}
	_, models := getBody(t, w.URL()+"/v1/models")
	if !strings.Contains(string(models), `"id":"kvroute-mocker"`) {
		t.Fatalf("models %s", models)
	}
	_, tok := postJSON(t, w.URL()+"/tokenize", map[string]any{"prompt": "abc"})
	if !strings.Contains(string(tok), `"tokens":[97,98,99]`) || !strings.Contains(string(tok), `"count":3`) {
		t.Fatalf("tokenize %s", tok)
	}
	if status, body := postJSON(t, w.URL()+"/v1/completions", map[string]any{"prompt": seq(0, 40), "max_tokens": 1}); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	testutil.Eventually(t, "idle", w.Idle)
	if status, body := postJSON(t, w.URL()+"/reset_prefix_cache", nil); status != 200 {
		t.Fatalf("reset %d %s", status, body)
	}
	testutil.Eventually(t, "AllBlocksCleared", func() bool {
		bs := w.rec[0].snapshot()
		return len(bs) > 0 && bs[len(bs)-1].Events[0].Kind == kvevents.Cleared
	})
	if status, _ := postJSON(t, w.URL()+"/v1/completions", map[string]any{"prompt": []int{}, "max_tokens": 1}); status != 400 {
		t.Fatalf("empty prompt status %d", status)
	}
	if status, _ := getBody(t, w.URL()+"/nope"); status != 404 {
		t.Fatalf("unknown path status %d", status)
	}
}

func pngDataURI(t *testing.T, w, h int) string {
	t.Helper()
	var buf bytes.Buffer
	must(t, png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))))
	return "data:image/png;base64," + base64Std(buf.Bytes())
}

func TestHTTPChatImageExtraKeys(t *testing.T) {
	w := startTestWorker(t, nil)
	uuid := "2f97f006c0e2eb2e" + strings.Repeat("0", 48)
	msgs := []map[string]any{{"role": "user", "content": []map[string]any{
		{"type": "text", "text": "look:"},
		{"type": "image_url", "image_url": map[string]any{"url": pngDataURI(t, 256, 256)}, "uuid": uuid},
		{"type": "text", "text": "what is it?"},
	}}}
	status, body := postJSON(t, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 2})
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	// 256×256 at patch 16, merge 2: 16·16/4 = 64 placeholder tokens.
	_, tok := postJSON(t, w.URL()+"/tokenize", map[string]any{"messages": msgs})
	var tr struct{ Tokens []uint32 }
	must(t, json.Unmarshal(tok, &tr))
	pads := 0
	for _, id := range tr.Tokens {
		if id == qwenImagePad {
			pads++
		}
	}
	if pads != 64 {
		t.Fatalf("%d image pads, want 64", pads)
	}
	testutil.Eventually(t, "idle", w.Idle)
	_, kb := getBody(t, w.URL()+"/debug/kv_blocks")
	var resp KVBlocksResponse
	must(t, json.Unmarshal(kb, &resp))
	withImage := 0
	for _, b := range resp.Ranks[0].Blocks {
		if b.ExtraKeys != nil && len(b.ExtraKeys.MM) == 1 && b.ExtraKeys.MM[0].ID == uuid {
			withImage++
		}
	}
	if withImage < 4 {
		t.Fatalf("%d blocks carry the image id, want >= 4: %s", withImage, kb)
	}
	// The events carry the same extra keys.
	found := false
	for _, b := range w.rec[0].snapshot() {
		for _, ev := range b.Events {
			for _, ek := range ev.ExtraKeys {
				if len(ek) == 1 && ek[0].Kind == kvevents.ExtraMM && ek[0].Str == uuid {
					found = true
				}
			}
		}
	}
	if !found {
		t.Fatal("no event carries the image's extra key")
	}
}

// TestEventStreamReconstructsGroundTruth drives a random concurrent workload with eviction pressure over
// HTTP and checks that applying the published batches gives exactly /debug/kv_blocks.
func TestEventStreamReconstructsGroundTruth(t *testing.T) {
	for _, layout := range []kvevents.Layout{kvevents.LayoutMap, kvevents.LayoutArray} {
		t.Run(fmt.Sprint("layout", layout), func(t *testing.T) {
			w := startTestWorker(t, func(c *WorkerConfig) {
				c.Engine.NumGPUBlocks = 40
				c.Engine.MaxNumBatchedTokens = 64
				c.DPSize = 2
			})
			for _, r := range w.rec {
				r.layout = layout
			}
			rng := rand.New(rand.NewPCG(7, uint64(layout)))
			prefixes := [][]uint32{seq(0, 70), seq(5000, 40), seq(9000, 100)}
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			images := []string{pngDataURI(t, 256, 256), pngDataURI(t, 320, 256)}
			for i := range 120 {
				p := append(append([]uint32(nil), prefixes[rng.IntN(3)]...), seq(20_000+i*13, rng.IntN(40))...)
				body := map[string]any{"prompt": p, "max_tokens": 1 + rng.IntN(30)}
				path := "/v1/completions"
				if i%8 == 0 { // a chat request with an image: its blocks carry extra keys
					path = "/v1/chat/completions"
					img := rng.IntN(2)
					body = map[string]any{"max_tokens": 1 + rng.IntN(10), "messages": []map[string]any{{"role": "user", "content": []map[string]any{
						{"type": "text", "text": "see"},
						{"type": "image_url", "image_url": map[string]any{"url": images[img]}, "uuid": fmt.Sprintf("%064x", img+1)},
					}}}}
				}
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					b, _ := json.Marshal(body)
					resp, err := http.Post(w.URL()+path, "application/json", bytes.NewReader(b))
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}()
			}
			wg.Wait()
			testutil.Eventually(t, "idle", w.Idle)
			_, kb := getBody(t, w.URL()+"/debug/kv_blocks")
			var resp KVBlocksResponse
			must(t, json.Unmarshal(kb, &resp))
			evictions, withImages := uint64(0), 0
			for rank := range 2 {
				m := wireMirror{}
				for _, b := range w.rec[rank].snapshot() {
					if int(b.DPRank) != rank || !b.HasDPRank {
						t.Fatalf("batch dp_rank %d on rank %d", b.DPRank, rank)
					}
					m.apply(t, b)
				}
				for _, b := range resp.Ranks[rank].Blocks {
					if b.ExtraKeys != nil {
						withImages++
					}
				}
				if got := truthOf(resp.Ranks[rank].Blocks); !equalMirrors(got, m) {
					t.Fatalf("rank %d: mirror %d hashes, truth %d", rank, len(m), len(got))
				}
				evictions += w.Stats(rank).Evictions
			}
			if evictions == 0 {
				t.Fatal("no eviction pressure")
			}
			t.Logf("%d evictions, %d cached image blocks at the end", evictions, withImages)
		})
	}
}

func TestHTTPDataParallelRank(t *testing.T) {
	w := startTestWorker(t, func(c *WorkerConfig) { c.DPSize = 2 })
	post := func(header string, body map[string]any) int {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", w.URL()+"/v1/completions", bytes.NewReader(b))
		if header != "" {
			req.Header.Set("X-data-parallel-rank", header)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := post("1", map[string]any{"prompt": seq(0, 40), "max_tokens": 1}); s != 200 {
		t.Fatalf("status %d", s)
	}
	if s := post("", map[string]any{"prompt": seq(100, 40), "max_tokens": 1, "data_parallel_rank": 1}); s != 200 {
		t.Fatalf("status %d", s)
	}
	if s := post("2", map[string]any{"prompt": seq(0, 40), "max_tokens": 1}); s != 400 {
		t.Fatalf("out-of-range rank status %d", s)
	}
	testutil.Eventually(t, "idle", w.Idle)
	if len(w.CachedBlocks(0)) != 0 || len(w.CachedBlocks(1)) != 4 || len(w.rec[0].snapshot()) != 0 || len(w.rec[1].snapshot()) != 2 {
		t.Fatalf("rank 0: %d blocks %d batches; rank 1: %d blocks %d batches", len(w.CachedBlocks(0)), len(w.rec[0].snapshot()), len(w.CachedBlocks(1)), len(w.rec[1].snapshot()))
	}
	_, metrics := getBody(t, w.URL()+"/metrics")
	if !strings.Contains(string(metrics), `vllm:prefix_cache_queries_total{engine="1",model_name="kvroute-mocker"} 80.0`) {
		t.Fatalf("metrics:\n%s", metrics)
	}
}

// TestHTTPStreamClientGoneAborts closes an SSE stream early: the request is aborted and its blocks freed.
func TestHTTPStreamClientGoneAborts(t *testing.T) {
	w := startTestWorker(t, func(c *WorkerConfig) { c.Engine.SpeedupRatio = 1 })
	b, _ := json.Marshal(map[string]any{"prompt": seq(0, 64), "max_tokens": 2000, "stream": true})
	resp, err := http.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(b))
	must(t, err)
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	testutil.Eventually(t, "abort frees the request", func() bool { return w.Idle() && w.Stats(0).UsedBlocks == 0 })
}

// TestHTTPMaxTokens: max_completion_tokens wins over max_tokens, as vLLM reads them; a max_tokens near
// the int range is a 400, not a crash of the process.
func TestHTTPMaxTokens(t *testing.T) {
	w := startTestWorker(t, nil)
	status, body := postJSON(t, w.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": seq(0, 20), "max_tokens": 5, "max_completion_tokens": 2})
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var r completionResp
	must(t, json.Unmarshal(body, &r))
	if r.Usage.CompletionTokens != 2 {
		t.Fatalf("%d tokens generated, want max_completion_tokens' 2", r.Usage.CompletionTokens)
	}
	if status, body := postJSON(t, w.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": seq(0, 20), "max_tokens": int64(math.MaxInt64)}); status != 400 {
		t.Fatalf("max_tokens at the int range: %d %s", status, body)
	}
}

// TestFleetPortBases: a port base whose ports leave 1..65535 is refused (libzmq would bind the port
// modulo 65536: a KV events base of 70000 published on 4464), as is a negative one.
func TestFleetPortBases(t *testing.T) {
	for _, fc := range []FleetConfig{
		{NumWorkers: 1, KVEventsPortBase: 70000},
		{NumWorkers: 2, ReplayPortBase: 65535},
		{NumWorkers: 1, HTTPPortBase: -1},
	} {
		if f, err := StartFleet(fc); !errors.Is(err, ErrBadConfig) {
			if f != nil {
				_ = f.Close()
			}
			t.Errorf("%+v: %v, want ErrBadConfig", fc, err)
		}
	}
}

package frontend

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/workers/kvevents"
)

// TestRouterAPIBlockMMInfos: a worker publishing TensorRT-LLM's event layout (JSON, per-block mm_keys)
// is indexed with the legacy block_mm_infos hashes; /v1/overlap_scores and /v1/route given the same
// tokens with block_mm_infos naming the same image find its blocks, the same tokens without them or
// with another image do not.
func TestRouterAPIBlockMMInfos(t *testing.T) {
	base, _ := startRouterAPI(t, 4, ServerConfig{})
	p, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*",
		Layout: kvevents.LayoutTRTLLM})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-p.Done() }()
	go func() { _ = p.Run(ctx) }()
	<-p.Ready()
	reg := `{"id":7,"url":"http://127.0.0.1:9","events":"` + p.Addr() + `","replay":"` + p.ReplayAddr() + `"}`
	if code, body := call(t, "POST", base+"/v1/workers", reg); code != 200 {
		t.Fatalf("register: %d %v", code, body)
	}
	const img, h = 151655, uint64(0x2f97f006c0e2eb2e)
	id := fmt.Sprintf("%016x", h) + "000000000000000000000000000000000000000000000000"
	_ = p.Publish(ctx, &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.Stored, BlockHashes: []uint64{11, 12},
		TokenIDs: []uint32{10, 20, img, img, img, img, 30, 40}, BlockSize: 4,
		ExtraKeys: [][]kvevents.ExtraKey{{{Kind: kvevents.ExtraMM, Str: id, Int: 2}}, {{Kind: kvevents.ExtraMM, Str: id}}}}}})

	tokens := `[10,20,151655,151655,151655,151655,30,40]`
	infos := func(hash uint64) string {
		o := fmt.Sprintf(`{"mm_objects":[{"mm_hash":%d,"offsets":[]}]}`, hash)
		return "[" + o + "," + o + "]"
	}
	overlap := func(body string) int {
		code, out := call(t, "POST", base+"/v1/overlap_scores", body)
		if code != 200 {
			t.Fatalf("overlap %s: %d %v", body, code, out)
		}
		for _, s := range out["scores"].([]any) {
			if m := s.(map[string]any); m["worker_id"] == float64(7) {
				return int(m["overlap_blocks"].(float64))
			}
		}
		return 0
	}
	withImage := `{"tokens":` + tokens + `,"block_mm_infos":` + infos(h) + `}`
	deadline := time.Now().Add(10 * time.Second)
	for overlap(withImage) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the TRT-LLM events never matched the block_mm_infos query")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := overlap(`{"tokens":` + tokens + `}`); n != 0 {
		t.Fatalf("plain tokens matched %d legacy-hashed blocks", n)
	}
	if n := overlap(`{"tokens":` + tokens + `,"block_mm_infos":` + infos(h+1) + `}`); n != 0 {
		t.Fatalf("another image matched %d blocks", n)
	}
	if n := overlap(`{"tokens":` + tokens + `,"block_mm_infos":[null,null]}`); n != 0 {
		t.Fatalf("all-null infos matched %d blocks", n)
	}
	code, out := call(t, "POST", base+"/v1/route", `{"request_id":"r1","tokens":`+tokens+`,"block_mm_infos":`+infos(h)+`}`)
	if code != 200 || out["worker_id"] != float64(7) || out["overlap_blocks"] != float64(2) {
		t.Fatalf("route: %d %v", code, out)
	}
	for _, bad := range []string{
		`{"block_hashes":[1],"block_mm_infos":[null]}`,
		`{"tokens":[1,2,3,4],"block_mm_infos":[null,null]}`,
		`{"tokens":[1,2,3,4],"block_mm_infos":[{"mm_objects":[{"mm_hash":-1}]}]}`,
	} {
		if code, _ := call(t, "POST", base+"/v1/overlap_scores", bad); code != 400 {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
}

// TestE2EImageTRTLLMEvents: workers publishing TensorRT-LLM's event layout (JSON, per-block mm_keys
// naming the forwarded image ids) are routed on their images through the frontend like vLLM workers: a
// repeated image goes to its worker with the image's blocks in the overlap, another image does not.
func TestE2EImageTRTLLMEvents(t *testing.T) {
	s := startStack(t, stackOpts{workers: 3, speedup: 100, mm: true, eventLayout: kvevents.LayoutTRTLLM})
	img := func(seed uint8) string {
		return "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngOf(320, 240, seed))
	}
	first := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(3)}, "What is in this picture?"))
	if first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	s.waitOverlap(t, "", first.worker)
	second := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(3)}, "Describe it again."))
	// 320×240 on Qwen3-VL is 80 image tokens, 5 blocks of 16.
	if second.status != 200 || second.worker != first.worker || overlapOf(second) < 5 {
		t.Fatalf("same image: worker %s (first %s), overlap %s", second.worker, first.worker, second.overlap)
	}
	other := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(4)}, "What is in this picture?"))
	if other.status != 200 || overlapOf(other) >= 5 {
		t.Fatalf("another image matched: overlap %s", other.overlap)
	}
	var decodeErrors uint64
	for _, w := range s.router.Workers() {
		decodeErrors += w.DecodeErrors
	}
	if decodeErrors != 0 {
		t.Fatalf("%d event payloads failed to decode", decodeErrors)
	}
}

// Each engine gets the image ids in the form Dynamo's backend for it forwards: vLLM the 64-character
// uuid, TensorRT-LLM (workers registered with engine=trtllm) the unpadded 16-hex mm_hash, which it echoes
// in its events' mm_keys. The simulated worker keys its blocks with the id it received, and a repeated
// image still reaches its worker with the image's blocks in the overlap.
func TestE2EImageIDFormByEngine(t *testing.T) {
	for _, tc := range []struct {
		engine string
		idLen  int
	}{{"", 64}, {"trtllm", 16}} {
		t.Run("engine="+tc.engine, func(t *testing.T) {
			s := startStack(t, stackOpts{workers: 2, speedup: 100, mm: true, eventLayout: kvevents.LayoutTRTLLM, engine: tc.engine})
			img := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngOf(320, 240, 9))
			first := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img}, "What is in this picture?"))
			if first.status != 200 {
				t.Fatalf("first: %d %s", first.status, first.raw)
			}
			s.waitOverlap(t, "", first.worker)
			second := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img}, "Describe it again."))
			if second.status != 200 || second.worker != first.worker || overlapOf(second) < 5 {
				t.Fatalf("same image: worker %s (first %s), overlap %s", second.worker, first.worker, second.overlap)
			}
			var ids []string
			for _, w := range s.fleet.Workers {
				if fmt.Sprint(w.ID()) != first.worker {
					continue
				}
				for _, b := range w.CachedBlocks(0) {
					if b.ExtraKeys != nil {
						for _, k := range b.ExtraKeys.MM {
							ids = append(ids, k.ID)
						}
					}
				}
			}
			if len(ids) == 0 {
				t.Fatal("the worker holds no image block")
			}
			for _, id := range ids {
				if _, err := strconv.ParseUint(id[:16], 16, 64); len(id) != tc.idLen || err != nil || strings.Trim(id[16:], "0") != "" {
					t.Fatalf("the worker received image id %q, want %d hex digits", id, tc.idLen)
				}
			}
		})
	}
}

// TestE2EImageBlockMMInfos: workers registered with mm_scheme=block_mm_infos and publishing TensorRT-LLM's
// layout are indexed with the legacy mm_hash suffix, and the frontend routes requests with images in
// the same scheme (block_mm_infos built from each image's span): a repeated image reaches its worker
// with the image's blocks in the overlap, another image does not.
func TestE2EImageBlockMMInfos(t *testing.T) {
	s := startStack(t, stackOpts{workers: 3, speedup: 100, mm: true, eventLayout: kvevents.LayoutTRTLLM, mmScheme: "block_mm_infos"})
	if !s.router.Fleet.AllLegacyMM() {
		t.Fatal("workers not registered with mm_scheme=block_mm_infos")
	}
	img := func(seed uint8) string {
		return "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngOf(320, 240, seed))
	}
	first := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(5)}, "What is in this picture?"))
	if first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	s.waitOverlap(t, "", first.worker)
	second := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(5)}, "Describe it again."))
	if second.status != 200 || second.worker != first.worker || overlapOf(second) < 5 {
		t.Fatalf("same image: worker %s (first %s), overlap %s", second.worker, first.worker, second.overlap)
	}
	other := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(6)}, "What is in this picture?"))
	if other.status != 200 || overlapOf(other) >= 5 {
		t.Fatalf("another image matched: overlap %s", other.overlap)
	}
	if n := counterValue(s.api.mmMetrics.routed); n != 3 {
		t.Fatalf("routed on images: %v", n)
	}
}

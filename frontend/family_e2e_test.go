package frontend

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/mm"
)

// familyModel writes a model directory for a vision family other than the fixture's: the fixture's
// tokenizer with the family's image tokens added at the given ids, its chat template emitting the
// family's single image placeholder, and the family's config.json and preprocessor_config.json. No real
// weights or vocabulary are needed: routing reads only these.
func familyModel(t *testing.T, added map[string]uint32, placeholder string, config, preprocessor map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(fixtureModel, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Splice the added tokens in front of the fixture's (re-encoding 11 MB of JSON per family is slow).
	at := bytes.Index(raw, []byte(`"added_tokens"`))
	if at >= 0 {
		if open := bytes.IndexByte(raw[at:], '['); open >= 0 {
			at += open + 1
		} else {
			at = -1
		}
	}
	if at < 0 {
		t.Fatal("fixture tokenizer.json has no added_tokens list")
	}
	var extra []byte
	for content, id := range added {
		e, _ := json.Marshal(map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
		extra = append(append(extra, e...), ',')
	}
	tok := append(append(append([]byte{}, raw[:at]...), extra...), raw[at:]...)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config.json", config)
	write("preprocessor_config.json", preprocessor)
	for _, f := range []string{"tokenizer_config.json", "generation_config.json"} {
		b, err := os.ReadFile(filepath.Join(fixtureModel, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmpl, err := os.ReadFile(filepath.Join(fixtureModel, "chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(tmpl), "<|vision_start|><|image_pad|><|vision_end|>", placeholder)
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

var textConfig = map[string]any{"max_position_embeddings": 131072.0}

// TestE2EImageFamilies routes a repeated image through the frontend, the router and simulated workers
// for each family layout: the repeat lands on the first image's worker with the image's blocks in the
// overlap, the worker reuses them, and a different image of the same size does not match. The
// simulated worker writes each family's prompt replacement with its own code (workers/mocker
// image_layout.go), so the router's view (package mm) is checked against a second implementation.
// Families kvroute does not route fall back with their reason counted.
func TestE2EImageFamilies(t *testing.T) {
	llama4 := familyModel(t, map[string]uint32{"<|image_start|>": 200088, "<|image_end|>": 200089, "<|image|>": 200090,
		"<|patch|>": 200092, "<|tile_x_separator|>": 200093, "<|tile_y_separator|>": 200094}, "<|image|>",
		map[string]any{"model_type": "llama4", "image_token_index": 200092.0, "text_config": textConfig,
			"vision_config": map[string]any{"image_size": 336.0, "patch_size": 14.0, "pixel_shuffle_ratio": 0.5}},
		map[string]any{"max_patches": 16.0, "size": map[string]any{"height": 336.0, "width": 336.0}})
	pixtral := familyModel(t, map[string]uint32{"[IMG]": 200010, "[IMG_BREAK]": 200012, "[IMG_END]": 200013}, "[IMG]",
		map[string]any{"model_type": "llava", "image_token_index": 200010.0, "text_config": textConfig,
			"vision_config": map[string]any{"model_type": "pixtral", "image_size": 1024.0, "patch_size": 16.0}},
		map[string]any{"patch_size": 16.0, "size": map[string]any{"longest_edge": 1024.0}})
	llava := familyModel(t, map[string]uint32{"<image>": 200032}, "<image>",
		map[string]any{"model_type": "llava", "image_token_index": 200032.0, "text_config": textConfig},
		map[string]any{"size": map[string]any{"shortest_edge": 336.0}, "crop_size": map[string]any{"height": 336.0, "width": 336.0}})
	llavaNext := familyModel(t, map[string]uint32{"<image>": 200032}, "<image>",
		map[string]any{"model_type": "llava_next", "image_token_index": 200032.0, "text_config": textConfig},
		map[string]any{"size": map[string]any{"shortest_edge": 336.0}})
	kimi := familyModel(t, map[string]uint32{"<|media_pad|>": 163605}, "<|media_pad|>",
		map[string]any{"model_type": "kimi_k25", "media_placeholder_token_id": 163605.0, "text_config": textConfig},
		map[string]any{"media_proc_cfg": map[string]any{"patch_size": 14.0, "merge_kernel_size": 2.0, "in_patch_limit": 16384.0, "patch_limit_on_one_side": 512.0}})
	qwen25 := familyModel(t, nil, "<|vision_start|><|image_pad|><|vision_end|>",
		map[string]any{"model_type": "qwen2_5_vl", "image_token_id": 151655.0, "vision_token_id": 151654.0, "text_config": textConfig},
		map[string]any{"patch_size": 14.0, "merge_size": 2.0, "temporal_patch_size": 2.0, "min_pixels": 3136.0, "max_pixels": 12845056.0})
	qwenPlaceholder := "<|vision_start|><|image_pad|><|vision_end|>"
	// Qwen2-VL-7B-Instruct's public config and image-processor values (the fixture's vocabulary has the
	// same <|image_pad|> 151655 and <|vision_pad|> 151654).
	qwen2 := familyModel(t, nil, qwenPlaceholder,
		map[string]any{"model_type": "qwen2_vl", "image_token_id": 151655.0, "vision_token_id": 151654.0, "text_config": textConfig},
		map[string]any{"patch_size": 14.0, "merge_size": 2.0, "temporal_patch_size": 2.0, "min_pixels": 3136.0, "max_pixels": 12845056.0})
	// A Qwen3.6 MoE fine-tune: found by model_type alone, with Qwen3-VL's image processor.
	qwen36 := familyModel(t, nil, qwenPlaceholder,
		map[string]any{"model_type": "qwen3_6_moe", "image_token_id": 151655.0, "text_config": textConfig},
		map[string]any{"patch_size": 16.0, "merge_size": 2.0, "temporal_patch_size": 2.0,
			"size": map[string]any{"shortest_edge": 65536.0, "longest_edge": 16777216.0}})
	omni := familyModel(t, nil, qwenPlaceholder,
		map[string]any{"model_type": "qwen3_omni_moe", "image_token_id": 151655.0, "text_config": textConfig},
		map[string]any{"patch_size": 16.0, "merge_size": 2.0, "temporal_patch_size": 2.0})
	tests := []struct {
		name, dir, served string
		w, h              int
		tokens            int    // the image's positions in the engine's prompt
		fallback          string // "" when routed
	}{
		// 500×500 on Llama-4: a 2×2 canvas, 4 tiles + the global tile of 144 <|patch|> each, 727 positions.
		{"llama4", llama4, "meta-llama/Llama-4-Scout-17B-16E-Instruct", 500, 500, 727, ""},
		// 200×100 on Pixtral: 7 rows of 13 [IMG] and a break or end each, 98 positions.
		{"pixtral", pixtral, "mistral-community/pixtral-12b", 200, 100, 98, ""},
		// Flat families: N copies of the placeholder. 320×240 → LLaVA-1.5 576 (any size), LLaVA-NeXT 1026
		// (anyres), Kimi-K2.5 108 (12×9 merged 28-px patches), Qwen2.5-VL 99 (252×308 in 28-px units).
		// The simulated worker counts Qwen2.5 with its own smart_resize, the others with package mm's
		// ports (golden-tested in mm): these rows check detection, placeholders and the event path.
		{"llava-1.5", llava, "llava-hf/llava-1.5-7b-hf", 320, 240, 576, ""},
		{"llava-next", llavaNext, "llava-hf/llava-v1.6-mistral-7b-hf", 320, 240, 1026, ""},
		{"kimi-k2.5", kimi, "moonshotai/Kimi-K2.5", 320, 240, 108, ""},
		{"qwen2.5-vl", qwen25, "Qwen/Qwen2.5-VL-7B-Instruct", 320, 240, 99, ""},
		// The fixture served under Qwen3.5's name: the Qwen3-VL counter and placeholder.
		{"qwen3.5", fixtureModel, "Qwen/Qwen3.5-2B", 320, 240, 80, ""},
		// Qwen rows at a size of the spec's golden table (§7.1, 337×511: Qwen2/2.5-VL 216, Qwen3-VL/3.5
		// 176), counted by the simulated worker with its own smart_resize.
		{"qwen2-vl", qwen2, "Qwen/Qwen2-VL-7B-Instruct", 337, 511, 216, ""},
		{"qwen2-vl by model_type", qwen2, "/models/ft", 337, 511, 216, ""},
		{"qwen3-vl", fixtureModel, "Qwen/Qwen3-VL-2B-Instruct", 337, 511, 176, ""},
		{"qwen3.6 by model_type", qwen36, "/models/ft", 337, 511, 176, ""},
		// Recognised families kvroute does not route: counted as unsupported_family, nothing fetched.
		{"phi3-vision", fixtureModel, "microsoft/Phi-3-vision-128k-instruct", 320, 240, 0, "unsupported_family"},
		{"kimi-k3", fixtureModel, "moonshotai/Kimi-K3", 320, 240, 0, "unsupported_family"},
		{"phi4-multimodal", fixtureModel, "microsoft/Phi-4-multimodal-instruct", 320, 240, 0, "unsupported_family"},
		{"qwen3-omni", fixtureModel, "Qwen/Qwen3-Omni-30B-A3B-Instruct", 320, 240, 0, "unsupported_family"},
		{"qwen3-omni by model_type", omni, "/models/ft", 320, 240, 0, "unsupported_family"},
		{"inkling", fixtureModel, "/models/Inkling", 320, 240, 0, "unsupported_family"},
		{"qwen3-asr", fixtureModel, "/models/Qwen3-ASR", 320, 240, 0, "unsupported_family"},
		{"nemotron-nano-omni", fixtureModel, "/models/Nemotron-3-Nano-Omni", 320, 240, 0, "unsupported_family"},
		// A LLaVA-1.5 fine-tune under a path that does not say so: model_type "llava" matches no counter
		// in llm-multimodal 1.7.0, so it is unknown_model, not unsupported_family.
		{"llava by model_type", llava, "/models/ft", 320, 240, 0, "unknown_model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, stackOpts{workers: 2, speedup: 100, mm: true, modelDir: tc.dir, modelName: tc.served})
			img := func(seed uint8) string {
				return "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngOf(tc.w, tc.h, seed))
			}
			first := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(1)}, "What is in this picture?"))
			if first.status != 200 {
				t.Fatalf("first: %d %s", first.status, first.raw)
			}
			if tc.fallback != "" {
				if n := counterValue(s.api.mmMetrics.fallbacks.WithLabelValues(tc.fallback)); n != 1 {
					t.Fatalf("%s fallbacks: %v", tc.fallback, n)
				}
				if n := counterValue(s.api.mmMetrics.routed); n != 0 {
					t.Fatalf("routed on images: %v", n)
				}
				return
			}
			if n := counterValue(s.api.mmMetrics.routed); n != 1 {
				t.Fatalf("not routed on its image (fallbacks: %v)", s.api.mmMetrics)
			}
			s.waitOverlap(t, "", first.worker)
			second := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(1)}, "Describe it again, with the colours."))
			// The image's full blocks are in the overlap (its last, partial block holds the differing text).
			full := tc.tokens / 16
			if second.status != 200 || second.worker != first.worker || overlapOf(second) < full {
				t.Fatalf("same image: worker %s (first %s), overlap %s blocks for %d image positions", second.worker, first.worker, second.overlap, tc.tokens)
			}
			usage := second.body["usage"].(map[string]any)
			if cached := usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); int(cached) < full*16 {
				t.Fatalf("the worker reused %v tokens, the image's full blocks are %d", cached, full*16)
			}
			other := s.post(t, "/v1/chat/completions", imageChat(s.name, []string{img(2)}, "What is in this picture?"))
			if other.status != 200 || overlapOf(other) >= full {
				t.Fatalf("a different image matched: overlap %s", other.overlap)
			}
			spec := s.api.MM.Resolver.Spec()
			if got := spec.NumTokens(mm.Size{W: uint32(tc.w), H: uint32(tc.h)}); got != tc.tokens {
				t.Fatalf("router counts %d positions, want %d", got, tc.tokens)
			}
		})
	}
}

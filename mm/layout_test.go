package mm

import (
	"slices"
	"strings"
	"testing"
)

// Llama-4's image tokens (meta-llama/Llama-4-Scout-17B-16E-Instruct tokenizer).
var llama4Vocab = map[string]uint32{
	"<|image_start|>": 200088, "<|image_end|>": 200089, "<|image|>": 200090, "<|patch|>": 200092,
	"<|tile_x_separator|>": 200093, "<|tile_y_separator|>": 200094,
}

// Pixtral-12B's image tokens (mistral-community/pixtral-12b).
var pixtralVocab = map[string]uint32{"[IMG]": 10, "[IMG_BREAK]": 12, "[IMG_END]": 13}

func llama4Spec(t testing.TB, cfg map[string]any, pc ProcessorConfig) Spec {
	t.Helper()
	s := Detect(ModelInfo{ID: "meta-llama/Llama-4-Scout-17B-16E-Instruct", ModelType: "llama4", Config: cfg,
		TokenID: vocabOf(llama4Vocab), Processor: &pc})
	if !s.Enabled {
		t.Fatalf("llama4 disabled: %s", s.Disabled)
	}
	return s
}

func pixtralSpec(t testing.TB) Spec {
	t.Helper()
	s := Detect(ModelInfo{ID: "mistral-community/pixtral-12b", ModelType: "llava",
		Config:  map[string]any{"image_token_index": 10.0, "vision_config": map[string]any{"image_size": 1024.0, "patch_size": 16.0}},
		TokenID: vocabOf(pixtralVocab), Processor: &ProcessorConfig{}})
	if !s.Enabled {
		t.Fatalf("pixtral disabled: %s", s.Disabled)
	}
	return s
}

// TestLlama4VLLMGolden: vLLM's Mllama4 replacement length and its <|patch|> count for the sizes of the
// golden table. Expected values were computed from the processor's own
// definitions, written out independently of this package: HF find_supported_resolutions (every
// rows×cols ≤ max_patches of 336-px tiles) and get_best_fit (resize_to_max_canvas false), then
// Llama4Processor._prompt_split_image with 144 patches per chunk ((336/14)² / round(1/0.5²)). The tile
// grid agrees with the crate's (its count is 576 × the same tiles: 64×64 → 576 = 1×576, 4000×3000 → 7488
// = 13×576), and the lengths satisfy §6.5 (1 tile 147, 2×2 727).
func TestLlama4VLLMGolden(t *testing.T) {
	tests := []struct {
		w, h                   uint32
		rows, cols, n, patches int
	}{
		{64, 64, 1, 1, 147, 144},
		{100, 100, 1, 1, 147, 144},
		{337, 511, 2, 2, 727, 720},
		{400, 300, 1, 2, 437, 432},
		{500, 500, 2, 2, 727, 720},
		{600, 300, 1, 2, 437, 432},
		{300, 600, 2, 1, 437, 432},
		{1000, 100, 1, 3, 582, 576},
		{100, 1000, 3, 1, 582, 576},
		{1999, 1125, 3, 5, 2322, 2304},
		{4000, 3000, 3, 4, 1887, 1872},
	}
	s := llama4Spec(t, map[string]any{"image_token_index": 200092.0}, ProcessorConfig{})
	if s.Llama4 != DefaultLlama4Params() || s.ImageTokenID != 200090 || s.RunTokenID != 200092 || s.EndTokenID != 200089 {
		t.Fatalf("spec %+v", s)
	}
	for _, tc := range tests {
		rows, cols := Llama4Grid(tc.w, tc.h, 336, 16)
		seq := s.AppendImage(nil, Size{tc.w, tc.h}, s.RunTokenID)
		patches := 0
		for _, id := range seq {
			if id == s.RunTokenID {
				patches++
			}
		}
		if rows != tc.rows || cols != tc.cols || s.NumTokens(Size{tc.w, tc.h}) != tc.n || len(seq) != tc.n || patches != tc.patches {
			t.Errorf("%dx%d: grid %dx%d, n %d, len %d, patches %d; want %dx%d, %d, %d",
				tc.w, tc.h, rows, cols, s.NumTokens(Size{tc.w, tc.h}), len(seq), patches, tc.rows, tc.cols, tc.n, tc.patches)
		}
		// The crate's 1.7.0 count is 576 per tile of the same grid (plus the global tile).
		tiles := rows * cols
		if tiles > 1 {
			tiles++
		}
		if got := CalculateNumTokens(tc.w, tc.h, FamilyLlama4, ProcessorConfig{}); got != 576*tiles {
			t.Errorf("%dx%d: crate count %d, want %d", tc.w, tc.h, got, 576*tiles)
		}
	}
	// Config-driven geometry: 448-px tiles (256 positions each) and a 4-tile budget.
	s4 := llama4Spec(t, map[string]any{"vision_config": map[string]any{"image_size": 448.0, "patch_size": 14.0, "pixel_shuffle_ratio": 0.5}},
		ProcessorConfig{MaxPatches: 4})
	for _, tc := range []struct{ w, h uint32 }{{1000, 1000}, {2000, 500}} {
		if n := s4.NumTokens(Size{tc.w, tc.h}); n != 1287 {
			t.Errorf("448/4 %dx%d: %d, want 1287", tc.w, tc.h, n)
		}
	}
}

// TestLlama4Sequence: the exact engine-side sequence of a 2×1 canvas (tiles of 2 positions, to read it).
func TestLlama4Sequence(t *testing.T) {
	s := llama4Spec(t, map[string]any{}, ProcessorConfig{})
	s.Llama4.PerTile = 2
	const P, S, E, I, X, Y = 200092, 200088, 200089, 200090, 200093, 200094
	got := s.AppendImage(nil, Size{W: 300, H: 600}, P) // 2 rows × 1 col
	want := []uint32{S, P, P, Y, P, P, Y, I, P, P, E}
	if !slices.Equal(got, want) {
		t.Fatalf("2x1: %v, want %v", got, want)
	}
	got = s.AppendImage(nil, Size{W: 600, H: 300}, 7) // 1 row × 2 cols, pad 7
	want = []uint32{S, 7, 7, X, 7, 7, Y, I, 7, 7, E}
	if !slices.Equal(got, want) {
		t.Fatalf("1x2: %v, want %v", got, want)
	}
	if got = s.AppendImage(nil, Size{W: 64, H: 64}, 7); !slices.Equal(got, []uint32{S, I, 7, 7, E}) {
		t.Fatalf("1 tile: %v", got)
	}
}

// TestPixtralVLLMGolden: vLLM's Pixtral (HF format) replacement for the golden-table sizes, computed from
// PixtralHFEncoderInfo.get_patch_grid_size (fit within 1024, floor) and HF _num_image_tokens (one row or
// column per started 16-px patch), rows × (cols + 1) tokens. The [IMG] count is the crate's
// unregistered Pixtral count (§6.8), which leaves out the breaks.
func TestPixtralVLLMGolden(t *testing.T) {
	tests := []struct {
		w, h                uint32
		rows, cols, n, imgs int
	}{
		{64, 64, 4, 4, 20, 16},
		{100, 100, 7, 7, 56, 49},
		{337, 511, 32, 22, 736, 704},
		{400, 300, 19, 25, 494, 475},
		{500, 500, 32, 32, 1056, 1024},
		{600, 300, 19, 38, 741, 722},
		{300, 600, 38, 19, 760, 722},
		{1000, 100, 7, 63, 448, 441},
		{100, 1000, 63, 7, 504, 441},
		{1999, 1125, 36, 64, 2340, 2304},
		{4000, 3000, 48, 64, 3120, 3072},
	}
	s := pixtralSpec(t)
	if s.ImageTokenID != 10 || s.RunTokenID != 10 || s.EndTokenID != 13 {
		t.Fatalf("spec %+v", s)
	}
	for _, tc := range tests {
		rows, cols := PixtralGrid(tc.w, tc.h, s.Pixtral)
		seq := s.AppendImage(nil, Size{tc.w, tc.h}, 10)
		imgs := 0
		for _, id := range seq {
			if id == 10 {
				imgs++
			}
		}
		if rows != tc.rows || cols != tc.cols || len(seq) != tc.n || s.NumTokens(Size{tc.w, tc.h}) != tc.n || imgs != tc.imgs || seq[len(seq)-1] != 13 {
			t.Errorf("%dx%d: grid %dx%d len %d imgs %d; want %dx%d %d %d", tc.w, tc.h, rows, cols, len(seq), imgs, tc.rows, tc.cols, tc.n, tc.imgs)
		}
		if got := CalculateNumTokens(tc.w, tc.h, FamilyPixtral, ProcessorConfig{}); got != tc.imgs {
			t.Errorf("%dx%d: crate count %d, want %d", tc.w, tc.h, got, tc.imgs)
		}
	}
	if got := s.AppendImage(nil, Size{W: 20, H: 40}, 10); !slices.Equal(got, []uint32{10, 10, 12, 10, 10, 12, 10, 10, 13}) {
		t.Fatalf("20x40: %v", got)
	}
}

// TestExpandStructured: the routing view of a structured layout is the engine's sequence with every
// embedding position at the image's pad value; two images keep their own pads.
func TestExpandStructured(t *testing.T) {
	s := pixtralSpec(t)
	a, b := Hash(0xaaaa), Hash(0xbbbb)
	images := []Image{{Hash: a, Size: Size{W: 20, H: 40}}, {Hash: b, Size: Size{W: 40, H: 20}}}
	for i := range images {
		images[i].NumTokens = s.NumTokens(images[i].Size)
	}
	r := &Resolver{spec: s, cfg: DefaultResolveConfig()}
	rt, reason := r.Route(nil, []uint32{1, 10, 2, 10, 3}, images, 4, DefaultLimits())
	if reason != FallbackNone {
		t.Fatal(reason)
	}
	pa, pb := a.Pad(), b.Pad()
	want := []uint32{1, pa, pa, 12, pa, pa, 12, pa, pa, 13, 2, pb, pb, pb, 12, pb, pb, pb, 13, 3}
	if !slices.Equal(rt.Tokens[:rt.ExpandedLen], want) {
		t.Fatalf("tokens %v\nwant   %v", rt.Tokens[:rt.ExpandedLen], want)
	}
}

// TestUnsupportedFamilyFallsBack: every family of the spec that kvroute recognises but does not route
// is disabled with its reason and falls back with FallbackUnsupportedFamily, in Resolve (before any
// fetch) and in Route, told apart from an unknown model (FallbackUnknownModel).
func TestUnsupportedFamilyFallsBack(t *testing.T) {
	pc := &ProcessorConfig{}
	tests := []struct {
		name string
		info ModelInfo
		want Family
		why  string // in Spec.Disabled
	}{
		{"phi3-vision", ModelInfo{ID: "microsoft/Phi-3-vision-128k-instruct", ModelType: "phi3_v", Config: map[string]any{},
			TokenID: vocabOf(map[string]uint32{"<|image|>": 32044}), Processor: pc}, FamilyPhi3Vision, "<|image_N|>"},
		{"kimi-k3", ModelInfo{ID: "moonshotai/Kimi-K3", ModelType: "kimi_k3", Config: map[string]any{"media_placeholder_token_id": 163605.0}, Processor: pc}, FamilyKimiK3, "WxH"},
		{"phi4-multimodal", ModelInfo{ID: "microsoft/Phi-4-multimodal-instruct", ModelType: "phi4mm", Config: map[string]any{}, Processor: pc}, FamilyPhi4MM, "dynamic-HD"},
		{"qwen3-omni", ModelInfo{ID: "Qwen/Qwen3-Omni-30B-A3B-Instruct", ModelType: "qwen3_omni_moe", Config: map[string]any{"image_token_id": 151655.0}, Processor: pc}, FamilyQwen3Omni, "Qwen3-Omni"},
		{"inkling", ModelInfo{ID: "/models/inkling", Config: map[string]any{}, Processor: pc}, FamilyInkling, "Inkling"},
		{"qwen3-asr", ModelInfo{ID: "/models/x", ModelType: "qwen3_asr", Config: map[string]any{}, Processor: pc}, FamilyQwen3ASR, "audio"},
		{"nemotron-omni", ModelInfo{ID: "/models/Nemotron-3-Nano-Omni", Config: map[string]any{}, Processor: pc}, FamilyNemotronOmni, "budget"},
		// Without preprocessor_config.json the family is still recognised as unsupported.
		{"qwen3-omni without preprocessor", ModelInfo{ID: "Qwen/Qwen3-Omni-30B-A3B-Instruct", Config: map[string]any{}}, FamilyQwen3Omni, "Qwen3-Omni"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Detect(tc.info)
			if s.Family != tc.want || s.Enabled || !s.Unsupported || !s.Vision() || !strings.Contains(s.Disabled, tc.why) {
				t.Fatalf("family %s enabled %v unsupported %v (%s)", s.Family, s.Enabled, s.Unsupported, s.Disabled)
			}
			r, p := newTestResolver(t, s, DefaultResolveConfig())
			if _, reason := resolve(t, r, Part{URL: "https://example.com/cat.png"}); reason != FallbackUnsupportedFamily {
				t.Fatalf("resolve reason %s", reason)
			}
			if _, reason := r.Route(nil, []uint32{32044}, []Image{{NumTokens: 3}}, 4, DefaultLimits()); reason != FallbackUnsupportedFamily {
				t.Fatalf("route reason %s", reason)
			}
			if n := p.Stats().Requests; n != 0 {
				t.Fatalf("%d image requests for an unsupported family", n)
			}
		})
	}
	if text := Detect(ModelInfo{ID: "/models/llama3", ModelType: "llama", Config: map[string]any{}}); text.Vision() {
		t.Fatalf("a text model counts as a vision model: %+v", text)
	}
	if llava := Detect(ModelInfo{ID: "/models/ft", ModelType: "llava", Config: map[string]any{"image_token_index": 32000.0}, Processor: pc}); llava.Enabled || !llava.Vision() {
		t.Fatalf("a LLaVA-1.5 fine-tune by model_type: enabled %v vision %v", llava.Enabled, llava.Vision())
	}
	unknown, _ := newTestResolver(t, Spec{}, DefaultResolveConfig())
	if _, reason := resolve(t, unknown, Part{URL: "data:image/png;base64,AAAA"}); reason != FallbackUnknownModel {
		t.Fatalf("unknown reason %s", reason)
	}
}

// TestRouteLegacy: the block_mm_infos view is the engine's prompt (image spans written with the run
// token, structure kept) and lists, per block, the images overlapping it.
func TestRouteLegacy(t *testing.T) {
	s := pixtralSpec(t)
	s.BOS, s.HasBOS = 1, true
	a, b := Hash(0xaaaa), Hash(0xbbbb)
	images := []Image{{Hash: a, Size: Size{W: 20, H: 40}}, {Hash: b, Size: Size{W: 40, H: 20}}}
	for i := range images {
		images[i].NumTokens = s.NumTokens(images[i].Size)
	}
	r := &Resolver{spec: s, cfg: DefaultResolveConfig()}
	rt, blockMM, reason := r.RouteLegacy(nil, []uint32{5, 10, 6, 10, 7}, images, 4, DefaultLimits())
	if reason != FallbackNone {
		t.Fatal(reason)
	}
	// BOS, 5, image a (9 positions), 6, image b (8 positions), 7.
	want := []uint32{1, 5, 10, 10, 12, 10, 10, 12, 10, 10, 13, 6, 10, 10, 10, 12, 10, 10, 10, 13, 7}
	if !slices.Equal(rt.Tokens[:rt.ExpandedLen], want) {
		t.Fatalf("tokens %v\nwant   %v", rt.Tokens[:rt.ExpandedLen], want)
	}
	// Blocks of 4: a spans [2, 11) → blocks 0-2; b spans [12, 20) → blocks 3-4.
	wantMM := [][]uint64{{0xaaaa}, {0xaaaa}, {0xaaaa}, {0xbbbb}, {0xbbbb}, nil}
	if len(blockMM) != len(wantMM) {
		t.Fatalf("blockMM %v", blockMM)
	}
	for i := range wantMM {
		if !slices.Equal(blockMM[i], wantMM[i]) {
			t.Fatalf("block %d: %v, want %v", i, blockMM[i], wantMM[i])
		}
	}
}

// TestPixtralByVisionConfig: an HF-format Pixtral under an unhelpful path is recognised by its vision
// tower's model_type, as the engine recognises it.
func TestPixtralByVisionConfig(t *testing.T) {
	s := Detect(ModelInfo{ID: "/models/x", ModelType: "llava",
		Config:  map[string]any{"image_token_index": 10.0, "vision_config": map[string]any{"model_type": "pixtral"}},
		TokenID: vocabOf(pixtralVocab), Processor: &ProcessorConfig{}})
	if !s.Enabled || s.Family != FamilyPixtral || s.Layout != LayoutPixtral {
		t.Fatalf("%+v", s)
	}
}

package mm

import (
	"strings"
	"testing"

	"github.com/kvroute/kvroute/model"
)

func TestDetectFamily(t *testing.T) {
	tests := []struct {
		id, mt string
		want   Family
	}{
		{"Qwen/Qwen3-VL-2B-Instruct", "", FamilyQwen3VL},
		{"Qwen/Qwen3.5-0.8B", "", FamilyQwen3VL},
		{"Qwen/Qwen3.6-35B-A3B", "", FamilyQwen3VL},
		{"Qwen/Qwen2-VL-7B-Instruct", "", FamilyQwen2VL},
		{"Qwen/Qwen2.5-VL-7B-Instruct", "", FamilyQwen2VL},
		{"llava-hf/llava-v1.6-mistral-7b-hf", "", FamilyLlavaNext},
		{"llava-hf/llava-next-72b-hf", "", FamilyLlavaNext},
		{"llava-hf/llava-1.5-7b-hf", "", FamilyLlava},
		{"liuhaotian/llava-v1.5-7b", "", FamilyLlava},
		{"meta-llama/Llama-4-Scout-17B-16E-Instruct", "", FamilyLlama4},
		{"moonshotai/Kimi-K2.5", "", FamilyKimiK25},
		{"microsoft/Phi-3-vision-128k-instruct", "", FamilyPhi3Vision},
		{"mistralai/Pixtral-12B-2409", "", FamilyPixtral},
		{"mistral-community/pixtral-12b", "llava", FamilyPixtral},
		{"/models/x", "pixtral", FamilyPixtral},
		{"moonshotai/Kimi-K3", "", FamilyKimiK3},
		{"/models/x", "kimi_k3", FamilyKimiK3},
		{"microsoft/Phi-4-multimodal-instruct", "phi4mm", FamilyPhi4MM},
		{"Qwen/Qwen3-Omni-30B-A3B-Instruct", "qwen3_omni_moe", FamilyQwen3Omni},
		{"/models/x", "qwen3_omni_moe", FamilyQwen3Omni},
		{"/models/x", "phi4mm", FamilyPhi4MM},
		{"/models/Inkling-8B", "", FamilyInkling},
		{"/models/Qwen3-ASR", "", FamilyQwen3ASR},
		{"/models/x", "qwen3_asr", FamilyQwen3ASR},
		{"/models/Nemotron-3-Nano-Omni", "", FamilyNemotronOmni},
		{"nvidia/NVIDIA-Nemotron-Nano-9B-v2", "nemotron_h", FamilyNone}, // text-only Nemotron: no "omni"
		{"Qwen/Qwen3-Omni-30B-A3B-Instruct", "", FamilyQwen3Omni},       // not taken for a Qwen3-VL id
		// model_type fallback for fine-tunes under an unhelpful path.
		{"/models/x", "qwen2_vl", FamilyQwen2VL},
		{"/models/x", "qwen2_5_vl", FamilyQwen2VL},
		{"/models/x", "qwen3_vl", FamilyQwen3VL},
		{"/models/x", "qwen3_vl_moe", FamilyQwen3VL},
		{"/models/x", "qwen3_5_moe", FamilyQwen3VL},
		{"/models/x", "llava_next", FamilyLlavaNext},
		{"/models/x", "llama4", FamilyLlama4},
		{"/models/x", "kimi_k25", FamilyKimiK25},
		{"/models/x", "kimi_k2_6", FamilyKimiK25}, // K2.6 shares K2.5's processor
		{"/models/x", "qwen3_6_moe", FamilyQwen3VL},
		{"/models/x", "phi3_v", FamilyPhi3Vision},
		{"/models/x", "llava", FamilyNone}, // 1.7.0: plain llava matches nothing
		{"/models/x", "llama", FamilyNone},
		{"", "", FamilyNone},
		// the id wins over model_type
		{"/models/qwen2-vl-ft", "qwen3_vl", FamilyQwen2VL},
	}
	for _, tc := range tests {
		if got := DetectFamily(tc.id, tc.mt); got != tc.want {
			t.Errorf("DetectFamily(%q, %q) = %s, want %s", tc.id, tc.mt, got, tc.want)
		}
	}
}

func vocabOf(m map[string]uint32) func(string) (uint32, bool) {
	return func(s string) (uint32, bool) { v, ok := m[s]; return v, ok }
}

// TestDetectPlaceholder covers §3 and §5.2: the spec placeholder and the chat placeholder override.
func TestDetectPlaceholder(t *testing.T) {
	pc := &ProcessorConfig{}
	tests := []struct {
		name     string
		info     ModelInfo
		spec     string
		id       uint32
		enabled  bool
		disabled string
	}{
		{"qwen2.5 chat id overrides vision_token_id", ModelInfo{ID: "Qwen/Qwen2.5-VL-7B-Instruct", ModelType: "qwen2_5_vl", Config: map[string]any{"vision_token_id": 151654.0, "image_token_id": 151655.0}, Processor: pc}, "qwen_vl", 151655, true, ""},
		{"qwen2 only vision_token_id", ModelInfo{ID: "Qwen/Qwen2-VL-2B", Config: map[string]any{"vision_token_id": 151654.0}, Processor: pc}, "qwen_vl", 151654, true, ""},
		{"qwen2 nothing", ModelInfo{ID: "Qwen/Qwen2-VL-2B", Config: map[string]any{}, Processor: pc}, "qwen_vl", 0, false, "placeholder"},
		{"qwen3", ModelInfo{ID: "/m", ModelType: "qwen3_vl", Config: map[string]any{"image_token_id": 151655.0}, Processor: pc}, "qwen3_vl", 151655, true, ""},
		{"qwen3.5 id", ModelInfo{ID: "Qwen/Qwen3.5-0.8B", ModelType: "qwen3_5", Config: map[string]any{"image_token_id": 248056.0}, Processor: pc}, "qwen3_vl", 248056, true, ""},
		{"llava image_token_index", ModelInfo{ID: "llava-hf/llava-1.5-7b-hf", ModelType: "llava", Config: map[string]any{"image_token_index": 32000.0}, Processor: pc}, "llava", 32000, true, ""},
		{"llava vocab", ModelInfo{ID: "llava-hf/llava-1.5-7b-hf", ModelType: "llava", Config: map[string]any{}, TokenID: vocabOf(map[string]uint32{"<image>": 32000}), Processor: pc}, "llava", 32000, true, ""},
		{"llava-next by model_type", ModelInfo{ID: "llava-hf/llava-v1.6-mistral-7b-hf", ModelType: "llava_next", Config: map[string]any{"image_token_index": 32000.0}, Processor: pc}, "llava_next", 32000, true, ""},
		{"llava-next id with llava mt is llava spec", ModelInfo{ID: "llava-hf/llava-v1.6-mistral-7b-hf", ModelType: "llava", Config: map[string]any{"image_token_index": 32000.0}, Processor: pc}, "llava", 32000, true, ""},
		{"llama4 finds <|image|>", ModelInfo{ID: "meta-llama/Llama-4-Scout", ModelType: "llama4", Config: map[string]any{"image_token_index": 200092.0}, TokenID: vocabOf(llama4Vocab), Processor: pc}, "llama4", 200090, true, ""},
		{"llama4 without structure tokens", ModelInfo{ID: "meta-llama/Llama-4-Scout", ModelType: "llama4", Config: map[string]any{"image_token_index": 200092.0}, Processor: pc}, "llama4", 200092, false, "structure tokens"},
		{"pixtral finds [IMG]", ModelInfo{ID: "mistral-community/pixtral-12b", ModelType: "llava", Config: map[string]any{"image_token_index": 10.0}, TokenID: vocabOf(pixtralVocab), Processor: pc}, "pixtral", 10, true, ""},
		{"pixtral without [IMG_END]", ModelInfo{ID: "mistral-community/pixtral-12b", ModelType: "llava", Config: map[string]any{"image_token_index": 10.0}, TokenID: vocabOf(map[string]uint32{"[IMG]": 10}), Processor: pc}, "pixtral", 10, false, "[IMG_END]"},
		{"kimi-k3 unsupported", ModelInfo{ID: "moonshotai/Kimi-K3", ModelType: "kimi_k3", Config: map[string]any{"media_placeholder_token_id": 163605.0}, Processor: pc}, "", 0, false, "WxH"},
		{"kimi", ModelInfo{ID: "moonshotai/Kimi-K2.5", ModelType: "kimi_k25", Config: map[string]any{"media_placeholder_token_id": 163605.0}, Processor: pc}, "kimi_k25", 163605, true, ""},
		{"phi3 resolves but unsupported", ModelInfo{ID: "microsoft/Phi-3-vision-128k-instruct", ModelType: "phi3_v", Config: map[string]any{}, TokenID: vocabOf(map[string]uint32{"<|image|>": 32044}), Processor: pc}, "phi3_v", 32044, false, "Phi-3"},
		{"no preprocessor", ModelInfo{ID: "Qwen/Qwen3-VL-2B", Config: map[string]any{"image_token_id": 151655.0}}, "qwen3_vl", 151655, false, "preprocessor_config"},
		{"text model", ModelInfo{ID: "Qwen/Qwen3-8B", ModelType: "qwen3", Config: map[string]any{}, Processor: pc}, "", 0, false, "no vision processor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Detect(tc.info)
			if s.PlaceholderSpec != tc.spec || s.Enabled != tc.enabled || (tc.enabled || tc.id != 0) && s.ImageTokenID != tc.id {
				t.Fatalf("got spec %q id %d enabled %v (%s)", s.PlaceholderSpec, s.ImageTokenID, s.Enabled, s.Disabled)
			}
			if !tc.enabled && !strings.Contains(s.Disabled, tc.disabled) {
				t.Fatalf("disabled reason %q lacks %q", s.Disabled, tc.disabled)
			}
		})
	}
}

// TestFixtureModelSpec loads the committed Qwen3-VL-2B model directory.
func TestFixtureModelSpec(t *testing.T) {
	s, err := LoadSpec("../testdata/models/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-2B-Instruct")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Enabled || s.Family != FamilyQwen3VL || s.ImageTokenID != 151655 || s.HasBOS {
		t.Fatalf("spec %+v", s)
	}
	if n := s.NumTokens(Size{W: 640, H: 480}); n != 300 {
		t.Fatalf("640x480 → %d, want 300", n)
	}
	// A path without a family hint still resolves through model_type.
	s2, err := LoadSpec("../testdata/models/Qwen3-VL-2B-Instruct", "/models/x")
	if err != nil || !s2.Enabled || s2.Family != FamilyQwen3VL {
		t.Fatalf("model_type fallback: %+v %v", s2, err)
	}
}

// TestBOSRule: a LlamaTokenizer-style model with add_bos_token gets its BOS prepended on the routing
// side; the Qwen fixture does not.
func TestBOSRule(t *testing.T) {
	m, err := model.Load("../testdata/models/Qwen3-VL-2B-Instruct")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := BOSFromModel(m); ok {
		t.Fatal("qwen fixture has no add_bos_token")
	}
	m.TokenizerConfig.AddBOSToken = true
	m.TokenizerConfig.BOSToken = "<|endoftext|>"
	id, ok := BOSFromModel(m)
	if !ok || id != 151643 {
		t.Fatalf("BOS %d %v, want 151643", id, ok)
	}
	m.TokenizerConfig.BOSToken = "two words"
	if _, ok := BOSFromModel(m); ok {
		t.Fatal("a multi-token BOS must not be prepended")
	}
}

func TestUUIDModality(t *testing.T) {
	if m := (&Spec{Family: FamilyKimiK25}).UUIDModality(); m != "vision_chunk" {
		t.Fatal(m)
	}
	if m := (&Spec{Family: FamilyQwen3VL}).UUIDModality(); m != "image" {
		t.Fatal(m)
	}
}

package mm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvroute/kvroute/model"
)

// familyPatterns is llm-multimodal 1.7.0's VisionProcessorRegistry as an ordered list (the crate keeps
// it in a HashMap; the patterns never overlap on real model ids, and a fixed order keeps detection
// deterministic). Detection tries the lowercased model id first, then model_type.
var familyPatterns = []struct {
	f        Family
	patterns []string
}{
	{FamilyQwen3VL, []string{"qwen3-vl", "qwen3_vl", "qwen3.5", "qwen3_5", "qwen3.6", "qwen3_6"}},
	{FamilyQwen2VL, []string{"qwen2-vl", "qwen2_vl", "qwen2.5-vl", "qwen2_5-vl", "qwen2_5_vl"}},
	{FamilyLlavaNext, []string{"llava-next", "llava_next", "llava-v1.6"}},
	{FamilyLlava, []string{"llava-1.5", "llava-v1.5"}},
	{FamilyLlama4, []string{"llama-4", "llama4"}},
	{FamilyKimiK25, []string{"kimi-k2", "kimi_k2"}},
	{FamilyPhi3Vision, []string{"phi-3-vision", "phi3-vision", "phi3_v"}},
}

// DetectFamily returns the counting family of a model: the first pattern contained in the lowercased
// model id (an HF id or a local path), else the first contained in model_type. A plain "llava"
// model_type matches nothing, as in 1.7.0.
func DetectFamily(modelID, modelType string) Family {
	for _, s := range []string{strings.ToLower(modelID), strings.ToLower(modelType)} {
		if s == "" {
			continue
		}
		for _, fp := range familyPatterns {
			for _, p := range fp.patterns {
				if strings.Contains(s, p) {
					return fp.f
				}
			}
		}
	}
	return FamilyNone
}

// ModelInfo is what placeholder resolution and family detection read of a model.
type ModelInfo struct {
	// ID is the model id as served: an HF id or a local path (Dynamo's source_path).
	ID string
	// ModelType is config.json model_type.
	ModelType string
	// Config is the decoded config.json (for image_token_id, vision_token_id, image_token_index,
	// media_placeholder_token_id).
	Config map[string]any
	// TokenID looks a token up in the vocabulary; nil when the model has no tokenizer.json.
	TokenID func(tok string) (uint32, bool)
	// Processor is preprocessor_config.json; nil when absent (no counter then).
	Processor *ProcessorConfig
	// BOS is the id prepended to routing tokens, when HasBOS (see BOSFromModel).
	BOS    uint32
	HasBOS bool
}

// ModelInfoFrom reads a loaded model. id is the name the model is served under (its HF id or path);
// empty means m.Dir.
func ModelInfoFrom(m *model.Model, id string) (ModelInfo, error) {
	if id == "" {
		id = m.Dir
	}
	info := ModelInfo{ID: id, ModelType: m.Config.ModelType, Config: m.Config.Raw}
	if m.Tokenizer != nil {
		info.TokenID = m.Tokenizer.TokenID
	}
	pc, err := LoadProcessorConfig(m.Dir)
	switch {
	case err == nil:
		info.Processor = &pc
	case !errors.Is(err, os.ErrNotExist):
		return info, err
	}
	info.BOS, info.HasBOS = BOSFromModel(m)
	return info, nil
}

// BOSFromModel is the routing-side BOS rule (spec/hashing.md §6.4): when tokenizer_config.json has
// add_bos_token true and bos_token re-encodes to exactly one id, that id is prepended to the routing
// tokens (LLaVA-1.5 / LlamaTokenizer family: the HF processor adds it, the chat template does not).
func BOSFromModel(m *model.Model) (uint32, bool) {
	tc := m.TokenizerConfig
	if !tc.AddBOSToken || tc.BOSToken == "" || m.Tokenizer == nil {
		return 0, false
	}
	ids := m.Tokenizer.Encode(tc.BOSToken)
	if len(ids) != 1 {
		return 0, false
	}
	return ids[0], true
}

// Spec is the resolved multimodal routing setup of one model, built once at startup.
type Spec struct {
	// Family is the token counter; FamilyNone when no pattern matched.
	Family Family
	// Processor is the model's preprocessor config the counter reads.
	Processor ProcessorConfig
	// PlaceholderSpec names the matched llm-multimodal ModelProcessorSpec ("qwen_vl", ...), "" if none.
	PlaceholderSpec string
	// ImageTokenID is the chat placeholder id (the find token): config.json image_token_id when present,
	// else the spec's placeholder_token_id. The frontend expands its runs and event normalization
	// (kvevents.RekeyImages) uses the same id.
	ImageTokenID uint32
	// BOS is prepended to routing tokens when HasBOS.
	BOS    uint32
	HasBOS bool
	// Enabled is true when both the counter and the placeholder resolve (and the family is routable).
	Enabled bool
	// Disabled says why Enabled is false, for the startup warning.
	Disabled string
}

// UUIDModality is the key of vLLM's multi_modal_uuids under which the image uuids go: "vision_chunk"
// for Kimi (unified vision chunks), "image" otherwise (spec/multimodal.md §2.3).
func (s *Spec) UUIDModality() string {
	if s.Family == FamilyKimiK25 {
		return "vision_chunk"
	}
	return "image"
}

// NumTokens is the placeholder count of an image of size sz.
func (s *Spec) NumTokens(sz Size) int { return CalculateNumTokens(sz.W, sz.H, s.Family, s.Processor) }

// Detect resolves a model's Spec (spec/multimodal.md §3, §5.3): the counter from the family patterns
// and preprocessor_config.json (required), the placeholder from the ordered ModelProcessorSpec list.
// Phi-3-vision resolves but stays disabled: its template's numbered <|image_N|> is not one token, so the
// placeholder count never matches (Dynamo PR #10441).
func Detect(info ModelInfo) Spec {
	s := Spec{Family: DetectFamily(info.ID, info.ModelType), BOS: info.BOS, HasBOS: info.HasBOS}
	if info.Processor != nil {
		s.Processor = *info.Processor
	}
	name, id, ok := placeholderID(info)
	s.PlaceholderSpec = name
	if lit, has := configU32(info.Config, "image_token_id"); has {
		id, ok = lit, true
	}
	s.ImageTokenID = id
	switch {
	case s.Family == FamilyNone:
		s.Disabled = fmt.Sprintf("model %q (model_type %q) matches no vision processor family", info.ID, info.ModelType)
	case info.Processor == nil:
		s.Disabled = "preprocessor_config.json is missing, so image token counts are unknown"
	case !ok:
		s.Disabled = fmt.Sprintf("the image placeholder token id cannot be resolved (spec %q)", name)
	case s.Family == FamilyPhi3Vision:
		s.Disabled = "Phi-3-vision's numbered <|image_N|> placeholders are not single tokens"
	default:
		s.Enabled = true
	}
	return s
}

// placeholderID walks llm-multimodal 1.7.0's ModelRegistry in order (KimiK25, Llama4, LlavaNext, Llava,
// Qwen3VL, QwenVL, Phi3) and returns the first matching spec's placeholder_token_id.
func placeholderID(info ModelInfo) (name string, id uint32, ok bool) {
	idl := strings.ToLower(info.ID)
	mt := info.ModelType
	has := func(subs ...string) bool {
		for _, s := range subs {
			if !strings.Contains(idl, s) {
				return false
			}
		}
		return true
	}
	vocab := func(tok string) (uint32, bool) {
		if info.TokenID == nil {
			return 0, false
		}
		return info.TokenID(tok)
	}
	cfgOrVocab := func(key, tok string) (uint32, bool) {
		if v, ok := configU32(info.Config, key); ok {
			return v, true
		}
		return vocab(tok)
	}
	switch {
	case has("kimi", "k2") || mt == "kimi_k25":
		id, ok = configU32(info.Config, "media_placeholder_token_id")
		return "kimi_k25", id, ok
	case has("llama-4") || has("llama4") || mt == "llama4":
		id, ok = cfgOrVocab("image_token_index", "<|image|>")
		return "llama4", id, ok
	case mt == "llava_next":
		id, ok = cfgOrVocab("image_token_index", "<image>")
		return "llava_next", id, ok
	case (has("llava") && !has("llava-next") && !has("llava_next")) || mt == "llava":
		id, ok = cfgOrVocab("image_token_index", "<image>")
		return "llava", id, ok
	case has("qwen3", "vl") || mt == "qwen3_vl" || has("qwen3.5") || has("qwen3.6") || mt == "qwen3_5" || mt == "qwen3_5_moe":
		id, ok = configU32(info.Config, "image_token_id")
		return "qwen3_vl", id, ok
	case has("qwen", "vl") || mt == "qwen2_vl":
		id, ok = configU32(info.Config, "vision_token_id")
		return "qwen_vl", id, ok
	case has("phi", "vision") || mt == "phi3_v":
		id, ok = vocab("<|image|>")
		return "phi3_v", id, ok
	}
	return "", 0, false
}

// configU32 reads a non-negative integer field of config.json; a dotted key walks nested objects.
func configU32(cfg map[string]any, key string) (uint32, bool) {
	var cur any = cfg
	for _, part := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false
		}
		cur = m[part]
	}
	f, ok := cur.(float64)
	if !ok || f < 0 || f > 1<<32-1 || f != float64(uint32(f)) {
		return 0, false
	}
	return uint32(f), true
}

// LoadSpec loads the model directory dir and detects its Spec; id is the served model id ("" = dir).
func LoadSpec(dir, id string) (Spec, error) {
	m, err := model.Load(filepath.Clean(dir))
	if err != nil {
		return Spec{}, err
	}
	info, err := ModelInfoFrom(m, id)
	if err != nil {
		return Spec{}, err
	}
	return Detect(info), nil
}

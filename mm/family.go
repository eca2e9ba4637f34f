package mm

import (
	"errors"
	"fmt"
	"math"
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
	// Not in the 1.7.0 registry: detected so that each routes with its own layout (Pixtral) or falls
	// back with FallbackUnsupportedFamily instead of matching nothing.
	{FamilyPixtral, []string{"pixtral"}},
	{FamilyKimiK3, []string{"kimi-k3", "kimi_k3"}},
	{FamilyPhi4MM, []string{"phi-4-multimodal", "phi4mm", "phi4_multimodal"}},
	{FamilyQwen3Omni, []string{"qwen3-omni", "qwen3_omni"}},
	{FamilyInkling, []string{"inkling"}},
	{FamilyQwen3ASR, []string{"qwen3-asr", "qwen3_asr"}},
	// The spec names no pattern for Nemotron-3-Nano-Omni; both words must appear ("&"), so the text-only
	// Nemotron models stay unknown.
	{FamilyNemotronOmni, []string{"nemotron&omni"}},
}

// containsPattern reports whether s contains p, or every "&"-separated part of p.
func containsPattern(s, p string) bool {
	for {
		part, rest, found := strings.Cut(p, "&")
		if !strings.Contains(s, part) {
			return false
		}
		if !found {
			return true
		}
		p = rest
	}
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
				if containsPattern(s, p) {
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

// BOSFromModel is the routing-side BOS rule: when tokenizer_config.json has
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
	// Unsupported is true for a detected family that kvroute does not route (Phi-3-vision, Kimi-K3,
	// Phi-4-multimodal, Qwen3-Omni, Inkling, Qwen3-ASR, Nemotron-Nano-Omni): its requests fall back with FallbackUnsupportedFamily rather than
	// FallbackUnknownModel, so the metric tells "not routable" from "not recognised".
	Unsupported bool

	// Layout is the shape one image takes in the engine's prompt: LayoutFlat (N × placeholder) except
	// Llama-4 and Pixtral, whose replacements interleave structural tokens with the embeddings.
	Layout Layout
	// Struct are the structural token ids of a non-flat Layout, from the vocabulary.
	Struct StructTokens
	// Llama4 and Pixtral are the geometry of those layouts, from config.json and
	// preprocessor_config.json.
	Llama4  Llama4Params
	Pixtral PixtralParams
	// RunTokenID is the token whose runs hold an image's embeddings in the engine's stored blocks; event
	// normalization (kvevents.RekeyImages) replaces those runs with pad values. It is ImageTokenID for
	// flat layouts, <|patch|> for Llama-4 and [IMG] for Pixtral.
	RunTokenID uint32
	// EndTokenID, when non-zero, is the token that closes an image in the engine's blocks
	// (<|image_end|>, [IMG_END]): normalization moves to the block's next image there rather than after
	// every run, since one image of several tiles or rows makes several runs.
	EndTokenID uint32
}

// Vision reports whether the model is a vision model, routed on images or not: its family or its
// placeholder spec was recognised. The frontend runs the image stage for such a model even when it is
// not Enabled, so that its requests with images are counted as fallbacks by reason; a text model has
// no image stage.
func (s *Spec) Vision() bool {
	return s.Enabled || s.Unsupported || s.Family != FamilyNone || s.PlaceholderSpec != ""
}

// UUIDModality is the key of vLLM's multi_modal_uuids under which the image uuids go: "vision_chunk"
// for Kimi (unified vision chunks), "image" otherwise.
func (s *Spec) UUIDModality() string {
	if s.Family == FamilyKimiK25 {
		return "vision_chunk"
	}
	return "image"
}

// NumTokens is the number of positions an image of size sz takes in the engine's prompt: the family's
// count for flat layouts, the whole replacement (structural tokens included) otherwise.
func (s *Spec) NumTokens(sz Size) int {
	sh := s.shapeOf(sz)
	switch s.Layout {
	case LayoutLlama4:
		return Llama4Len(sh.rows, sh.cols, sh.perTile)
	case LayoutPixtral:
		return sh.rows * (sh.cols + 1)
	}
	return CalculateNumTokens(sz.W, sz.H, s.Family, s.Processor)
}

// shapeOf is the replacement shape of an image of size sz.
func (s *Spec) shapeOf(sz Size) shape {
	sh := shape{layout: s.Layout, tok: &s.Struct}
	switch s.Layout {
	case LayoutLlama4:
		sh.rows, sh.cols = Llama4Grid(sz.W, sz.H, s.Llama4.Tile, s.Llama4.MaxTiles)
		sh.perTile = s.Llama4.PerTile
	case LayoutPixtral:
		sh.rows, sh.cols = PixtralGrid(sz.W, sz.H, s.Pixtral)
	}
	return sh
}

// Detect resolves a model's Spec: the counter from the family patterns
// and preprocessor_config.json (required), the placeholder from the ordered ModelProcessorSpec list.
// Llama-4 and Pixtral get vLLM's structured layouts (find token <|image|> / [IMG]). Phi-3-vision,
// Kimi-K3, Phi-4-multimodal, Qwen3-Omni, Inkling, Qwen3-ASR and Nemotron-Nano-Omni resolve but stay
// disabled and Unsupported (see unsupportedFamilies).
func Detect(info ModelInfo) Spec {
	s := Spec{Family: DetectFamily(info.ID, info.ModelType), BOS: info.BOS, HasBOS: info.HasBOS}
	if vc, _ := info.Config["vision_config"].(map[string]any); s.Family == FamilyNone && vc["model_type"] == "pixtral" {
		s.Family = FamilyPixtral // an HF-format Pixtral (model_type "llava") under a path that does not say so
	}
	if info.Processor != nil {
		s.Processor = *info.Processor
	}
	name, id, ok := placeholderID(info)
	s.PlaceholderSpec = name
	if lit, has := configU32(info.Config, "image_token_id"); has {
		id, ok = lit, true
	}
	s.ImageTokenID = id
	structErr := ""
	switch s.Family {
	case FamilyLlama4:
		ok, structErr = s.detectLlama4(info)
	case FamilyPixtral:
		s.PlaceholderSpec = "pixtral"
		ok, structErr = s.detectPixtral(info)
	}
	s.RunTokenID = s.ImageTokenID
	if s.Layout != LayoutFlat {
		s.RunTokenID = s.Struct.Patch
	}
	switch {
	case s.Family == FamilyNone:
		s.Disabled = fmt.Sprintf("model %q (model_type %q) matches no vision processor family", info.ID, info.ModelType)
	case unsupportedFamilies[s.Family] != "":
		s.Unsupported = true
		s.Disabled = unsupportedFamilies[s.Family]
	case info.Processor == nil:
		s.Disabled = "preprocessor_config.json is missing, so image token counts are unknown"
	case structErr != "":
		s.Disabled = structErr
	case !ok:
		s.Disabled = fmt.Sprintf("the image placeholder token id cannot be resolved (spec %q)", name)
	default:
		s.Enabled = true
	}
	return s
}

// unsupportedFamilies are the detected families kvroute does not route, with the reason.
var unsupportedFamilies = map[Family]string{
	FamilyPhi3Vision:   "Phi-3-vision is not routed on images: its template's numbered <|image_N|> placeholders are not single tokens, so the placeholder count never matches (Dynamo dropped it too)",
	FamilyKimiK3:       "Kimi-K3 is not routed on images: its prompt embeds each image's WxH as text between control tokens",
	FamilyPhi4MM:       "Phi-4-multimodal is not routed on images: no token counter matches its dynamic-HD processor",
	FamilyQwen3Omni:    "Qwen3-Omni is not routed on images: no token counter matches its processor",
	FamilyInkling:      "Inkling is not routed on images: no token counter matches its processor (llm-multimodal 1.9 adds one)",
	FamilyQwen3ASR:     "Qwen3-ASR is not routed on images: it is an audio model",
	FamilyNemotronOmni: "Nemotron-Nano-Omni is not routed on images: its dynamic resolution shares a token budget across the request's images, so one image's count depends on the others",
}

// detectLlama4 sets vLLM's Llama-4 layout: the template emits <|image|> once per image (the find
// token); the engine replaces it by _prompt_split_image, whose <|patch|> runs carry the embeddings.
func (s *Spec) detectLlama4(info ModelInfo) (ok bool, why string) {
	vocab := func(tok string) uint32 {
		if info.TokenID == nil {
			return 0
		}
		id, _ := info.TokenID(tok)
		return id
	}
	t := StructTokens{Start: vocab("<|image_start|>"), End: vocab("<|image_end|>"), Image: vocab("<|image|>"),
		Patch: vocab("<|patch|>"), XSep: vocab("<|tile_x_separator|>"), YSep: vocab("<|tile_y_separator|>")}
	if p, has := configU32(info.Config, "image_token_index"); has {
		t.Patch = p
	}
	if t.Start == 0 || t.End == 0 || t.Image == 0 || t.Patch == 0 || t.XSep == 0 || t.YSep == 0 {
		return false, "Llama-4's image structure tokens (<|image_start|>, <|image|>, <|patch|>, <|tile_x_separator|>, <|tile_y_separator|>, <|image_end|>) are not all in the vocabulary"
	}
	p := DefaultLlama4Params()
	if v, has := configU32(info.Config, "vision_config.image_size"); has && v > 0 {
		p.Tile = int(v)
	} else if s.Processor.SizeHeight > 0 {
		p.Tile = s.Processor.SizeHeight
	}
	if s.Processor.MaxPatches > 0 {
		p.MaxTiles = s.Processor.MaxPatches
	}
	patch := 14
	if v, has := configU32(info.Config, "vision_config.patch_size"); has && v > 0 {
		patch = int(v)
	}
	ratio := 0.5
	if v, has := configFloat(info.Config, "vision_config.pixel_shuffle_ratio"); has && v > 0 && v <= 1 {
		ratio = v
	}
	ds := int(math.Round(1 / (ratio * ratio)))
	if p.Tile%patch != 0 || ds <= 0 || (p.Tile/patch)*(p.Tile/patch)%ds != 0 {
		return false, fmt.Sprintf("Llama-4 tile %d, patch %d and pixel shuffle ratio %g do not give whole tokens per tile", p.Tile, patch, ratio)
	}
	p.PerTile = (p.Tile / patch) * (p.Tile / patch) / ds
	s.Layout, s.Struct, s.Llama4, s.ImageTokenID = LayoutLlama4, t, p, t.Image
	s.EndTokenID = t.End
	return true, ""
}

// detectPixtral sets vLLM's Pixtral layout: the template emits [IMG] once per image; the engine writes
// rows of [IMG] ended by [IMG_BREAK], the last by [IMG_END].
func (s *Spec) detectPixtral(info ModelInfo) (ok bool, why string) {
	vocab := func(tok string) uint32 {
		if info.TokenID == nil {
			return 0
		}
		id, _ := info.TokenID(tok)
		return id
	}
	t := StructTokens{Patch: vocab("[IMG]"), Break: vocab("[IMG_BREAK]"), End: vocab("[IMG_END]")}
	if p, has := configU32(info.Config, "image_token_index"); has {
		t.Patch = p
	}
	if t.Patch == 0 || t.Break == 0 || t.End == 0 {
		return false, "Pixtral's image tokens ([IMG], [IMG_BREAK], [IMG_END]) are not all in the vocabulary"
	}
	p := DefaultPixtralParams()
	if v, has := configU32(info.Config, "vision_config.image_size"); has && v > 0 {
		p.MaxSide = int(v)
	}
	if v, has := configU32(info.Config, "vision_config.patch_size"); has && v > 0 {
		p.Patch = int(v)
	}
	if v, has := configU32(info.Config, "spatial_merge_size"); has && v > 0 {
		p.Patch *= int(v)
	}
	s.Layout, s.Struct, s.Pixtral, s.ImageTokenID = LayoutPixtral, t, p, t.Patch
	s.EndTokenID = t.End
	return true, ""
}

// configFloat reads a number field of config.json; a dotted key walks nested objects.
func configFloat(cfg map[string]any, key string) (float64, bool) {
	var cur any = cfg
	for _, part := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false
		}
		cur = m[part]
	}
	f, ok := cur.(float64)
	return f, ok
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
	f, ok := configFloat(cfg, key)
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

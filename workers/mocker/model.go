package mocker

import (
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/model"
)

// Tokenizer is what the mocker needs from a tokenizer: text with special tokens in, ids out, and back.
type Tokenizer interface {
	Encode(text string) []uint32
	Decode(ids []uint32) string
}

// ChatMessage is one OpenAI chat message after parsing: its role and its content parts in order.
type ChatMessage struct {
	Role  string
	Parts []ChatPart
	// Msg is the whole message as the router's renderer reads it (tool calls, tool call ids, names,
	// reasoning), when the request carried it; the chat template renders it rather than Parts, so the
	// prompt is the router's to the byte.
	Msg *model.Message
}

// ChatPart is a text part or an image part.
type ChatPart struct {
	Text     string
	Image    bool
	URL      string // image URL or data URI
	UUID     string // the part's "uuid": the image's identity when set
	MMKwargs []byte // mm transfer hook (mm_transfer.go): the part's "mm_kwargs" descriptor, raw JSON
}

// Model is the served model as the mocker sees it: tokenizer, chat rendering and the image geometry that
// decides how many placeholder tokens an image expands to. NewFallbackModel works without any files.
type Model struct {
	// Name is the served model name (/v1/models, "model" in responses).
	Name string
	// Root is the model path reported by /v1/models.
	Root string
	Tok  Tokenizer
	// RenderChat renders messages with the chat template; each image part becomes exactly one
	// ImagePadID token after Encode.
	// opts carries the request's template inputs (generation prompt, tools, chat_template_kwargs).
	RenderChat func(msgs []ChatMessage, opts model.ChatOptions) (string, error)
	// ImagePadID is the placeholder token repeated once per image token (Qwen: <|image_pad|> 151655).
	ImagePadID uint32
	// PatchSize, MergeSize, MinPixels and MaxPixels are the Qwen-VL resize parameters
	// (preprocessor_config.json): tokens = (h'/patch)·(w'/patch)/merge².
	PatchSize, MergeSize int
	MinPixels, MaxPixels int
	// MaxModelLen is reported by /v1/models and /tokenize.
	MaxModelLen int
	// Layout, when its Kind is set, writes each image as vLLM's structured replacement (Llama-4,
	// Pixtral) instead of ImageTokens copies of ImagePadID; ImagePadID is then the placeholder the
	// template emits, and Layout.Patch the token whose runs carry the image.
	Layout ImageLayout
	// CountImage, when set, is the image token count of a family other than Qwen-VL (LLaVA, LLaVA-NeXT,
	// Kimi): package mm's port of the processors' counts, which mm's golden tests check. nil: the Qwen-VL
	// smart_resize count of ImageTokens, written here independently of mm.
	CountImage func(w, h int) int
}

// Qwen special tokens used by the fallback model (the real ids, so events look like Qwen3-VL's).
const (
	qwenImStart     = 151644
	qwenImEnd       = 151645
	qwenVisionStart = 151652
	qwenVisionEnd   = 151653
	qwenImagePad    = 151655
)

var fallbackSpecials = []struct {
	text string
	id   uint32
}{
	{"<|im_start|>", qwenImStart},
	{"<|im_end|>", qwenImEnd},
	{"<|vision_start|>", qwenVisionStart},
	{"<|vision_end|>", qwenVisionEnd},
	{"<|image_pad|>", qwenImagePad},
}

// byteTokenizer maps every UTF-8 byte to its value as a token id, except Qwen's chat and vision special
// tokens, which keep their Qwen ids. It is exact and reversible, and needs no files.
type byteTokenizer struct{}

func (byteTokenizer) Encode(text string) []uint32 {
	out := make([]uint32, 0, len(text))
	for i := 0; i < len(text); {
		matched := false
		if text[i] == '<' {
			for _, sp := range fallbackSpecials {
				if strings.HasPrefix(text[i:], sp.text) {
					out = append(out, sp.id)
					i += len(sp.text)
					matched = true
					break
				}
			}
		}
		if !matched {
			out = append(out, uint32(text[i]))
			i++
		}
	}
	return out
}

func (byteTokenizer) Decode(ids []uint32) string {
	var b strings.Builder
	for _, id := range ids {
		if id < 256 {
			b.WriteByte(byte(id))
			continue
		}
		for _, sp := range fallbackSpecials {
			if sp.id == id {
				b.WriteString(sp.text)
			}
		}
	}
	s := b.String()
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// renderQwenChat is Qwen3-VL's template for plain conversations (no tools): each message as
// <|im_start|>role\ncontent<|im_end|>\n, images as <|vision_start|><|image_pad|><|vision_end|>.
func renderQwenChat(msgs []ChatMessage, opts model.ChatOptions) (string, error) {
	addGenerationPrompt := opts.AddGenerationPrompt
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteByte('\n')
		for _, p := range m.Parts {
			if p.Image {
				b.WriteString("<|vision_start|><|image_pad|><|vision_end|>")
			} else {
				b.WriteString(p.Text)
			}
		}
		b.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}

// NewFallbackModel is a file-free model: byte tokenizer, Qwen-style chat rendering and Qwen3-VL's image
// geometry (patch 16, merge 2, 65536..16777216 pixels).
func NewFallbackModel(name string) *Model {
	return &Model{
		Name:        name,
		Root:        name,
		Tok:         byteTokenizer{},
		RenderChat:  renderQwenChat,
		ImagePadID:  qwenImagePad,
		PatchSize:   16,
		MergeSize:   2,
		MinPixels:   65536,
		MaxPixels:   16777216,
		MaxModelLen: 262144,
	}
}

// fillerText is what the mocker "generates", cycled token by token.
const fillerText = " The quick brown fox jumps over the lazy dog while the router keeps the cache warm."

// fillerTokens encodes fillerText with the model's tokenizer.
func (m *Model) fillerTokens() []uint32 {
	ids := m.Tok.Encode(fillerText)
	if len(ids) == 0 {
		return []uint32{1}
	}
	return ids
}

// hfTokenizer adapts model.Tokenizer (exact byte-level BPE with added-token splitting).
type hfTokenizer struct{ t *model.Tokenizer }

func (h hfTokenizer) Encode(text string) []uint32 { return h.t.Encode(text) }
func (h hfTokenizer) Decode(ids []uint32) string  { return h.t.Decode(ids, model.DecodeOptions{}) }

// LoadModel loads an HF model directory, or a name found in the local HF hub cache (model.LoadNamed; nothing
// is downloaded): its tokenizer, chat template and image geometry. name is the served model name ("" uses
// dir as given, as vLLM does).
func LoadModel(dir, name string) (*Model, error) {
	hf, err := model.LoadNamed(dir)
	if err != nil {
		return nil, fmt.Errorf("mocker: %w", err)
	}
	if name == "" {
		name = dir
	}
	return ModelOf(hf, name), nil
}

// ModelOf is the simulated model of an already loaded HF model served as name: it shares hf's
// tokenizer and chat template (both safe for concurrent use), so one loaded model can serve a
// frontend and its simulated workers in one process without parsing tokenizer.json again.
func ModelOf(hf *model.Model, name string) *Model {
	m := NewFallbackModel(name)
	m.Root = filepath.Clean(hf.Dir)
	m.Tok = hfTokenizer{hf.Tokenizer}
	if hf.Config.ImageTokenID >= 0 {
		m.ImagePadID = uint32(hf.Config.ImageTokenID)
	}
	if l, ph, ok := detectImageLayout(hf, name); ok {
		m.Layout, m.ImagePadID = l, ph
	} else if info, err := mm.ModelInfoFrom(hf, name); err == nil {
		switch spec := mm.Detect(info); {
		case !spec.Enabled || spec.Layout != mm.LayoutFlat:
		case spec.Family == mm.FamilyLlava || spec.Family == mm.FamilyLlavaNext || spec.Family == mm.FamilyKimiK25:
			m.ImagePadID = spec.ImageTokenID
			m.CountImage = func(w, h int) int { return spec.NumTokens(mm.Size{W: uint32(w), H: uint32(h)}) }
		}
	}
	if p := hf.Preprocessor; p != nil {
		if p.PatchSize > 0 {
			m.PatchSize = p.PatchSize
		}
		if p.MergeSize > 0 {
			m.MergeSize = p.MergeSize
		}
		if p.MinPixels > 0 {
			m.MinPixels = p.MinPixels
		}
		if p.MaxPixels > 0 {
			m.MaxPixels = p.MaxPixels
		}
	}
	if tc, ok := hf.Config.Raw["text_config"].(map[string]any); ok {
		if v, ok := tc["max_position_embeddings"].(float64); ok && v > 0 {
			m.MaxModelLen = int(v)
		}
	} else if v, ok := hf.Config.Raw["max_position_embeddings"].(float64); ok && v > 0 {
		m.MaxModelLen = int(v)
	}
	if hf.ChatTemplate != nil {
		m.RenderChat = func(msgs []ChatMessage, opts model.ChatOptions) (string, error) {
			return hf.RenderChat(toModelMessages(msgs), opts)
		}
	}
	return m
}

func toModelMessages(msgs []ChatMessage) []model.Message {
	out := make([]model.Message, len(msgs))
	for i, m := range msgs {
		if m.Msg != nil {
			out[i] = *m.Msg
			continue
		}
		out[i].Role = m.Role
		if len(m.Parts) == 1 && !m.Parts[0].Image {
			out[i].Content = model.TextContent(m.Parts[0].Text)
			continue
		}
		parts := make([]model.ContentPart, len(m.Parts))
		for j, p := range m.Parts {
			if p.Image {
				parts[j] = model.ContentPart{Type: "image_url", ImageURL: &model.MediaURL{URL: p.URL}}
			} else {
				parts[j] = model.ContentPart{Type: "text", Text: p.Text}
			}
		}
		out[i].Content = model.PartsContent(parts...)
	}
	return out
}

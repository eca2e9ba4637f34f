package mocker

import (
	"fmt"
	"path/filepath"

	"github.com/kvroute/kvroute/model"
)

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
	m := NewFallbackModel(name)
	m.Root = filepath.Clean(hf.Dir)
	m.Tok = hfTokenizer{hf.Tokenizer}
	if hf.Config.ImageTokenID >= 0 {
		m.ImagePadID = uint32(hf.Config.ImageTokenID)
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
		m.RenderChat = func(msgs []ChatMessage, addGen bool) (string, error) {
			return hf.RenderChat(toModelMessages(msgs), model.ChatOptions{AddGenerationPrompt: addGen})
		}
	}
	return m, nil
}

func toModelMessages(msgs []ChatMessage) []model.Message {
	out := make([]model.Message, len(msgs))
	for i, m := range msgs {
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

package lab

import (
	"fmt"
	"sync"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/mocker"
)

// Images in the lab's workloads. A trace names token blocks by hash id; an image starts at the first
// token of a hash id (Images maps that id to the image) and covers as many tokens as the model's
// processor makes of it, the rest of its last block being text. Because a hash id stands for its whole
// prefix, the same id always carries the same image at the same place, so the oracles (which count
// hash ids) stay exact, and an image shared by requests shares KV blocks only where the engines' prefix
// cache would: after the same prefix.
//
// The three sides see an image as production does, for Qwen2.5-VL (flat layout, <|image_pad|>
// 151655, its published preprocessor config):
//   - the engine's prompt holds the image's placeholder run (mm.Spec.AppendImage with RunTokenID) and
//     the request carries the item (vLLM uuid Hash.VLLMUUID, offset, length), which enters the extra
//     keys of the blocks it overlaps and so the engine's block hashes and KV events;
//   - the router hashes the routing view the frontend builds: the worker-bound tokens (one placeholder
//     per image) expanded by mm.Expand to the image's pad values, then scoring.PromptHashes;
//   - KV events are re-keyed by kvevents.RekeyImages (the worker actor's path when an image token id
//     is configured), which puts the same pad values where the engine's blocks hold the placeholder.

// Image is one image of a workload.
type Image struct {
	// Hash is the image's identity (mm.HashURL of its URL).
	Hash mm.Hash `json:"mm_hash"`
	// W and H are its size in pixels.
	W uint32 `json:"w"`
	H uint32 `json:"h"`
}

// Images maps the hash id at whose first token an image starts to the image.
type Images map[uint64]Image

var (
	imageSpecOnce sync.Once
	imageSpec     mm.Spec
)

// ImageModel is the vision model whose processor sizes the lab's images: Qwen2.5-VL with its
// published preprocessor config (patch 14, merge 2, 3,136–12,845,056 pixels).
func ImageModel() *mm.Spec {
	imageSpecOnce.Do(func() {
		pc := mm.ProcessorConfig{PatchSize: 14, MergeSize: 2, TemporalPatchSize: 2, MinPixels: 3136, MaxPixels: 12845056}
		imageSpec = mm.Detect(mm.ModelInfo{ID: "Qwen/Qwen2.5-VL-7B-Instruct", ModelType: "qwen2_5_vl",
			Config: map[string]any{"image_token_id": 151655.0}, Processor: &pc})
	})
	return &imageSpec
}

// Tokens is the number of prompt tokens the image becomes.
func (im Image) Tokens() int { return ImageModel().NumTokens(mm.Size{W: im.W, H: im.H}) }

// prompt is one request as the engine and the router see it.
type prompt struct {
	// tokens are the engine's prompt; mm its image items, in prompt order.
	tokens []uint32
	mm     []mocker.MMItem
	// local and chain are the router's block hashes of its routing view.
	local, chain []uint64
}

// buildPrompt builds request r's prompt: the trace's token blocks, with the images of cfg.Images over
// the blocks they start at.
func buildPrompt(cfg *Config, r *bench.Request) (prompt, error) {
	p := prompt{tokens: cfg.Blocks.AppendPrompt(make([]uint32, 0, cfg.Blocks.PromptLen(r)), r)}
	if len(cfg.Images) == 0 {
		p.local, p.chain = scoring.PromptHashes(nil, nil, p.tokens, cfg.BlockSize, scoring.Seed)
		return p, nil
	}
	spec := ImageModel()
	var entries []mm.Entry
	var bound []uint32 // worker-bound tokens: one placeholder per image
	prev := 0
	for i, id := range r.HashIDs {
		im, ok := cfg.Images[id]
		if !ok {
			continue
		}
		at := i * cfg.Blocks.BlockSize
		if at < prev {
			return p, fmt.Errorf("%w: image at hash id %d overlaps the image before it", ErrBadConfig, id)
		}
		run := spec.AppendImage(nil, mm.Size{W: im.W, H: im.H}, spec.RunTokenID)
		if at+len(run) > len(p.tokens) {
			return p, fmt.Errorf("%w: image at hash id %d (%d tokens) runs past the prompt's %d tokens", ErrBadConfig, id, len(run), len(p.tokens))
		}
		bound = append(append(bound, p.tokens[prev:at]...), spec.ImageTokenID)
		copy(p.tokens[at:], run)
		p.mm = append(p.mm, mocker.MMItem{ID: im.Hash.VLLMUUID(), Offset: at, Length: len(run)})
		entries = append(entries, mm.Entry{Hash: im.Hash, NumTokens: len(run)})
		prev = at + len(run)
	}
	if len(entries) == 0 {
		p.local, p.chain = scoring.PromptHashes(nil, nil, p.tokens, cfg.BlockSize, scoring.Seed)
		return p, nil
	}
	bound = append(bound, p.tokens[prev:]...)
	rt, reason := mm.Expand(nil, bound, spec.ImageTokenID, entries, spec.BOS, spec.HasBOS, cfg.BlockSize, mm.DefaultLimits())
	if reason != mm.FallbackNone {
		return p, fmt.Errorf("%w: routing view: %s", ErrBadConfig, reason)
	}
	p.local, p.chain = scoring.PromptHashes(nil, nil, rt.Tokens, cfg.BlockSize, scoring.Seed)
	return p, nil
}

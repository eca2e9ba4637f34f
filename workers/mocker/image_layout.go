package mocker

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvroute/kvroute/model"
)

// ImageLayout is how the simulated engine writes one image into the prompt, as vLLM's prompt
// replacement for the model does. The zero value is Qwen-VL's: ImageTokens copies of ImagePadID.
// Written here from the engines' definitions, independently of package mm, so that an end-to-end test
// compares two implementations.
type ImageLayout struct {
	// Kind is "" (flat), "llama4" (Mllama4: tiles of <|patch|> between structural tokens) or "pixtral"
	// (rows of [IMG] ended by [IMG_BREAK], the last by [IMG_END]).
	Kind string
	// Tokens by role: Patch is the embedding token; the rest are structural.
	Start, End, Image, Patch, XSep, YSep, Break uint32
	// Llama-4: tile side, max tiles (max_patches) and positions per tile.
	Tile, MaxTiles, PerTile int
	// Pixtral: the longest side an image is fitted into and the patch side.
	MaxSide, PatchSide int
}

// write appends the replacement of a w×h image.
func (l *ImageLayout) write(out []uint32, w, h int) []uint32 {
	rep := func(id uint32, n int) {
		for range n {
			out = append(out, id)
		}
	}
	switch l.Kind {
	case "llama4":
		rows, cols := llama4BestFit(w, h, l.Tile, l.MaxTiles)
		out = append(out, l.Start)
		if rows*cols > 1 {
			for range rows {
				for c := range cols {
					rep(l.Patch, l.PerTile)
					if c < cols-1 {
						out = append(out, l.XSep)
					}
				}
				out = append(out, l.YSep)
			}
		}
		out = append(out, l.Image)
		rep(l.Patch, l.PerTile)
		return append(out, l.End)
	case "pixtral":
		ratio := math.Max(float64(w)/float64(l.MaxSide), float64(h)/float64(l.MaxSide))
		if ratio > 1 {
			w, h = int(math.Floor(float64(w)/ratio)), int(math.Floor(float64(h)/ratio))
		}
		rows, cols := (h-1)/l.PatchSide+1, (w-1)/l.PatchSide+1
		for r := range rows {
			rep(l.Patch, cols)
			if r == rows-1 {
				out = append(out, l.End)
			} else {
				out = append(out, l.Break)
			}
		}
		return out
	}
	return out
}

// llama4BestFit is HF get_best_fit over find_supported_resolutions: every canvas of r×c tiles with
// r·c ≤ maxTiles; the smallest scale that does not shrink the image if any, else the largest; ties go
// to the smallest canvas.
func llama4BestFit(w, h, tile, maxTiles int) (rows, cols int) {
	type canvas struct{ r, c int }
	var all []canvas
	for n := maxTiles; n >= 1; n-- {
		for f := 1; f <= n; f++ {
			if n%f == 0 {
				all = append(all, canvas{f, n / f})
			}
		}
	}
	scale := func(cv canvas) float64 {
		return math.Min(float64(cv.r*tile)/float64(h), float64(cv.c*tile)/float64(w))
	}
	sel, up := math.Inf(1), false
	for _, cv := range all {
		if s := scale(cv); s >= 1 && s < sel {
			sel, up = s, true
		}
	}
	if !up {
		sel = math.Inf(-1)
		for _, cv := range all {
			sel = math.Max(sel, scale(cv))
		}
	}
	best := canvas{}
	for _, cv := range all {
		if scale(cv) == sel && (best.r == 0 || cv.r*cv.c < best.r*best.c) {
			best = cv
		}
	}
	return best.r, best.c
}

// detectImageLayout recognises the models whose images vLLM writes with structure (Llama-4 by
// model_type, Pixtral by name or vision model_type) and reads their token ids from the vocabulary and
// geometry from config.json. ok is false for every other model (Qwen's flat layout applies).
func detectImageLayout(hf *model.Model, name string) (l ImageLayout, placeholder uint32, ok bool) {
	if hf.Tokenizer == nil {
		return l, 0, false
	}
	tok := func(s string) uint32 { id, _ := hf.Tokenizer.TokenID(s); return id }
	cfgInt := func(def int, path ...string) int {
		var cur any = hf.Config.Raw
		for _, p := range path {
			m, ok := cur.(map[string]any)
			if !ok {
				return def
			}
			cur = m[p]
		}
		if f, ok := cur.(float64); ok && f > 0 {
			return int(f)
		}
		return def
	}
	vision, _ := hf.Config.Raw["vision_config"].(map[string]any)
	vmt, _ := vision["model_type"].(string)
	switch {
	case hf.Config.ModelType == "llama4":
		l = ImageLayout{Kind: "llama4", Start: tok("<|image_start|>"), End: tok("<|image_end|>"), Image: tok("<|image|>"),
			Patch: tok("<|patch|>"), XSep: tok("<|tile_x_separator|>"), YSep: tok("<|tile_y_separator|>"),
			Tile: cfgInt(336, "vision_config", "image_size"), MaxTiles: 16}
		if data, err := os.ReadFile(filepath.Join(hf.Dir, "preprocessor_config.json")); err == nil {
			var pc struct {
				MaxPatches int `json:"max_patches"`
			}
			if json.Unmarshal(data, &pc) == nil && pc.MaxPatches > 0 {
				l.MaxTiles = pc.MaxPatches
			}
		}
		side := l.Tile / cfgInt(14, "vision_config", "patch_size")
		l.PerTile = side * side / 4 // pixel shuffle ratio 0.5
		return l, l.Image, l.Image != 0 && l.Patch != 0
	case strings.Contains(strings.ToLower(name), "pixtral") || vmt == "pixtral":
		l = ImageLayout{Kind: "pixtral", Patch: tok("[IMG]"), Break: tok("[IMG_BREAK]"), End: tok("[IMG_END]"),
			MaxSide: cfgInt(1024, "vision_config", "image_size"), PatchSide: cfgInt(16, "vision_config", "patch_size") * cfgInt(1, "spatial_merge_size")}
		return l, l.Patch, l.Patch != 0 && l.Break != 0 && l.End != 0
	}
	return l, 0, false
}

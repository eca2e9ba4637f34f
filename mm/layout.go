package mm

import "math"

// Layout is the shape an image's single placeholder takes in the engine's prompt: vLLM's prompt
// replacement for the model. The routing view reproduces it token for token, with every position that
// carries the image's embedding replaced by its pad value and the structural tokens kept, so that the
// engine's stored blocks, normalized by kvevents.RekeyImages, hash as the request's.
type Layout uint8

const (
	// LayoutFlat: N copies of the placeholder (Qwen-VL, LLaVA, Kimi). N is the family's token count.
	LayoutFlat Layout = iota
	// LayoutLlama4: vLLM's Mllama4 replacement (HF Llama4Processor._prompt_split_image):
	// <|image_start|>, then for a canvas of rows×cols tiles with more than one tile, per row: cols runs
	// of PerTile <|patch|> separated by <|tile_x_separator|>, then <|tile_y_separator|>; then <|image|>,
	// PerTile <|patch|> (the global tile) and <|image_end|>. PerTile = (tile/patch)² / round(1/ratio²) =
	// 144 for 336-px tiles, patch 14, pixel_shuffle_ratio 0.5. Length 3 + PerTile + [tiles > 1] ·
	// rows · (cols·PerTile + cols).
	LayoutLlama4
	// LayoutPixtral: vLLM's Pixtral (HF format) replacement: per row, cols [IMG] then [IMG_BREAK], the
	// last [IMG_BREAK] being [IMG_END]. Length rows · (cols + 1).
	LayoutPixtral
)

// StructTokens are the structural token ids of a non-flat layout, resolved from the vocabulary.
// Llama-4 uses all but Break; Pixtral uses Patch ([IMG]), Break ([IMG_BREAK]) and End ([IMG_END]).
type StructTokens struct {
	Start, End, Image, Patch, XSep, YSep, Break uint32
}

// Llama4Params are the inputs of vLLM's Llama-4 token layout.
type Llama4Params struct {
	// Tile is the tile side in pixels: vision_config.image_size, else preprocessor size.height; 336.
	Tile int
	// MaxTiles is the image processor's max_patches (16), the canvas budget of get_best_fit.
	MaxTiles int
	// PerTile is the embedding positions per tile: (Tile/patch)² / round(1/pixel_shuffle_ratio²) = 144.
	PerTile int
}

// DefaultLlama4Params are Llama-4 Scout / Maverick's: 336-px tiles, 16 tiles, 144 positions per tile.
func DefaultLlama4Params() Llama4Params { return Llama4Params{Tile: 336, MaxTiles: 16, PerTile: 144} }

// Llama4Grid is the (rows, cols) tile canvas HF get_best_fit chooses for an image of w×h among every
// rows×cols ≤ maxTiles: the smallest scale ≥ 1 when one exists (no upscaling beyond need), else the
// largest downscale; among equal scales the smallest area.
func Llama4Grid(w, h uint32, tile, maxTiles int) (rows, cols int) {
	if w == 0 || h == 0 || tile <= 0 || maxTiles <= 0 {
		return 1, 1
	}
	H, W := float64(h), float64(w)
	type cand struct {
		scale      float64
		rows, cols int
	}
	bestUp := cand{scale: math.Inf(1)}
	bestDown := cand{scale: math.Inf(-1)}
	haveUp := false
	for r := 1; r <= maxTiles; r++ {
		sh := float64(r*tile) / H
		for c := 1; r*c <= maxTiles; c++ {
			s := math.Min(sh, float64(c*tile)/W)
			if s >= 1 {
				haveUp = true
				if s < bestUp.scale-1e-9 || (math.Abs(s-bestUp.scale) < 1e-9 && r*c < bestUp.rows*bestUp.cols) {
					bestUp = cand{s, r, c}
				}
			} else if s > bestDown.scale+1e-9 || (math.Abs(s-bestDown.scale) < 1e-9 && r*c < bestDown.rows*bestDown.cols) {
				bestDown = cand{s, r, c}
			}
		}
	}
	if haveUp {
		return bestUp.rows, bestUp.cols
	}
	return bestDown.rows, bestDown.cols
}

// Llama4Len is the length of vLLM's Llama-4 replacement for a rows×cols canvas.
func Llama4Len(rows, cols, perTile int) int {
	n := 3 + perTile
	if rows*cols > 1 {
		n += rows * (cols*perTile + cols)
	}
	return n
}

// PixtralParams are the inputs of vLLM's Pixtral token layout.
type PixtralParams struct {
	// MaxSide is vision_config.image_size (1024): a larger image is scaled down to fit, aspect kept.
	MaxSide int
	// Patch is vision_config.patch_size × spatial_merge_size (16 for Pixtral-12B).
	Patch int
}

// DefaultPixtralParams are Pixtral-12B's: 1024-px bound, 16-px patches, no spatial merge.
func DefaultPixtralParams() PixtralParams { return PixtralParams{MaxSide: 1024, Patch: 16} }

// PixtralGrid is the (rows, cols) patch grid of vLLM's PixtralHFEncoderInfo.get_patch_grid_size:
// ratio = max(W/max, H/max); above 1 both sides are divided by it and floored; then one row or column
// per started patch.
func PixtralGrid(w, h uint32, p PixtralParams) (rows, cols int) {
	if w == 0 || h == 0 || p.MaxSide <= 0 || p.Patch <= 0 {
		return 1, 1
	}
	W, H := float64(w), float64(h)
	ratio := math.Max(W/float64(p.MaxSide), H/float64(p.MaxSide))
	iw, ih := int(w), int(h)
	if ratio > 1 {
		iw = int(math.Floor(W / ratio))
		ih = int(math.Floor(H / ratio))
	}
	return max((ih-1)/p.Patch+1, 1), max((iw-1)/p.Patch+1, 1)
}

// shape is one image's replacement: its layout, grid and the tokens it is built of.
type shape struct {
	layout     Layout
	rows, cols int
	perTile    int
	tok        *StructTokens
}

// write appends the replacement of one image to out, with pad at every embedding position.
func (s *shape) write(out []uint32, pad uint32, n int) []uint32 {
	fill := func(k int) {
		for range k {
			out = append(out, pad)
		}
	}
	switch s.layout {
	case LayoutLlama4:
		out = append(out, s.tok.Start)
		if s.rows*s.cols > 1 {
			for range s.rows {
				for c := range s.cols {
					fill(s.perTile)
					if c < s.cols-1 {
						out = append(out, s.tok.XSep)
					}
				}
				out = append(out, s.tok.YSep)
			}
		}
		out = append(out, s.tok.Image)
		fill(s.perTile)
		return append(out, s.tok.End)
	case LayoutPixtral:
		for r := range s.rows {
			fill(s.cols)
			if r < s.rows-1 {
				out = append(out, s.tok.Break)
			} else {
				out = append(out, s.tok.End)
			}
		}
		return out
	}
	fill(n)
	return out
}

// AppendImage appends the replacement of one image of size sz as the engine writes it, with fill at
// every embedding position: RunTokenID gives the engine's own prompt tokens (what a simulated worker
// stores), an image's pad value gives its routing view.
func (s *Spec) AppendImage(out []uint32, sz Size, fill uint32) []uint32 {
	sh := s.shapeOf(sz)
	return sh.write(out, fill, s.NumTokens(sz))
}

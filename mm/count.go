package mm

import (
	"math"
)

// Family is a vision processor family: it fixes how an image's (W, H) becomes a number of placeholder
// tokens (llm-multimodal 1.7.0).
type Family uint8

// Families. The zero value means "no counter".
const (
	FamilyNone Family = iota
	FamilyQwen2VL
	FamilyQwen3VL
	FamilyLlava
	FamilyLlavaNext
	FamilyLlama4
	FamilyKimiK25
	FamilyPhi3Vision
	// FamilyPixtral has a counter in the crate but is not registered there; kvroute detects it (id or
	// model_type "pixtral") and routes it with vLLM's row layout (LayoutPixtral), whose length the
	// crate's count (no [IMG_BREAK]/[IMG_END]) is not.
	FamilyPixtral
	// FamilyKimiK3 is detected and counted (Dynamo's K3 counter) but not routed: its prompt embeds the
	// image's "WxH" as text between control tokens.
	FamilyKimiK3
	// FamilyPhi4MM (Phi-4-multimodal, the crate's unregistered Phi4VisionProcessor), FamilyQwen3Omni,
	// FamilyInkling and FamilyQwen3ASR (llm-multimodal 1.9) and FamilyNemotronOmni (Nemotron-3-Nano-Omni,
	// a newer Dynamo adapter) are detected so that they fall back with a reason instead of matching no
	// family; none has a counter here.
	FamilyPhi4MM
	FamilyQwen3Omni
	FamilyInkling
	FamilyQwen3ASR
	FamilyNemotronOmni
)

var familyNames = [...]string{"none", "qwen2-vl", "qwen3-vl", "llava", "llava-next", "llama4-vision", "kimi-k2.5", "phi3-vision", "pixtral", "kimi-k3", "phi4-multimodal", "qwen3-omni", "inkling", "qwen3-asr", "nemotron-omni"}

// String is the crate's model_name() ("qwen2-vl", "llava-next", ...).
func (f Family) String() string {
	if int(f) < len(familyNames) {
		return familyNames[f]
	}
	return "unknown"
}

// CalculateNumTokens is the number of placeholder tokens an image of W×H pixels becomes for family f
// with preprocessor config cfg: a port of llm-multimodal 1.7.0 calculate_num_tokens, quirks included
// (Kimi and Phi-3 ignore cfg, LLaVA-NeXT uses fixed pinpoints in f32, Llama-4 counts 576 per 336-px
// tile). FamilyNone returns 0.
func CalculateNumTokens(w, h uint32, f Family, cfg ProcessorConfig) int {
	switch f {
	case FamilyQwen2VL:
		return qwenTokens(w, h, qwen2Params(cfg))
	case FamilyQwen3VL:
		return qwenTokens(w, h, qwen3Params(cfg))
	case FamilyLlava:
		return llavaTokens(cfg)
	case FamilyLlavaNext:
		return llavaNextTokens(w, h, cfg)
	case FamilyLlama4:
		return llama4Tokens(w, h, cfg)
	case FamilyKimiK25:
		return kimiTokens(w, h, kimiK25Params)
	case FamilyPhi3Vision:
		return phi3Tokens(w, h)
	case FamilyPixtral:
		return pixtralTokens(w, h)
	case FamilyKimiK3:
		return kimiTokens(w, h, kimiK3Params)
	}
	return 0
}

// qwenParams are the smart_resize inputs of the Qwen families.
type qwenParams struct {
	patch, merge, temporal int
	minPixels, maxPixels   float64
}

// qwen2Params: defaults patch 14, merge 2, min 256·28·28, max 1280·28·28, temporal 2; once any
// relevant field is set each field is config-or-default, and min/max come only from the top-level
// min_pixels / max_pixels (size.* is ignored).
func qwen2Params(c ProcessorConfig) qwenParams {
	p := qwenParams{patch: 14, merge: 2, temporal: 2, minPixels: 200704, maxPixels: 1003520}
	if c.PatchSize == 0 && c.MergeSize == 0 && c.MinPixels == 0 && c.MaxPixels == 0 && c.TemporalPatchSize == 0 && !c.HasSize {
		return p
	}
	p.patch = or(c.PatchSize, p.patch)
	p.merge = or(c.MergeSize, p.merge)
	p.temporal = or(c.TemporalPatchSize, p.temporal)
	p.minPixels = float64(or(c.MinPixels, 200704))
	p.maxPixels = float64(or(c.MaxPixels, 1003520))
	return p
}

// qwen3Params: defaults patch 16, merge 2, temporal 2; min = min_pixels || size.shortest_edge ||
// 65536, max = max_pixels || size.longest_edge || 16777216.
func qwen3Params(c ProcessorConfig) qwenParams {
	return qwenParams{
		patch:     or(c.PatchSize, 16),
		merge:     or(c.MergeSize, 2),
		temporal:  or(c.TemporalPatchSize, 2),
		minPixels: float64(or(c.MinPixels, or(c.ShortestEdge, 65536))),
		maxPixels: float64(or(c.MaxPixels, or(c.LongestEdge, 16777216))),
	}
}

func or(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// roundHalfEven is Python's round() for the values smart_resize sees.
func roundHalfEven(x float64) float64 {
	r := math.Round(x)
	if math.Abs(x-math.Floor(x)-0.5) < 1e-9 && math.Mod(r, 2) != 0 {
		r--
	}
	return r
}

// SmartResize is HF's Qwen smart_resize in f64: the (height, width) an image is resized to, multiples
// of patch*merge with area in [minPixels, maxPixels]. A zero side or an aspect ratio above 200 gives
// (f, f), the crate's error fallback.
func SmartResize(h, w uint32, patch, merge int, minPixels, maxPixels float64) (rh, rw int) {
	f := float64(patch * merge)
	H, W := float64(h), float64(w)
	if h == 0 || w == 0 || math.Max(H, W)/math.Min(H, W) > 200 {
		return int(f), int(f)
	}
	hb := math.Max(f, roundHalfEven(H/f)*f)
	wb := math.Max(f, roundHalfEven(W/f)*f)
	if hb*wb > maxPixels {
		beta := math.Sqrt(H * W / maxPixels)
		hb = math.Max(f, math.Floor(H/beta/f)*f)
		wb = math.Max(f, math.Floor(W/beta/f)*f)
	} else if hb*wb < minPixels {
		beta := math.Sqrt(minPixels / (H * W))
		hb = math.Ceil(H*beta/f) * f
		wb = math.Ceil(W*beta/f) * f
	}
	return int(hb), int(wb)
}

func qwenTokens(w, h uint32, p qwenParams) int {
	rh, rw := SmartResize(h, w, p.patch, p.merge, p.minPixels, p.maxPixels)
	t := p.temporal
	if t < 1 {
		t = 1
	}
	gridT := max(1, t) / t
	return gridT * (rh / p.patch) * (rw / p.patch) / (p.merge * p.merge)
}

// llavaTokens is LLaVA-1.5: (S/p)² with p = patch_size || 14 and S = size.height ||
// size.shortest_edge || 336, whatever the image size (CLS dropped).
func llavaTokens(c ProcessorConfig) int {
	n := c.TargetSize(336) / or(c.PatchSize, 14)
	return n * n
}

// llavaNextPinpoints are the crate's fixed grid pinpoints (W, H); config pinpoints are not read.
var llavaNextPinpoints = [...][2]int{{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}}

// llavaNextTokens is LLaVA-NeXT anyres in f32 arithmetic, as the crate computes it.
func llavaNextTokens(w, h uint32, c ProcessorConfig) int {
	s := c.TargetSize(336)
	np := s / 14
	base := np * np
	if w == 0 || h == 0 {
		return base
	}
	W, H := float32(w), float32(h)
	bestW, bestH := 0, 0
	bestEff, bestWaste := int64(0), int64(math.MaxInt64)
	for _, pp := range llavaNextPinpoints {
		pw, ph := pp[0], pp[1]
		sc := min(float32(pw)/W, float32(ph)/H)
		dw := int64(W * sc)
		dh := int64(H * sc)
		eff := min(dw*dh, int64(w)*int64(h))
		waste := int64(pw*ph) - eff
		if eff > bestEff || (eff == bestEff && waste < bestWaste) {
			bestEff, bestWaste, bestW, bestH = eff, waste, pw, ph
		}
	}
	gridW, gridH := bestW/336, bestH/336
	cw := float32(np * gridW)
	ch := float32(np * gridH)
	ar := W / H
	ca := cw / ch
	var fh, fw float32
	if ar > ca {
		nh := round32(H * (cw / W))
		pad := float32(math.Floor(float64((ch - nh) / 2)))
		fh, fw = ch-2*pad, cw
	} else {
		nw := round32(W * (ch / H))
		pad := float32(math.Floor(float64((cw - nw) / 2)))
		fh, fw = ch, cw-2*pad
	}
	return int(fh*fw) + int(fh) + base
}

// round32 is Rust f32::round: half away from zero.
func round32(x float32) float32 { return float32(math.Round(float64(x))) }

// llama4Tokens picks the tile grid as HF get_best_fit does (smallest upscale, else largest
// downscale; ties to the smallest area) and counts (tile/14)² per tile plus a global tile when there
// is more than one, without pixel shuffle (576 per 336-px tile, the 1.7.0 behaviour; vLLM uses 144).
func llama4Tokens(w, h uint32, c ProcessorConfig) int {
	tile := or(c.SizeHeight, 336)
	maxTiles := or(c.MaxImageTiles, 16)
	tiles := Llama4Tiles(w, h, tile, maxTiles)
	total := tiles
	if tiles > 1 {
		total++
	}
	per := tile / 14
	return total * per * per
}

// Llama4Tiles is the number of tiles (rows*cols) of the canvas Llama4Grid chooses.
func Llama4Tiles(w, h uint32, tile, maxTiles int) int {
	r, c := Llama4Grid(w, h, tile, maxTiles)
	return r * c
}

// kimiParams are the Kimi counting parameters; 1.7.0 ignores the config and always uses K2.5's.
type kimiParams struct {
	patch, merge, inPatchLimit, sideLimit int
}

var (
	kimiK25Params = kimiParams{patch: 14, merge: 2, inPatchLimit: 16384, sideLimit: 512}
	// kimiK3Params are Dynamo's K3 counter's (not routed: the K3 prompt embeds "WxH" text).
	kimiK3Params = kimiParams{patch: 14, merge: 2, inPatchLimit: 65536, sideLimit: 512}
)

// kimiGrid returns the merged-patch grid (columns, rows) of an image: never upscaled, bounded by the
// patch budget and the per-side limit, zero-padded to a multiple of patch*merge.
func kimiGrid(w, h uint32, p kimiParams) (gw, gh int) {
	if w == 0 || h == 0 {
		return 1, 1
	}
	pw := max(int(w)/p.patch, 1)
	ph := max(int(h)/p.patch, 1)
	W, H := float64(w), float64(h)
	side := float64(p.sideLimit * p.patch)
	s := math.Min(1, math.Sqrt(float64(p.inPatchLimit)/float64(pw*ph)))
	s = math.Min(s, math.Min(side/W, side/H))
	limit := p.sideLimit * p.patch
	nw := min(max(int(W*s), 1), limit)
	nh := min(max(int(H*s), 1), limit)
	f := p.patch * p.merge
	return (nw + f - 1) / f, (nh + f - 1) / f
}

func kimiTokens(w, h uint32, p kimiParams) int {
	gw, gh := kimiGrid(w, h, p)
	return gw * gh
}

// phi3Tokens is Phi-3-vision's hd_transform on a blank image with 16 crops (config ignored).
func phi3Tokens(w, h uint32) int {
	if w == 0 || h == 0 {
		return 0
	}
	W, H := float64(w), float64(h)
	transposed := W < H
	if transposed {
		W, H = H, W
	}
	r := W / H
	s := 1.0
	for s*math.Ceil(s/r) <= 16 {
		s++
	}
	s--
	nw := math.Trunc(s * 336)
	nh := math.Trunc(nw / r)
	nhPad := math.Ceil(nh/336) * 336
	wPad, hPad := nw, nhPad
	if transposed {
		wPad, hPad = nhPad, nw
	}
	gh := int(hPad / 336)
	gw := int(wPad / 336)
	return (gh*gw+1)*144 + 1 + (gh+1)*12
}

// pixtralTokens: scale down to fit 1024 on the longer side (floor), then one token per 16-px patch.
func pixtralTokens(w, h uint32) int {
	W, H := float64(w), float64(h)
	ratio := math.Max(H/1024, W/1024)
	if ratio > 1 {
		H = math.Floor(H / ratio)
		W = math.Floor(W / ratio)
	}
	return int(math.Ceil(H/16) * math.Ceil(W/16))
}

package transfer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	_ "image/gif"  // registered decoders: GIF (first frame)
	_ "image/jpeg" // JPEG
	_ "image/png"  // PNG
	"os"
	"path/filepath"

	_ "golang.org/x/image/webp" // WebP (lossy and lossless)

	"github.com/kvroute/kvroute/mm"
)

// Processor is the Qwen2-VL / Qwen3-VL image processor's configuration: geometry and normalisation.
type Processor struct {
	// PatchSize is the ViT patch side in pixels (Qwen3-VL 16, Qwen2-VL 14).
	PatchSize int
	// MergeSize is the spatial merge factor (2): merge×merge patches become one token.
	MergeSize int
	// TemporalPatchSize is the number of frames per patch (2); a still image is duplicated to fill it.
	TemporalPatchSize int
	// MinPixels and MaxPixels bound the resized area (smart_resize).
	MinPixels, MaxPixels int
	// Mean and Std normalise each RGB channel after rescaling by 1/255.
	Mean, Std [3]float32
}

// Qwen3VLProcessor is Qwen3-VL's default processor (the Qwen3-VL-2B-Instruct fixture).
func Qwen3VLProcessor() Processor {
	return Processor{PatchSize: 16, MergeSize: 2, TemporalPatchSize: 2, MinPixels: 65536, MaxPixels: 16777216,
		Mean: [3]float32{0.5, 0.5, 0.5}, Std: [3]float32{0.5, 0.5, 0.5}}
}

// Validate reports the first invalid field.
func (p Processor) Validate() error {
	switch {
	case p.PatchSize <= 0 || p.MergeSize <= 0 || p.TemporalPatchSize <= 0:
		return fmt.Errorf("%w: patch %d merge %d temporal %d", ErrConfig, p.PatchSize, p.MergeSize, p.TemporalPatchSize)
	case p.MinPixels < 0 || p.MaxPixels <= 0 || p.MinPixels > p.MaxPixels:
		return fmt.Errorf("%w: min_pixels %d max_pixels %d", ErrConfig, p.MinPixels, p.MaxPixels)
	}
	for _, s := range p.Std {
		if s == 0 {
			return fmt.Errorf("%w: image_std has a zero", ErrConfig)
		}
	}
	return nil
}

// LoadProcessor reads dir/preprocessor_config.json as a Qwen-VL image processor: geometry through
// mm.LoadProcessorConfig with Qwen3-VL's rules for absent fields (min =
// min_pixels || size.shortest_edge, max = max_pixels || size.longest_edge), image_mean / image_std from
// the file (CLIP's defaults when absent, as HF's Qwen2-VL processor).
func LoadProcessor(dir string) (Processor, error) {
	cfg, err := mm.LoadProcessorConfig(dir)
	if err != nil {
		return Processor{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	p := Qwen3VLProcessor()
	p.Mean = [3]float32{0.48145466, 0.4578275, 0.40821073}
	p.Std = [3]float32{0.26862954, 0.26130258, 0.27577711}
	if cfg.PatchSize > 0 {
		p.PatchSize = cfg.PatchSize
	}
	if cfg.MergeSize > 0 {
		p.MergeSize = cfg.MergeSize
	}
	if cfg.TemporalPatchSize > 0 {
		p.TemporalPatchSize = cfg.TemporalPatchSize
	}
	switch {
	case cfg.MinPixels > 0:
		p.MinPixels = cfg.MinPixels
	case cfg.ShortestEdge > 0:
		p.MinPixels = cfg.ShortestEdge
	}
	switch {
	case cfg.MaxPixels > 0:
		p.MaxPixels = cfg.MaxPixels
	case cfg.LongestEdge > 0:
		p.MaxPixels = cfg.LongestEdge
	}
	data, err := os.ReadFile(filepath.Join(dir, "preprocessor_config.json"))
	if err != nil {
		return Processor{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var raw struct {
		Mean []float64 `json:"image_mean"`
		Std  []float64 `json:"image_std"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Processor{}, fmt.Errorf("%w: preprocessor_config.json: %v", ErrConfig, err)
	}
	if len(raw.Mean) == 3 {
		p.Mean = [3]float32{float32(raw.Mean[0]), float32(raw.Mean[1]), float32(raw.Mean[2])}
	}
	if len(raw.Std) == 3 {
		p.Std = [3]float32{float32(raw.Std[0]), float32(raw.Std[1]), float32(raw.Std[2])}
	}
	return p, p.Validate()
}

// TargetSize is the (height, width) an image of w×h pixels is resized to: mm.SmartResize, the same
// function the token count uses. ok is false for a zero side or an aspect ratio above 200, which HF's
// processor rejects.
func (p Processor) TargetSize(w, h int) (rh, rw int, ok bool) {
	if w <= 0 || h <= 0 || max(w, h) > 200*min(w, h) {
		return 0, 0, false
	}
	rh, rw = mm.SmartResize(uint32(h), uint32(w), p.PatchSize, p.MergeSize, float64(p.MinPixels), float64(p.MaxPixels))
	return rh, rw, true
}

// Preprocess decodes an encoded image (PNG, JPEG, GIF first frame, WebP) and runs the processor on it.
// h is the image's mm_hash, recorded in the tensor.
func (p Processor) Preprocess(data []byte, h mm.Hash) (Tensor, error) {
	if _, err := mm.DecodableSize(data); err != nil {
		return Tensor{}, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return Tensor{}, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	rgb, w, hh := toRGB(img)
	return p.PreprocessRGB(rgb, w, hh, h)
}

// PreprocessRGB runs the processor on interleaved 8-bit RGB pixels (w×h×3, row-major): resize to
// TargetSize, rescale by 1/255, normalise, and lay the patches out (doc.go, "Layout").
func (p Processor) PreprocessRGB(rgb []byte, w, h int, id mm.Hash) (Tensor, error) {
	if len(rgb) != w*h*3 {
		return Tensor{}, fmt.Errorf("%w: %d bytes for %d×%d RGB", ErrDecode, len(rgb), w, h)
	}
	rh, rw, ok := p.TargetSize(w, h)
	if !ok {
		return Tensor{}, fmt.Errorf("%w: %d×%d: zero side or aspect ratio above 200", ErrDecode, w, h)
	}
	px := resizeRGB(rgb, w, h, rw, rh)

	// lut[c][v] is the normalised value of level v in channel c, computed as HF's numpy path does:
	// float64 v*(1/255) cast to float32, then (x - mean) / std in float32.
	var lut [3][256]float32
	for c := range 3 {
		for v := range 256 {
			x := float32(float64(v) * (1.0 / 255.0))
			lut[c][v] = (x - p.Mean[c]) / p.Std[c]
		}
	}

	ps, ms, tp := p.PatchSize, p.MergeSize, p.TemporalPatchSize
	gh, gw := rh/ps, rw/ps
	t := Tensor{Rows: gh * gw, Cols: 3 * tp * ps * ps, GridTHW: [3]int{1, gh, gw}, Hash: id}
	t.Data = make([]float32, t.Rows*t.Cols)
	row := 0
	for bh := 0; bh < gh/ms; bh++ {
		for bw := 0; bw < gw/ms; bw++ {
			for mh := range ms {
				for mw := range ms {
					y0, x0 := (bh*ms+mh)*ps, (bw*ms+mw)*ps
					out := t.Data[row*t.Cols : (row+1)*t.Cols]
					i := 0
					for c := range 3 {
						// One frame, written once and copied for the other temporal slots: the
						// processor tiles a still image to temporal_patch_size identical frames.
						frame := out[i : i+ps*ps]
						for py := range ps {
							src := px[((y0+py)*rw+x0)*3:]
							for pxi := range ps {
								frame[py*ps+pxi] = lut[c][src[3*pxi+c]]
							}
						}
						i += ps * ps
						for range tp - 1 {
							copy(out[i:i+ps*ps], frame)
							i += ps * ps
						}
					}
					row++
				}
			}
		}
	}
	return t, nil
}

// toRGB converts a decoded image to interleaved RGB, compositing any alpha over white as HF's
// convert_to_rgb does (PIL alpha_composite on a white background, then RGB).
func toRGB(img image.Image) ([]byte, int, int) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	out := make([]byte, w*h*3)
	switch m := img.(type) {
	case *image.YCbCr:
		for y := range h {
			for x := range w {
				yi := m.YOffset(b.Min.X+x, b.Min.Y+y)
				ci := m.COffset(b.Min.X+x, b.Min.Y+y)
				r, g, bb := color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				o := (y*w + x) * 3
				out[o], out[o+1], out[o+2] = r, g, bb
			}
		}
	case *image.Gray:
		for y := range h {
			for x := range w {
				v := m.Pix[m.PixOffset(b.Min.X+x, b.Min.Y+y)]
				o := (y*w + x) * 3
				out[o], out[o+1], out[o+2] = v, v, v
			}
		}
	case *image.NRGBA:
		for y := range h {
			row := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
			for x := range w {
				p, o := row[4*x:4*x+4], (y*w+x)*3
				out[o], out[o+1], out[o+2] = overWhite(p[0], p[3]), overWhite(p[1], p[3]), overWhite(p[2], p[3])
			}
		}
	case *image.RGBA:
		// Premultiplied: opaque pixels (the common case: Go decodes RGB PNGs as RGBA) copy as they are;
		// translucent ones go through the un-premultiplying conversion first, like the default path.
		for y := range h {
			row := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
			for x := range w {
				p, o := row[4*x:4*x+4], (y*w+x)*3
				if p[3] == 255 {
					out[o], out[o+1], out[o+2] = p[0], p[1], p[2]
					continue
				}
				c := color.NRGBAModel.Convert(color.RGBA{p[0], p[1], p[2], p[3]}).(color.NRGBA)
				out[o], out[o+1], out[o+2] = overWhite(c.R, c.A), overWhite(c.G, c.A), overWhite(c.B, c.A)
			}
		}
	default:
		toRGBGeneric(img, out)
	}
	return out, w, h
}

// toRGBGeneric is the conversion for every image type: NRGBA per pixel, then over white.
func toRGBGeneric(img image.Image, out []byte) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	{
		for y := range h {
			for x := range w {
				c := color.NRGBAModel.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
				o := (y*w + x) * 3
				out[o], out[o+1], out[o+2] = overWhite(c.R, c.A), overWhite(c.G, c.A), overWhite(c.B, c.A)
			}
		}
	}
}

// overWhite composites level v with alpha a over 255, rounded.
func overWhite(v, a uint8) uint8 {
	if a == 255 {
		return v
	}
	return uint8((int(v)*int(a) + 255*(255-int(a)) + 127) / 255)
}

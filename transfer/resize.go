package transfer

import "math"

// Resampling as Pillow's Image.resize(..., Image.BICUBIC) does it for 8-bit RGB (libImaging/Resample.c),
// which is what HF's slow Qwen2-VL image processor calls: a separable convolution, horizontal pass first
// then vertical, each pass rounding to uint8; the cubic kernel with a = -0.5 and support 2, widened by the
// scale factor when downsampling (antialiasing); weights normalised in float64 and then quantised to
// 22-bit fixed point, accumulated in int32 from a rounding offset of 2^21. The integer arithmetic below
// is the same, so for the same RGB input the output bytes are Pillow's.

const precisionBits = 32 - 8 - 2

func bicubic(x float64) float64 {
	const a = -0.5
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return ((a+2)*x-(a+3))*x*x + 1
	}
	if x < 2 {
		return (((x-5)*x+8)*x - 4) * a
	}
	return 0
}

// coeffs are one pass's fixed-point weights: output index i reads input [start[i], start[i]+n[i]) with
// weights k[i*ksize : i*ksize+n[i]].
type coeffs struct {
	start, n []int
	k        []int32
	ksize    int
}

func precompute(inSize, outSize int) coeffs {
	scale := float64(inSize) / float64(outSize)
	filterscale := max(scale, 1.0)
	support := 2.0 * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := coeffs{start: make([]int, outSize), n: make([]int, outSize), k: make([]int32, outSize*ksize), ksize: ksize}
	w := make([]float64, ksize)
	ss := 1.0 / filterscale
	for xx := range outSize {
		center := (float64(xx) + 0.5) * scale
		xmin := int(center - support + 0.5) // C truncation, as in Pillow
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > inSize {
			xmax = inSize
		}
		xmax -= xmin
		var ww float64
		for x := range xmax {
			w[x] = bicubic((float64(x+xmin) - center + 0.5) * ss)
			ww += w[x]
		}
		for x := range xmax {
			if ww != 0 {
				w[x] /= ww
			}
			f := w[x] * (1 << precisionBits)
			if w[x] < 0 {
				c.k[xx*ksize+x] = int32(-0.5 + f)
			} else {
				c.k[xx*ksize+x] = int32(0.5 + f)
			}
		}
		c.start[xx], c.n[xx] = xmin, xmax
	}
	return c
}

func clip8(v int32) uint8 {
	v >>= precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// resizeRGB resamples an interleaved RGB image (3 bytes per pixel) from w×h to ow×oh. A pass whose size
// does not change is skipped, as in Pillow (it would be the identity anyway).
func resizeRGB(src []byte, w, h, ow, oh int) []byte {
	if ow != w {
		c := precompute(w, ow)
		dst := make([]byte, ow*h*3)
		for y := range h {
			row := src[y*w*3 : (y+1)*w*3]
			out := dst[y*ow*3 : (y+1)*ow*3]
			for x := range ow {
				k := c.k[x*c.ksize : x*c.ksize+c.n[x]]
				in := row[c.start[x]*3:]
				s0, s1, s2 := int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1))
				for i, kv := range k {
					s0 += int32(in[3*i]) * kv
					s1 += int32(in[3*i+1]) * kv
					s2 += int32(in[3*i+2]) * kv
				}
				out[3*x], out[3*x+1], out[3*x+2] = clip8(s0), clip8(s1), clip8(s2)
			}
		}
		src, w = dst, ow
	}
	if oh != h {
		c := precompute(h, oh)
		dst := make([]byte, w*oh*3)
		acc := make([]int32, w*3)
		for y := range oh {
			for i := range acc {
				acc[i] = 1 << (precisionBits - 1)
			}
			for i, kv := range c.k[y*c.ksize : y*c.ksize+c.n[y]] {
				row := src[(c.start[y]+i)*w*3 : (c.start[y]+i+1)*w*3]
				for j, v := range row {
					acc[j] += int32(v) * kv
				}
			}
			out := dst[y*w*3 : (y+1)*w*3]
			for j, v := range acc {
				out[j] = clip8(v)
			}
		}
		src = dst
	}
	return src
}

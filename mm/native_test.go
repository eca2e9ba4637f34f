package mm

import (
	"bytes"
	"image"
	"image/color"
	"math/rand/v2"
	"testing"
	"time"
)

// nativePixels' fast paths (RGBA64At, palette lookup) give the bytes of the generic conversion through
// At and color.NRGBAModel, for every image type Go's decoders return, opaque or not.
func TestNativePixelsFastPathsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
	}
	r := image.Rect(3, 5, 3+37, 5+23) // odd sizes, a non-zero origin
	var imgs []image.Image
	rgba := image.NewRGBA(r)
	fill(rgba.Pix)
	for i := 3; i < len(rgba.Pix); i += 4 { // premultiplied: no channel above alpha
		rgba.Pix[i-3], rgba.Pix[i-2], rgba.Pix[i-1] = min(rgba.Pix[i-3], rgba.Pix[i]), min(rgba.Pix[i-2], rgba.Pix[i]), min(rgba.Pix[i-1], rgba.Pix[i])
	}
	opaqueRGBA := image.NewRGBA(r)
	fill(opaqueRGBA.Pix)
	for i := 3; i < len(opaqueRGBA.Pix); i += 4 {
		opaqueRGBA.Pix[i] = 0xff
	}
	rgba64 := image.NewRGBA64(r)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			a := uint16(rng.UintN(1 << 16))
			rgba64.SetRGBA64(x, y, color.RGBA64{uint16(rng.UintN(uint(a) + 1)), uint16(rng.UintN(uint(a) + 1)), uint16(rng.UintN(uint(a) + 1)), a})
		}
	}
	nrgba64 := image.NewNRGBA64(r)
	fill(nrgba64.Pix)
	cmyk := image.NewCMYK(r)
	fill(cmyk.Pix)
	alpha16 := image.NewAlpha16(r)
	fill(alpha16.Pix)
	imgs = append(imgs, rgba, opaqueRGBA, rgba64, nrgba64, cmyk, alpha16)
	for _, ratio := range []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio422} {
		m := image.NewYCbCr(r, ratio)
		fill(m.Y)
		fill(m.Cb)
		fill(m.Cr)
		a := image.NewNYCbCrA(r, ratio)
		fill(a.Y)
		fill(a.Cb)
		fill(a.Cr)
		fill(a.A)
		imgs = append(imgs, m, a)
	}
	for _, pal := range []color.Palette{
		{color.RGBA{1, 2, 3, 255}, color.RGBA{200, 100, 50, 255}, color.Black},                                      // opaque (GIF)
		{color.NRGBA{10, 20, 30, 40}, color.NRGBA{250, 0, 7, 0}, color.NRGBA{9, 9, 9, 255}, color.RGBA{1, 1, 1, 1}}, // tRNS (PNG)
	} {
		m := image.NewPaletted(r, pal)
		for i := range m.Pix {
			m.Pix[i] = byte(rng.UintN(uint(len(pal))))
		}
		imgs = append(imgs, m)
	}
	for _, img := range imgs {
		opaque := img.(interface{ Opaque() bool }).Opaque()
		gc, want := genericPixels(img, opaque)
		c, got := nativePixels(img)
		if c != gc || !bytes.Equal(got, want) {
			t.Errorf("%T (opaque %v): %d channels, generic %d; bytes equal %v", img, opaque, c, gc, bytes.Equal(got, want))
		}
	}
}

// The conversion of a large decoded JPEG allocates its HWC copy and nothing per pixel.
func TestNativePixelsLargeYCbCr(t *testing.T) {
	m := image.NewYCbCr(image.Rect(0, 0, 2048, 2048), image.YCbCrSubsampleRatio420)
	start := time.Now()
	n := allocated(func() { nativePixels(m) })
	if want := uint64(3 * 2048 * 2048); n > want+1<<20 {
		t.Fatalf("converting 4 M pixels allocated %d bytes, want about %d (took %v)", n, want, time.Since(start))
	}
}

package mm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
	"golang.org/x/image/webp"
)

// DefaultMaxDecodeBytes bounds a full image download for --frontend-decoding.
const DefaultMaxDecodeBytes = 64 << 20

// MaxDecodePixels bounds W*H of an image decoded for its content hash (64 M pixels, 256 MiB as RGBA):
// a few hundred bytes of header can declare dimensions whose pixel buffer would exhaust memory, so the
// header is read and checked before any decoding.
const MaxDecodePixels = 1 << 26

// DecodeImage decodes a whole image file and returns its content hash (ContentHash over HWC pixels in
// the native channel count) and its size. Channel mapping of Go's decoders to the Rust image crate's
// native layouts: gray → 1, gray+alpha → 2 (Go has no such type: gray PNGs with alpha arrive as NRGBA,
// so they hash with 4 channels here; recorded as a divergence), opaque colour → 3, colour with alpha →
// 4; 16-bit samples keep their high byte. Lossless formats give Dynamo's bytes; JPEG and lossy WebP go
// through Go's IDCT and YCbCr→RGB conversion, which can differ from zune-jpeg by one level, so such
// hashes agree across kvroute instances but not necessarily with a Dynamo frontend.
func DecodeImage(data []byte) (Hash, Size, error) {
	hdr, err := DecodableSize(data)
	if err != nil {
		return 0, Size{}, err
	}
	return decodeChecked(data, hdr)
}

// DecodableSize reads an image's header and checks it against MaxDecodePixels and the file's size
// (plausibleSize), before anything is decoded: every decoder of outside image bytes calls it first.
func DecodableSize(data []byte) (Size, error) {
	hdr, f, err := HeaderSize(data)
	if err != nil {
		return Size{}, err
	}
	if hdr.Pixels() > MaxDecodePixels {
		return Size{}, fmt.Errorf("%w: %dx%d image exceeds %d pixels for decoding", ErrLimit, hdr.W, hdr.H, MaxDecodePixels)
	}
	if err := plausibleSize(data, f, hdr); err != nil {
		return Size{}, err
	}
	return hdr, nil
}

// decodeChecked decodes data whose header DecodableSize accepted as hdr.
func decodeChecked(data []byte, hdr Size) (Hash, Size, error) {
	img, err := decodeAny(data)
	if err != nil {
		return 0, Size{}, err
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= 0 || h <= 0 {
		return 0, Size{}, fmt.Errorf("%w: empty image", ErrHeader)
	}
	if uint64(w)*uint64(h) > hdr.Pixels() {
		// The budgets were taken for the header's size.
		return 0, Size{}, fmt.Errorf("%w: decoded %dx%d, header %dx%d", ErrHeader, w, h, hdr.W, hdr.H)
	}
	c, pix := nativePixels(img)
	hash, err := ContentHash(h, w, c, pix)
	if err != nil {
		return 0, Size{}, err
	}
	return hash, Size{W: uint32(w), H: uint32(h)}, nil
}

func decodeAny(data []byte) (image.Image, error) {
	r := bytes.NewReader(data)
	var (
		img image.Image
		err error
	)
	switch f := SniffFormat(data); f {
	case FormatPNG:
		img, err = png.Decode(r)
	case FormatJPEG:
		img, err = jpeg.Decode(r)
	case FormatGIF:
		img, err = gif.Decode(r)
	case FormatWebP:
		img, err = webp.Decode(r)
	case FormatBMP:
		img, err = bmp.Decode(r)
	case FormatTIFF:
		img, err = tiff.Decode(r)
	default:
		return nil, fmt.Errorf("%w: unknown format", ErrHeader)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: decode: %v", ErrHeader, err)
	}
	return img, nil
}

// nativePixels returns the channel count and the HWC bytes of img.
func nativePixels(img image.Image) (int, []byte) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	switch m := img.(type) {
	case *image.Gray:
		pix := make([]byte, 0, w*h)
		for y := 0; y < h; y++ {
			pix = append(pix, m.Pix[y*m.Stride:y*m.Stride+w]...)
		}
		return 1, pix
	case *image.Gray16:
		pix := make([]byte, 0, w*h)
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+2*w]
			for x := 0; x < w; x++ {
				pix = append(pix, row[2*x])
			}
		}
		return 1, pix
	case *image.NRGBA:
		pix := make([]byte, 0, 4*w*h)
		for y := 0; y < h; y++ {
			pix = append(pix, m.Pix[y*m.Stride:y*m.Stride+4*w]...)
		}
		return 4, pix
	}
	opaque := false
	if o, ok := img.(interface{ Opaque() bool }); ok {
		opaque = o.Opaque()
	}
	switch m := img.(type) {
	case *image.Paletted:
		return paletted(m, opaque)
	case image.RGBA64Image:
		return rgba64Pixels(m, opaque)
	}
	return genericPixels(img, opaque)
}

// rgba64Pixels is genericPixels without a boxed colour per pixel (RGBA64At returns what At's colour's
// RGBA method does, for every image type of the standard library; color.NRGBAModel's arithmetic follows):
// a 4096×4096 JPEG's conversion went from 1.35 s and 176 MiB allocated to the HWC copy alone.
func rgba64Pixels(img image.RGBA64Image, opaque bool) (int, []byte) {
	b := img.Bounds()
	c := 4
	if opaque {
		c = 3
	}
	pix := make([]byte, 0, c*b.Dx()*b.Dy())
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			p := img.RGBA64At(x, y)
			n := nrgba(uint32(p.R), uint32(p.G), uint32(p.B), uint32(p.A))
			if opaque {
				pix = append(pix, n.R, n.G, n.B)
			} else {
				pix = append(pix, n.R, n.G, n.B, n.A)
			}
		}
	}
	return c, pix
}

// nrgba is color.NRGBAModel's conversion of a premultiplied colour that is not already NRGBA.
func nrgba(r, g, b, a uint32) color.NRGBA {
	switch a {
	case 0xffff:
		return color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0xff}
	case 0:
		return color.NRGBA{}
	}
	return color.NRGBA{uint8((r * 0xffff / a) >> 8), uint8((g * 0xffff / a) >> 8), uint8((b * 0xffff / a) >> 8), uint8(a >> 8)}
}

// paletted converts each palette entry once (as color.NRGBAModel does, NRGBA entries kept as they
// are) and looks the pixels up. The decoders keep every index within the palette (Paletted.At would
// panic past it); an empty or oversized palette takes the generic path.
func paletted(m *image.Paletted, opaque bool) (int, []byte) {
	if len(m.Palette) == 0 || len(m.Palette) > 256 {
		return genericPixels(m, opaque)
	}
	var lut [256]color.NRGBA
	for i, c := range m.Palette {
		lut[i] = color.NRGBAModel.Convert(c).(color.NRGBA)
	}
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	c := 4
	if opaque {
		c = 3
	}
	pix := make([]byte, 0, c*w*h)
	for y := 0; y < h; y++ {
		for _, k := range m.Pix[y*m.Stride : y*m.Stride+w] {
			n := lut[k]
			if opaque {
				pix = append(pix, n.R, n.G, n.B)
			} else {
				pix = append(pix, n.R, n.G, n.B, n.A)
			}
		}
	}
	return c, pix
}

// genericPixels converts any image through its At method and color.NRGBAModel: 3 channels when opaque,
// else 4. The fast paths above give the same bytes.
func genericPixels(img image.Image, opaque bool) (int, []byte) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if opaque {
		pix := make([]byte, 0, 3*w*h)
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
				pix = append(pix, c.R, c.G, c.B)
			}
		}
		return 3, pix
	}
	pix := make([]byte, 0, 4*w*h)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			pix = append(pix, c.R, c.G, c.B, c.A)
		}
	}
	return 4, pix
}

// Decode downloads (http/https, guarded, whole body up to maxBytes; Fetch) or reads (data:) an image
// and returns its content hash and size, the --frontend-decoding identity, with the encoded bytes so
// that later stages (the mm_kwargs transfer) use them instead of downloading the image again. Nothing
// is cached: the URL does not identify the content in this mode. acct, when set, counts the download
// against its request's byte bound. The downloaded bytes stay reserved in MaxFetchBytesInFlight until
// the decode has ended.
//
// Before decoding, admit (when set) is given the header's size and may refuse it (the request's total
// pixel bound), then the decode waits for room in the process's MaxDecodePixelsInFlight (at most
// FetchBudgetWait: ErrBusy), charged decodeCost (more than its pixels for formats whose decoder needs more than 8 bytes a pixel).
func (p *Prober) decode(ctx context.Context, rawURL string, maxBytes int, acct *requestBytes, admit func(Size) error) (Hash, Size, []byte, error) {
	data, release, err := p.fetch(ctx, rawURL, maxBytes, acct)
	defer release()
	if err != nil {
		return 0, Size{}, nil, err
	}
	hdr, err := DecodableSize(data)
	if err != nil {
		return 0, Size{}, nil, err
	}
	if admit != nil {
		if err := admit(hdr); err != nil {
			return 0, Size{}, nil, err
		}
	}
	cost := decodeCost(data, SniffFormat(data), hdr)
	if err := p.decoding.takePixels(ctx, cost, p.cfg.FetchBudgetWait); err != nil {
		if errors.Is(err, ErrBusy) {
			p.busy.Add(1)
		}
		return 0, Size{}, nil, err
	}
	h, sz, err := decodeChecked(data, hdr)
	p.decoding.give(cost)
	if err != nil {
		return 0, Size{}, nil, err
	}
	return h, sz, data, nil
}

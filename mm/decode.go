package mm

import (
	"bytes"
	"context"
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
	opaque := true
	if o, ok := img.(interface{ Opaque() bool }); ok {
		opaque = o.Opaque()
	} else {
		opaque = false
	}
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
// pixel bound), then the decode waits for room in the process's MaxDecodePixelsInFlight.
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
	if err := p.decoding.takePixels(ctx, hdr.Pixels()); err != nil {
		return 0, Size{}, nil, err
	}
	h, sz, err := decodeChecked(data, hdr)
	p.decoding.give(hdr.Pixels())
	if err != nil {
		return 0, Size{}, nil, err
	}
	return h, sz, data, nil
}

package mm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
	"golang.org/x/image/webp"
)

// Size is an image's width and height in pixels, as its header states them (no EXIF rotation, as
// neither Dynamo nor the backends apply one).
type Size struct {
	W, H uint32
}

// Pixels is W*H.
func (s Size) Pixels() uint64 { return uint64(s.W) * uint64(s.H) }

// Format names the image formats whose headers the package reads.
type Format uint8

// Formats recognised by their magic bytes.
const (
	FormatUnknown Format = iota
	FormatPNG
	FormatJPEG
	FormatGIF
	FormatWebP
	FormatBMP
	FormatTIFF
)

var formatNames = [...]string{"unknown", "png", "jpeg", "gif", "webp", "bmp", "tiff"}

func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return "unknown"
}

// SniffFormat recognises an image format from its first bytes (at most 12 are looked at).
func SniffFormat(b []byte) Format {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return FormatPNG
	case bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}):
		return FormatJPEG
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return FormatGIF
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return FormatWebP
	case bytes.HasPrefix(b, []byte("BM")):
		return FormatBMP
	case bytes.HasPrefix(b, []byte("II*\x00")), bytes.HasPrefix(b, []byte("MM\x00*")):
		return FormatTIFF
	}
	return FormatUnknown
}

// errShort marks a header that may parse with more bytes; HeaderSize wraps it in ErrHeader.
var errShort = errors.New("header incomplete")

// HeaderSize reads (W, H) from the start of an image file. The error wraps ErrHeader; IsShort tells
// whether a longer prefix might succeed.
func HeaderSize(b []byte) (Size, Format, error) {
	f := SniffFormat(b)
	var (
		cfg image.Config
		err error
	)
	r := bytes.NewReader(b)
	switch f {
	case FormatPNG:
		cfg, err = png.DecodeConfig(r)
	case FormatJPEG:
		cfg, err = jpeg.DecodeConfig(r)
	case FormatGIF:
		cfg, err = gif.DecodeConfig(r)
	case FormatWebP:
		cfg, err = webp.DecodeConfig(r)
	case FormatBMP:
		cfg, err = bmp.DecodeConfig(r)
	case FormatTIFF:
		cfg, err = tiff.DecodeConfig(r)
	default:
		if len(b) < 12 {
			return Size{}, f, fmt.Errorf("%w: %w (%d bytes)", ErrHeader, errShort, len(b))
		}
		return Size{}, f, fmt.Errorf("%w: unknown format", ErrHeader)
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return Size{}, f, fmt.Errorf("%w: %s: %w", ErrHeader, f, errShort)
		}
		return Size{}, f, fmt.Errorf("%w: %s: %v", ErrHeader, f, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || uint64(cfg.Width) > 1<<32-1 || uint64(cfg.Height) > 1<<32-1 {
		return Size{}, f, fmt.Errorf("%w: %s: dimensions %dx%d", ErrHeader, f, cfg.Width, cfg.Height)
	}
	return Size{W: uint32(cfg.Width), H: uint32(cfg.Height)}, f, nil
}

// IsShort reports whether a HeaderSize error means the prefix ended before the header did.
func IsShort(err error) bool { return errors.Is(err, errShort) }

// JPEGHeaderEnd walks the JPEG marker segments of b and returns how many bytes from the start Go's
// decoder needs to report the size: through the first start-of-scan header (it reads the tables that
// follow the frame header, or stops at the frame header when a JFIF segment came first). ok is false
// when b is not a JPEG or its marker structure is broken. With large metadata (EXIF thumbnail, ICC
// profile) before the frame header the answer exceeds 64 KiB; the prober then fetches that far, within
// its bound.
func JPEGHeaderEnd(b []byte) (need int, ok bool) {
	if len(b) < 2 || b[0] != 0xff || b[1] != 0xd8 {
		return 0, false
	}
	i := 2
	jfif, sof := false, false
	for {
		if i+2 > len(b) {
			return i + 4, true // need the next marker and its length
		}
		if b[i] != 0xff {
			return 0, false
		}
		m := b[i+1]
		if m == 0xff { // fill byte
			i++
			continue
		}
		if m == 0x01 || m >= 0xd0 && m <= 0xd7 {
			i += 2
			continue
		}
		if m == 0xd9 {
			return 0, false
		}
		if i+4 > len(b) {
			return i + 4, true
		}
		segLen := int(binary.BigEndian.Uint16(b[i+2:]))
		if segLen < 2 {
			return 0, false
		}
		end := i + 2 + segLen
		switch {
		case m == 0xda: // start of scan: the decoder stops here
			if !sof {
				return 0, false
			}
			return end, true
		case m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc:
			sof = true
			if jfif {
				return end, true
			}
		case m == 0xe0 && !sof && segLen >= 7 && i+9 <= len(b) && string(b[i+4:i+9]) == "JFIF\x00":
			jfif = true
		}
		if end > len(b) {
			return end + 4, true
		}
		i = end
	}
}

package mm

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// Hash is an image's mm_hash: the u64 identity that becomes its pad value in the routing tokens and,
// as HexID, the uuid forwarded to workers.
type Hash uint64

// IdentitySource says how an mm_hash was derived, for logs and metrics ("source=url" / "decoded_bytes").
type IdentitySource uint8

const (
	// SourceURL: XXH3-64 (seed 0) of the WHATWG-serialized URL, query kept (the default).
	SourceURL IdentitySource = iota
	// SourceDataURI: XXH3-64 (seed 0) of the decoded payload of a data: URI (HashData), whatever its
	// MIME label and parameters.
	SourceDataURI
	// SourceDecodedBytes: the content hash of the decoded pixels (--frontend-decoding).
	SourceDecodedBytes
)

func (s IdentitySource) String() string {
	switch s {
	case SourceURL:
		return "url"
	case SourceDataURI:
		return "data_uri"
	case SourceDecodedBytes:
		return "decoded_bytes"
	}
	return "unknown"
}

// HashURL returns the identity of an image reference. For a URL: XXH3-64
// with seed 0 of its WHATWG serialization, query kept. Any other scheme (s3://, gs://) is hashed too;
// size discovery is what refuses it.
//
// A data: URI is identified by its decoded payload (HashData), not by the URI string as Dynamo's
// default path does: the same image bytes sent as image/png, image/jpeg, application/octet-stream or
// with extra parameters (";name=a.png") are one image, so they share one worker's blocks. The payload is
// decoded with ParseDataURI (DefaultMaxDataURIBytes bound); a malformed URI is ErrBadDataURI.
func HashURL(url string) (Hash, IdentitySource, error) {
	if IsDataURI(url) {
		h, _, err := HashDataURI(url, 0)
		return h, SourceDataURI, err
	}
	norm, err := NormalizeURL(url)
	if err != nil {
		return 0, SourceURL, err
	}
	return Hash(xxh3.HashString(norm)), SourceURL, nil
}

// IsDataURI reports whether url (leading spaces ignored, any case) has the data: scheme.
func IsDataURI(url string) bool {
	s := strings.TrimLeft(url, " \t\n\r\f")
	return len(s) >= 5 && strings.EqualFold(s[:5], "data:")
}

// HashDataURIString is Dynamo's default identity of a data: URI: XXH3-64 (seed 0) of the whole URI's
// WHATWG serialization, like any other URL. The same bytes under another MIME label are another image;
// ResolveConfig.DataURIAsString selects it for fleets shared with Dynamo frontends. The payload is still
// decoded (ParseDataURI, maxLen as there) to refuse a malformed URI and to read the size from it.
func HashDataURIString(uri string, maxLen int) (Hash, DataURI, error) {
	d, err := ParseDataURI(strings.TrimSpace(uri), maxLen)
	if err != nil {
		return 0, DataURI{}, err
	}
	norm, err := NormalizeURL(uri)
	if err != nil {
		return 0, DataURI{}, fmt.Errorf("%w: %v", ErrBadDataURI, err)
	}
	return Hash(xxh3.HashString(norm)), d, nil
}

// HashData is the identity of an image's encoded bytes: XXH3-64 with seed 0, the hash Dynamo's
// frontend-decoding mode calls "decoded bytes" for a data: URI.
func HashData(b []byte) Hash { return Hash(xxh3.Hash(b)) }

// HashDataURI decodes a data: URI (ParseDataURI, maxLen as there) and returns HashData of its payload
// with the parsed URI, so a caller reads the image header from the same bytes.
func HashDataURI(uri string, maxLen int) (Hash, DataURI, error) {
	d, err := ParseDataURI(strings.TrimSpace(uri), maxLen)
	if err != nil {
		return 0, DataURI{}, err
	}
	return HashData(d.Data), d, nil
}

// contentHeaderLen is the byte length of the content-hash header for a rank-3 tensor:
// u64 rank, three u64 dims, u8 dtype.
const contentHeaderLen = 8 + 3*8 + 1

// dtypeUint8 is the dtype tag of uint8 pixel data in the content-hash header.
const dtypeUint8 = 0

// ContentHash is the --frontend-decoding identity: XXH3-64 (seed 0) of
// u64le(3) ‖ u64le(H) ‖ u64le(W) ‖ u64le(C) ‖ u8(0 = uint8) ‖ pixels, with pixels in HWC order and the
// native channel count C (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA). len(pix) must be H*W*C.
func ContentHash(h, w, c int, pix []byte) (Hash, error) {
	if h <= 0 || w <= 0 || c < 1 || c > 4 || len(pix) != h*w*c {
		return 0, fmt.Errorf("mm: content hash of shape [%d %d %d] over %d bytes", h, w, c, len(pix))
	}
	var hdr [contentHeaderLen]byte
	binary.LittleEndian.PutUint64(hdr[0:], 3)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(h))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(w))
	binary.LittleEndian.PutUint64(hdr[24:], uint64(c))
	hdr[32] = dtypeUint8
	hs := xxh3.New()
	_, _ = hs.Write(hdr[:])
	_, _ = hs.Write(pix)
	return Hash(hs.Sum64()), nil
}

// HexID is the wire form of an mm_hash: 16 lowercase hex digits (%016x). SGLang and TRT-LLM take it as
// is; vLLM takes VLLMUUID.
func (h Hash) HexID() string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[h&15]
		h >>= 4
	}
	return string(b[:])
}

// vllmPad is the 48 '0' characters that pad a 16-hex id to vLLM's 64-character uuid.
const vllmPad = "000000000000000000000000000000000000000000000000"

// VLLMUUID is the 64-character uuid sent to vLLM as the image part's uuid: HexID followed by 48 '0'
// (Python h.ljust(64, "0")). vLLM echoes it in BlockStored.extra_keys, where
// kvevents.ParseMMIdentifier reads the first 16 digits back.
func (h Hash) VLLMUUID() string { return h.HexID() + vllmPad }

// ParseHexID reads a 16-hex-digit wire id (or the first 16 digits of a longer one) back to a Hash.
func ParseHexID(s string) (Hash, error) {
	if len(s) < 16 {
		return 0, fmt.Errorf("mm: hex id %q shorter than 16 digits", s)
	}
	v, err := strconv.ParseUint(s[:16], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("mm: hex id %q: %w", s, err)
	}
	return Hash(v), nil
}

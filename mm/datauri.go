package mm

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// DefaultMaxDataURIBytes bounds the encoded length of a data: URI whose size is read in memory.
const DefaultMaxDataURIBytes = 32 << 20

// DataURI is a parsed data: URI.
type DataURI struct {
	// MediaType is the part before the first ';' or ',' ("image/png"), possibly empty.
	MediaType string
	// Base64 is true when the metadata contains ";base64".
	Base64 bool
	// Data is the payload: base64-decoded (standard alphabet, padding required) when Base64, else the
	// raw bytes after the comma, not percent-decoded (as Dynamo does).
	Data []byte
}

// ParseDataURI splits uri at the first ',' and decodes its payload. maxLen bounds len(uri) (0 means
// DefaultMaxDataURIBytes); a longer URI is refused before any decoding.
func ParseDataURI(uri string, maxLen int) (DataURI, error) {
	if maxLen <= 0 {
		maxLen = DefaultMaxDataURIBytes
	}
	if len(uri) > maxLen {
		return DataURI{}, fmt.Errorf("%w: %d bytes exceeds the %d-byte bound", ErrBadDataURI, len(uri), maxLen)
	}
	if len(uri) < 5 || !strings.EqualFold(uri[:5], "data:") {
		return DataURI{}, fmt.Errorf("%w: no data: prefix", ErrBadDataURI)
	}
	meta, payload, ok := strings.Cut(uri[5:], ",")
	if !ok {
		return DataURI{}, fmt.Errorf("%w: no comma", ErrBadDataURI)
	}
	d := DataURI{Base64: strings.Contains(meta, ";base64")}
	d.MediaType, _, _ = strings.Cut(meta, ";")
	if !d.Base64 {
		d.Data = []byte(payload)
		return d, nil
	}
	buf := make([]byte, base64.StdEncoding.DecodedLen(len(payload)))
	n, err := base64.StdEncoding.Strict().Decode(buf, []byte(payload))
	if err != nil {
		return DataURI{}, fmt.Errorf("%w: base64: %v", ErrBadDataURI, err)
	}
	d.Data = buf[:n]
	return d, nil
}

// RedactDataURI is how a data: URI appears in logs: "data:<mime>,<redacted>".
func RedactDataURI(uri string) string {
	if len(uri) < 5 || !strings.EqualFold(uri[:5], "data:") {
		return uri
	}
	meta, _, _ := strings.Cut(uri[5:], ",")
	mime, _, _ := strings.Cut(meta, ";")
	return "data:" + mime + ",<redacted>"
}

// DataImage reads a data: URI image in memory: its identity (HashData of the payload, or with asString
// HashDataURIString, Dynamo's) and its size from the payload's header. One decode serves both; nothing
// is fetched or cached.
func DataImage(uri string, maxLen int, asString bool) (Hash, Size, error) {
	hash := HashDataURI
	if asString {
		hash = HashDataURIString
	}
	h, d, err := hash(uri, maxLen)
	if err != nil {
		return 0, Size{}, err
	}
	sz, _, err := HeaderSize(d.Data)
	if err != nil {
		return 0, Size{}, err
	}
	return h, sz, nil
}

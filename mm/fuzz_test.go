package mm

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// FuzzDataURI: ParseDataURI never panics, honours its bound and classifies every failure.
func FuzzDataURI(f *testing.F) {
	for _, s := range []string{
		"data:image/png;base64,iVBORw0KGgo=", "data:,", "data:text/plain,hello", "data:;base64,", "data:image/png;base64",
		"DATA:image/gif;base64,R0lGODlhAQABAAAAACw=", "data:image/png;charset=x;base64,AAAA====",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDataURI(s, 1<<16)
		if err != nil {
			if !errors.Is(err, ErrBadDataURI) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(d.Data) > len(s) {
			t.Fatalf("payload %d bytes from a %d-byte uri", len(d.Data), len(s))
		}
		_, _, _ = HeaderSize(d.Data)
		_ = RedactDataURI(s)
		if _, _, err := HashURL(s); err != nil && !errors.Is(err, ErrBadURL) && !errors.Is(err, ErrBadDataURI) {
			t.Fatalf("HashURL: %v", err)
		}
		if h, _, err := DataImage(s, 1<<16, false); err == nil {
			if hu, _, err := HashURL(s); err != nil || hu != h {
				t.Fatalf("DataImage identity %#x, HashURL %#x %v", uint64(h), uint64(hu), err)
			}
		}
		// Dynamo's identity refuses exactly what the payload identity refuses, and is the URL hash of
		// the whole string.
		hs, _, errS := DataImage(s, 1<<16, true)
		_, _, errP := DataImage(s, 1<<16, false)
		if (errS == nil) != (errP == nil) && !errors.Is(errS, ErrBadDataURI) {
			t.Fatalf("string identity %v, payload identity %v", errS, errP)
		}
		if errS == nil {
			if norm, err := NormalizeURL(s); err != nil || Hash(xxh3.HashString(norm)) != hs {
				t.Fatalf("string identity %#x of %q: %v", uint64(hs), norm, err)
			}
		}
	})
}

// FuzzImageHeader: header readers never panic, return positive sizes, and JPEGHeaderEnd's answer is
// monotone (a prefix never needs fewer bytes than it had when it asked for more).
func FuzzImageHeader(f *testing.F) {
	f.Add(encodePNG(f, 3, 2))
	f.Add(encodeJPEG(f, 9, 7))
	f.Add(webpVP8X(40, 30))
	f.Add(webpVP8L(17, 5))
	f.Add(webpVP8(600, 400))
	f.Add([]byte("GIF89a\x01\x00\x01\x00\x00\x00\x00"))
	f.Add(tinyGIF(8192, 8192))
	f.Add(encodeGIF(f, 33, 17))
	f.Add(progressiveJPEG(64, 48, 3, 40))
	f.Add(progressiveJPEG(16, 16, 1, 40))
	f.Add([]byte("BM\x00\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00\x28\x00\x00\x00"))
	f.Add([]byte("II*\x00\x08\x00\x00\x00"))
	f.Add([]byte{0xff, 0xd8, 0xff, 0xe1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		sz, _, err := HeaderSize(b)
		if err == nil && (sz.W == 0 || sz.H == 0) {
			t.Fatalf("zero size without error")
		}
		if err != nil && !errors.Is(err, ErrHeader) {
			t.Fatalf("unclassified error %v", err)
		}
		if need, ok := JPEGHeaderEnd(b); ok && need <= 0 {
			t.Fatalf("need %d", need)
		}
		if len(b) < 1<<16 {
			_, _, _ = DecodeImage(b)
		}
	})
}

// FuzzNormalizeURL: serialization never panics, is idempotent, and the canonical fast path agrees
// with the full parser.
func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/cat.png", "HTTP://Ex.COM:80/a/../b?q=1#f", "http://0x7f.1/", "http://[::ffff:1.2.3.4]:8080/x",
		"s3://bucket/key?v=1", "data:image/png;base64,AAAA", " https://a.b/\tc d ", "https://u:p@h/p%2e%2e/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if canonicalHTTP(s) || canonicalData(s) {
			if full, err := NormalizeURL(" " + s); err != nil || full != s {
				t.Fatalf("fast path accepted %q, full parser gives %q %v", s, full, err)
			}
		}
		n, err := NormalizeURL(s)
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		n2, err := NormalizeURL(n)
		if err != nil || n2 != n {
			t.Fatalf("not idempotent: %q → %q → %q (%v)", s, n, n2, err)
		}
	})
}

// otherParserHost reads the host of an http(s) URL the way a parser that follows RFC 3986 loosely does
// (Python's urllib, which vLLM's fetchers build on): the authority runs to the first '/', '?' or '#'
// (a backslash is an ordinary character), the host follows the last '@' and precedes the port; glibc
// then reads numeric forms as inet_aton does (the WHATWG IPv4 parser reads the same forms).
func otherParserHost(raw string) (netip.Addr, bool) {
	s := strings.TrimSpace(raw)
	i := strings.Index(s, "://")
	if i < 0 {
		return netip.Addr{}, false
	}
	if sc := strings.ToLower(s[:i]); sc != "http" && sc != "https" {
		return netip.Addr{}, false
	}
	auth := s[i+3:]
	if end := strings.IndexAny(auth, "/?#"); end >= 0 {
		auth = auth[:end]
	}
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		auth = auth[at+1:]
	}
	host := auth
	if strings.HasPrefix(host, "[") {
		if end := strings.IndexByte(host, ']'); end > 0 {
			host = host[1:end]
		}
	} else if c := strings.LastIndexByte(host, ':'); c >= 0 {
		host = host[:c]
	}
	host = strings.ToLower(host)
	if a, err := netip.ParseAddr(host); err == nil {
		return a, true
	}
	if v4, ok, err := parseIPv4Host(host); err == nil && ok {
		return netip.MustParseAddr(v4), true
	}
	return netip.Addr{}, false
}

// FuzzCheckURL: CheckURL never panics, classifies every refusal, and never accepts a URL whose host
// another parser reads as an internal address (host names do not resolve here: they are refused).
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"http://8.8.8.8/a.png", "http://2130706433/", "http://127.1:80/x", "http://0x7f.1/", "http://017700000001/",
		"http://0/", "http://[::1]/", "http://8.8.8.8@127.0.0.1/", "http://8.8.8.8\\@127.0.0.1/", "HTTP://8.8.8.8:8080/a?b#c",
		"data:image/png;base64,AAAA", "http://%31%32%37.0.0.1/", "http://8.8.8.8#@127.0.0.1/", "http://127.0.0.1%2f@8.8.8.8/",
		" http://8.8.8.8/", "http://8.8.8.8\t/", "https://[::ffff:127.0.0.1]/", "http://1.1.1.1:80:80/",
	} {
		f.Add(s)
	}
	g, err := NewGuard(nil)
	if err != nil {
		f.Fatal(err)
	}
	g.lookup = func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("no DNS in the fuzzer") }
	f.Fuzz(func(t *testing.T, raw string) {
		err := g.CheckURL(context.Background(), raw)
		if err != nil {
			if !errors.Is(err, ErrBadURL) && !errors.Is(err, ErrBlockedAddress) && !errors.Is(err, ErrUnsupportedScheme) {
				t.Fatalf("unclassified refusal of %q: %v", raw, err)
			}
			return
		}
		if a, ok := otherParserHost(raw); ok && g.CheckAddr(a) != nil {
			t.Fatalf("accepted %q, whose host another parser reads as %s", raw, a)
		}
	})
}

// FuzzDecodeImage: the --frontend-decoding decoder classifies every failure, decodes exactly the size
// the header declared (the pixel budgets are taken for it), and allocates in proportion to that size;
// for PNG and GIF, whose DEFLATE and LZW data expand at most 1032 and 2730 times, in proportion to the
// file too, so a small file declaring a large image is refused before the decoder allocates it.
func FuzzDecodeImage(f *testing.F) {
	f.Add(encodePNG(f, 3, 2))
	f.Add(encodePNG(f, 64, 48))
	f.Add(encodeJPEG(f, 9, 7))
	f.Add(pngBomb(f, 8192, 8192, 1<<10))
	f.Add(pngBomb(f, 300, 200, 200*(1+300*4)))
	f.Add(webpVP8L(17, 5))
	f.Add([]byte("GIF89a\x01\x00\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"))
	f.Add(tinyGIF(8192, 8192))
	f.Add(encodeGIF(f, 33, 17))
	f.Add(progressiveJPEG(64, 48, 3, 40))
	f.Add(progressiveJPEG(16, 16, 1, 40))
	f.Add([]byte("BM\x00\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00\x28\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hdr, f, herr := HeaderSize(b)
		var (
			sz  Size
			err error
		)
		n := allocated(func() { _, sz, err = DecodeImage(b) })
		if err != nil {
			if !errors.Is(err, ErrHeader) && !errors.Is(err, ErrLimit) {
				t.Fatalf("unclassified error %v", err)
			}
		} else if herr != nil || sz != hdr {
			t.Fatalf("decoded %v, header %v %v", sz, hdr, herr)
		}
		if herr != nil {
			hdr = Size{}
		}
		// Decoder buffers (up to 8 bytes a pixel for 16-bit RGBA, 12 for a progressive JPEG's
		// coefficients of three components besides its image) and the HWC copy, plus the file.
		limit := 1<<20 + 64*uint64(len(b)) + 24*min(hdr.Pixels(), MaxDecodePixels)
		switch f {
		case FormatPNG:
			limit = min(limit, 1<<20+64*deflateMaxRatio*uint64(len(b))) // 1-bit palette: 5 bytes a pixel from 1/8
		case FormatGIF:
			limit = min(limit, 1<<20+16*lzwMaxRatio*uint64(len(b))) // a byte a pixel, the HWC copy
		}
		if n > limit {
			t.Fatalf("%s of %d bytes declaring %v: %d bytes allocated, bound %d", f, len(b), hdr, n, limit)
		}
	})
}

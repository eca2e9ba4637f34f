package mm

import (
	"errors"
	"testing"
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
		if _, _, err := HashURL(s); err != nil && !errors.Is(err, ErrBadURL) {
			t.Fatalf("HashURL: %v", err)
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

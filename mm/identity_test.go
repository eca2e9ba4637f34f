package mm

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// TestVector7URLIdentity checks Dynamo's URL-identity vectors (XXH3-64 of the serialized URL).
func TestVector7URLIdentity(t *testing.T) {
	h, src, err := HashURL("https://example.com/cat.png")
	if err != nil {
		t.Fatal(err)
	}
	if h != 0x2f97f006c0e2eb2e || src != SourceURL {
		t.Fatalf("got %#x %s, want 0x2f97f006c0e2eb2e url", uint64(h), src)
	}
	if h.HexID() != "2f97f006c0e2eb2e" {
		t.Fatalf("hex %s", h.HexID())
	}
	if h.Pad() != 15871342 {
		t.Fatalf("pad %d, want 15871342", h.Pad())
	}
	if Hash(0).Pad() != 1_000_000 {
		t.Fatal("pad_value(0) != 1000000 (vector #6)")
	}
}

// TestVector9ContentHash is vector #9: shape [1, 2, 3], bytes 00..05.
func TestVector9ContentHash(t *testing.T) {
	h, err := ContentHash(1, 2, 3, []byte{0, 1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	if h != 0x7a9bbcb11a898630 || h.HexID() != "7a9bbcb11a898630" {
		t.Fatalf("got %#x", uint64(h))
	}
	if _, err := ContentHash(1, 2, 3, []byte{0}); err == nil {
		t.Fatal("short pixel buffer accepted")
	}
}

func TestWireForms(t *testing.T) {
	tests := []struct {
		h    Hash
		hex  string
		uuid string
	}{
		{0x1234, "0000000000001234", "0000000000001234" + strings.Repeat("0", 48)},
		{0x2f97f006c0e2eb2e, "2f97f006c0e2eb2e", "2f97f006c0e2eb2e" + strings.Repeat("0", 48)},
		{^Hash(0), "ffffffffffffffff", "ffffffffffffffff" + strings.Repeat("0", 48)},
	}
	for _, tc := range tests {
		if got := tc.h.HexID(); got != tc.hex {
			t.Errorf("HexID(%#x) = %s", uint64(tc.h), got)
		}
		if got := tc.h.VLLMUUID(); got != tc.uuid || len(got) != 64 {
			t.Errorf("VLLMUUID(%#x) = %s", uint64(tc.h), got)
		}
		back, err := ParseHexID(tc.h.VLLMUUID())
		if err != nil || back != tc.h {
			t.Errorf("ParseHexID round trip %#x: %#x %v", uint64(tc.h), uint64(back), err)
		}
	}
}

// TestHashURLSemantics mirrors Dynamo's hash_image_url_* tests.
func TestHashURLSemantics(t *testing.T) {
	mustHash := func(u string) Hash {
		t.Helper()
		h, _, err := HashURL(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		return h
	}
	if mustHash("https://example.com/cat.png?sig=a") == mustHash("https://example.com/cat.png?sig=b") {
		t.Error("rotating signatures collide")
	}
	if mustHash("https://example.com/cat.png?v=1") == mustHash("https://example.com/cat.png") {
		t.Error("query string dropped")
	}
	if mustHash("https://example.com/a.png") != mustHash("https://example.com/a.png") {
		t.Error("not deterministic")
	}
	if mustHash("data:image/png;base64,AAAA") == mustHash("data:image/png;base64,AAAB") {
		t.Error("data URI payloads collide")
	}
	if mustHash("s3://bucket/key.png?versionId=1") == mustHash("s3://bucket/key.png?versionId=2") {
		t.Error("s3 query dropped")
	}
	if mustHash("HTTPS://Example.COM:443/cat.png") != 0x2f97f006c0e2eb2e {
		t.Error("scheme/host case or default port not normalized")
	}
	if _, src, _ := HashURL("data:image/png;base64,AAAA"); src != SourceDataURI {
		t.Errorf("data source %s", src)
	}
}

// TestDataURIIdentityIsPayload: a data: URI is identified by its decoded bytes, so the same bytes under
// another MIME label, with other parameters or percent-free raw form are one image; other bytes are not.
func TestDataURIIdentityIsPayload(t *testing.T) {
	payload := []byte("\x89PNG\r\n\x1a\n-some-image-bytes")
	b64 := base64.StdEncoding.EncodeToString(payload)
	want := Hash(xxh3.Hash(payload))
	for _, u := range []string{
		"data:image/png;base64," + b64,
		"data:image/jpeg;base64," + b64,
		"data:application/octet-stream;base64," + b64,
		"data:image/png;name=cat.png;base64," + b64,
		"DATA:;base64," + b64,
		"  data:image/webp;base64," + b64 + "\n",
	} {
		h, src, err := HashURL(u)
		if err != nil || h != want || src != SourceDataURI {
			t.Errorf("%.40q: %#x %s %v, want %#x", u, uint64(h), src, err, uint64(want))
		}
	}
	// A raw (not base64) payload is its bytes as written, not percent-decoded.
	if h, _, _ := HashURL("data:text/plain,a%20b"); h != HashData([]byte("a%20b")) {
		t.Errorf("raw payload hash %#x", uint64(h))
	}
	other, _, _ := HashURL("data:image/png;base64," + base64.StdEncoding.EncodeToString(append(payload, 0)))
	if other == want {
		t.Error("different payloads collide")
	}
	if _, _, err := HashURL("data:image/png;base64,AAA"); !errors.Is(err, ErrBadDataURI) {
		t.Errorf("bad base64: %v", err)
	}
}

// TestNormalizeURL covers the WHATWG serialization rules that rust-url applies.
func TestNormalizeURL(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"https://example.com/cat.png", "https://example.com/cat.png"},
		{"HTTPS://EXAMPLE.com/Cat.PNG", "https://example.com/Cat.PNG"},
		{"http://example.com:80/a", "http://example.com/a"},
		{"https://example.com:443/a", "https://example.com/a"},
		{"https://example.com:8443/a", "https://example.com:8443/a"},
		{"https://example.com:0080/a", "https://example.com:80/a"},
		{"http://example.com", "http://example.com/"},
		{"http://example.com?x=1", "http://example.com/?x=1"},
		{"  https://example.com/a.png \n", "https://example.com/a.png"},
		{"https://exa\tmple.com/a\n.png", "https://example.com/a.png"},
		{"https://example.com/a/./b/../c.png", "https://example.com/a/c.png"},
		{"https://example.com/a/%2e%2E/c.png", "https://example.com/c.png"},
		{"https://example.com\\a\\b.png", "https://example.com/a/b.png"},
		{"https://example.com/a b.png", "https://example.com/a%20b.png"},
		{"https://example.com/a\"<>`{}.png", "https://example.com/a%22%3C%3E%60%7B%7D.png"},
		{"https://example.com/a^|.png", "https://example.com/a^|.png"},
		{"https://example.com/caf\u00e9.png", "https://example.com/caf%C3%A9.png"},
		{"https://example.com/a.png?q=a b&x='y'", "https://example.com/a.png?q=a%20b&x=%27y%27"},
		{"https://example.com/a.png?q=%zz", "https://example.com/a.png?q=%zz"},
		{"https://example.com/a.png#frag ment", "https://example.com/a.png#frag%20ment"},
		{"https://user:pa ss@example.com/a", "https://user:pa%20ss@example.com/a"},
		{"https://@example.com/a", "https://example.com/a"},
		{"http://0x7f.1/a", "http://127.0.0.1/a"},
		{"http://2130706433/a", "http://127.0.0.1/a"},
		{"http://[::FFFF:127.0.0.1]/a", "http://[::ffff:7f00:1]/a"},
		{"http://[2001:db8:0:0:1:0:0:1]/", "http://[2001:db8::1:0:0:1]/"},
		{"https:example.com/a", "https://example.com/a"},
		{"https:///example.com/a", "https://example.com/a"},
		{"s3://Bucket/Key.png?versionId=1", "s3://Bucket/Key.png?versionId=1"},
		{"file:///tmp/a b.png", "file:///tmp/a%20b.png"},
		{"file://localhost/tmp/a.png", "file:///tmp/a.png"},
		{"FILE://Server/share/a.png", "file://server/share/a.png"},
		{"data:image/png;base64,iVBORw0K", "data:image/png;base64,iVBORw0K"},
		{"DATA:image/png;base64,iVBORw0K", "data:image/png;base64,iVBORw0K"},
	}
	for _, tc := range tests {
		got, err := NormalizeURL(tc.in)
		if err != nil {
			t.Errorf("NormalizeURL(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("NormalizeURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", "example.com/a.png", "/a.png", "https://", "https://exa mple.com/", "http://ex\u00e4mple.com/", "http://1.2.3.256/", "https://example.com:99999/", "http://[::1/"} {
		if _, err := NormalizeURL(bad); !errors.Is(err, ErrBadURL) {
			t.Errorf("NormalizeURL(%q) = %v, want ErrBadURL", bad, err)
		}
	}
}

func TestNormalizeURLNoAllocWhenCanonical(t *testing.T) {
	u := "https://example.com/images/cat.png?sig=abc"
	allocs := testing.AllocsPerRun(100, func() { _, _ = NormalizeURL(u) })
	if allocs > 1 {
		t.Fatalf("%v allocs for a canonical URL", allocs)
	}
}

// TestCanonicalFastPath: the fast path agrees with the full serializer.
func TestCanonicalFastPath(t *testing.T) {
	for _, u := range []string{
		"http://127.0.0.1:8080/a.png", "https://cdn.example.com/a/b.png?x=1&y=2", "http://127.0.0.1/a", "http://1.2.3.4:65535/x",
		"http://127.0.0.1:80/a", "https://h.com:443/a", "http://01.2.3.4/a", "http://1.2.3/a", "http://h.com:0080/a",
		"http://h.com:/a", "http://256.1.1.1/a", "http://a.b.c.d.e:1/x", "http://h.com:65536/a",
	} {
		want, err := NormalizeURL(" " + u) // the leading space forces the full parser
		fast := canonicalHTTP(u)
		if fast && (err != nil || want != u) {
			t.Errorf("%s: fast path accepted, full parser gives %q %v", u, want, err)
		}
	}
	if !canonicalHTTP("http://127.0.0.1:8080/a.png") || !canonicalHTTP("https://cdn.example.com/a.png?sig=1") {
		t.Error("common canonical URLs miss the fast path")
	}
}

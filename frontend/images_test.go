package frontend

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/mm"
)

// TestInlineURLs: each downloaded image becomes a data: URI of its bytes labelled with its sniffed type,
// until the request's inline total would pass maxInlineBytes; images not downloaded keep their URL.
func TestInlineURLs(t *testing.T) {
	budget := NewInlineBudget(DefaultInlineBytes)
	if urls, held := inlineURLs([]mm.Image{{}, {}}, budget); urls != nil || held != 0 {
		t.Fatalf("nothing downloaded, got %v (%d bytes held)", urls, held)
	}
	png := pngOf(4, 3, 1)
	big := bytes.Repeat([]byte{0}, maxInlineBytes/2) // 2/3 of the budget once in base64
	urls, held := inlineURLs([]mm.Image{{Data: png}, {}, {Data: big}, {Data: big}, {Data: png}}, budget)
	if len(urls) != 5 {
		t.Fatalf("%d urls", len(urls))
	}
	if want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png); urls[0] != want || urls[4] != want {
		t.Fatalf("png: %.60s…, %.60s…", urls[0], urls[4])
	}
	if urls[1] != "" {
		t.Fatalf("an image that was not downloaded was inlined: %.40s", urls[1])
	}
	// The first large image fits, the second would pass the budget and keeps its URL.
	if !strings.HasPrefix(urls[2], "data:application/octet-stream;base64,AAAA") || urls[3] != "" {
		t.Fatalf("large images: %.50s / %.50s", urls[2], urls[3])
	}
	total := 0
	for _, u := range urls {
		total += len(u)
	}
	if total > maxInlineBytes || held != int64(total) || budget.InUse() != held {
		t.Fatalf("inlined %d bytes (held %d, budget in use %d), per-request bound %d", total, held, budget.InUse(), maxInlineBytes)
	}
}

// TestInlineBudget: the requests in flight hold at most the process's inline budget; an image that does
// not fit keeps its URL, and the bytes come back when the request gives them.
func TestInlineBudget(t *testing.T) {
	png := pngOf(4, 3, 1)
	one := int64(len("data:image/png;base64,") + base64.StdEncoding.EncodedLen(len(png)))
	budget := NewInlineBudget(one + one/2) // room for one image, not two
	urls, held := inlineURLs([]mm.Image{{Data: png}}, budget)
	if urls == nil || urls[0] == "" || held != one {
		t.Fatalf("first request: %v, %d held", urls, held)
	}
	if urls, held := inlineURLs([]mm.Image{{Data: png}}, budget); urls != nil || held != 0 {
		t.Fatalf("second request with the budget full: %v, %d held", urls, held)
	}
	budget.Give(held)
	if urls, held := inlineURLs([]mm.Image{{Data: png}}, budget); urls == nil || held != one || budget.InUse() != one {
		t.Fatalf("after the first gave its bytes back: %v, %d held, %d in use", urls, held, budget.InUse())
	}
}

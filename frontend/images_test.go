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
	if urls := inlineURLs([]mm.Image{{}, {}}); urls != nil {
		t.Fatalf("nothing downloaded, got %v", urls)
	}
	png := pngOf(4, 3, 1)
	big := bytes.Repeat([]byte{0}, maxInlineBytes/2) // 2/3 of the budget once in base64
	urls := inlineURLs([]mm.Image{{Data: png}, {}, {Data: big}, {Data: big}, {Data: png}})
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
	if total > maxInlineBytes {
		t.Fatalf("inlined %d bytes, budget %d", total, maxInlineBytes)
	}
}

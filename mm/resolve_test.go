package mm

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvroute/kvroute/scoring"
)

const imgTok = 151655

func qwen3Spec() Spec {
	pc := cfgQwen3
	return Detect(ModelInfo{ID: "Qwen/Qwen3-VL-2B-Instruct", ModelType: "qwen3_vl", Config: map[string]any{"image_token_id": float64(imgTok)}, Processor: &pc})
}

func newTestResolver(t testing.TB, spec Spec, cfg ResolveConfig, allow ...string) (*Resolver, *Prober) {
	p := newTestProber(t, nil, allow...)
	r, err := NewResolver(spec, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, p
}

func resolve(t testing.TB, r *Resolver, parts ...Part) ([]Image, FallbackReason) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.Resolve(ctx, parts, nil)
}

func urls(base string, paths ...string) []Part {
	out := make([]Part, len(paths))
	for i, p := range paths {
		out[i] = Part{URL: base + p}
	}
	return out
}

// prompt builds worker-bound tokens: text, then one placeholder per image separated by text (Qwen's
// <|vision_end|><|vision_start|> between images), then more text.
func prompt(nImages int, text ...uint32) []uint32 {
	out := []uint32{1, 2, 3, 4, 5}
	for i := 0; i < nImages; i++ {
		out = append(out, 151652, imgTok, 151653)
	}
	return append(out, text...)
}

func TestResolveConcurrent(t *testing.T) {
	srv := newImageServer(t, map[string][]byte{
		"/a.png": encodePNG(t, 640, 480), "/b.jpg": encodeJPEG(t, 337, 511),
		"/c.png": encodePNG(t, 64, 64), "/d.png": encodePNG(t, 400, 300),
	})
	r, _ := newTestResolver(t, qwen3Spec(), DefaultResolveConfig(), "127.0.0.1")
	parts := urls(srv.URL, "/a.png", "/b.jpg", "/c.png", "/d.png")
	images, reason := resolve(t, r, parts...)
	if reason != FallbackNone {
		t.Fatalf("reason %s: %v", reason, images)
	}
	want := []int{300, 176, 64, 108}
	for i, im := range images {
		if im.NumTokens != want[i] || im.Source != SourceURL {
			t.Errorf("image %d: %v, want %d tokens", i, im, want[i])
		}
	}
	if n := srv.requests.Load(); n != 4 {
		t.Fatalf("%d requests, want 4", n)
	}
	// The second time everything is cached: no request, same results.
	again, reason := resolve(t, r, parts...)
	if reason != FallbackNone || srv.requests.Load() != 4 || again[1].Hash != images[1].Hash {
		t.Fatalf("warm: %s %d", reason, srv.requests.Load())
	}
	rt, reason := r.Route(nil, prompt(4, 7, 8, 9), images, 16, DefaultLimits())
	if reason != FallbackNone || rt.ExpandedLen != 5+4*2+300+176+64+108+3 || len(rt.Tokens)%16 != 0 {
		t.Fatalf("route: %s len %d", reason, rt.ExpandedLen)
	}
	// Placeholder count differs from the image count.
	if _, reason := r.Route(nil, prompt(3), images, 16, DefaultLimits()); reason != FallbackCountMismatch {
		t.Fatalf("mismatch: %s", reason)
	}
}

func TestResolveFallbacks(t *testing.T) {
	png := encodePNG(t, 100, 100)
	srv := newImageServer(t, map[string][]byte{"/a.png": png})
	noRange := newImageServer(t, map[string][]byte{"/a.png": png})
	noRange.ignore = true
	spec := qwen3Spec()
	small := DefaultResolveConfig()
	small.MaxImages = 2
	small.MaxTotalPixels = 15000
	tests := []struct {
		name  string
		spec  Spec
		cfg   ResolveConfig
		allow []string
		parts []Part
		want  FallbackReason
	}{
		{"ok", spec, small, []string{"127.0.0.1"}, urls(srv.URL, "/a.png"), FallbackNone},
		{"no images", spec, small, nil, nil, FallbackNone},
		{"unknown model", Spec{}, small, []string{"127.0.0.1"}, urls(srv.URL, "/a.png"), FallbackUnknownModel},
		{"user uuid", spec, small, []string{"127.0.0.1"}, []Part{{URL: srv.URL + "/a.png"}, {URL: srv.URL + "/a.png", UUID: "mine"}}, FallbackUserUUID},
		{"too many images", spec, small, []string{"127.0.0.1"}, urls(srv.URL, "/a.png", "/a.png?1", "/a.png?2"), FallbackLimits},
		{"too many pixels", spec, small, []string{"127.0.0.1"}, urls(srv.URL, "/a.png", "/a.png?x"), FallbackLimits},
		{"server ignores range", spec, small, []string{"127.0.0.1"}, urls(noRange.URL, "/a.png"), FallbackProbeFailed},
		{"not found", spec, small, []string{"127.0.0.1"}, urls(srv.URL, "/nope.png"), FallbackProbeFailed},
		{"loopback not allowed", spec, small, nil, urls(srv.URL, "/a.png"), FallbackBlocked},
		{"s3 scheme", spec, small, nil, []Part{{URL: "s3://bucket/a.png"}}, FallbackBadURL},
		{"unparsable url", spec, small, nil, []Part{{URL: "not a url"}}, FallbackBadURL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newTestResolver(t, tc.spec, tc.cfg, tc.allow...)
			before := srv.requests.Load()
			_, got := resolve(t, r, tc.parts...)
			if got != tc.want {
				t.Fatalf("reason %s, want %s", got, tc.want)
			}
			if (tc.want == FallbackUserUUID || tc.want == FallbackUnknownModel) && srv.requests.Load() != before {
				t.Fatal("size discovery ran although routing was off")
			}
		})
	}
}

// TestResolveDataURIIdentity: by default a data: URI is its decoded payload, so the same PNG bytes
// labelled image/png and image/jpeg are one image; with DataURIAsString (Dynamo's default path) the
// whole URI string is the identity, so they are two, each the XXH3 of the string. The size is read from
// the payload either way.
func TestResolveDataURIIdentity(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString(encodePNG(t, 64, 32))
	parts := []Part{{URL: "data:image/png;base64," + b64}, {URL: "data:image/jpeg;base64," + b64}}

	byPayload, _ := newTestResolver(t, qwen3Spec(), DefaultResolveConfig())
	images, reason := resolve(t, byPayload, parts...)
	if reason != FallbackNone || images[0].Hash != images[1].Hash || images[0].Source != SourceDataURI {
		t.Fatalf("payload identity: %s %+v", reason, images)
	}
	cfg := DefaultResolveConfig()
	cfg.DataURIAsString = true
	byString, _ := newTestResolver(t, qwen3Spec(), cfg)
	images, reason = resolve(t, byString, parts...)
	if reason != FallbackNone || images[0].Hash == images[1].Hash {
		t.Fatalf("string identity: %s %+v", reason, images)
	}
	for i, im := range images {
		if im.Hash != Hash(xxh3.HashString(parts[i].URL)) || im.Source != SourceURL || im.Size != (Size{W: 64, H: 32}) {
			t.Errorf("image %d: %+v, want the hash of its string", i, im)
		}
	}
}

// TestResolveFrontendDecoding: with decoding, identity follows the bytes, not the URL.
func TestResolveFrontendDecoding(t *testing.T) {
	png := encodePNG(t, 200, 100)
	srv := newImageServer(t, map[string][]byte{"/a.png": png, "/copy.png": png, "/other.png": encodePNG(t, 200, 101)})
	data := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
	parts := []Part{{URL: srv.URL + "/a.png"}, {URL: srv.URL + "/copy.png"}, {URL: data}, {URL: srv.URL + "/other.png"}}

	byURL, _ := newTestResolver(t, qwen3Spec(), DefaultResolveConfig(), "127.0.0.1")
	images, reason := resolve(t, byURL, parts...)
	if reason != FallbackNone || images[0].Hash == images[1].Hash || images[0].Hash == images[2].Hash || images[2].Source != SourceDataURI {
		t.Fatalf("url mode: %s %v", reason, images)
	}
	cfg := DefaultResolveConfig()
	cfg.FrontendDecoding = true
	dec, _ := newTestResolver(t, qwen3Spec(), cfg, "127.0.0.1")
	images, reason = resolve(t, dec, parts...)
	if reason != FallbackNone {
		t.Fatalf("decode mode: %s %v", reason, images)
	}
	if images[0].Hash != images[1].Hash || images[0].Hash != images[2].Hash || images[0].Hash == images[3].Hash {
		t.Fatalf("decode mode hashes: %v", images)
	}
	if images[0].Source != SourceDecodedBytes || images[0].Size != (Size{200, 100}) {
		t.Fatalf("decode mode: %v", images[0])
	}
}

// overlap is the number of leading sequence hashes two routing views share.
func overlap(a, b []uint32, bs int) int {
	ha := scoring.SequenceHashes(nil, scoring.LocalBlockHashes(nil, a, bs, scoring.Seed, nil))
	hb := scoring.SequenceHashes(nil, scoring.LocalBlockHashes(nil, b, bs, scoring.Seed, nil))
	n := 0
	for n < len(ha) && n < len(hb) && ha[n] == hb[n] {
		n++
	}
	return n
}

// TestDynamoScenarios mirrors Dynamo's multimodal routing e2e assertions on
// the routing view: overlap in blocks of 16 between a first and a second request.
func TestDynamoScenarios(t *testing.T) {
	files := map[string][]byte{"/cat.png": encodePNG(t, 640, 480), "/dog.png": encodePNG(t, 480, 640), "/cow.png": encodePNG(t, 500, 500)}
	srv := newImageServer(t, files)
	r, _ := newTestResolver(t, qwen3Spec(), DefaultResolveConfig(), "127.0.0.1")
	const bs = 16
	view := func(tail []uint32, parts ...Part) []uint32 {
		t.Helper()
		images, reason := resolve(t, r, parts...)
		if reason != FallbackNone {
			t.Fatalf("resolve: %s", reason)
		}
		rt, reason := r.Route(nil, prompt(len(parts), tail...), images, bs, DefaultLimits())
		if reason != FallbackNone {
			t.Fatalf("route: %s", reason)
		}
		return rt.Tokens
	}
	textA := []uint32{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116}
	textB := []uint32{200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216}
	cat, dog, cow := Part{URL: srv.URL + "/cat.png"}, Part{URL: srv.URL + "/dog.png"}, Part{URL: srv.URL + "/cow.png"}
	first := view(textA, cat)
	imageBlocks := (5 + 1 + 300) / bs

	// Repeated image, different text after it: the image blocks match.
	if got := overlap(first, view(textB, cat), bs); got < imageBlocks {
		t.Errorf("same image: overlap %d < %d image blocks", got, imageBlocks)
	}
	// Different image, same text: strictly less than the same image.
	same := overlap(first, view(textA, cat), bs)
	if diff := overlap(first, view(textA, dog), bs); diff >= same || diff > 0 {
		t.Errorf("different image: overlap %d (same image %d)", diff, same)
	}
	// Distinct query strings do not collide (URL identity keeps the query).
	if got := overlap(first, view(textA, Part{URL: srv.URL + "/cat.png?v=2"}), bs); got > 0 {
		t.Errorf("query strings collide: overlap %d", got)
	}
	// Staircase: 1 → 2 → 3 identical images, each request extends the previous one's prefix.
	two := view(textA, cat, dog)
	three := view(textA, cat, dog, cow)
	if o := overlap(two, three, bs); o < (5+3+300+3+300)/bs {
		t.Errorf("staircase overlap %d", o)
	}
	// Two identical images in one request: one fetch, both expanded; a repeat overlaps fully.
	twin := view(textA, cat, cat)
	if o := overlap(twin, view(textA, cat, cat), bs); o != len(twin)/bs-1 && o != len(twin)/bs {
		t.Errorf("repeated two-identical-image request overlap %d of %d blocks", o, len(twin)/bs)
	}
	// Same images with a different prompt before them: less than with the same prompt.
	otherPrompt := func(tail []uint32, parts ...Part) []uint32 {
		images, _ := resolve(t, r, parts...)
		toks := append([]uint32{9, 9, 9, 9, 9}, prompt(len(parts), tail...)[5:]...)
		rt, reason := r.Route(nil, toks, images, bs, DefaultLimits())
		if reason != FallbackNone {
			t.Fatalf("route: %s", reason)
		}
		return rt.Tokens
	}
	if o := overlap(first, otherPrompt(textA, cat), bs); o >= same {
		t.Errorf("different prompt overlap %d >= same prompt %d", o, same)
	}
	// Text-only repeat (no images) is plain prefix routing: nothing to resolve.
	if images, reason := resolve(t, r); reason != FallbackNone || len(images) != 0 {
		t.Errorf("text-only: %s %v", reason, images)
	}
	// Swapped image order: near-zero overlap (only the text before the first image).
	if o := overlap(two, view(textA, dog, cat), bs); o > 0 {
		t.Errorf("swapped order overlap %d", o)
	}
}

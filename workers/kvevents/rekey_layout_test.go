package kvevents

import (
	"testing"

	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/scoring"
)

func TestNormalizeImageSpans(t *testing.T) {
	const img, brk, end = 10, 12, 13
	// The tail of image 0 (two rows), then image 1 (one row): k moves on at [IMG_END] only.
	block := []uint32{img, brk, img, end, 5, img, img, end}
	NormalizeImageSpans(block, img, end, []uint64{0, 1})
	p0, p1 := scoring.PadValue(0), scoring.PadValue(1)
	want := []uint32{p0, brk, p0, end, 5, p1, p1, end}
	for i := range want {
		if block[i] != want[i] {
			t.Fatalf("got %v want %v", block, want)
		}
	}
	// Per-run normalization would have given the second row of image 0 image 1's pad.
	runs := []uint32{img, brk, img, end, 5, img, img, end}
	NormalizeImageRuns(runs, img, []uint64{0, 1})
	if runs[2] != p1 {
		t.Fatal("expected per-run normalization to misattribute a structured image's second run")
	}
}

// engineEvent builds the Stored event a vLLM worker publishes for prompt tokens whose images occupy
// ranges[i] (the whole replacement, structural tokens included): each full block's extra keys name the
// images overlapping it, in order, by their 64-character uuid.
func engineEvent(tokens []uint32, hashes []mm.Hash, ranges [][2]int, bs int) Event {
	ev := Event{Kind: Stored, TokenIDs: tokens, BlockSize: bs}
	for b := 0; (b+1)*bs <= len(tokens); b++ {
		ev.BlockHashes = append(ev.BlockHashes, uint64(1000+b))
		var keys []ExtraKey
		for i, r := range ranges {
			if r[0] < (b+1)*bs && r[1] > b*bs {
				keys = append(keys, ExtraKey{Kind: ExtraMM, Str: hashes[i].VLLMUUID(), Int: int64(max(r[0]-b*bs, 0))})
			}
		}
		ev.ExtraKeys = append(ev.ExtraKeys, keys)
	}
	return ev
}

// TestStructuredLayoutsAgree: for Llama-4 (tiles of <|patch|> runs with separators) and Pixtral (rows of
// [IMG] with breaks), the blocks a vLLM worker stores, normalized with the layout's end token, hash as
// the frontend's routing view of the same request — two different images, several block sizes.
func TestStructuredLayoutsAgree(t *testing.T) {
	llama := mm.Detect(mm.ModelInfo{ID: "meta-llama/Llama-4-Scout-17B-16E-Instruct", ModelType: "llama4",
		Config: map[string]any{"image_token_index": 200092.0}, Processor: &mm.ProcessorConfig{},
		TokenID: func(s string) (uint32, bool) {
			v, ok := map[string]uint32{"<|image_start|>": 200088, "<|image_end|>": 200089, "<|image|>": 200090, "<|patch|>": 200092,
				"<|tile_x_separator|>": 200093, "<|tile_y_separator|>": 200094}[s]
			return v, ok
		}})
	pixtral := mm.Detect(mm.ModelInfo{ID: "mistral-community/pixtral-12b", ModelType: "llava",
		Config: map[string]any{"image_token_index": 10.0}, Processor: &mm.ProcessorConfig{},
		TokenID: func(s string) (uint32, bool) {
			v, ok := map[string]uint32{"[IMG]": 10, "[IMG_BREAK]": 12, "[IMG_END]": 13}[s]
			return v, ok
		}})
	sizes := []mm.Size{{W: 500, H: 500}, {W: 100, H: 1000}}
	hashes := []mm.Hash{0x1111222233334444, 0x5555666677778888}
	for _, tc := range []struct {
		name string
		spec mm.Spec
	}{{"llama4", llama}, {"pixtral", pixtral}} {
		for _, bs := range []int{16, 64} {
			s := tc.spec
			if !s.Enabled {
				t.Fatalf("%s: %s", tc.name, s.Disabled)
			}
			// Engine side: text, image 0, text, image 1, text.
			var engine []uint32
			var ranges [][2]int
			text := []uint32{1, 2, 3}
			for _, sz := range sizes {
				engine = append(engine, text...)
				start := len(engine)
				engine = s.AppendImage(engine, sz, s.RunTokenID)
				ranges = append(ranges, [2]int{start, len(engine)})
			}
			engine = append(engine, text...)
			ev := engineEvent(engine, hashes, ranges, bs)
			local, partial := RekeyImages(&ev, bs, scoring.Seed, s.RunTokenID, s.EndTokenID, nil)
			if partial != 0 {
				t.Fatalf("%s bs %d: partial %d", tc.name, bs, partial)
			}
			// Router side: the worker-bound prompt has one placeholder per image; the resolver expands it.
			prompt := append(append(append(append(append([]uint32{}, text...), s.ImageTokenID), text...), s.ImageTokenID), text...)
			images := make([]mm.Image, len(sizes))
			for i, sz := range sizes {
				images[i] = mm.Image{Hash: hashes[i], Size: sz, NumTokens: s.NumTokens(sz)}
			}
			prober, err := mm.NewProber(mm.DefaultProbeConfig(), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := mm.NewResolver(s, prober, mm.DefaultResolveConfig())
			if err != nil {
				t.Fatal(err)
			}
			rt, reason := res.Route(nil, prompt, images, bs, mm.DefaultLimits())
			prober.Close()
			if reason != mm.FallbackNone {
				t.Fatalf("%s: %s", tc.name, reason)
			}
			view := rt.Tokens[:rt.ExpandedLen]
			if len(view) != len(engine) {
				t.Fatalf("%s: view %d tokens, engine %d", tc.name, len(view), len(engine))
			}
			want := scoring.LocalBlockHashes(nil, view[:len(view)/bs*bs], bs, scoring.Seed, nil)
			if len(local) != len(want) || len(want) < 4 {
				t.Fatalf("%s bs %d: %d blocks, want %d", tc.name, bs, len(local), len(want))
			}
			for i := range want {
				if local[i] != want[i] {
					t.Fatalf("%s bs %d: block %d differs", tc.name, bs, i)
				}
			}
		}
	}
}

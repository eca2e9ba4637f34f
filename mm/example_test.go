package mm_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/scoring"
)

// Example shows the request path: resolve the images, build the routing view, hash it, and forward the
// image ids only when routing on images.
func Example() {
	// Startup, once per model (normally mm.LoadSpec(dir, servedID)).
	pc := mm.ProcessorConfig{PatchSize: 16, MergeSize: 2, TemporalPatchSize: 2, HasSize: true, ShortestEdge: 65536, LongestEdge: 16777216}
	spec := mm.Detect(mm.ModelInfo{ID: "Qwen/Qwen3-VL-2B-Instruct", ModelType: "qwen3_vl",
		Config: map[string]any{"image_token_id": 151655.0}, Processor: &pc})
	prober, _ := mm.NewProber(mm.DefaultProbeConfig(), nil, nil)
	defer prober.Close()
	resolver, _ := mm.NewResolver(spec, prober, mm.DefaultResolveConfig())

	// Per request: a data: URI (a 1x1 GIF) between text tokens.
	gif, _ := base64.StdEncoding.DecodeString("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
	parts := []mm.Part{{URL: "data:image/gif;base64," + base64.StdEncoding.EncodeToString(gif)}}
	tokens := []uint32{9707, 151652, 151655, 151653, 3838}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	images, reason := resolver.Resolve(ctx, parts, nil)
	var routing mm.Routing
	if reason == mm.FallbackNone {
		routing, reason = resolver.Route(nil, tokens, images, 16, mm.DefaultLimits())
	}
	if reason != mm.FallbackNone {
		fmt.Println("text-prefix routing:", reason)
		return
	}
	blocks := scoring.LocalBlockHashes(nil, routing.Tokens, 16, scoring.Seed, nil)
	fmt.Println(images[0].Source, images[0].Size.W, images[0].Size.H, images[0].NumTokens)
	fmt.Println(routing.ExpandedLen, len(routing.Tokens), len(blocks))
	fmt.Println(spec.UUIDModality(), len(routing.VLLMUUIDs()[0]))
	// Output:
	// data_uri 1 1 64
	// 68 80 5
	// image 64
}

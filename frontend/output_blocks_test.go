package frontend

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/scoring"
)

// TestStreamOutputBlocksCharged (Dynamo's cost, whose decode term counts blocks): with
// --router-track-output-blocks, the tokens a worker streams are
// charged to it as they come (one block per block boundary crossed), so its decode cost grows during the
// stream; without the flag it stays at the prompt's blocks.
func TestStreamOutputBlocksCharged(t *testing.T) {
	for _, track := range []bool{false, true} {
		t.Run(fmt.Sprint("track=", track), func(t *testing.T) {
			s := startStack(t, stackOpts{workers: 1, speedup: 1, scoring: func(c *scoring.Config) { c.TrackOutputBlocks, c.Preset = track, scoring.PresetDynamo }})
			bs := s.router.BlockSize()
			resp, err := http.Post(s.base+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(
				`{"model":%q,"prompt":[1,2,3,4,5,6,7,8],"max_tokens":%d,"ignore_eos":true,"stream":true}`, s.name, 64*bs)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("stream: %d", resp.StatusCode)
			}
			sc := bufio.NewScanner(resp.Body)
			chunks := 0
			readChunks := func(n int) {
				t.Helper()
				for chunks < n && sc.Scan() {
					if strings.HasPrefix(sc.Text(), "data: {") {
						chunks++
					}
				}
				if chunks < n {
					t.Fatalf("stream ended after %d chunks, want %d", chunks, n)
				}
			}
			// probe routes a one-token request and frees it at once: its cost on the only worker is the
			// worker's decode blocks plus the probe's own.
			probe := func(id string) float64 {
				t.Helper()
				res, err := s.router.Route(context.Background(), &router.RouteRequest{ID: id, Tokens: []uint32{900}, ReturnCosts: true})
				if err != nil {
					t.Fatal(err)
				}
				_ = s.router.Free(id)
				return res.Candidates[0].Cost
			}
			readChunks(2)
			before := probe("probe-1")
			readChunks(2 + 3*bs)
			after := probe("probe-2")
			// The worker may have generated ahead of what this client read, never behind it, and the request
			// stays charged until its stream ends, which max_tokens puts far beyond what is read here.
			switch {
			case track && after-before < 3:
				t.Fatalf("tracking on: decode cost %v -> %v after %d more tokens, want ≥ 3 blocks more", before, after, 3*bs)
			case !track && after != before:
				t.Fatalf("tracking off: decode cost %v -> %v; output must not be charged", before, after)
			}
			// The stream is far from its end (64 blocks): closing the body aborts it.
		})
	}
}

package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/mm"
)

// A workload is a bench.Trace: Mooncake lines whose hash ids stand for 512-token blocks (bench.Blocks
// turns them into tokens). The conversation trace is one; the generators below write the patterns it
// lacks in the same form, so the oracles, the arrival schedule and the prompt builder are shared.

// Generated workload kinds.
const (
	GenAgentic    = "agentic"     // tool loops: a turn every 1–5 s on a growing prefix
	GenFanout     = "fanout"      // best-of-N: N identical requests at once
	GenTenants    = "tenants"     // 64 tenants with distinct system prompts, Zipf popularity
	GenHerding    = "herding"     // one 16k-token system prompt shared by every request
	GenPrefixTree = "prefix-tree" // two-level shared-prefix tree (SGLang generated-shared-prefix style)
	GenBursts     = "bursts"      // tenant requests arriving in bursts (2 s at 5.5× the mean, 18 s at 0.5×)
	GenCatalog    = "catalog"     // questions about products, each shown by 1–3 photos, Zipf popularity (images)
	GenDocQA      = "docqa"       // questions about documents of 2–6 scanned pages, Zipf popularity (images)
)

// GenKinds lists the generators in order.
var GenKinds = []string{GenAgentic, GenFanout, GenTenants, GenHerding, GenPrefixTree, GenBursts, GenCatalog, GenDocQA}

// ImageKinds are the generators whose workloads carry images (GenerateImages).
var ImageKinds = []string{GenCatalog, GenDocQA}

// GenConfig configures one generated workload.
type GenConfig struct {
	Kind string
	// Duration is the arrival span. Default 5 minutes.
	Duration time.Duration
	// Rate is the mean arrival rate in requests/s at arrival speedup 1. Default 3 (the conversation
	// trace's first 10 minutes run at 2.9).
	Rate float64
	// Seed makes the workload reproducible. Default 42.
	Seed uint64
}

// DefaultGenConfig returns the defaults for a kind.
func DefaultGenConfig(kind string) GenConfig {
	return GenConfig{Kind: kind, Duration: 5 * time.Minute, Rate: 3, Seed: 42}
}

// Validate checks the configuration.
func (c *GenConfig) Validate() error {
	if !slices.Contains(GenKinds, c.Kind) {
		return fmt.Errorf("%w: unknown workload %q (have %v)", ErrBadConfig, c.Kind, GenKinds)
	}
	if c.Duration <= 0 || c.Duration > 24*time.Hour || !(c.Rate > 0) || c.Rate > 1e4 {
		return fmt.Errorf("%w: workload duration %v and rate %v must be positive and bounded", ErrBadConfig, c.Duration, c.Rate)
	}
	return nil
}

const idTokens = bench.TraceBlockSize

// gen holds a generator's state: the seeded source and the next fresh hash id.
type gen struct {
	rng    *rand.Rand
	next   uint64
	out    []bench.Request
	images Images
}

// image gives an image fresh hash ids: it starts at the first one's first token and its placeholder
// run covers as many of them as its token count needs (the rest of the last is text).
func (g *gen) image(url string, w, h uint32) []uint64 {
	hash, _, err := mm.HashURL(url)
	if err != nil {
		panic("lab: generated image url " + url + ": " + err.Error()) // the generators' own URLs
	}
	im := Image{Hash: hash, W: w, H: h}
	ids := g.fresh((im.Tokens() + idTokens - 1) / idTokens)
	g.images[ids[0]] = im
	return ids
}

func (g *gen) fresh(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = g.next
		g.next++
	}
	return ids
}

func (g *gen) uniform(lo, hi int) int { return lo + g.rng.IntN(hi-lo+1) }

// exp draws an exponential gap with the given rate.
func (g *gen) exp(rate float64) float64 { return -math.Log(1-g.rng.Float64()) / rate }

// prompt is a prefix of ids (whose text is prefixLen tokens, a multiple of idTokens) followed by n fresh
// tokens.
func (g *gen) prompt(prefix []uint64, n int) ([]uint64, int) {
	ids := append(slices.Clone(prefix), g.fresh((n+idTokens-1)/idTokens)...)
	return ids, len(prefix)*idTokens + n
}

func (g *gen) emit(at float64, ids []uint64, isl, osl int) {
	g.out = append(g.out, bench.Request{Timestamp: int64(at * 1000), InputLength: isl, OutputLength: osl, HashIDs: ids})
}

// Generate writes a workload without images; GenerateImages writes every kind.
func Generate(c GenConfig) (*bench.Trace, error) {
	if slices.Contains(ImageKinds, c.Kind) {
		return nil, fmt.Errorf("%w: workload %q has images: GenerateImages", ErrBadConfig, c.Kind)
	}
	tr, _, err := GenerateImages(c)
	return tr, err
}

// GenerateImages writes the workload and its images (Config.Images; empty for the text kinds).
func GenerateImages(c GenConfig) (*bench.Trace, Images, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	g := &gen{rng: newRNG(c.Seed), images: Images{}}
	span := c.Duration.Seconds()
	switch c.Kind {
	case GenAgentic:
		g.agentic(span, c.Rate)
	case GenFanout:
		shared := g.fresh(2)
		for t := g.exp(c.Rate / 5); t < span; t += g.exp(c.Rate / 5) {
			n := g.uniform(2, 8)
			ids, isl := g.prompt(shared, g.uniform(1024, 4096))
			osl := g.uniform(256, 1024)
			for range n {
				g.emit(t, ids, isl, osl)
			}
		}
	case GenTenants, GenBursts:
		sys := make([][]uint64, 64)
		for i := range sys {
			sys[i] = g.fresh(g.uniform(4, 16))
		}
		z := rand.NewZipf(g.rng, 1.1, 1, uint64(len(sys)-1))
		rate := func(t float64) float64 { return c.Rate }
		if c.Kind == GenBursts {
			rate = func(t float64) float64 {
				if math.Mod(t, 20) < 2 {
					return 5.5 * c.Rate
				}
				return 0.5 * c.Rate
			}
		}
		for t := g.exp(rate(0)); t < span; t += g.exp(rate(t)) {
			ids, isl := g.prompt(sys[z.Uint64()], g.uniform(256, 2048))
			g.emit(t, ids, isl, g.uniform(64, 512))
		}
	case GenHerding:
		sys := g.fresh(32)
		for t := g.exp(c.Rate); t < span; t += g.exp(c.Rate) {
			ids, isl := g.prompt(sys, g.uniform(256, 2048))
			g.emit(t, ids, isl, g.uniform(64, 512))
		}
	case GenCatalog:
		g.catalog(span, c.Rate)
	case GenDocQA:
		g.docQA(span, c.Rate)
	case GenPrefixTree:
		// 8 roots of 2,048 tokens, 8 branches of 2,048 under each, then a 128-token question: SGLang's
		// generated-shared-prefix shape (64 groups, 2,048-token system prompt, 128-token question,
		// 256-token output) with its groups split in two levels.
		roots := make([][]uint64, 8)
		var groups [][]uint64
		for i := range roots {
			roots[i] = g.fresh(4)
			for range 8 {
				groups = append(groups, append(slices.Clone(roots[i]), g.fresh(4)...))
			}
		}
		for t := g.exp(c.Rate); t < span; t += g.exp(c.Rate) {
			ids, isl := g.prompt(groups[g.rng.IntN(len(groups))], 128)
			g.emit(t, ids, isl, 256)
		}
	}
	slices.SortStableFunc(g.out, func(a, b bench.Request) int { return int(a.Timestamp - b.Timestamp) })
	return &bench.Trace{Requests: g.out}, g.images, nil
}

// catalog: a shopping assistant. One 1,024-token system prompt, then the product the user asks about —
// 1–3 photos (768×768, 1024×768 or 800×1000 px: 729, 999 or 1,044 tokens for Qwen2.5-VL) and a
// 512-token description — then a 32–256-token question; 256 products with Zipf(1.1) popularity, so a
// popular product's photos recur across users after the same prefix.
func (g *gen) catalog(span, rate float64) {
	sys := g.fresh(2)
	sizes := [][2]uint32{{768, 768}, {1024, 768}, {800, 1000}}
	products := make([][]uint64, 256)
	for p := range products {
		ids := slices.Clone(sys)
		for k := range g.uniform(1, 3) {
			sz := sizes[g.rng.IntN(len(sizes))]
			ids = append(ids, g.image(fmt.Sprintf("https://shop.example.com/p/%d/%d.jpg", p, k), sz[0], sz[1])...)
		}
		products[p] = append(ids, g.fresh(1)...)
	}
	z := rand.NewZipf(g.rng, 1.1, 1, uint64(len(products)-1))
	for t := g.exp(rate); t < span; t += g.exp(rate) {
		ids, isl := g.prompt(products[z.Uint64()], g.uniform(32, 256))
		g.emit(t, ids, isl, g.uniform(64, 256))
	}
}

// docQA: questions about scanned documents. A 512-token system prompt, then the document's 2–6 pages
// (A4 at 150 dpi, 1240×1754 px: 2,772 tokens each), then a 16–128-token question; 48 documents with
// Zipf(1.1) popularity.
func (g *gen) docQA(span, rate float64) {
	sys := g.fresh(1)
	docs := make([][]uint64, 48)
	for d := range docs {
		ids := slices.Clone(sys)
		for k := range g.uniform(2, 6) {
			ids = append(ids, g.image(fmt.Sprintf("https://docs.example.com/d/%d/page-%d.png", d, k+1), 1240, 1754)...)
		}
		docs[d] = ids
	}
	z := rand.NewZipf(g.rng, 1.1, 1, uint64(len(docs)-1))
	for t := g.exp(rate); t < span; t += g.exp(rate) {
		ids, isl := g.prompt(docs[z.Uint64()], g.uniform(16, 128))
		g.emit(t, ids, isl, g.uniform(64, 384))
	}
}

// agentic: sessions start as a Poisson process; each picks one of 4 agent system prompts (4,096 tokens),
// sends a 1,024-token task, then 8–24 more turns 1–5 s apart, each adding its previous output and a tool
// result of 256–2,048 tokens to the conversation.
func (g *gen) agentic(span, rate float64) {
	agents := make([][]uint64, 4)
	for i := range agents {
		agents[i] = g.fresh(8)
	}
	const meanTurns = 17
	for t0 := g.exp(rate / meanTurns); t0 < span; t0 += g.exp(rate / meanTurns) {
		ids, isl := g.prompt(agents[g.rng.IntN(len(agents))], 1024)
		turns := g.uniform(9, 25)
		t := t0
		for k := 0; k < turns && t < span; k++ {
			osl := g.uniform(64, 512)
			g.emit(t, ids, isl, osl)
			// The next turn: this prompt, its answer and a tool result. The last id may be cut; extending
			// it with the same id keeps the prefix (an id's block is the same tokens at any cut).
			grow := osl + g.uniform(256, 2048)
			isl += grow
			if need := (isl + idTokens - 1) / idTokens; need > len(ids) {
				ids = append(slices.Clone(ids), g.fresh(need-len(ids))...)
			}
			t += 1 + 4*g.rng.Float64()
		}
	}
}

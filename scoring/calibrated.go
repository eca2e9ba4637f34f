package scoring

import "math"

// The kvroute preset's cost: a request's expected time to first token on a worker, in units of one
// prompt token's prefill on an idle worker.
//
// A worker runs the prefill work already routed to it (its active prefill tokens, Q) before or beside
// this request's uncached tokens (U = ISL − cached); the engine fits them into steps of at most
// max_num_batched_tokens, and every step also advances the worker's decode batch, whose attention reads
// every active block, so a step's cost grows with the worker's active blocks K. Per prompt token:
//
//	t(K) = α · (1 + γ·K)        seconds per prefill token on a worker holding K active blocks
//	TTFT ≈ (Q + U) · t(K)
//
// α is the same for every worker of a fleet, so the choice needs only γ, which the machine learns from
// the fleet (Calibrator: observed prefill completion times against the work and the blocks at routing).
// Where the request's blocks would push a worker past its KV capacity, the overflow is charged as
// recomputation (the engine preempts and prefills again). The cached prefix is worth its whole length on
// the device and the host and disk weights on lower tiers (the transfer instead of the recompute).
//
// Why not Dynamo's linear cost: it adds prefill blocks (scaled by --router-prefill-load-scale, 1) to the
// worker's active decode blocks, so on a fleet whose workers each hold a few long conversations the
// decode footprint dwarfs what a cache hit saves, and a request leaves the worker holding its prefix for
// any worker with a little less in flight: 63–78 % of the pooled-cache oracle's hit rate where peers
// reach 93–99 % (docs/benchmarks.md, fleet lab). In time units a hit is worth what it saves, and a busy
// worker costs what its queue and its decode batch cost, at the rate the engines actually run.

// WorkWeight prices the recomputation of a prefix another worker holds idle (a dead copy: a conversation
// that moves leaves its old context to be evicted there): the requests queued behind recomputed work
// wait for it too, wherever it runs. Chosen by the fleet lab (docs/benchmarks.md): on the conversation
// trace 1 leaves a tenth of the reuse on the table at high load (90 % of the pooled oracle), 4 reaches
// 97–100 % on the mocker profile. Between 8 and 16 one seed could not tell (the 8B profile's rows move
// ±5 points with the seed); the mean over eight seeds can: at 16 the mean hit rate is above the best
// peer's in 19 of the conversation trace's 20 (profile, fleet, rate) rows against 14 at 8, the 8B
// profile at ×1 / ×2 reaches 96.3 / 95.1 % of the pooled oracle (93.3 / 94.1 at 8) and the 70B profile
// 105–116 % (98–114), for a TTFT p90 a few ms to 0.13 s higher (8B ×2: 1.96 s against 1.83, the peers'
// 4.7 s). 24 took the 8B profile's ×2 over the 2 s SLO (2.01 s) and to 91.7 %.
const WorkWeight = 16

// EvictionWeight prices, per token, what a request's uncached tokens evict from a worker's KV cache,
// charged only while some eligible worker has more than half of its cache free and room for the whole
// request (scoring/sched's room.go: on a fleet whose caches are all full, or all have room, every
// worker evicts alike and nothing is charged). A cached block evicted is recomputed only if it is asked
// for again, so it costs less than a dead copy (WorkWeight). Without it the holders of a shared system
// prompt kept every new conversation on a large fleet, their caches churning while the rest stayed
// empty: 32 workers at ×0.5 / ×1 / ×2 on the 8B profile 77 / 82 / 94 % of the pooled oracle, with it
// 98 / 98 / 98 % (SGLang's router 93 %); on the 70B profile at ×0.25 / ×0.5 / ×1 57 / 75 / 90 → 91 / 93 /
// 93 % (docs/benchmarks.md, four seeds each, WorkWeight 8; at 16, 97–98 % and 94–95 %). In an earlier
// form charged wherever any worker had room, 0.5 and 2 gave the 8B profile's 32-worker rows within 0.6
// points of 1.
const EvictionWeight = 1

// EvictionAgeWeight prices, per uncached token, evicting recently freed blocks once every cache is full
// (scoring/sched's age.go): a worker is charged this times 1 − the age of what its engine evicts over the
// oldest such age in the fleet. Chosen by the fleet lab (docs/benchmarks.md): on the conversation trace,
// four seeds, 0.5 brought every (profile, fleet, rate) row to 95 % of the pooled oracle (the 70B
// profile's 32-worker rows 93.5–94.6 → 95.3–96.5 %) with TTFT p90 lower or within 15 ms; 1 left the ×0.5
// row at 94.5 %.
const EvictionAgeWeight = 0.5

// DecodeContextWeight prices a second of decode time spent reading KV cache (a request's tokens' wait
// on the context decoded beside it, and the others' wait on its context; scoring/sched's decode.go)
// against a second of its time to first token. DecodeStallWeight prices the same for a prefill's chunks
// sharing the decode's steps: a request's uncached tokens, which every request active on the worker
// waits through, and the prefill it will decode beside. Both are scaled by Config.DecodeWeight
// (--router-decode-weight, 0 by default). Chosen by the fleet lab (docs/benchmarks.md): at weight 1 the
// inter-token latency is at most the best peer's in 95 of the standing's 132 cells instead of 35.
const (
	DecodeContextWeight = 0.25
	DecodeStallWeight   = 0.5
)

// SoleSharerWeight is the least price per token of a replica whose prefix one active request alone
// holds on its holder. That request is as likely the same conversation's previous turn, still running
// when the next one arrives (no one else will share its context: the copy is dead when it ends), as
// another user of a popular prefix; at the fleet's load, often under 0.5 requests in prefill per worker
// while a few holders queue seconds of work, such contexts moved for nothing. Chosen by the fleet lab
// (docs/benchmarks.md): the conversation trace on 32 workers at ×16 reaches 95–97 % of the pooled oracle
// over four seeds with 2 against 94–96 % with the load alone; 1 keeps most of the loss, 4 and more change
// the 8B profile's ×2 row in three seeds of four, and the credit for the spared wait stays untouched (a
// single sharer still earns it: without it the document workloads on the 8B profile lose 59 ms of TTFT
// p90 at ×8).
const SoleSharerWeight = 2

// CalibratedCost is the cost of sending a request to a worker, in prefill-token units: its expected TTFT
// there plus WorkWeight × its uncached tokens. Queued prefill tokens q, the request's uncached tokens u, the worker's active blocks with the request's own added
// (k), the KV capacity in blocks (0: unknown) and the block size.
func CalibratedCost(q, u, k float64, capacity uint64, blockSize int, gamma float64) float64 {
	return ExpectedTTFT(q, u, k, capacity, blockSize, gamma) + WorkWeight*u
}

// ExpectedTTFT is the request's own wait on a worker in prefill-token units: the queued prefill and its
// uncached tokens at the worker's speed, plus KV overflow charged as recomputation.
func ExpectedTTFT(q, u, k float64, capacity uint64, blockSize int, gamma float64) float64 {
	c := (q + u) * (1 + gamma*k)
	if capacity > 0 {
		if over := k - float64(int64(capacity)); over > 0 { // int64: one instruction; capacities fit
			c += over * float64(blockSize) * (1 + gamma*k)
		}
	}
	return c
}

// SharedCost is CalibratedCost when part of the request's prefix is live on its holder (the worker with
// the longest cached prefix has active requests sharing it). Copying a live prefix makes a replica, not
// a dead copy: the holder keeps serving it and the copy serves the sharers to come. Such a copy is priced
// at the fleet's load (load, at most WorkWeight: the mean requests in prefill per worker, the number an
// added unit of work delays in an M/M/1 queue), only the dead tokens (cached idle on the holder or still
// in its first prefill, this candidate lacking them) at WorkWeight, and saved (the wait and the decode
// batch's slowdown the copy spares the holder's next sharers) is credited; it can make the cost negative. With nothing live (dead = the whole duplicate, saved = 0) it ranks candidates exactly as
// CalibratedCost: the fresh tokens every candidate computes cost them all alike.
func SharedCost(q, u, dead, k float64, capacity uint64, blockSize int, gamma, load, saved float64) float64 {
	return ExpectedTTFT(q, u, k, capacity, blockSize, gamma) + load*u + (WorkWeight-load)*dead - saved
}

// Calibrator learns t(K) = α + β·K (seconds per prefill token against a worker's active blocks) from
// observations, by least squares with exponential forgetting, so the fit follows engines whose speed
// changes. Gamma is β/α, clamped to [0, MaxGamma]; until MinSamples observations with spread in K arrive
// it is the prior. Not safe for concurrent use (the scheduler machine owns it).
type Calibrator struct {
	// Forget is the weight an old observation keeps at each new one. Default 0.995 (a half-life of about
	// 140 observations: a few seconds to a minute of a busy fleet).
	Forget float64
	// Prior is γ before the fit is trusted. Default 1e-5 per block.
	Prior float64

	n                   int
	w, sx, sy, sxx, sxy float64
	gamma, alpha, beta  float64
}

// Calibrator limits.
const (
	MinSamples = 32
	MaxGamma   = 1e-2
)

// NewCalibrator returns a calibrator with the defaults.
func NewCalibrator() *Calibrator {
	return &Calibrator{Forget: 0.995, Prior: 1e-5, gamma: 1e-5}
}

// Observe records one prefill: perToken seconds per token of work (the request's own uncached tokens
// plus what was queued before it) on a worker that held blocks active blocks when the request was routed.
func (c *Calibrator) Observe(perToken, blocks float64) {
	if !(perToken > 0) || math.IsInf(perToken, 0) || blocks < 0 {
		return
	}
	f := c.Forget
	c.w, c.sx, c.sy = c.w*f+1, c.sx*f+blocks, c.sy*f+perToken
	c.sxx, c.sxy = c.sxx*f+blocks*blocks, c.sxy*f+blocks*perToken
	c.n++
	if c.n < MinSamples {
		return
	}
	mx, my := c.sx/c.w, c.sy/c.w
	vx := c.sxx/c.w - mx*mx
	if vx <= 1e-9*(1+mx*mx) {
		c.alpha, c.beta = my, 0
		return
	}
	c.beta = (c.sxy/c.w - mx*my) / vx
	c.alpha = my - c.beta*mx
	if c.alpha <= 0 {
		// All slowdown, no base rate: the fit is off; keep the last γ.
		return
	}
	c.gamma = min(max(c.beta/c.alpha, 0), MaxGamma)
}

// Gamma is the slowdown per active block.
func (c *Calibrator) Gamma() float64 {
	if c.n < MinSamples {
		return c.Prior
	}
	return c.gamma
}

// Fit reports the learned α (seconds per prefill token on an idle worker), β (extra seconds per token per
// active block), γ and the number of observations.
func (c *Calibrator) Fit() (alpha, beta, gamma float64, n int) {
	return c.alpha, c.beta, c.Gamma(), c.n
}

// DecodeFit learns a decode step's time per generated token against two things a worker does beside
// the request: the context it decodes (C, blocks read every step) and the prefill it runs (P, tokens per
// second, whose chunks share the decode's steps): t = a + b·C + c·P seconds per token, by least squares
// with exponential forgetting. Fitting P beside C keeps a worker's prefill out of b (on a busy fleet the
// workers decoding most also prefill most). Not safe for concurrent use.
type DecodeFit struct {
	// Forget is the weight an old observation keeps at each new one. Default 0.995.
	Forget float64

	n                                 int
	w, sx, sp, sy, sxx, spp, sxp, sxy float64
	spy                               float64
	a, b, c                           float64
}

// NewDecodeFit returns a fit with the defaults.
func NewDecodeFit() *DecodeFit { return &DecodeFit{Forget: 0.995} }

// Observe records one request's mean time per generated token against the context and the prefill
// rate its worker had beside it.
func (f *DecodeFit) Observe(perToken, ctx, prefill float64) {
	if !(perToken > 0) || math.IsInf(perToken, 0) || !(ctx >= 0) || !(prefill >= 0) || math.IsInf(ctx+prefill, 0) {
		return
	}
	g := f.Forget
	f.w, f.sx, f.sp, f.sy = f.w*g+1, f.sx*g+ctx, f.sp*g+prefill, f.sy*g+perToken
	f.sxx, f.spp, f.sxp = f.sxx*g+ctx*ctx, f.spp*g+prefill*prefill, f.sxp*g+ctx*prefill
	f.sxy, f.spy = f.sxy*g+ctx*perToken, f.spy*g+prefill*perToken
	f.n++
	if f.n < MinSamples {
		return
	}
	mx, mp, my := f.sx/f.w, f.sp/f.w, f.sy/f.w
	vxx, vpp, vxp := f.sxx/f.w-mx*mx, f.spp/f.w-mp*mp, f.sxp/f.w-mx*mp
	cxy, cpy := f.sxy/f.w-mx*my, f.spy/f.w-mp*my
	det := vxx*vpp - vxp*vxp
	switch {
	case vxx > 1e-9*(1+mx*mx) && det > 1e-9*vxx*vpp:
		f.b, f.c = (cxy*vpp-cpy*vxp)/det, (cpy*vxx-cxy*vxp)/det
	case vxx > 1e-9*(1+mx*mx):
		f.b, f.c = cxy/vxx, 0 // the prefill rate did not vary apart from the context
	default:
		f.b, f.c = 0, 0
	}
	f.b, f.c = max(f.b, 0), max(f.c, 0)
	f.a = my - f.b*mx - f.c*mp
}

// Fit reports a, b (seconds per token per context block), c (seconds per token per prefill token/s)
// and the observations so far; b and c are 0 until MinSamples observations.
func (f *DecodeFit) Fit() (a, b, c float64, n int) { return f.a, f.b, f.c, f.n }

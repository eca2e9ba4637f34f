package scoring

import "math"

// WorkerKey identifies one scheduling target: a worker instance and its data-parallel rank. Its layout
// matches prefix.WorkerKey, so the two convert with a plain type conversion.
type WorkerKey struct {
	WorkerID uint64
	DPRank   uint32
}

// Device is a worker's device class, for device-aware-weighted mode.
type Device uint8

// Device classes. The zero value is GPU because nearly every worker is one.
const (
	DeviceGPU Device = iota
	DeviceCPU
)

// Overlap is a candidate's matched prefix in blocks, per storage tier.
type Overlap struct {
	Device uint32 // device-tier overlap: the indexer score
	Host   uint32 // host-pinned tier
	Disk   uint32 // disk tier
	Shared uint32 // shared (hicache) tier, counted from the first block
}

// Load is a candidate's load projection (Dynamo WorkerLoadProjection), taken from the worker's published
// load snapshot plus the request's own projection.
type Load struct {
	// Known is false when the worker has no load snapshot yet; the cost then charges the ISL only.
	Known          bool
	ActiveRequests uint32
	// ActivePrefillTokens is the outstanding prefill charge in tokens.
	ActivePrefillTokens uint64
	// ActiveDecodeBlocks counts unique active blocks plus fractional output-block weights.
	ActiveDecodeBlocks float64
	// AdditionalBlocks is the request's blocks not already active on this worker (load.Tracker.Projection).
	AdditionalBlocks uint64
}

// Capacity is what a worker reports about itself; zero fields are unknown.
type Capacity struct {
	TotalKVBlocks       uint64
	KVUsedBlocks        uint64
	MaxNumBatchedTokens uint64
	KVUsedKnown         bool
}

// Candidate is one worker the request may go to, with everything the cost and the modes read.
type Candidate struct {
	Worker   WorkerKey
	Overlap  Overlap
	Load     Load
	Capacity Capacity
	Device   Device
	// InFlight is the worker's in-flight request count for the non-KV modes; when zero, Load.ActiveRequests
	// is used.
	InFlight uint32
}

func (c *Candidate) inflight() uint32 {
	if c.InFlight != 0 {
		return c.InFlight
	}
	return c.Load.ActiveRequests
}

// CostTerms breaks a logit into the terms of Dynamo's worker logit, for logs and return_routing.
type CostTerms struct {
	RawPrefillBlocks      float64
	Decay                 float64
	OverlapCreditBlocks   float64
	AdjustedPrefillBlocks float64
	DecodeBlocks          float64
	ActiveRequestCost     float64
	Logit                 float64
}

// costInputs are the request-wide values the per-candidate cost needs.
type costInputs struct {
	isl           float64
	bs            float64
	invBs         float64
	minPrefill    uint64 // min active prefill tokens over eligible workers (credit decay)
	requestBlocks float64
	trackPrefill  bool
	credit        float64
	decayRate     float64
	scale         float64
	hostW, diskW  float64
	sharedMult    float64
	sharedOn      bool
	requestWeight float64
	lmetric       bool
	decodeSpecial bool
}

// newCostInputs gathers the request-wide inputs; f says which candidates are eligible (it feeds the
// credit-decay minimum only; nil means all).
func newCostInputs(req *Request, cfg *Config, cands []Candidate, f *filter) costInputs {
	in := costInputs{
		isl:           float64(req.ISL),
		bs:            float64(cfg.BlockSize),
		trackPrefill:  cfg.TrackPrefillTokens,
		credit:        cfg.OverlapScoreCredit,
		decayRate:     cfg.OverlapScoreCreditDecay,
		scale:         cfg.PrefillLoadScale,
		hostW:         cfg.HostCacheHitWeight,
		diskW:         cfg.DiskCacheHitWeight,
		sharedMult:    cfg.SharedCacheMultiplier,
		sharedOn:      cfg.SharedCacheType == SharedCacheHiCache,
		requestWeight: cfg.DecodeActiveRequestWeight,
		lmetric:       cfg.SelectionPolicy == PolicyLMetric,
	}
	in.invBs = 1 / in.bs
	in.requestBlocks = in.isl / in.bs
	in.decodeSpecial = cfg.WorkerType == WorkerDecode && !cfg.TrackPrefillTokens && cfg.OverlapScoreCredit > 0
	if in.trackPrefill && in.decayRate > 0 {
		in.minPrefill = math.MaxUint64
		for i := range cands {
			if p := cands[i].Load.ActivePrefillTokens; p < in.minPrefill && (f == nil || f.ok(&cands[i])) {
				in.minPrefill = p
			}
		}
		if in.minPrefill == math.MaxUint64 {
			in.minPrefill = 0
		}
	}
	return in
}

func fmin(a, b float64) float64 {
	if a < b {
		return a
	}
	return b
}

func fmax(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

// logit is terms(c).Logit without the breakdown: the selection hot path (a few ns per candidate). Keep
// the two in step; TestLogitMatchesTerms checks them against each other.
func (in *costInputs) logit(c *Candidate) float64 {
	// Counts fit in int64, and int64 → float64 is one instruction where uint64 → float64 branches.
	dev := float64(int64(c.Overlap.Device))
	prefill := float64(int64(c.Load.ActivePrefillTokens))
	var raw float64
	if in.trackPrefill {
		raw = in.isl
		if c.Load.Known {
			cached := fmin(dev*in.bs, in.isl)
			raw = prefill + fmax(in.isl-cached, 0) + cached
		}
		raw *= in.invBs
	}
	credit := in.credit * dev
	if in.trackPrefill && in.decayRate > 0 && in.requestBlocks > 0 {
		excess := fmax(prefill-float64(int64(in.minPrefill)), 0) * in.invBs
		credit *= 1 / (1 + in.decayRate*excess/in.requestBlocks)
	}
	if o := c.Overlap; o.Host|o.Disk != 0 {
		credit += in.hostW*float64(int64(o.Host)) + in.diskW*float64(int64(o.Disk))
	}
	if in.sharedOn && c.Overlap.Shared > c.Overlap.Device {
		credit += in.sharedMult * float64(int64(c.Overlap.Shared-c.Overlap.Device))
	}
	adjusted := fmax(raw-credit, 0)
	decode := c.Load.ActiveDecodeBlocks + float64(int64(c.Load.AdditionalBlocks))
	reqCost := in.requestWeight * float64(int64(c.Load.ActiveRequests))
	switch {
	case in.decodeSpecial:
		return fmax(0, decode-credit) + reqCost
	case in.lmetric:
		return adjusted * (decode + 1)
	}
	return in.scale*adjusted + decode + reqCost
}

// terms computes the logit of one candidate exactly as Dynamo's worker_logit, with every term.
func (in *costInputs) terms(c *Candidate) CostTerms {
	var t CostTerms
	dev := float64(c.Overlap.Device)
	cached := math.Min(dev*in.bs, in.isl) // effective cached tokens, clipped to the ISL

	if in.trackPrefill {
		raw := in.isl
		if c.Load.Known {
			raw = float64(c.Load.ActivePrefillTokens) + math.Max(in.isl-cached, 0) + cached
		}
		t.RawPrefillBlocks = raw / in.bs
	}

	t.Decay = 1
	if in.trackPrefill && in.decayRate > 0 && in.requestBlocks > 0 {
		excess := math.Max(float64(c.Load.ActivePrefillTokens)-float64(in.minPrefill), 0) / in.bs
		t.Decay = 1 / (1 + in.decayRate*excess/in.requestBlocks)
	}

	t.OverlapCreditBlocks = in.credit * dev
	if t.Decay != 1 {
		t.OverlapCreditBlocks *= t.Decay
	}
	if o := c.Overlap; o.Host|o.Disk != 0 {
		t.OverlapCreditBlocks += in.hostW*float64(o.Host) + in.diskW*float64(o.Disk)
	}
	if in.sharedOn && c.Overlap.Shared > c.Overlap.Device {
		t.OverlapCreditBlocks += in.sharedMult * float64(c.Overlap.Shared-c.Overlap.Device)
	}

	t.AdjustedPrefillBlocks = math.Max(t.RawPrefillBlocks-t.OverlapCreditBlocks, 0)
	t.DecodeBlocks = c.Load.ActiveDecodeBlocks + float64(c.Load.AdditionalBlocks)
	t.ActiveRequestCost = in.requestWeight * float64(c.Load.ActiveRequests)

	switch {
	case in.decodeSpecial:
		t.Logit = math.Max(0, t.DecodeBlocks-t.OverlapCreditBlocks) + t.ActiveRequestCost
	case in.lmetric:
		t.Logit = t.AdjustedPrefillBlocks * (t.DecodeBlocks + 1)
	default:
		t.Logit = in.scale*t.AdjustedPrefillBlocks + t.DecodeBlocks + t.ActiveRequestCost
	}
	return t
}

// Cost returns the cost terms of every candidate for req under cfg, without busy filtering or selection:
// the "Formula for worker" view Dynamo logs, for logs and debugging.
func Cost(req Request, cands []Candidate, cfg *Config) []CostTerms {
	in := newCostInputs(&req, cfg, cands, nil)
	out := make([]CostTerms, len(cands))
	for i := range cands {
		out[i] = in.terms(&cands[i])
	}
	return out
}

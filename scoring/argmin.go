package scoring

// Argmin is Select for the common case, as one pass: kv mode at temperature 0, no per-request
// override, no pin, no cost report, no credit decay. The caller offers the candidates one at a time, in
// order, instead of building a slice for Select to read once: a router with hundreds of workers saves
// writing and re-reading some 100 bytes per worker per decision. The decision, errors and random
// tie-breaks are Select's for the same candidates in the same order (TestArgminMatchesSelect).
type Argmin struct {
	in        costInputs
	f         filter
	rng       RNG
	bs        int
	isl       int
	n         int // candidates offered
	eligible  int
	best      int
	bestLogit float64
	bestOver  uint32
	// tied lists Offer's candidates at bestLogit (index<<32 | overlap, in offer order), in the caller's
	// buffer (Ties).
	tied []uint64
	// pf is 1 when prefill tokens are tracked, else 0, and islPf is ISL × pf: OfferLoads' prefill blocks
	// without a branch. loadOnly says OfferLoads may be used (the linear policy).
	pf, islPf float64
	loadOnly  bool
}

// NewArgmin returns an Argmin for req under cfg, or false when the request or configuration needs
// Select (another mode, temperature, override, pin, cost report, credit decay).
func NewArgmin(req *Request, cfg *Config, rng RNG) (Argmin, bool) {
	if cfg.Mode != ModeKV || cfg.Temperature != 0 || req.Override != nil || req.Pinned || req.ReturnCosts ||
		(cfg.TrackPrefillTokens && cfg.OverlapScoreCreditDecay > 0) {
		return Argmin{}, false
	}
	a := Argmin{in: newCostInputs(req, cfg, nil, nil), f: newFilter(req, cfg), rng: rng, bs: cfg.BlockSize,
		isl: req.ISL, best: -1}
	if a.in.trackPrefill {
		a.pf, a.islPf = 1, a.in.isl
	}
	a.loadOnly = !a.in.lmetric && !a.in.decodeSpecial
	return a, true
}

// Ties gives Offer a buffer for the candidates tied at the best cost (its length is ignored, its
// capacity reused) and returns the buffer Offer grew, for the caller to keep for the next decision.
func (a *Argmin) Ties(buf []uint64) []uint64 {
	old := a.tied
	a.tied = buf[:0]
	return old
}

// LoadOnly reports whether OfferLoads may be used: the linear policy.
func (a *Argmin) LoadOnly() bool { return a.loadOnly }

// LoadRow is what the cost reads of a candidate with a device-tier overlap only and a known load.
type LoadRow struct {
	Prefill    uint64  // Load.ActivePrefillTokens
	Decode     float64 // Load.ActiveDecodeBlocks
	Additional uint64  // Load.AdditionalBlocks
	Overlap    uint32  // Overlap.Device
	Requests   uint32  // Load.ActiveRequests
}

// Linear is the cost of a row: costInputs.logit for a candidate with a device-tier overlap only and a
// known load under the linear policy. With a known load the raw prefill is (prefill + ISL) / block size,
// as the clipped cached tokens cancel (exact: every term is an integer below 2^53), and zero when prefill
// is not tracked (pf = 0). The same operations in the same order give the same bits: a vector kernel
// that reads these constants (the scheduler's, eight rows at a time) does them unfused, in this order.
type Linear struct{ Pf, IslPf, InvBs, Credit, Scale, Weight float64 }

// Linear is the cost's constants for this request (LoadOnly).
func (a *Argmin) Linear() Linear {
	return Linear{a.pf, a.islPf, a.in.invBs, a.in.credit, a.in.scale, a.in.requestWeight}
}

// Cost is row r's cost.
func (k *Linear) Cost(r *LoadRow) float64 {
	raw := (float64(int64(r.Prefill))*k.Pf + k.IslPf) * k.InvBs
	adjusted := fmax(raw-k.Credit*float64(int64(r.Overlap)), 0)
	return k.Scale*adjusted + (r.Decode + float64(int64(r.Additional))) + k.Weight*float64(int64(r.Requests))
}

// OfferLoads offers rows as candidates 0…len(rows)−1, when LoadOnly and nothing was offered before: the
// decision, costs and tie-breaks of Offer, in a loop with the cost computed in place. caps[i] is row i's
// capacity, read only when ReadsCapacity (busy thresholds; nil otherwise). A tie at the best cost costs a
// second pass over the rows (it finds the drawn one), not a list of the tied.
func (a *Argmin) OfferLoads(rows []LoadRow, caps []Capacity) {
	a.n += len(rows)
	k := a.Linear()
	busy := a.f.anyBusy
	if busy {
		caps = caps[:len(rows)]
	}
	best, bestLogit, ties, eligible := a.best, a.bestLogit, 0, 0
	for i := range rows {
		if busy && a.f.busyLoad(rows[i].Decode, rows[i].Prefill, &caps[i]) {
			continue
		}
		eligible++
		l := k.Cost(&rows[i])
		switch {
		case l < bestLogit || best < 0:
			best, bestLogit, ties = i, l, 1
		case l == bestLogit:
			ties++
		}
	}
	if ties > 1 {
		r := a.rng.IntN(ties)
		for i := range rows {
			if busy && a.f.busyLoad(rows[i].Decode, rows[i].Prefill, &caps[i]) {
				continue
			}
			if k.Cost(&rows[i]) == bestLogit {
				if r == 0 {
					best = i
					break
				}
				r--
			}
		}
	}
	a.best, a.bestLogit, a.eligible = best, bestLogit, a.eligible+eligible
	if best >= 0 {
		a.bestOver = rows[best].Overlap
	}
}

// OfferTied records n candidates as offered, eligible of them (> 0) not busy, when LoadOnly and nothing
// was offered before, by their least cost among the eligible, computed elsewhere (Linear): tied are the
// candidates at that cost in order (at least one) and overlap their overlaps by candidate index. One is
// drawn as OfferLoads draws, so the decision is OfferLoads' for the same rows.
func (a *Argmin) OfferTied(n, eligible int, cost float64, tied []uint64, overlap []uint32) {
	best := int(tied[0])
	if len(tied) > 1 {
		best = int(tied[a.rng.IntN(len(tied))])
	}
	a.n, a.eligible = a.n+n, a.eligible+eligible
	a.best, a.bestLogit, a.bestOver = best, cost, overlap[best]
}

// ReadsCapacity reports whether Offer reads the candidates' Capacity (busy thresholds are set); Offer
// never reads Worker, Device or InFlight.
func (a *Argmin) ReadsCapacity() bool { return a.f.anyBusy }

// Offer considers candidate i (its position among the offered candidates, counted from 0).
func (a *Argmin) Offer(i int, c *Candidate) {
	a.n++
	if a.f.anyBusy && a.f.busy(c) {
		return
	}
	a.eligible++
	l := a.in.logit(c)
	e := uint64(i)<<32 | uint64(c.Overlap.Device)
	switch {
	case a.best < 0 || l < a.bestLogit:
		a.best, a.bestLogit, a.bestOver = i, l, c.Overlap.Device
		a.tied = append(a.tied[:0], e)
	case l == a.bestLogit:
		a.tied = append(a.tied, e)
	}
}

// Decision returns the chosen candidate, with Select's errors when there is none; Worker is left for
// the caller, who knows candidate Index. Offered candidates tied at the best cost are drawn from here,
// uniformly, with one draw.
func (a *Argmin) Decision() (Decision, error) {
	switch {
	case a.n == 0:
		return Decision{}, ErrNoWorkers
	case a.eligible == 0:
		return Decision{}, ErrAllBusy
	}
	if len(a.tied) > 1 {
		e := a.tied[a.rng.IntN(len(a.tied))]
		a.best, a.bestOver = int(e>>32), uint32(e)
		a.tied = append(a.tied[:0], e) // drawn: a second Decision returns the same
	}
	return Decision{Index: a.best, Cost: a.bestLogit, Overlap: a.bestOver,
		CachedTokens: cachedTokens(a.isl, a.bestOver, a.bs)}, nil
}

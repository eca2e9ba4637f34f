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
	ties      int
}

// NewArgmin returns an Argmin for req under cfg, or false when the request or configuration needs
// Select (another mode, temperature, override, pin, cost report, credit decay).
func NewArgmin(req *Request, cfg *Config, rng RNG) (Argmin, bool) {
	if cfg.Mode != ModeKV || cfg.Temperature != 0 || req.Override != nil || req.Pinned || req.ReturnCosts ||
		(cfg.TrackPrefillTokens && cfg.OverlapScoreCreditDecay > 0) {
		return Argmin{}, false
	}
	return Argmin{in: newCostInputs(req, cfg, nil, nil), f: newFilter(req, cfg), rng: rng, bs: cfg.BlockSize,
		isl: req.ISL, best: -1}, true
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
	switch {
	case a.best < 0 || l < a.bestLogit:
		a.best, a.bestLogit, a.bestOver, a.ties = i, l, c.Overlap.Device, 1
	case l == a.bestLogit:
		a.ties++
		if a.rng.IntN(a.ties) == 0 {
			a.best, a.bestOver = i, c.Overlap.Device
		}
	}
}

// Decision returns the chosen candidate, with Select's errors when there is none; Worker is left for
// the caller, who knows candidate Index.
func (a *Argmin) Decision() (Decision, error) {
	switch {
	case a.n == 0:
		return Decision{}, ErrNoWorkers
	case a.eligible == 0:
		return Decision{}, ErrAllBusy
	}
	return Decision{Index: a.best, Cost: a.bestLogit, Overlap: a.bestOver,
		CachedTokens: cachedTokens(a.isl, a.bestOver, a.bs)}, nil
}

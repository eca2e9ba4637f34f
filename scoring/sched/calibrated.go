package sched

import (
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// calObs is what the machine remembers of a routed request to learn from its first token: when it was
// charged, the prefill work ahead of and in it (tokens), and the worker's active blocks then.
type calObs struct {
	at     int64
	work   float64
	blocks float64
}

// useCalibrated reports whether a kv-mode decision takes the kvroute cost (scoring.CalibratedCost).
func (m *Machine) useCalibrated(req *Request) bool {
	c := m.cfg
	return c.Preset == scoring.PresetKVRoute && c.Mode == scoring.ModeKV && c.Temperature == 0 &&
		req.Override == nil && m.selector == nil
}

// calibrated picks the target with the least expected time to first token (scoring.CalibratedCost),
// ties to the one with fewer active blocks, then at random. Pins, exclusions, health and busy thresholds
// filter as in Select, with its errors.
func (m *Machine) calibrated(sreq *scoring.Request, scores []prefix.Score, chain []uint64, isl int, reuse bool,
	exclude []uint64) (*target, scoring.Decision, error) {
	cfg := m.cfg
	bs := cfg.BlockSize
	ov := m.overlaps(scores)
	var host, disk []uint32
	if tieredScores(scores) {
		host, disk = m.tierOverlaps(scores)
	}
	gamma := m.cal.Gamma()
	busyCheck := cfg.ActiveDecodeBlocksThreshold.Set || cfg.ActivePrefillTokensThreshold.Set || cfg.ActivePrefillTokensThresholdFrac.Set
	filter := m.filtering(exclude)
	fisl := float64(isl)
	var (
		c                        scoring.Candidate
		best                     = -1
		bestCost, bestK          float64
		allowed, eligible, offer int
		tied                     = m.sc.ties[:0]
	)
	costs := sreq.CostsBuf[:0]
	q0 := 1.0
	if !cfg.TrackPrefillTokens {
		q0 = 0
	}
	fbs := float64(bs)
	nchain := float64(len(chain))
	for i := range m.lines {
		if filter && m.skip(i, exclude) {
			continue
		}
		offer++
		tm := &m.tmpl[i]
		if sreq.Pinned && !pinMatches(tm.worker, &sreq.Pin, sreq.PinRank) {
			continue
		}
		allowed++
		l := &m.lines[i]
		if busyCheck {
			if m.busyAt(i, &c) {
				if sreq.ReturnCosts {
					costs = append(costs, scoring.CandidateCost{Worker: tm.worker, Overlap: ov[i], Busy: true})
				}
				continue
			}
		}
		eligible++
		// Plain comparisons and signed conversions: the builtin float min/max carry NaN and signed-zero
		// branches, and uint64 → float64 is a branchy sequence on amd64; neither is needed here.
		cached := float64(ov[i]) * fbs
		if host != nil {
			cached += (cfg.HostCacheHitWeight*float64(host[i]) + cfg.DiskCacheHitWeight*float64(disk[i])) * fbs
		}
		u := 0.0
		if cached < fisl {
			u = fisl - cached
		}
		add := nchain
		if l.active != 0 && reuse && nchain != 0 {
			add = float64(int64(m.list[i].t.Projection(chain, true)))
		}
		k := l.decode + add
		cost := scoring.CalibratedCost(q0*float64(int64(l.prefill)), u, k, tm.totalKV, bs, gamma)
		if sreq.ReturnCosts {
			costs = append(costs, scoring.CandidateCost{Worker: tm.worker, Overlap: ov[i], Cost: cost})
		}
		if best >= 0 && cost > bestCost {
			continue
		}
		switch {
		case best < 0 || cost < bestCost || k < bestK:
			best, bestCost, bestK = i, cost, k
			tied = append(tied[:0], uint64(i))
		case k == bestK:
			tied = append(tied, uint64(i))
		}
	}
	if len(tied) > 1 {
		// One draw among the tied (an idle fleet and a new prompt tie everywhere).
		best = int(tied[m.rng.IntN(len(tied))])
	}
	m.sc.ties = tied
	m.sc.chosenK = bestK
	switch {
	case offer == 0:
		return nil, scoring.Decision{}, scoring.ErrNoWorkers
	case allowed == 0 && sreq.Pinned:
		return nil, scoring.Decision{}, scoring.ErrPinnedNotFound
	case eligible == 0 && sreq.Pinned:
		return nil, scoring.Decision{}, scoring.ErrPinnedBusy
	case eligible == 0:
		return nil, scoring.Decision{}, scoring.ErrAllBusy
	}
	t := m.list[best]
	d := scoring.Decision{Worker: t.key, Index: best, Cost: bestCost, Overlap: ov[best],
		CachedTokens: min(int(ov[best])*bs, isl)}
	if sreq.ReturnCosts {
		d.Costs = costs
	}
	return t, d, nil
}

// tierOverlaps scatters the host and disk overlaps into slices by target index.
func (m *Machine) tierOverlaps(scores []prefix.Score) (host, disk []uint32) {
	n := len(m.list)
	host = make([]uint32, n)
	disk = make([]uint32, n)
	for _, sco := range scores {
		if i, ok := m.pos.find(scoring.WorkerKey(sco.Worker)); ok {
			host[i], disk[i] = sco.Host, sco.Disk
		}
	}
	return host, disk
}

// observeRouted remembers a calibrated decision for calibration: the work ahead of and in the request and the
// worker's active blocks, before the charge.
func (m *Machine) observeRouted(now time.Time, id string, t *target, isl int, overlap uint32) {
	if !m.sc.calibrated {
		return
	}
	l := &m.lines[t.i]
	u := max(isl-int(overlap)*m.cfg.BlockSize, 0)
	m.obs[id] = calObs{at: now.UnixNano(), work: float64(l.prefill) + float64(u), blocks: m.sc.chosenK}
}

// observeFirstToken learns from a request's prefill completion.
func (m *Machine) observeFirstToken(now time.Time, id string) {
	o, ok := m.obs[id]
	if !ok {
		return
	}
	delete(m.obs, id)
	if o.work >= 1 {
		m.cal.Observe(float64(now.UnixNano()-o.at)/1e9/o.work, o.blocks)
	}
}

// Calibration reports the calibrated cost's learned fit: α seconds per prefill token on an idle
// worker, β extra seconds per token per active block, γ = β/α in use, and the observations so far.
func (m *Machine) Calibration() (alpha, beta, gamma float64, n int) { return m.cal.Fit() }

// pinMatches reports whether worker rank k satisfies a pin (any rank of the pinned worker unless rank).
func pinMatches(k scoring.WorkerKey, pin *scoring.WorkerKey, rank bool) bool {
	return k.WorkerID == pin.WorkerID && (!rank || k.DPRank == pin.DPRank)
}

// busyAt reports whether target i is over a busy threshold (scoring.Busy over its load and capacity);
// c is the caller's scratch and keeps target i's load and capacity.
func (m *Machine) busyAt(i int, c *scoring.Candidate) bool {
	l := &m.lines[i]
	c.Load = scoring.Load{Known: true, ActivePrefillTokens: l.prefill, ActiveDecodeBlocks: l.decode, ActiveRequests: l.active}
	m.capacity(&c.Capacity, i)
	return scoring.Busy(c, m.cfg)
}

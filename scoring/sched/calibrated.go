package sched

import (
	"encoding/binary"
	"math"
	"slices"
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

// holding is what a decision knows of the request's prefix on its holder, the worker with the longest
// overlap: cached tokens there, how many of them active requests there share (live) and how many of
// those the engines have reported (settled: not only predicted), the sharers still in prefill (an
// estimate) and the holder's queued prefill; sole: one active request holds all of live.
type holding struct {
	cached, live, settled, sharers, queued float64
	active                                 int // active requests sharing live
	sole                                   bool
}

// hold finds the request's holder among scores (primary: the engines' report alone) and what its active
// requests share of the prompt. The sharers in prefill are the sharers times the holder's share of
// active requests in prefill (the load tracker counts requests per chain, not per state). grouped: the
// overlaps came in groups (overlaps has them, with what predictions raised in m.sc.raised).
func (m *Machine) hold(scores, primary []prefix.Score, grouped, tiered bool, chain []uint64, isl int, reuse bool) holding {
	var h holding
	var best float64
	i := m.sc.most // overlaps' pick: the largest device overlap
	if tiered {
		// Lower tiers count at their weights, as in the cost.
		hw, dw := m.cfg.HostCacheHitWeight, m.cfg.DiskCacheHitWeight
		var who prefix.WorkerKey
		for _, sc := range scores {
			if b := float64(sc.Blocks) + hw*float64(sc.Host) + dw*float64(sc.Disk); b > best {
				best, who = b, sc.Worker
			}
		}
		var ok bool
		if i, ok = m.pos.find(scoring.WorkerKey(who)); !ok {
			return h
		}
	} else if i >= 0 {
		best = float64(m.sc.ov[i])
	}
	if best == 0 {
		return h
	}
	who := prefix.WorkerKey(m.list[i].key)
	bs := float64(m.cfg.BlockSize)
	h.cached = min(best*bs, float64(isl))
	l := &m.lines[i]
	if l.active == 0 || !reuse || len(chain) == 0 {
		return h
	}
	blocks, n := m.list[i].t.Sharing(chain)
	h.live = min(float64(blocks)*bs, h.cached)
	if h.live == 0 {
		return h
	}
	h.sole, h.active = n == 1, n
	// The holder's score in the engines' report: where overlaps found it (a merge of predictions keeps
	// primary's scores in their places and appends the workers primary lacks), else a search.
	if grouped {
		settled := best // the holder's overlap in the engines' report: overlaps kept it if a prediction raised it
		for _, r := range m.sc.raised {
			if r.target == i {
				settled = float64(r.primary)
			}
		}
		h.settled = min(settled*bs, h.live)
	} else {
		j := m.sc.mostAt
		if tiered || i != m.sc.most || j < 0 || j >= len(primary) || primary[j].Worker != who {
			j = slices.IndexFunc(primary, func(sc prefix.Score) bool { return sc.Worker == who })
		}
		if j >= 0 {
			h.settled = min(float64(primary[j].Blocks)*bs, h.live)
		}
	}
	h.sharers = float64(n) * float64(l.prefilling) / float64(l.active)
	h.queued = float64(int64(l.prefill))
	return h
}

// calibrated picks the target with the least expected time to first token plus what its recomputation
// costs the fleet (scoring.SharedCost), ties to the one with fewer active blocks, then at random. Pins,
// exclusions, health and busy thresholds filter as in Select, with its errors.
//
// What a copy of the prefix costs depends on its holder. A prefix the holder's active requests share
// and the engines have reported (a system prompt, a popular document) copied elsewhere is a replica:
// priced at the fleet's load (at least scoring.SoleSharerWeight when one request alone shares it: a
// conversation's previous turn, still running), and credited with the wait it spares the holder's next sharers — by
// Little's law as many arrive while the holder's queue drains as wait in it now, and each saves on
// average half the difference between the queue at the best copy that exists and this worker's — and
// with the slowdown its decode batch puts on their prefill (below, where it is computed). The
// rest of the holder's prefix copied elsewhere is a dead copy, WorkWeight per token: cached idle there
// (a conversation's last turn, which moves), or still in its first prefill (best-of-N copies, which
// ride on that prefill and spare nobody a wait).
func (m *Machine) calibrated(sreq *scoring.Request, src overlap, primary []prefix.Score, tiered bool, chain []uint64, isl int,
	reuse bool, av avoid) (*target, scoring.Decision, error) {
	cfg := m.cfg
	bs := cfg.BlockSize
	ov := m.overlaps(src)
	var host, disk []uint32
	if tiered {
		host, disk = m.tierOverlaps(src.scores) // tiered overlaps are never grouped (choose)
	}
	gamma := m.cal.Gamma()
	h := m.hold(src.scores, primary, src.grouped != nil, tiered, chain, isl, reuse)
	if !cfg.TrackPrefillTokens {
		h.sharers = 0 // no queued prefill to spare anyone
	}
	// The slowdown a copy spares the sharers: a sharer's own f tokens prefill at (1 + γ·K) on a worker
	// of K active blocks, and by Little's law as many sharers arrive during one residence (every step of
	// which the decode batch slows) as are active now, each saving on average half the difference between
	// the best copy's K and a candidate's. Only for a settled prefix that two or more active requests
	// share and that is at least as long as f: a prefix shorter than what its sharers add to it (a system
	// prompt under long conversations) is not what brings them to a worker, their own contexts are.
	f := max(float64(isl)-h.cached, 0)
	slow := h.active >= 2 && f > 0 && h.settled >= f && gamma > 0
	slowPer, slowK := 0.0, -1.0 // a candidate of k < slowK active blocks is credited slowPer·(slowK − k)
	if h.sharers > 0 || slow {
		// The copy saves the sharers the wait at the best copy that exists, not only at the holder.
		need := uint32((h.settled + float64(bs) - 1) / float64(bs))
		queue, blocks := m.bestCopy(src.scores, src.grouped != nil, ov, need)
		if h.sharers > 0 {
			h.queued = min(h.queued, float64(int64(queue)))
		}
		if slow {
			slowPer = float64(h.active) * f * gamma / 2
			slowK = blocks + f/float64(bs)
		}
	}
	load := 0.0
	if n := len(m.lines); n > 0 {
		load = min(float64(m.prefilling)/float64(n), scoring.WorkWeight)
	}
	if h.sole {
		load = max(load, scoring.SoleSharerWeight)
	}
	mask, visit, offer, allowed, eligible := m.eligibility(sreq, av)
	// The holder's head in progress: its charge drained for the costs alone (drain.go), put back after.
	drainAt, drained := -1, uint64(0)
	if cfg.TrackPrefillTokens {
		drainAt, drained = m.drainHolder(ov, &h, f, tiered)
		if drained > 0 {
			m.lines[drainAt].prefill -= drained
		}
	}
	var (
		best            = -1
		bestCost, bestK float64
		tied            = m.sc.ties[:0]
		costs           = sreq.CostsBuf[:0]
		returnCosts     = sreq.ReturnCosts
		// topOnly: the caller keeps the cheapest workers' rows alone, so only candidates that can be
		// among them get a row (at 8,192 workers a row per candidate made a decision ten times slower).
		topOnly = returnCosts && sreq.CostsTop > 0
		top     topCosts
	)
	if topOnly {
		top, returnCosts = newTopCosts(sreq.CostsTop, costs), false
	}
	// The request's constants in locals: the loop below is the decision's only O(fleet) part, and
	// fields read through m, cfg or h are reloaded on every candidate.
	var (
		fisl, fbs, nchain = float64(isl), float64(bs), float64(len(chain))
		hw, dw            = cfg.HostCacheHitWeight, cfg.DiskCacheHitWeight
		hCached, hSettled = h.cached, h.settled
		sharers, queued   = h.sharers, h.queued
		credit            = h.sharers > 0 || slowK >= 0 // a replica here spares the sharers a wait
		q0                = 1.0
		lines             = m.lines
		tmpl              = m.tmpl[:len(lines)]
	)
	ov = ov[:len(lines)]
	if !cfg.TrackPrefillTokens {
		q0 = 0
	}
	// Evictions are charged only while some eligible worker has room for the request (room.go): nil, or
	// each target's charge.
	evict := m.evictions(mask, ov, fisl, fbs, q0)
	// The decode the request adds where it goes (decode.go), with the evictions' charges.
	evict = m.decodeCharges(evict, ov, fisl, fbs)
	// The common case (no lower tiers, targets filtered or not) on a CPU with AVX-512 takes the vector
	// kernel (vectorCosts: the same operations eight candidates at a time) and the vector argmin over
	// its arrays (vectorArgmin: least cost, then least k, the ties in order), the filtered targets'
	// costs and k made +Inf; the scalar loop after it is the reference and does the rest, and the
	// decisions that name their few targets (visit).
	scalar := lines
	if haveCostKernel && host == nil && visit == nil && (mask == nil || eligible > 0) {
		a := costArgs{fbs: fbs, fisl: fisl, nchain: nchain, q0: q0, hCached: hCached, hSettled: hSettled,
			creditBelow: math.Inf(-1), sharers: sharers, queued: queued, slowPer: slowPer, slowK: slowK,
			gamma: gamma, load: load, wwl: scoring.WorkWeight - load}
		if credit {
			a.creditBelow = hSettled
		}
		cost, ks := m.vectorCosts(&a, ov, chain, reuse && nchain != 0)
		for i, e := range evict {
			cost[i] += e
		}
		if mask != nil {
			// Targets left out or busy lose to every eligible one, even to an infinite cost (on k). A
			// mask used to send every decision to the scalar loop: with one unhealthy worker in the
			// fleet, or one excluded, a decision at 8,192 workers took 167–185 µs instead of 21 µs
			// (BenchmarkRouteOneUnhealthy).
			notEligible(mask, func(i int) { cost[i], ks[i] = math.Inf(1), math.Inf(1) })
		}
		switch {
		case returnCosts:
			for i, c := range cost {
				if mask != nil && mask[i] != candEligible {
					if mask[i] == candBusy {
						costs = append(costs, scoring.CandidateCost{Worker: tmpl[i].worker, Overlap: ov[i], Busy: true})
					}
					continue
				}
				costs = append(costs, scoring.CandidateCost{Worker: tmpl[i].worker, Overlap: ov[i], Cost: c})
			}
		case topOnly:
			for i, c := range cost {
				if top.worth(c) && (mask == nil || mask[i] == candEligible) {
					top.offer(scoring.CandidateCost{Worker: tmpl[i].worker, Overlap: ov[i], Cost: c})
				}
			}
		}
		var ok bool
		if len(cost) > 0 {
			tied, ok = vectorArgmin(cost, ks, tied)
		}
		if ok {
			best = int(tied[0])
			bestCost, bestK = cost[best], ks[best]
			cost = nil // decided
		}
		for i, cost := range cost { // NaN costs: the scalar loop's comparisons
			if best >= 0 && cost > bestCost || mask != nil && mask[i] != candEligible {
				continue
			}
			switch k := ks[i]; {
			case best < 0 || cost < bestCost || k < bestK:
				best, bestCost, bestK = i, cost, k
				tied = append(tied[:0], uint64(i))
			case k == bestK:
				tied = append(tied, uint64(i))
			}
		}
		scalar = nil
	}
	last := len(scalar)
	if visit != nil { // only these targets can be chosen (a pin, a short only list): in target order
		last = len(visit)
	}
	for k := range last {
		i := k
		if visit != nil {
			i = int(visit[k])
		}
		if mask != nil && mask[i] != candEligible {
			if mask[i] == candBusy && returnCosts {
				costs = append(costs, scoring.CandidateCost{Worker: tmpl[i].worker, Overlap: ov[i], Busy: true})
			}
			continue
		}
		l := &lines[i]
		// Plain comparisons and signed conversions: the builtin float min/max carry NaN and signed-zero
		// branches, and uint64 → float64 is a branchy sequence on amd64; neither is needed here.
		cached := float64(ov[i]) * fbs
		if host != nil {
			cached += (hw*float64(host[i]) + dw*float64(disk[i])) * fbs
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
		q := q0 * float64(int64(l.prefill))
		// The holder's prefix this worker lacks, beyond what is settled and live (plain comparisons, as
		// above: no NaN can reach them).
		held := hSettled
		if cached > held {
			held = cached
		}
		dead, saved := hCached-held, 0.0
		if dead < 0 {
			dead = 0
		}
		if credit && cached < hSettled {
			if queued > q {
				saved = sharers * (queued - q) / 2 // 0 without sharers in prefill
			}
			if k < slowK {
				saved += slowPer * (slowK - k)
			}
		}
		cost := scoring.SharedCost(q, u, dead, k, tmpl[i].totalKV, bs, gamma, load, saved)
		if evict != nil {
			cost += evict[i]
		}
		if returnCosts {
			costs = append(costs, scoring.CandidateCost{Worker: tmpl[i].worker, Overlap: ov[i], Cost: cost})
		} else if topOnly && top.worth(cost) {
			top.offer(scoring.CandidateCost{Worker: tmpl[i].worker, Overlap: ov[i], Cost: cost})
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
	if drained > 0 {
		m.lines[drainAt].prefill += drained
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
	switch {
	case topOnly:
		d.Costs = top.rows
	case returnCosts:
		d.Costs = costs
	}
	return t, d, nil
}

// A candidate's standing in eligibility's mask.
const (
	candLeftOut  uint8 = iota // excluded, unhealthy or not the pinned worker: not offered
	candEligible              // costed
	candBusy                  // over a busy threshold: in the returned costs as busy, not costed
)

// eligibility filters the targets as Select does (exclusions and health, the pin, busy thresholds) into
// a mask by target index, with the counts its errors need: offered (not excluded; only whether it is
// 0 is exact), allowed (and matching the pin) and eligible (and not busy). The mask is nil when nothing
// filters, the common case, so the cost loop runs without it; visit, when not nil, lists the only
// targets the cost loop needs to read.
func (m *Machine) eligibility(sreq *scoring.Request, av avoid) (mask []uint8, visit []int32, offer, allowed, eligible int) {
	cfg := m.cfg
	busyCheck := busyThresholds(cfg)
	filter := m.filtering(av)
	n := len(m.lines)
	if !filter && !sreq.Pinned && (!busyCheck || shortVisits && m.overN == 0) {
		return nil, nil, n, n, n
	}
	mask = slices.Grow(m.sc.mask[:0], n)[:n]
	m.sc.mask = mask
	// A pinned request, or one limited to a few workers, can only go to their targets: they alone are
	// classified and costed (visit, in target order). With a pass over the fleet a pinned decision at
	// 8,192 workers took 55–72 µs, four times an unpinned one; 1.6–2.5 µs now (BenchmarkRouteSubset).
	var some []uint64
	switch {
	case !shortVisits:
	case sreq.Pinned:
		some = []uint64{sreq.Pin.WorkerID}
	case len(av.only) > 0 && len(av.only) <= n/shortOnly:
		some = av.only
	}
	if some != nil {
		if visit, allowed, eligible = m.visitSome(mask, some, sreq, av, filter, busyCheck); allowed > 0 {
			return mask, visit, allowed, allowed, eligible // offer counts only whether it is 0
		}
		// Nothing to cost: the full pass below tells "no worker" from "not the pinned one".
		allowed, eligible = 0, 0
	}
	if shortVisits && !sreq.Pinned {
		offer = m.markAvoided(mask, av)
		eligible = offer
		if busyCheck {
			eligible -= m.markBusy(mask) // the busy marks (busy.go), not a question to each target
		}
		return mask, nil, offer, offer, eligible
	}
	// Every target: standingOf written out, as a call a target made a decision excluding half of 8,192
	// workers 10–20 % slower (BenchmarkRouteSubset).
	var c scoring.Candidate
	for i := range mask {
		mask[i] = candLeftOut
		if filter && m.skip(i, av) {
			continue
		}
		offer++
		if sreq.Pinned && !pinMatches(m.tmpl[i].worker, &sreq.Pin, sreq.PinRank) {
			continue
		}
		allowed++
		if busyCheck && m.busyAt(i, &c) {
			mask[i] = candBusy
			continue
		}
		eligible++
		mask[i] = candEligible
	}
	return mask, nil, offer, allowed, eligible
}

// visitSome classifies the targets of the workers some names alone into mask (the rest left out), and
// returns those it can cost or report busy, in target order, with the counts.
func (m *Machine) visitSome(mask []uint8, some []uint64, sreq *scoring.Request, av avoid, filter, busyCheck bool) (visit []int32, allowed, eligible int) {
	for i := range mask {
		mask[i] = candLeftOut
	}
	var c scoring.Candidate
	visit = m.sc.visit[:0]
	for _, id := range some {
		from, to := m.ranks(id)
		for i := from; i < to; i++ {
			if mask[i] != candLeftOut { // an id listed twice
				continue
			}
			switch st := m.standingOf(i, sreq, av, filter, busyCheck, &c); st {
			case costed:
				eligible++
				fallthrough
			case pinned:
				allowed++
				mask[i] = st.mask()
				visit = append(visit, int32(i))
			}
		}
	}
	slices.Sort(visit)
	m.sc.visit = visit
	return visit, allowed, eligible
}

// markLeftOut fills mask for a decision whose only filters are the unhealthy targets and a few excluded
// workers: every target eligible but those, marked from their lists, and returns how many are left. A
// pass classifying every target made a decision with one unhealthy worker in a fleet of 8,192 take 110
// µs instead of 18 (BenchmarkRouteOneUnhealthy).
func (m *Machine) markLeftOut(mask []uint8, exclude []uint64) (eligible int) {
	fillEligible(mask)
	eligible = len(mask)
	m.eachLeftOut(exclude, func(i int) {
		mask[i] = candLeftOut
		eligible--
	})
	return eligible
}

// eachLeftOut calls f once for every target the unhealthy workers or exclude (a short list) leave out,
// from their lists: the unhealthy targets, then the excluded workers' healthy ones, a worker listed
// twice once.
func (m *Machine) eachLeftOut(exclude []uint64, f func(i int)) {
	for t := range m.sick {
		f(t.i)
	}
	for j, id := range exclude {
		if slices.Contains(exclude[:j], id) {
			continue
		}
		from, to := m.ranks(id)
		for i := from; i < to; i++ {
			if m.list[i].healthy {
				f(i)
			}
		}
	}
}

// allEligible is eight candEligible bytes read as a word.
const allEligible = 0x0101010101010101 * uint64(candEligible)

// notEligible calls f for every position of mask that is not candEligible, in order, reading mask eight
// bytes at a time: a fleet's mask is nearly all eligible (one unhealthy worker, a retry's exclusion),
// and a byte loop over a mask of 8,192 targets took 8-10 us of a 30 us decision
// (BenchmarkRouteOneUnhealthy).
func notEligible(mask []uint8, f func(i int)) {
	w := 0
	for ; w+8 <= len(mask); w += 8 {
		if binary.LittleEndian.Uint64(mask[w:]) == allEligible {
			continue
		}
		for i := w; i < w+8; i++ {
			if mask[i] != candEligible {
				f(i)
			}
		}
	}
	for i := w; i < len(mask); i++ {
		if mask[i] != candEligible {
			f(i)
		}
	}
}

// fillEligible sets every byte of mask to candEligible by doubling copies (memmove), not a byte loop.
func fillEligible(mask []uint8) {
	if len(mask) == 0 {
		return
	}
	mask[0] = candEligible
	for n := 1; n < len(mask); n *= 2 {
		copy(mask[n:], mask[:n])
	}
}

// markAvoided fills mask with every target eligible but those av or their health leave out, and returns
// how many are left: from the lists (markLeftOut) when they are short, else from the bitmap of the
// positions av leaves out (excluded), a word of 64 targets at a time. Asking each target (skip) made a
// decision excluding half of 8,192 workers take 107-127 us; 64-82 us now (BenchmarkRouteExcluding),
// most of it building the bitmap from the list.
func (m *Machine) markAvoided(mask []uint8, av avoid) (eligible int) {
	if len(av.only) == 0 && len(av.exclude) <= shortExclude {
		return m.markLeftOut(mask, av.exclude)
	}
	eligible = m.markLeftOut(mask, nil)
	eachBit(m.excluded(av), len(mask), func(i int) {
		if mask[i] == candEligible {
			mask[i] = candLeftOut
			eligible--
		}
	})
	return eligible
}

// standing is how far a target gets in eligibility: left out (excluded, unhealthy), offered, pinned
// (offered and the request's pin, if any, matches), costed (pinned and not busy).
type standing uint8

const (
	notOffered standing = iota
	offered
	pinned
	costed
)

// mask is the standing's entry in eligibility's mask.
func (st standing) mask() uint8 {
	switch st {
	case costed:
		return candEligible
	case pinned:
		return candBusy
	}
	return candLeftOut
}

// standingOf is target i's standing for sreq (c is scratch for the busy check).
func (m *Machine) standingOf(i int, sreq *scoring.Request, av avoid, filter, busyCheck bool, c *scoring.Candidate) standing {
	if filter && m.skip(i, av) {
		return notOffered
	}
	if sreq.Pinned && !pinMatches(m.tmpl[i].worker, &sreq.Pin, sreq.PinRank) {
		return offered
	}
	if busyCheck && m.busyAt(i, c) {
		return pinned
	}
	return costed
}

// shortVisits lets eligibility classify a pinned request's or a short only list's targets alone, and
// mark the unhealthy and a few excluded targets from their lists; tests turn it off to compare with the
// pass over every target.
var shortVisits = true

// shortOnly: an only list of at most 1/shortOnly of the targets is classified worker by worker.
const shortOnly = 4

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

// observeRouted remembers a calibrated decision for calibration: the work ahead of and in the request (its
// u uncached tokens) and the worker's active blocks, before the charge.
func (m *Machine) observeRouted(now time.Time, id string, t *target, u int) {
	if !m.sc.calibrated {
		return
	}
	l := &m.lines[t.i]
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

// bestCopy is the least queued prefill and the fewest active blocks among the workers holding at least
// need blocks of the prompt (ov, as overlaps left it), in one pass. A worker holding blocks is one of the
// scores, whose positions overlaps has just memoised, so only they are visited, not the whole fleet (a
// prompt is held by a few workers; the fleet has hundreds); with grouped overlaps, every target is. need
// 0 is held by every worker.
func (m *Machine) bestCopy(scores []prefix.Score, grouped bool, ov []uint32, need uint32) (queue uint64, blocks float64) {
	queue, blocks = ^uint64(0), -1
	if need == 0 || grouped {
		for i := range m.lines {
			if ov[i] < need {
				continue
			}
			l := &m.lines[i]
			queue = min(queue, l.prefill)
			if blocks < 0 || l.decode < blocks {
				blocks = l.decode
			}
		}
		return queue, blocks
	}
	for j := range scores {
		if i := m.sc.memo[j].pos; i >= 0 && ov[i] >= need {
			l := &m.lines[i]
			queue = min(queue, l.prefill)
			if blocks < 0 || l.decode < blocks {
				blocks = l.decode
			}
		}
	}
	return queue, blocks
}

package sched

// The charge of a prefill in progress on a conversation's holder. The load tracker charges a request's
// uncached tokens to its worker until its first token, while the engine prefills a long prompt in chunks
// of max_num_batched_tokens over many steps: a worker in the last chunks of a 100k-token prompt looks as
// busy as when it began, and a conversation's next turn, its previous turn still running there, leaves
// the worker holding its context for a shorter queue elsewhere (32 workers at ×12 / ×16: most of the
// preset's gap to llm-d's hit rate; docs/benchmarks.md, fleet lab). For that decision alone the cost does
// not count the charge of the prefill the holder has started (drainHolder); every other worker, the
// replica credit, the calibration and the holder's charge itself stay as they are.

// pfReq is a local request whose prefill is charged on a target, in routing order: its id, the charge
// (tokens) and when it was routed (ns).
type pfReq struct {
	id     string
	charge uint64
	at     int64
}

// drainIdleTenths is the least share of the fleet, in tenths, with no queued prefill for a holder's
// started prefill to be drained: on a busier fleet the next turn's wait behind it is what balances the
// load (the 8-worker mocker profile at ×4, where a few workers are idle, lost 0.1 points of hit rate
// with one more worker in ten).
const drainIdleTenths = 3

// On a fleet of at least drainWideFleet targets two more decisions drain the holder's head: a
// conversation's context cached idle there (its previous turn ended; only a shorter prefix, the system
// prompt, is live), at least as long as what the request adds, while at least drainIdleContextTenths of
// the fleet has no queued prefill; and the head need not have started (at ×16 on 32 workers a next turn
// and an unrelated long prompt arrive at the same instant, and the turn left an 18–20k-token context for
// it). On 8 workers either breaks rows that pass (the mocker profile ×4 99.65 → 95.72 % of pooled, the 8B
// profile seed 42 ×1 95.02 → 92.05 %), hence the fleet bound; docs/benchmarks.md, fleet lab.
//
// For the idle context (not for a running turn's) the head's charge is not left out whole: the cost
// leaves out what the engine has prefilled of it, estimated from the time since the head started (its
// routing, or the previous head's first token) at the calibrated α seconds per token, and
// drainIdleRestTenths of the rest (of all of it for a head not yet started); the other 4 in 10 of the
// rest stay, as the wait the next turn would have behind an unrelated long prompt. Left out whole, that
// wait costs seed 2 ×4 its TTFT p90 (0.542 → 0.566 s, llm-d 0.552); so, 0.551 s and every 32-worker cell
// of seeds 42 / 1 / 2 / 3 passes (5 in 10 passes too, 4 in 10 does not: docs/benchmarks.md).
const (
	drainWideFleet         = 16
	drainIdleContextTenths = 5
	drainIdleRestTenths    = 6
)

// pfPush records a calibrated decision's prefill charge on t (none: nothing to drain).
func (m *Machine) pfPush(t *target, id string, charge uint64, now int64) {
	if charge == 0 || !m.sc.calibrated {
		return
	}
	if len(t.pf) == 0 {
		t.pfSince = now
	}
	t.pf = append(t.pf, pfReq{id: id, charge: charge, at: now})
}

// pfDone removes a request from t's prefill order at its first token or its end; when it was the head,
// the next request becomes the head now.
func (m *Machine) pfDone(t *target, id string, now int64) {
	for j := range t.pf {
		if t.pf[j].id == id {
			if j == 0 {
				t.pfSince = now
			}
			t.pf = append(t.pf[:j], t.pf[j+1:]...)
			return
		}
	}
}

// pfHead is the request at the head of t's prefill order (false: none), dropping those no longer active
// on t (expired or forgotten).
func (m *Machine) pfHead(t *target) (pfReq, bool) {
	for len(t.pf) > 0 {
		if m.active[t.pf[0].id] == t {
			return t.pf[0], true
		}
		t.pf = t.pf[1:]
	}
	return pfReq{}, false
}

// drainHolder is the holder's index and how much of its charge a calibrated decision leaves out (-1, 0:
// none): the charge of the request at the head of its prefill order, once the engine has started it, and
// only
//   - on the sole worker with the longest overlap (not on a tie: no single context to follow),
//   - where the request's whole cached context is live there and one running request alone holds it
//     (h.sole: its previous turn), and it is at least as long as what the request adds (f); a context
//     cached idle behind a live system prompt is not following a running turn (one such decision moved
//     the 8B profile's seed-6 row at ×1 from 93.8 to 91.8 % of pooled),
//   - for a head longer than one step's token budget (a shorter one ends within the step),
//   - while at least drainIdleTenths of the fleet has no queued prefill;
//
// and on a fleet of drainWideFleet or more also where the context is cached idle on the holder (above;
// only in part, drainPart), and for a head not yet started.
func (m *Machine) drainHolder(ov []uint32, h *holding, f float64, tiered bool) (int, uint64) {
	i, n := m.sc.most, len(m.lines)
	if i < 0 || tiered {
		return -1, 0
	}
	wide := n >= drainWideFleet
	live := h.sole && h.live >= f && h.live >= h.cached && 10*m.pfIdle >= drainIdleTenths*n
	idle := wide && h.live < h.cached && h.cached-h.live >= f && 10*m.pfIdle >= drainIdleContextTenths*n
	if !live && !idle {
		return -1, 0
	}
	if !m.sc.sole { // another worker holds as much
		return -1, 0
	}
	t := m.list[i]
	r, ok := m.pfHead(t)
	since := max(t.pfSince, r.at)
	if !ok || m.tmpl[i].maxBatched == 0 || r.charge <= m.tmpl[i].maxBatched || !wide && m.sc.now <= since {
		return -1, 0
	}
	c := r.charge
	if !live {
		c = m.drainPart(c, m.sc.now-since)
	}
	return i, min(c, m.lines[i].prefill)
}

// drainPart is how much of a head's charge an idle-context decision leaves out, elapsed ns after the head
// started: the tokens prefilled by then at the calibrated α and drainIdleRestTenths tenths of the rest
// (all of the charge before α is fit).
func (m *Machine) drainPart(charge uint64, elapsed int64) uint64 {
	a, _, _, _ := m.cal.Fit()
	if a <= 0 {
		return charge
	}
	done := min(charge, uint64(max(float64(elapsed)/1e9, 0)/a))
	return done + (charge-done)*drainIdleRestTenths/10
}

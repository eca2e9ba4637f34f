package sched

import (
	"math"
	"slices"

	"github.com/kvroute/kvroute/scoring"
)

// The decode a request adds (--router-decode-weight w, 0 by default: nothing here runs). The kvroute cost
// prices a worker by the request's time to its first token; every token after it is generated in the
// worker's decode steps. A step reads the KV cache of every request decoding there (paged attention reads
// each sequence's whole context, shared prefixes included), and a step that also prefills lasts as long
// as its prefill chunk. So a worker decoding many long contexts, or prefilling much, makes a request's
// every later token slower, and the request's own context and prompt slow every request there. A cost
// blind to it packs the requests that share a prefix onto its holder: best-of-N groups and agent loops
// decoded at 1.8–2.4× the peers' inter-token latency on the 8B profile at 32 workers (docs/benchmarks.md,
// fleet lab).
//
// What the machine keeps, per target: the context it decodes (C, the blocks of its active requests'
// prompts, each counted whole) and its recent prefill rate (P, uncached tokens routed there with a
// memory of prefillRateTau, kept as e^(t/τ)-weighted sums against one epoch so a decision reads it with
// one exponential). At each request's end it learns, from the mean gap between its tokens (its decode's
// span from the first token over the tokens after it, RecordOutput's count), t = a + b·C + c·P seconds a
// token (scoring.DecodeFit; C and P averaged over the request's first token and its end), and the
// fleet's mean gap and mean output. A request of k prompt blocks and u uncached tokens expecting O
// tokens (nvext agent_hints osl, else the fleet's mean) is then charged on a worker of B active requests,
// in prefill-token units (α: the prefill calibration's seconds a token):
//
//	w · DecodeContextWeight · O · b/α · (C + B·k)    its tokens' wait on the others' contexts, theirs on its own
//	w · DecodeStallWeight · u · B                    its prefill chunks, which every active request waits through
//	w · DecodeStallWeight · P · O · gap              the prefill it would decode beside
//
// The context charge waits for both fits (scoring.MinSamples requests ended), the last stall for a mean
// gap; the first stall needs nothing learned.

// outputForget is the weight the fleet's mean output length and mean gap between tokens keep at each
// completed request.
const outputForget = 0.99

// forgetMean is a mean with exponential forgetting: each add keeps outputForget of the weight before.
type forgetMean struct{ sum, w float64 }

func (f *forgetMean) add(x float64) {
	f.sum = f.sum*outputForget + x*(1-outputForget)
	f.w = f.w*outputForget + (1 - outputForget)
}

// mean is the mean so far, 0 before any add.
func (f *forgetMean) mean() float64 {
	if f.w <= 0 {
		return 0
	}
	return f.sum / f.w
}

// decodes reports whether the machine keeps and charges the decode a request adds: the kvroute preset's
// kv mode with --router-decode-weight above 0.
func (m *Machine) decodes() bool {
	return m.cfg.Preset == scoring.PresetKVRoute && m.cfg.Mode == scoring.ModeKV && m.cfg.DecodeWeight != 0
}

// decodeReq is what the machine keeps of an active request for the decode calibration: its context
// blocks (charged to its target's context), when its first token came (ns, 0: not yet) and its
// target's context then, and the tokens generated so far (RecordOutput).
type decodeReq struct {
	blocks   float64
	first    int64
	ctxFirst float64
	pfFirst  float64
	out      int
}

// decodeRouted adds a committed request's context to its target. Nothing is kept while the decode is
// not charged (--router-decode-weight 0, the default; another preset or mode): the map entry and the
// rate's update cost the decision 0.2–0.4 µs at 256 workers (docs/benchmarks.md).
func (m *Machine) decodeRouted(t *target, id string, isl, u int, now int64) {
	if !m.decodes() {
		return
	}
	if m.pfT0 == 0 || float64(now-m.pfT0) > 200*prefillRateTau {
		// Rebase: the weights grow as e^(t/τ); keep them finite.
		f := 0.0
		if m.pfT0 != 0 {
			f = math.Exp(-float64(now-m.pfT0) / prefillRateTau)
		}
		for _, x := range m.list {
			x.pfg *= f
			if x.i < len(m.pfg) {
				m.pfg[x.i] = x.pfg
			}
		}
		m.pfT0 = now
	}
	t.pfg += float64(u) * math.Exp(float64(now-m.pfT0)/prefillRateTau)
	if t.i < len(m.pfg) {
		m.pfg[t.i] = t.pfg
	}
	b := float64(isl) / float64(m.cfg.BlockSize)
	m.dreq[id] = decodeReq{blocks: b}
	m.setCtx(t, t.ctx+b)
}

// decodeFirst records a request's first token.
func (m *Machine) decodeFirst(t *target, id string, now int64) {
	if len(m.dreq) == 0 {
		return
	}
	if r, ok := m.dreq[id]; ok && r.first == 0 {
		r.first, r.ctxFirst, r.pfFirst = now, t.ctx, m.prefillRate(t, now)
		m.dreq[id] = r
	}
}

// decodeOutput records the tokens a request has generated so far.
func (m *Machine) decodeOutput(id string, tokens int) {
	if len(m.dreq) == 0 {
		return
	}
	if r, ok := m.dreq[id]; ok {
		r.out = tokens
		m.dreq[id] = r
	}
}

// decodeFreed takes an ended request's context off its target and, when it completed (learn; not an
// expiry), learns from it: its mean gap between tokens against the context decoded beside it.
func (m *Machine) decodeFreed(t *target, id string, now int64, learn bool) {
	if len(m.dreq) == 0 {
		return
	}
	r, ok := m.dreq[id]
	if !ok {
		return
	}
	delete(m.dreq, id)
	if !learn {
		m.setCtx(t, t.ctx-r.blocks)
		return
	}
	if r.out > 0 {
		m.outMean.add(float64(r.out))
	}
	if r.first > 0 && r.out >= 2 && now > r.first {
		itl := float64(now-r.first) / 1e9 / float64(r.out-1)
		m.dcal.Observe(itl, (r.ctxFirst+t.ctx)/2, (r.pfFirst+m.prefillRate(t, now))/2)
		m.gapMean.add(itl)
	}
	m.setCtx(t, t.ctx-r.blocks)
}

// prefillRate is t's recent prefill rate, tokens per second.
func (m *Machine) prefillRate(t *target, now int64) float64 { return t.pfg * m.rateOfPfg(now) }

// rateOfPfg turns a target's pfg into its prefill rate at now, tokens per second (0 before any routing).
func (m *Machine) rateOfPfg(now int64) float64 {
	if m.pfT0 == 0 {
		return 0
	}
	return math.Exp(-float64(now-m.pfT0)/prefillRateTau) / (prefillRateTau / 1e9)
}

// prefillRateTau is the time constant (ns) of a target's recent prefill rate: about the span of a
// decode (a few hundred tokens at tens of ms).
const prefillRateTau = 10e9

// setCtx sets a target's decoded context and its dense copy.
func (m *Machine) setCtx(t *target, c float64) {
	if c < 1e-9 {
		c = 0 // no drift below zero from sums of fractions
	}
	t.ctx = c
	if t.i < len(m.ctxs) {
		m.ctxs[t.i] = c
	}
}

// expectedOutput is a request's expected output tokens: osl when given, else the fleet's recent mean
// (0: none completed yet).
func (m *Machine) expectedOutput(osl int) float64 {
	if osl > 0 {
		return float64(osl)
	}
	return m.outMean.mean()
}

// decodePer is the context charge's factor w · DecodeContextWeight · O · b / α for a request expecting o
// output tokens, or 0 while a fit is not trusted.
func (m *Machine) decodePer(o float64) float64 {
	alpha, _, _, n := m.cal.Fit()
	_, b, _, dn := m.dcal.Fit()
	if n < scoring.MinSamples || dn < scoring.MinSamples || !(alpha > 0) || !(b > 0) {
		return 0
	}
	return m.cfg.DecodeWeight * scoring.DecodeContextWeight * o * b / alpha
}

// stallPer is the factor that turns a target's pfg into the prefill tokens a request expecting o output
// tokens will decode beside there (its recent prefill rate × the request's decode span at the fleet's
// mean gap between tokens), weighted by DecodeStallWeight; 0 while nothing is known.
func (m *Machine) stallPer(o float64) float64 {
	return m.cfg.DecodeWeight * scoring.DecodeStallWeight * m.rateOfPfg(m.sc.now) * o * m.gapMean.mean()
}

// decodeCharges adds every target's decode charges for a request of fisl tokens (blocks of fbs) with
// device overlaps ov to extra (the eviction charges, nil when there are none) and returns it: the
// context charge, and the prefill stalls both ways — its uncached tokens, whose chunks every request
// active there waits through (DecodeStallWeight a token each), and the prefill it will decode beside.
func (m *Machine) decodeCharges(extra []float64, ov []uint32, fisl, fbs float64) []float64 {
	if !m.decodes() {
		return extra
	}
	o := m.expectedOutput(m.sc.osl)
	per, stall := m.decodePer(o), m.stallPer(o)
	if extra == nil {
		extra = slices.Grow(m.sc.evict[:0], len(m.lines))[:len(m.lines)]
		clear(extra)
		m.sc.evict = extra
	}
	k, sw := fisl/fbs, m.cfg.DecodeWeight*scoring.DecodeStallWeight
	lines, ctxs, pfg := m.lines[:len(extra)], m.ctxs[:len(extra)], m.pfg[:len(extra)]
	for i := range extra {
		b := float64(lines[i].active)
		u := fisl - float64(ov[i])*fbs
		if u < 0 {
			u = 0
		}
		extra[i] += per*(ctxs[i]+b*k) + sw*u*b + stall*pfg[i]
	}
	return extra
}

// DecodeCalibration reports the decode fit: a seconds per generated token on a worker decoding nothing,
// b seconds more per context block decoded beside it, the observations so far, and the mean output the
// charge assumes for a request without an expected length (0: none yet).
func (m *Machine) DecodeCalibration() (a, b float64, n int, meanOut float64) {
	a, b, _, n = m.dcal.Fit()
	return a, b, n, m.expectedOutput(0)
}

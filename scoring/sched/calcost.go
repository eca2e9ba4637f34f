package sched

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/kvroute/kvroute/scoring"
)

// costArgs is the cost kernel's input and output (calcost_amd64.s reads it by go_asm.h's offsets): the
// targets' overlaps, lines, templates (for their capacities) and projections (proj, taken where a line has active requests and projOn is 0xff), the request's
// constants as the scalar loop in Machine.calibrated names them (creditBelow: hSettled with a credit,
// −∞ without; wwl: WorkWeight − load), and the cost and k arrays it fills.
type costArgs struct {
	ov                                           *uint32
	lines                                        *line
	tmpl                                         *candTmpl
	proj, cost, k                                *float64
	n                                            int
	projOn                                       uint64
	fbs, fisl, nchain, q0, hCached, hSettled     float64
	creditBelow, sharers, queued, slowPer, slowK float64
	gamma, load, wwl                             float64
}

// The kernel's layouts: a line is four words, a template five with totalKV its third.
const (
	_ = uint(unsafe.Sizeof(line{}) - 32)
	_ = uint(32 - unsafe.Sizeof(line{}))
	_ = uint(unsafe.Sizeof(candTmpl{}) - 40)
	_ = uint(40 - unsafe.Sizeof(candTmpl{}))
	_ = uint(unsafe.Offsetof(candTmpl{}.totalKV) - 16)
	_ = uint(16 - unsafe.Offsetof(candTmpl{}.totalKV))
	_ = uint(unsafe.Offsetof(line{}.active) - 20)
	_ = uint(20 - unsafe.Offsetof(line{}.active))
)

// vectorCosts fills m.sc.cost and m.sc.k with every target's cost and k by the vector kernel, a as
// calibrated set it: first the projections of the targets with active requests (project: the scalar
// loop's reuse with a chain), then eight targets per kernel step, the last partial eight through a
// zero-padded copy.
func (m *Machine) vectorCosts(a *costArgs, ov []uint32, chain []uint64, project bool) (cost, k []float64) {
	lines, tmpl := m.lines, m.tmpl[:len(m.lines)]
	n := len(lines)
	// Room to a multiple of eight: calArgminAVX512 reads whole blocks.
	m.sc.cost = slices.Grow(m.sc.cost[:0], n+7)[:n]
	m.sc.k = slices.Grow(m.sc.k[:0], n+7)[:n]
	cost, k, proj := m.sc.cost, m.sc.k, m.projections(chain, project)
	full := n &^ 7
	if project {
		a.projOn = 0xff
	}
	if full > 0 {
		a.ov, a.lines, a.tmpl, a.proj, a.cost, a.k, a.n = &ov[0], &lines[0], &tmpl[0], &proj[0], &cost[0], &k[0], full
		calCostsAVX512(a)
	}
	if r := n - full; r > 0 {
		var (
			tov           [8]uint32
			tl            [8]line
			tt            [8]candTmpl
			tp, tcost, tk [8]float64
		)
		copy(tov[:], ov[full:])
		copy(tl[:], lines[full:])
		copy(tt[:], tmpl[full:])
		copy(tp[:], proj[full:])
		a.ov, a.lines, a.tmpl, a.proj, a.cost, a.k, a.n = &tov[0], &tl[0], &tt[0], &tp[0], &tcost[0], &tk[0], 8
		calCostsAVX512(a)
		copy(cost[full:], tcost[:r])
		copy(k[full:], tk[:r])
	}
	return cost, k
}

// projections fills m.sc.proj with the projection of chain on every target with active requests when
// project is set (what the scalar loops' additional blocks take there), and returns it: a bitmap of the
// lines with active requests, whole eights by the kernel (its bytes read as words, zero past the last),
// the rest here.
func (m *Machine) projections(chain []uint64, project bool) []float64 {
	lines := m.lines
	n := len(lines)
	m.sc.proj = slices.Grow(m.sc.proj[:0], n)[:n]
	proj := m.sc.proj
	if !project {
		return proj
	}
	full := n &^ 7
	words := (full/8 + 7) / 8
	m.sc.active = slices.Grow(m.sc.active[:0], words*8)[:words*8]
	act := m.sc.active
	clear(act[full/8:])
	if full > 0 {
		calActiveAVX512(&lines[0], full, &act[0])
	}
	at := func(i int) { proj[i] = float64(int64(m.list[i].t.Projection(chain, true))) }
	for w := range words {
		for x := binary.LittleEndian.Uint64(act[8*w:]); x != 0; x &= x - 1 {
			at(64*w + bits.TrailingZeros64(x))
		}
	}
	for i := full; i < n; i++ {
		if lines[i].active != 0 {
			at(i)
		}
	}
	return proj
}

// linArgs is the linear cost kernel's input and output (calLinearAVX512, by go_asm.h's offsets): the
// targets' overlaps, lines and projections (taken where a line has active requests and projOn is
// 0xff), the request's constants (scoring.Linear; nchain: the additional blocks elsewhere) and the cost
// array it fills.
type linArgs struct {
	ov                                              *uint32
	lines                                           *line
	proj, cost                                      *float64
	n                                               int
	projOn                                          uint64
	pf, islPf, invBs, credit, scale, weight, nchain float64
}

// linearCosts fills m.sc.cost with every target's cost under the linear policy by the vector kernel
// (Dynamo's cost, and the other presets' kv mode): scoring.Linear's cost of the row loadRows writes for
// the target, bit for bit, eight targets per kernel step and the last partial eight through a
// zero-padded copy.
func (m *Machine) linearCosts(c scoring.Linear, ov []uint32, chain []uint64, reuse bool) []float64 {
	lines := m.lines
	n := len(lines)
	m.sc.cost = slices.Grow(m.sc.cost[:0], n+7)[:n] // room to a multiple of eight, as vectorCosts'
	cost := m.sc.cost
	project := reuse && len(chain) > 0
	proj := m.projections(chain, project)
	a := linArgs{pf: c.Pf, islPf: c.IslPf, invBs: c.InvBs, credit: c.Credit, scale: c.Scale, weight: c.Weight,
		nchain: float64(len(chain))}
	if project {
		a.projOn = 0xff
	}
	full := n &^ 7
	if full > 0 {
		a.ov, a.lines, a.proj, a.cost, a.n = &ov[0], &lines[0], &proj[0], &cost[0], full
		calLinearAVX512(&a)
	}
	if r := n - full; r > 0 {
		var (
			tov    [8]uint32
			tl     [8]line
			tp, tc [8]float64
		)
		copy(tov[:], ov[full:])
		copy(tl[:], lines[full:])
		copy(tp[:], proj[full:])
		a.ov, a.lines, a.proj, a.cost, a.n = &tov[0], &tl[0], &tp[0], &tc[0], 8
		calLinearAVX512(&a)
		copy(cost[full:], tc[:r])
	}
	return cost
}

// vectorArgmin is the argmin over vectorCosts' arrays (n > 0) by calArgminAVX512: the ties in target
// order (tied's buffer, grown), false when a cost is NaN and the scalar comparisons must decide.
func vectorArgmin(cost, k []float64, tied []uint64) ([]uint64, bool) {
	tied = slices.Grow(tied[:0], len(cost)+8)
	nt := calArgminAVX512(&cost[0], &k[0], len(cost), &tied[:1][0])
	if nt < 0 {
		return tied, false
	}
	return tied[:nt], true
}

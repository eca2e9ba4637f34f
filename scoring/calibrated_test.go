package scoring

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestCalibratorLearnsAndAdapts: fed prefill times from t(K) = α(1 + γK) with noise, the calibrator
// recovers γ; when the engines' slowdown per block changes, it follows within a few hundred
// observations (the forgetting factor's memory).
func TestCalibratorLearnsAndAdapts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCalibrator()
	if c.Gamma() != c.Prior {
		t.Fatalf("before any observation γ = %v, want the prior", c.Gamma())
	}
	feed := func(alpha, gamma float64, n int) {
		for range n {
			k := rng.Float64() * 20000
			c.Observe(alpha*(1+gamma*k)*(1+0.05*(rng.Float64()-0.5)), k)
		}
	}
	feed(16e-6, 2e-5, 400)
	if g := c.Gamma(); math.Abs(g-2e-5) > 0.2e-5 {
		t.Fatalf("learned γ %v, want 2e-5", g)
	}
	a, _, _, n := c.Fit()
	if math.Abs(a-16e-6) > 1e-6 || n != 400 {
		t.Fatalf("α %v (want 16e-6), n %d", a, n)
	}
	// The engines slow down per block fourfold (longer contexts, a slower model).
	feed(16e-6, 8e-5, 600)
	if g := c.Gamma(); math.Abs(g-8e-5) > 0.8e-5 {
		t.Fatalf("after the change γ %v, want 8e-5", g)
	}
	// Nonsense observations are ignored.
	c.Observe(math.NaN(), 1)
	c.Observe(-1, 1)
	c.Observe(math.Inf(1), 1)
	if _, _, _, m := c.Fit(); m != 1000 {
		t.Fatalf("bad observations counted: %d", m)
	}
}

// TestCalibratedCostPrefersHits: a worker holding most of the prompt wins over an idle one unless its
// queue outweighs what the hit saves; over capacity the overflow is charged.
func TestCalibratedCostPrefersHits(t *testing.T) {
	const isl = 10000.0
	hit := CalibratedCost(2000, 1000, 500, 0, 16, 1e-5) // queued work, a 90 % hit
	idle := CalibratedCost(0, isl, 100, 0, 16, 1e-5)
	if !(hit < idle) {
		t.Fatalf("hit %v, idle %v", hit, idle)
	}
	jammed := CalibratedCost(200000, 1000, 500, 0, 16, 1e-5)
	if !(jammed > idle) {
		t.Fatalf("a worker with 200k queued tokens (%v) should lose to an idle one (%v)", jammed, idle)
	}
	if over, fits := CalibratedCost(0, 100, 1100, 1000, 16, 0), CalibratedCost(0, 100, 900, 1000, 16, 0); over != fits+100*16 {
		t.Fatalf("over capacity %v, within %v", over, fits)
	}
}

// TestDecodeFitSeparatesContextFromPrefill: time per token made of a context term and a prefill term
// whose regressors move together (the busiest workers decode and prefill most) is split into the two
// coefficients, not all given to the context; the fit follows a change of speed; bad input is ignored.
func TestDecodeFitSeparatesContextFromPrefill(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const a, b, c = 6.5e-3, 2.5e-6, 1.2e-6 // s/token; per context block; per prefill token/s
	f := NewDecodeFit()
	obs := func(a, b, c float64, n int) {
		for range n {
			busy := rng.Float64()
			ctx := 4000*busy + 500*rng.Float64()
			pf := 6000*busy + 2000*rng.Float64()
			f.Observe((a+b*ctx+c*pf)*(1+0.02*rng.NormFloat64()), ctx, pf)
		}
	}
	obs(a, b, c, MinSamples-1)
	if _, gb, gc, _ := f.Fit(); gb != 0 || gc != 0 {
		t.Fatalf("fit before %d observations: b %v c %v", MinSamples, gb, gc)
	}
	obs(a, b, c, 2000)
	ga, gb, gc, n := f.Fit()
	if math.Abs(gb-b)/b > 0.15 || math.Abs(gc-c)/c > 0.15 || math.Abs(ga-a)/a > 0.15 || n != 2000+MinSamples-1 {
		t.Fatalf("fit a %v b %v c %v (n %d), want %v %v %v", ga, gb, gc, n, a, b, c)
	}
	obs(a, 2*b, c, 2000) // the context costs twice as much: the fit follows within its memory
	if _, gb, gc, _ := f.Fit(); math.Abs(gb-2*b)/(2*b) > 0.15 || math.Abs(gc-c)/c > 0.2 {
		t.Fatalf("after the change b %v c %v, want %v %v", gb, gc, 2*b, c)
	}
	before := *f
	for _, bad := range [][3]float64{{math.NaN(), 1, 1}, {0, 1, 1}, {-1, 1, 1}, {1e-3, -1, 1}, {1e-3, 1, math.Inf(1)}, {math.Inf(1), 1, 1}} {
		f.Observe(bad[0], bad[1], bad[2])
	}
	if *f != before {
		t.Fatal("an invalid observation changed the fit")
	}
	// No spread in the prefill rate: the context alone is fit.
	g := NewDecodeFit()
	for range 500 {
		ctx := 4000 * rng.Float64()
		g.Observe(a+b*ctx, ctx, 100)
	}
	if _, gb, gc, _ := g.Fit(); math.Abs(gb-b)/b > 0.01 || gc != 0 {
		t.Fatalf("constant prefill: b %v c %v, want %v 0", gb, gc, b)
	}
}

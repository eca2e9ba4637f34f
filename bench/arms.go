package bench

import (
	"slices"
	"strconv"
)

// Helpers for the end-to-end report (the e2e bench), pure so the e2e driver only has to record samples.

// Goodput returns the highest offered rate at which the SLO holds at that rate and every lower one: rates
// are the offered arrival rates of a sweep, p90 the TTFT p90 measured at each (same order), slo the bound
// (--slo-ttft). 0 when even the lowest rate misses it. Requiring every lower rate keeps one lucky noisy
// step from counting.
func Goodput(rates, p90 []float64, slo float64) float64 {
	idx := make([]int, len(rates))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case rates[a] < rates[b]:
			return -1
		case rates[a] > rates[b]:
			return 1
		}
		return 0
	})
	best := 0.0
	for _, i := range idx {
		if i >= len(p90) || p90[i] > slo {
			break
		}
		best = rates[i]
	}
	return best
}

// LoadImbalance is max/mean of per-worker active requests (1 is perfectly even; 0 when idle).
func LoadImbalance(active []float64) float64 {
	if len(active) == 0 {
		return 0
	}
	var sum, mx float64
	for _, a := range active {
		sum += a
		mx = max(mx, a)
	}
	if sum == 0 {
		return 0
	}
	return mx / (sum / float64(len(active)))
}

// LoadOverTime builds the per-worker load plot: t in seconds, load[w][i] the active requests of worker w
// at t[i].
// firstID is the worker id of load[0], so the legend numbers workers as /v1/workers and the routing
// headers do.
func LoadOverTime(title string, t []float64, load [][]float64, firstID int) *LinePlot {
	p := &LinePlot{Title: title, XLabel: "time (s)", YLabel: "active requests"}
	for w, l := range load {
		p.Series = append(p.Series, Series{Name: "worker " + strconv.Itoa(firstID+w), X: t, Y: l})
	}
	return p
}

// HitRatePlot is the bar chart of hit rates per arm (engine-reported, predicted, oracles).
func HitRatePlot(title string, arms []string, rates []float64) *BarPlot {
	return &BarPlot{Title: title, YLabel: "hit rate", Labels: arms, Values: rates, Max: 1}
}

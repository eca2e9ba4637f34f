package bench

import (
	"math"
	"slices"
	"time"
)

// Summary is the distribution of one recorded sample set. Percentiles use the nearest-rank method on the
// sorted samples (p-th percentile = the ⌈p·n⌉-th smallest), so every reported value is a recorded sample.
type Summary struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	Min   float64 `json:"min"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// Percentile returns the nearest-rank p-quantile (p in [0, 1]) of sorted samples; 0 when empty.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	k := int(math.Ceil(p*float64(n))) - 1
	k = max(0, min(k, n-1))
	return sorted[k]
}

// Summarize sorts samples in place and summarizes them.
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var sum float64
	for _, v := range samples {
		sum += v
	}
	return Summary{
		Count: len(samples),
		Mean:  sum / float64(len(samples)),
		Min:   samples[0],
		P50:   Percentile(samples, 0.50),
		P90:   Percentile(samples, 0.90),
		P99:   Percentile(samples, 0.99),
		P999:  Percentile(samples, 0.999),
		Max:   samples[len(samples)-1],
	}
}

// Micros converts durations to float microseconds for Summarize.
func Micros(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v.Nanoseconds()) / 1e3
	}
	return out
}

// NanosToMicros converts int64 nanoseconds to float microseconds.
func NanosToMicros(d []int64) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v) / 1e3
	}
	return out
}

// CDF returns at most points (value, cumulative fraction) pairs of sorted samples, for plotting.
func CDF(sorted []float64, points int) (xs, ys []float64) {
	n := len(sorted)
	if n == 0 || points < 2 {
		return nil, nil
	}
	step := max(1, n/points)
	for i := 0; i < n; i += step {
		xs = append(xs, sorted[i])
		ys = append(ys, float64(i+1)/float64(n))
	}
	if xs[len(xs)-1] != sorted[n-1] || ys[len(ys)-1] != 1 {
		xs = append(xs, sorted[n-1])
		ys = append(ys, 1)
	}
	return xs, ys
}

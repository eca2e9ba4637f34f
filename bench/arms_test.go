package bench

import (
	"strings"
	"testing"
)

func TestGoodput(t *testing.T) {
	tests := []struct {
		name        string
		rates, p90s []float64
		want        float64
	}{
		{"all under", []float64{1, 2, 4}, []float64{0.1, 0.5, 1.9}, 4},
		{"saturates at 4", []float64{4, 1, 2, 8}, []float64{2.5, 0.2, 1.0, 9}, 2},
		{"noisy recovery does not count", []float64{1, 2, 4}, []float64{0.1, 3, 1}, 1},
		{"none", []float64{1}, []float64{5}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Goodput(tc.rates, tc.p90s, 2); got != tc.want {
				t.Fatalf("goodput %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLoadImbalanceAndPlots(t *testing.T) {
	if got := LoadImbalance([]float64{2, 2, 8}); got != 2 {
		t.Fatalf("imbalance %v, want 8/4", got)
	}
	if LoadImbalance(nil) != 0 || LoadImbalance([]float64{0, 0}) != 0 {
		t.Fatal("idle fleet")
	}
	svg := LoadOverTime("load", []float64{0, 1, 2}, [][]float64{{1, 2, 3}, {0, 1, 0}}, 1).SVG()
	if strings.Count(svg, "<polyline") != 2 || !strings.Contains(svg, "worker 1") || !strings.Contains(svg, "worker 2") || strings.Contains(svg, "worker 0") {
		t.Fatal("load plot")
	}
	bar := HitRatePlot("hits", []string{"kv", "round-robin"}, []float64{0.25, 0.05}).SVG()
	if strings.Count(bar, "<rect") != 4 || !strings.Contains(bar, "round-robin") { // background, frame, 2 bars
		t.Fatalf("bar plot:\n%s", bar)
	}
}

package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Hand-written SVG plots: a line chart (linear or log axes) and a bar chart, enough for latency CDFs,
// hit rates per arm, load over time and throughput sweeps without a plotting dependency.

// Series is one named line of a LinePlot.
type Series struct {
	Name string
	X, Y []float64
}

// LinePlot is a line chart.
type LinePlot struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	Series                []Series
	// Diagonal draws y = x (offered vs achieved plots).
	Diagonal bool
}

// BarPlot is a bar chart with one bar per label.
type BarPlot struct {
	Title, YLabel string
	Labels        []string
	Values        []float64
	// Max fixes the y range top (e.g. 1 for rates); 0 scales to the data.
	Max float64
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// labelCharW and slantCharW are the approximate widths of one label character at the plots' font size
// and at the slanted labels' (10 px), in pixels.
const labelCharW, slantCharW = 7.0, 6.0

const (
	svgW, svgH                     = 760, 460
	padL, padR, padT, padB float64 = 78, 170, 40, 56
)

type axis struct {
	lo, hi float64
	log    bool
}

func (a axis) norm(v float64) float64 {
	if a.log {
		v = math.Log10(math.Max(v, 1e-300))
		return (v - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	}
	return (v - a.lo) / (a.hi - a.lo)
}

func newAxis(vals []float64, log bool) axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) || (log && v <= 0) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
		if log {
			lo, hi = 1, 10
		}
	}
	if log {
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi)))
		if hi <= lo {
			hi = lo * 10
		}
		return axis{lo, hi, true}
	}
	if !log && lo > 0 && lo < hi/3 {
		lo = 0
	}
	if hi == lo {
		hi = lo + 1
	}
	span := hi - lo
	return axis{lo, hi + span*0.05, false}
}

func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for v := a.lo; v <= a.hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / 5)
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// FormatNum renders a number compactly: 1.2k, 3.4M, 0.012.
func FormatNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trimZeros(fmt.Sprintf("%.2f", v/1e9)) + "G"
	case a >= 1e6:
		return trimZeros(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case a >= 1e4:
		return trimZeros(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return trimZeros(fmt.Sprintf("%.2f", v))
	case a == 0:
		return "0"
	default:
		return trimZeros(fmt.Sprintf("%.3g", v))
	}
}

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func svgHeader(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="22" text-anchor="middle" font-size="15">%s</text>`+"\n", svgW/2, html.EscapeString(title))
}

// SVG renders the chart.
func (p *LinePlot) SVG() string {
	var xs, ys []float64
	for _, s := range p.Series {
		xs = append(xs, s.X...)
		ys = append(ys, s.Y...)
	}
	ax, ay := newAxis(xs, p.LogX), newAxis(ys, p.LogY)
	if p.Diagonal {
		lo, hi := math.Min(ax.lo, ay.lo), math.Max(ax.hi, ay.hi)
		ax.lo, ax.hi, ay.lo, ay.hi = lo, hi, lo, hi
	}
	pw, ph := svgW-padL-padR, svgH-padT-padB
	px := func(v float64) float64 { return padL + ax.norm(v)*pw }
	py := func(v float64) float64 { return padT + (1-ay.norm(v))*ph }
	var b strings.Builder
	svgHeader(&b, p.Title)
	drawAxes(&b, ax.ticks(), ay.ticks(), px, py, pw, ph, p.XLabel, p.YLabel)
	if p.Diagonal {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="5,3"/>`+"\n",
			px(ax.lo), py(ax.lo), px(ax.hi), py(ax.hi))
	}
	for i, s := range p.Series {
		col := palette[i%len(palette)]
		var pts []string
		for j := range s.X {
			if j >= len(s.Y) || (p.LogX && s.X[j] <= 0) || (p.LogY && s.Y[j] <= 0) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		if len(pts) <= 40 {
			for _, pt := range pts {
				xy := strings.Split(pt, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], col)
			}
		}
		ly := padT + 10 + float64(i)*18
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/>`+"\n", svgW-padR+14, ly, svgW-padR+34, ly, col)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", svgW-padR+40, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func drawAxes(b *strings.Builder, xticks, yticks []float64, px, py func(float64) float64, pw, ph float64, xl, yl string) {
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", padL, padT, pw, ph)
	for _, t := range xticks {
		x := px(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#eee"/>`+"\n", x, padT, x, padT+ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x, padT+ph+16, FormatNum(t))
	}
	for _, t := range yticks {
		y := py(t)
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/>`+"\n", padL, y, padL+pw, y)
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, FormatNum(t))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`+"\n", padL+pw/2, svgH-14, html.EscapeString(xl))
	fmt.Fprintf(b, `<text x="16" y="%.0f" text-anchor="middle" transform="rotate(-90 16 %.0f)">%s</text>`+"\n", padT+ph/2, padT+ph/2, html.EscapeString(yl))
}

// SVG renders the chart.
func (p *BarPlot) SVG() string {
	vals := append([]float64{0}, p.Values...)
	if p.Max > 0 {
		vals = append(vals, p.Max)
	}
	ay := newAxis(vals, false)
	if p.Max > 0 {
		ay.hi = p.Max
	}
	ay.lo = 0
	pw, ph := svgW-padL-padR, svgH-padT-padB
	// Labels wider than their slot are drawn slanted from the bar's foot, so many bars (a matrix of
	// cells) stay readable instead of overlapping; the plot gives up the height they need.
	slant, longest := false, 0
	for _, l := range p.Labels {
		longest = max(longest, len(l))
		if n := len(p.Values); n > 0 && float64(len(l))*labelCharW > pw/float64(n)*0.95 {
			slant = true
		}
	}
	if slant {
		ph -= max(0, float64(longest)*slantCharW*0.5-padB+20)
	}
	py := func(v float64) float64 { return padT + (1-ay.norm(v))*ph }
	var b strings.Builder
	svgHeader(&b, p.Title)
	drawAxes(&b, nil, ay.ticks(), nil, py, pw, ph, "", p.YLabel)
	n := len(p.Values)
	if n == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	slot := pw / float64(n)
	for i, v := range p.Values {
		x := padL + slot*float64(i) + slot*0.15
		y := py(v)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, slot*0.7, padT+ph-y, palette[i%len(palette)])
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x+slot*0.35, y-4, FormatNum(v))
		label := ""
		if i < len(p.Labels) {
			label = p.Labels[i]
		}
		if slant {
			lx, ly := x+slot*0.35, padT+ph+12
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="end" font-size="10" transform="rotate(-30 %.1f %.0f)">%s</text>`+"\n",
				lx, ly, lx, ly, html.EscapeString(label))
			continue
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x+slot*0.35, padT+ph+16, html.EscapeString(label))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

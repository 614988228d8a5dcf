package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The curves' SVG: four panels of line charts, written by hand (no plotting
// dependency). x is on a log scale (the goroutine counts and lock counts
// grow by factors); y is linear from 0, or logarithmic where the values
// span decades.

// series is one line of a panel.
type series struct {
	name     string
	color    string
	dashed   bool // a target, not a measurement
	positive bool // only a value above 0 was measured (0: below the resolution), others are not drawn
	ys       []float64
}

// panel is one chart.
type panel struct {
	title, xLabel, yLabel string
	xs                    []float64
	logY                  bool
	lines                 []series
}

const (
	svgPanelW, svgPanelH = 460, 280
	svgLeft, svgRight    = 64, 36 // plot area margins inside a panel
	svgTop, svgBottom    = 44, 52
)

var svgColors = []string{"#888888", "#d62728", "#1f77b4", "#2ca02c"}

// drawSVG returns the curves as an SVG document.
func (r *curvesReport) drawSVG() string {
	gs := make([]float64, len(r.p1))
	p1 := make([]series, len(curveContenders))
	for j, name := range curveContenders {
		p1[j] = series{name: name, color: svgColors[j]}
	}
	for i := range r.p1 {
		gs[i] = float64(curveGoroutines[i])
		for j, res := range r.p1[i] {
			p1[j].ys = append(p1[j].ys, res.median())
		}
	}
	var ls, trips, maxTrips, heap, maxHeap, client, server []float64
	for i, res := range r.p4 {
		if !curveHolds[i].drawn {
			continue
		}
		ls = append(ls, float64(res.locks))
		trips = append(trips, res.perCycle())
		maxTrips = append(maxTrips, float64(res.locks)/p4PerLeases)
		heap = append(heap, res.heapPerLock)
		maxHeap = append(maxHeap, p4MaxHeap)
		c, s := res.renewalCPU()
		client, server = append(client, c), append(server, s)
	}
	panels := []panel{
		{title: "P1: Obtain+Release pairs/s, distinct keys", xLabel: "goroutines", yLabel: "pairs/s", xs: gs, lines: p1},
		{title: "P4: store round trips per renewal cycle", xLabel: holdsLabel(), yLabel: "round trips", xs: ls, logY: true, lines: []series{
			{name: "tasklock", color: svgColors[1], ys: trips},
			{name: fmt.Sprintf("target: 1 per %d leases", p4PerLeases), color: "#555555", dashed: true, ys: maxTrips},
		}},
		{title: "P4: heap per held lock", xLabel: holdsLabel(), yLabel: "bytes", xs: ls, lines: []series{
			{name: "tasklock", color: svgColors[1], ys: heap},
			{name: fmt.Sprintf("target: %.0f B", p4MaxHeap), color: "#555555", dashed: true, ys: maxHeap},
		}},
		{title: "P4: renewal CPU per lease renewal", xLabel: holdsLabel(), yLabel: "µs", xs: ls, lines: []series{
			{name: "lockbench (client)", color: svgColors[1], positive: true, ys: client},
			{name: "redis-server", color: svgColors[2], positive: true, ys: server},
		}},
	}
	var b strings.Builder
	w, h := 2*svgPanelW, 2*svgPanelH+36
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" text-anchor="middle">tasklock on one Redis: how the cost grows with the work (lockbench -only curves)</text>`+"\n", w/2)
	for i, p := range panels {
		p.draw(&b, float64(i%2*svgPanelW), float64(36+i/2*svgPanelH))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// holdsLabel names the drawn P4 runs' TTLs: "locks held (TTL 3s; 100,000: 30s)".
func holdsLabel() string {
	var odd []string
	for _, h := range curveHolds {
		if h.drawn && h.ttl != p4TTL {
			odd = append(odd, fmt.Sprintf("%s: %v", thousands(float64(h.locks)), h.ttl))
		}
	}
	return fmt.Sprintf("locks held (TTL %v; %s)", p4TTL, strings.Join(odd, ", "))
}

// draw writes p with its top left corner at (ox, oy).
func (p panel) draw(b *strings.Builder, ox, oy float64) {
	x0, x1 := ox+svgLeft, ox+svgPanelW-svgRight
	y0, y1 := oy+svgPanelH-svgBottom, oy+svgTop // y0: the bottom
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-size="13" font-weight="bold">%s</text>`+"\n", x0, oy+18, html.EscapeString(p.title))
	if len(p.xs) == 0 {
		return
	}
	xlo, xhi := math.Log10(p.xs[0]), math.Log10(p.xs[len(p.xs)-1])
	if xhi == xlo {
		xhi = xlo + 1
	}
	px := func(x float64) float64 { return x0 + (math.Log10(x)-xlo)/(xhi-xlo)*(x1-x0) }
	var all []float64
	for _, l := range p.lines {
		all = append(all, l.ys...)
	}
	ticks, py := yAxis(all, p.logY, y0, y1)
	// Grid, ticks and labels.
	for _, t := range ticks {
		y := py(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", x0, y, x1, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y+4, tickLabel(t))
	}
	for _, x := range p.xs {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", px(x), y0, px(x), y1)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), y0+16, thousands(x))
	}
	fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fH%.1f" fill="none" stroke="black"/>`+"\n", x0, y1, y0, x1)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y0+32, html.EscapeString(p.xLabel))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
		ox+14, (y0+y1)/2, ox+14, (y0+y1)/2, html.EscapeString(p.yLabel))
	// The lines, each with its points and a legend entry below the plot.
	lx := x0
	for _, l := range p.lines {
		var pts []string
		for i, y := range l.ys {
			if i < len(p.xs) && (y > 0 || !p.logY && !l.positive) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.xs[i]), py(y)))
			}
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(b, `<polyline class="series" data-name="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n",
			html.EscapeString(l.name), strings.Join(pts, " "), l.color, dash)
		if !l.dashed {
			for _, pt := range pts {
				x, y, _ := strings.Cut(pt, ",")
				fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", x, y, l.color)
			}
		}
		ly := y0 + 46
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly-4, lx+18, ly-4, l.color, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+22, ly, html.EscapeString(l.name))
		lx += 30 + 6.5*float64(len([]rune(l.name)))
	}
}

// yAxis returns the tick values for values vs and the function placing a
// value between y0 (bottom) and y1 (top): from 0 to a round maximum, or on
// a log scale between powers of ten.
func yAxis(vs []float64, logY bool, y0, y1 float64) ([]float64, func(float64) float64) {
	hi := 0.0
	lo := math.Inf(1)
	for _, v := range vs {
		hi = max(hi, v)
		if v > 0 {
			lo = min(lo, v)
		}
	}
	if logY {
		if math.IsInf(lo, 1) {
			lo, hi = 1, 10
		}
		a, z := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if z == a {
			z = a + 1
		}
		var ticks []float64
		for e := a; e <= z; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
		return ticks, func(v float64) float64 { return y0 - (math.Log10(v)-a)/(z-a)*(y0-y1) }
	}
	if hi <= 0 {
		hi = 1
	}
	step := niceStep(hi / 5)
	top := math.Ceil(hi/step) * step
	var ticks []float64
	for t := 0.0; t <= top+step/2; t += step {
		ticks = append(ticks, t)
	}
	return ticks, func(v float64) float64 { return y0 - v/top*(y0-y1) }
}

// niceStep returns the smallest of 1, 2 and 5 times a power of ten that is
// at least v.
func niceStep(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel formats an axis value: 12,000 or 0.5.
func tickLabel(v float64) string {
	if v >= 1 || v == 0 {
		return thousands(v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

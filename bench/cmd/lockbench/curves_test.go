package main

import (
	"encoding/xml"
	"strconv"
	"strings"
	"testing"
)

// TestCurvesSVG draws a report with known numbers and checks the SVG: it
// parses, it has one line per series with a point per x, x grows to the
// right on every line, and a larger y is drawn higher.
func TestCurvesSVG(t *testing.T) {
	r := &curvesReport{}
	for i := range curveGoroutines {
		var row []*p1Result
		for j := range curveContenders {
			row = append(row, &p1Result{slices: []float64{float64((i + 1) * (j + 1) * 1000)}})
		}
		r.p1 = append(r.p1, row)
	}
	drawn := 0
	for i, h := range curveHolds {
		r.p4 = append(r.p4, &p4Result{locks: h.locks, ttl: h.ttl, renewed: int64(2 * h.locks), cycles: 2, roundTrips: int64(2 * (i + 1)),
			heapPerLock: float64(300 + 10*i), client: 1e6, server: 2e6, cpuOK: true})
		if h.drawn {
			drawn++
		}
	}
	var doc struct {
		XMLName   xml.Name `xml:"svg"`
		Polylines []struct {
			Class  string `xml:"class,attr"`
			Name   string `xml:"data-name,attr"`
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	if err := xml.Unmarshal([]byte(r.drawSVG()), &doc); err != nil {
		t.Fatalf("the SVG does not parse: %v", err)
	}
	// P1: one line per contender; P4: tasklock and its target, twice;
	// client and server CPU.
	if want := len(curveContenders) + 6; len(doc.Polylines) != want {
		t.Fatalf("%d lines, want %d", len(doc.Polylines), want)
	}
	for k, pl := range doc.Polylines {
		want := drawn
		if k < len(curveContenders) {
			want = len(curveGoroutines)
		}
		var xs, ys []float64
		for _, pt := range strings.Fields(pl.Points) {
			x, y, _ := strings.Cut(pt, ",")
			fx, err1 := strconv.ParseFloat(x, 64)
			fy, err2 := strconv.ParseFloat(y, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("line %q: bad point %q", pl.Name, pt)
			}
			xs, ys = append(xs, fx), append(ys, fy)
		}
		if len(xs) != want {
			t.Errorf("line %q has %d points, want %d", pl.Name, len(xs), want)
			continue
		}
		for i := 1; i < len(xs); i++ {
			if xs[i] <= xs[i-1] {
				t.Errorf("line %q: x does not grow: %v", pl.Name, xs)
			}
		}
		// The P1 lines and the heap grow with x in the numbers above: SVG's
		// y grows downwards.
		if k < len(curveContenders) || pl.Name == "tasklock" && k == len(curveContenders)+2 {
			for i := 1; i < len(ys); i++ {
				if ys[i] >= ys[i-1] {
					t.Errorf("line %q: a larger value is not drawn higher: %v", pl.Name, ys)
				}
			}
		}
	}
	if got := doc.Polylines[1].Name; got != curveContenders[1] {
		t.Errorf("second line is %q, want %q", got, curveContenders[1])
	}
}

func TestNiceStep(t *testing.T) {
	for v, want := range map[float64]float64{0.7: 1, 1: 1, 1.2: 2, 3: 5, 7: 10, 1300: 2000, 0.3: 0.5} {
		if got := niceStep(v); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", v, got, want)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// The scaling curves (issue 16, item 6): how the cost grows with the work.
// P1 (Obtain+Release pairs/s on distinct keys) at each of curveGoroutines
// goroutines, tasklock against the raw floor and redsync, and P4 (locks
// kept alive) at each of curveHolds, on a redis-server of their own;
// printed as tables and drawn as an SVG (curvessvg.go).
var (
	curveGoroutines = []int{1, 4, 16, 64, 256}
	// curveHolds are the P4 runs. The drawn ones renew at most 10,000
	// leases a second (a TTL of 3 s renews every second): 100,000 locks
	// with P4's TTL, 100,000 renewals a second, run too, undrawn.
	curveHolds = []curveHold{
		{1_000, p4TTL, true},
		{10_000, p4TTL, true},
		{100_000, p4TTL, false},
		{100_000, 10 * p4TTL, true},
	}
	// curveContenders are the P1 contenders drawn, by name, in this order.
	curveContenders = []string{"raw floor", "tasklock", "redsync v4"}
)

// curveQuickLocks is the most locks a quick run holds: the runs after
// the first with more are left out.
const curveQuickLocks = 10_000

// curveHold is one P4 run of the curve.
type curveHold struct {
	locks int
	ttl   time.Duration
	drawn bool
}

// curvesSVG is the file the curves are drawn into, relative to the
// working directory (bench/ under make bench). A quick run draws nothing.
const curvesSVG = "curves.svg"

// curvesCycles is how many slices of p1Slice each contender runs per
// goroutine count (1 in a quick run): short, so that the part takes about
// a minute; the ratios are medians of the cycles' paired ratios.
const curvesCycles = 3

// curvesReport is the part's section of the report.
type curvesReport struct {
	quick   bool
	server  string
	slice   time.Duration // of the P1 curve's runs
	p1      [][]*p1Result // per curveGoroutines: one per curveContenders
	p1Err   error
	p4      []*p4Result // per curveHolds, as far as they ran
	p4Err   error
	svg     string // the file written, "" when none
	svgErr  error
	elapsed time.Duration
	load    string
	summary targets
}

func (r *curvesReport) target(id, target, measured string, ok bool) string {
	return r.summary.add(id, target, measured, ok)
}

// addCurvesOnly adds what the -only word id (upper case) selects of this
// part to only and reports whether id was one of its words.
func addCurvesOnly(only map[string]bool, id string) bool {
	if id == "CURVES" {
		only[id] = true
		return true
	}
	return false
}

// runCurves runs the part when cfg selects it (nil otherwise): the P1
// curve, then the P4 curve, each of its sizes in a process of its own
// (runP4Child), on one redis-server, then draws them.
func runCurves(ctx context.Context, cfg config, add func(func())) *curvesReport {
	if !cfg.runs("CURVES") {
		return nil
	}
	start, load0 := time.Now(), loadAvg()
	r := &curvesReport{quick: cfg.quick}
	srv, err := startServer(ctx, func(s *server) { add(s.stop) })
	if err != nil {
		r.p1Err = err
		return r
	}
	defer srv.stop()
	r.server = srv.version
	r.p1Err = r.runP1(ctx, srv, cfg)
	for _, h := range curveHolds {
		if cfg.quick && h.locks > curveQuickLocks {
			break
		}
		res, err := runP4Child(ctx, srv, h.locks, h.ttl, cfg.quick)
		if err != nil {
			r.p4Err = fmt.Errorf("curves P4 %s locks: %w", thousands(float64(h.locks)), err)
			break
		}
		r.p4 = append(r.p4, res)
		progress("curves P4 %7s locks, TTL %v: %.1f round trips per cycle, %.0f B heap per lock, %d lost", thousands(float64(h.locks)), h.ttl, res.perCycle(), res.heapPerLock, res.lost)
	}
	if !cfg.quick && r.p1Err == nil && r.p4Err == nil {
		r.svgErr = os.WriteFile(curvesSVG, []byte(r.drawSVG()), 0o644)
		if r.svgErr == nil {
			r.svg = curvesSVG
			progress("curves: wrote %s", curvesSVG)
		}
	}
	r.elapsed = time.Since(start)
	if load1 := loadAvg(); load0 != "" && load1 != "" {
		r.load = fmt.Sprintf(" Load average (1 min) %s before, %s after.", load0, load1)
	}
	return r
}

// runP1 runs P1's slices (runSlices) at each goroutine count of
// curveGoroutines with the contenders of curveContenders.
func (r *curvesReport) runP1(ctx context.Context, srv *server, cfg config) error {
	var opens []func() (*instance, error)
	for _, name := range curveContenders {
		i := slices.IndexFunc(contenders, func(c contender) bool { return c.name == name })
		if i < 0 {
			return fmt.Errorf("curves: no P1 contender %q", name)
		}
		opens = append(opens, func() (*instance, error) { return contenders[i].open(ctx, srv.addr) })
	}
	cycles := curvesCycles
	r.slice = p1Slice
	if cfg.quick {
		cycles, r.slice = 1, min(p1Slice, cfg.p1Duration)
	}
	for _, n := range curveGoroutines {
		res, err := runSlices(ctx, fmt.Sprintf("curves P1 %3d goroutines", n), curveContenders, opens, srv.cpu,
			fmt.Sprintf("lockbench:curves:%d:", n), n, cfg.warmup, r.slice, cycles)
		if err != nil {
			return err
		}
		r.p1 = append(r.p1, res)
	}
	return nil
}

// failures lists what could not run.
func (r *curvesReport) failures() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, err := range []error{r.p1Err, r.p4Err, r.svgErr} {
		if err != nil {
			out = append(out, err.Error())
		}
	}
	return out
}

// renewalCPU returns the CPU µs per lease renewal of lockbench's process
// and of redis-server; 0, 0 when unknown.
func (r *p4Result) renewalCPU() (client, server float64) {
	if !r.cpuOK || r.renewed == 0 {
		return 0, 0
	}
	return float64(r.client.Microseconds()) / float64(r.renewed), float64(r.server.Microseconds()) / float64(r.renewed)
}

// write prints the part's section of the report, with its own targets
// table; nothing when the part did not run.
func (r *curvesReport) write(w io.Writer) {
	if r == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("### Scaling curves: P1 by goroutines, P4 by locks held")
	p("")
	drawn := "not drawn (quick run, or a part failed)"
	if r.svg != "" {
		drawn = "drawn in " + r.svg
	}
	p("redis-server %s of its own, private, loopback; %s; %v in all, curves %s.%s", r.server, runMode(r.quick), r.elapsed.Round(time.Second), drawn, r.load)
	r.writeP1(p)
	r.writeP4(p)
	r.summary.write(p, "#### Targets: scaling curves")
}

func (r *curvesReport) writeP1(p func(string, ...any)) {
	p("")
	p("#### P1 by goroutines: Obtain+Release pairs/s, distinct keys")
	p("")
	if r.p1Err != nil {
		p("**Failed**: %v", r.p1Err)
	}
	if len(r.p1) == 0 {
		return
	}
	p("Per goroutine count, %d slices of %v per implementation, taking turns as in P1. Pairs/s: median of the slices; ratios: median over the cycles of the ratio of one cycle's slices. CPU: µs per pair of lockbench's process + redis-server.",
		len(r.p1[0][0].slices), r.slice)
	p("")
	head := "| goroutines |"
	for _, name := range curveContenders {
		head += " " + name + " pairs/s |"
	}
	p("%s tasklock ÷ floor | tasklock ÷ redsync | CPU µs/pair (floor, tasklock, redsync) |", head)
	p("|--:|%s--:|--:|---|", strings.Repeat("--:|", len(curveContenders)))
	for i, n := range curveGoroutines[:len(r.p1)] {
		row := fmt.Sprintf("| %d |", n)
		var cpus []string
		for _, res := range r.p1[i] {
			errs := ""
			if res.errs > 0 {
				errs = fmt.Sprintf(" (%d failed: %v)", res.errs, res.err)
			}
			row += " " + thousands(res.median()) + errs + " |"
			c, s := res.cpuPerPair()
			cpus = append(cpus, fmt.Sprintf("%.1f", c+s))
		}
		floor, tl, rs := r.p1[i][0], r.p1[i][1], r.p1[i][2]
		p("%s %.2f× | %.2f× | %s |", row, pairedRatio(tl, floor), pairedRatio(tl, rs), strings.Join(cpus, ", "))
	}
}

func (r *curvesReport) writeP4(p func(string, ...any)) {
	p("")
	p("#### P4 by locks held: keep N locks alive (renewal on)")
	p("")
	if r.p4Err != nil {
		p("**Failed**: %v", r.p4Err)
	}
	if len(r.p4) == 0 {
		return
	}
	p("Each as P4, in a lockbench process of its own (started again for that size, so that its heap holds the locks, their Locker and client, and nothing left by earlier measurements): obtained by 16 goroutines through one Locker, counted over two cycles' time (a cycle is TTL/3) after one cycle (none in a quick run, which stops at %s locks). Heap per lock: the median of %d samples of the heap after two collections while the locks renew, less the same taken before the obtains. The drawn curve renews at most 10,000 leases a second, so 100,000 locks have a TTL of %v there; 100,000 with P4's TTL (100,000 renewals a second) run too.", thousands(curveQuickLocks), len(r.p4[0].heapSamples), 10*p4TTL)
	p("")
	p("Renewal CPU: CPU time in the window of that process (the renewals, almost all of it) and of redis-server, per lease renewal and per cycle; redis-server's is read in ticks of 10 ms, so with 1,000 locks (2,000 renewals in the window) it is known to 5 µs per renewal. Targets (DESIGN P4): ≤ 1 round trip per %d leases per cycle, ≤ %.0f B heap per held lock.", p4PerLeases, p4MaxHeap)
	p("")
	p("| locks | TTL | obtained in | round trips per cycle | leases per round trip | heap per lock | goroutines | renewal CPU µs per lease (client + server) | renewal CPU ms per cycle | lost | round trips ≤ | heap ≤ %.0f B |", p4MaxHeap)
	p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
	for _, res := range r.p4 {
		n := fmt.Sprintf("%s locks, TTL %v", thousands(float64(res.locks)), res.ttl)
		maxRT := float64(res.locks) / p4PerLeases
		perCycle := res.perCycle()
		rt := r.target("P4-curve", fmt.Sprintf("%s: ≤ %s round trips per cycle", n, thousands(maxRT)), fmt.Sprintf("%.1f", perCycle), res.cycles > 0 && perCycle <= maxRT)
		heap := r.target("P4-curve", fmt.Sprintf("%s: ≤ %.0f B heap per lock", n, p4MaxHeap), fmt.Sprintf("%.0f B", res.heapPerLock), res.heapPerLock <= p4MaxHeap)
		lost := r.target("P4-curve", n+": no lock lost", fmt.Sprint(res.lost), res.lost == 0)
		cpu, cycle := "—", "—"
		if c, s := res.renewalCPU(); c+s > 0 {
			cpu = fmt.Sprintf("%.2f + %.2f = %.2f", c, s, c+s)
			cycle = fmt.Sprintf("%.1f", (c+s)*float64(res.locks)/1000)
		}
		leases := "—"
		if perCycle > 0 {
			leases = thousands(float64(res.locks) / perCycle)
		}
		p("| %s | %v | %v | %.1f | %s | %.0f B | %+d | %s | %s | %d (%s) | %s: %s | %s |", thousands(float64(res.locks)), res.ttl, res.obtainTime.Round(time.Millisecond), perCycle, leases,
			res.heapPerLock, res.goroutineDelta, cpu, cycle, res.lost, lost, thousands(maxRT), rt, heap)
	}
}

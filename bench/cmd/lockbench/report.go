package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The targets of DESIGN.md, "Performance targets".
const (
	p1VsFloor      = 1.0  // tasklock pairs/s ÷ floor pairs/s, at least
	p1VsRedsync    = 1.3  // tasklock pairs/s ÷ redsync pairs/s, at least
	p2MaxAllocs    = 18.0 // allocations per pair, at most
	p3MaxP50       = time.Millisecond
	p3VsRedsync    = 20.0 // tasklock's acquisitions/s by a waiter ÷ redsync's, at least
	p4PerLeases    = 500  // at most one round trip per this many leases per cycle
	p4MaxGoroutine = 10   // "O(1)": the rise while holding stays a small constant
	p4MaxHeap      = 512.0
)

type report struct {
	cfg     config
	server  string
	started time.Time
	elapsed time.Duration

	p1     []*p1Result
	p2     []p2Result
	p1one  []*p1Result   // P1 at 1 goroutine
	extend *extendResult // Extend
	p3     []*p3Result
	p4     *p4Result
	p5     []*schedResult
	p5x    []*schedResult // P5-features, P5-shard

	sqlEnvs []*sqlEnv
	p1sql   []*sqlP1Result
	p3sql   []*sqlP3Result
	// handoffSQL is P3-sql's handoff rows: sqlHandoffContenders
	// contenders with clients of their own on one key.
	handoffSQL []*sqlP3Result
	p4sql      []*sqlP4Result
	p5sql      []*schedResult // P5-sql, one per store

	summary targets
	load    string // the machine's load average before and after, when known
}

// loadAvg returns the 1-minute load average, "" when unknown.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// runMode says what kind of run the report is of.
func runMode(quick bool) string {
	if quick {
		return "**quick run (smoke test; numbers are rough)**"
	}
	return "full run"
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "**FAIL**"
}

func (r *report) target(id, target, measured string, ok bool) string {
	return r.summary.add(id, target, measured, ok)
}

// targets are a part's targets with what was measured, for its summary
// table: id, target, measured, result.
type targets [][4]string

// add records a target and returns its result, PASS or FAIL.
func (t *targets) add(id, target, measured string, ok bool) string {
	res := passFail(ok)
	*t = append(*t, [4]string{id, target, measured, res})
	return res
}

// write prints the summary table under the heading title; nothing when
// no target was recorded.
func (t targets) write(p func(string, ...any), title string) {
	if len(t) == 0 {
		return
	}
	p("")
	p("%s", title)
	p("")
	p("| id | target | measured | result |")
	p("|---|---|---|---|")
	for _, s := range t {
		p("| %s | %s | %s | %s |", s[0], s[1], s[2], s[3])
	}
}

func (r *report) write(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("## lockbench — %s", r.started.UTC().Format("2006-01-02 15:04 UTC"))
	p("")
	var servers []string
	if r.server != "" {
		servers = append(servers, "redis-server "+r.server+", private, loopback, no persistence")
	}
	for _, e := range r.sqlEnvs {
		if e.err == nil {
			servers = append(servers, e.describe())
		}
	}
	servers = append(servers, deps())
	p("%s %s/%s, %d CPUs (GOMAXPROCS %d); %s.",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), strings.Join(servers, "; "))
	mode := runMode(r.cfg.quick)
	var parts []string
	if r.p1 != nil || r.p3 != nil || r.p1one != nil || r.extend != nil {
		parts = append(parts, fmt.Sprintf("P1 %v and P3 %d × %v per implementation", time.Duration(r.cfg.rounds)*r.cfg.p1Duration, r.cfg.rounds, r.cfg.p3Duration))
	}
	if r.p1sql != nil || r.p3sql != nil {
		parts = append(parts, fmt.Sprintf("P1-sql %v and P3-sql %d × %v per implementation and store", r.cfg.sqlDuration, r.cfg.sqlP3Rounds, r.cfg.sqlDuration/time.Duration(r.cfg.sqlP3Rounds)))
	}
	turns := ""
	if len(parts) > 0 {
		turns = strings.Join(parts, ", ") + fmt.Sprintf(", taking turns, after a %v warm-up; ", r.cfg.warmup)
	}
	p("%s: %stotal %v.%s", mode, turns, r.elapsed.Round(time.Second), r.load)
	r.writeP1(p)
	r.writeP1One(p)
	r.writeP2(p)
	r.writeExtend(p)
	r.writeP3(p)
	r.writeP4(p)
	r.writeP5(p)
	r.writeP5Variants(p)
	r.writeSQL(p)
	r.summary.write(p, "### Targets")
}

func (r *report) writeP1(p func(string, ...any)) {
	if r.p1 == nil {
		return
	}
	floor, tl, rs := r.p1[0], r.p1[1], r.p1[2]
	p("")
	p("### P1 — %d goroutines, distinct keys: Obtain+Release pairs/s", r.cfg.p1Goroutines)
	p("")
	p("%d slices of %v per implementation, taking turns (ABCD DCBA …). Pairs/s: median of the slices; \"vs floor\": median over the cycles of the ratio of the slices of one cycle. CPU: CPU time per pair in the slices, of lockbench's process (client) and of redis-server (server); with both on the same 2 cores, their sum bounds the throughput.",
		len(floor.slices), min(p1Slice, r.cfg.p1Duration))
	p("")
	p("| implementation | pairs/s | slices min–max | vs floor | CPU µs/pair client + server | target | result |")
	p("|---|--:|--:|--:|--:|---|---|")
	for i, res := range r.p1 {
		target, result := "", ""
		vs := pairedRatio(res, floor)
		if i == 1 {
			target = fmt.Sprintf("≥ %.2f× floor", p1VsFloor)
			result = r.target("P1", target, fmt.Sprintf("%.2f× floor", vs), vs >= p1VsFloor)
		}
		errs := ""
		if res.errs > 0 {
			errs = fmt.Sprintf(" (%d failed pairs: %v)", res.errs, res.err)
		}
		cpu := cpuPer(res)
		spread := "—"
		if len(res.slices) > 0 {
			spread = thousands(slices.Min(res.slices)) + "–" + thousands(slices.Max(res.slices))
		}
		p("| %s%s | %s | %s | %.2f× | %s | %s | %s |", res.name, errs, thousands(res.median()), spread, vs, cpu, target, result)
	}
	vs := pairedRatio(tl, rs)
	target := fmt.Sprintf("≥ %.2f× redsync", p1VsRedsync)
	p("| tasklock ÷ redsync v4 | | | %.2f× | | %s | %s |", vs, target, r.target("P1", target, fmt.Sprintf("%.2f× redsync", vs), vs >= p1VsRedsync))
}

func (r *report) writeP2(p func(string, ...any)) {
	if r.p2 == nil {
		return
	}
	floor := r.p2[0].allocs
	p("")
	p("### P2 — allocations per Obtain+Release pair (%d sequential pairs, GOMAXPROCS 1, whole process)", r.cfg.p2Pairs)
	p("")
	p("| implementation | allocs/pair | bytes/pair | vs floor | target | result |")
	p("|---|--:|--:|--:|---|---|")
	for i, res := range r.p2 {
		target, result := "", ""
		if i == 1 {
			target = fmt.Sprintf("≤ %.0f", p2MaxAllocs)
			result = r.target("P2", target+" allocs/pair", fmt.Sprintf("%.1f", res.allocs), res.allocs <= p2MaxAllocs)
		}
		p("| %s | %.1f | %s | %s | %s | %s |", res.name, res.allocs, thousands(res.bytes), ratio(res.allocs, floor), target, result)
	}
}

func (r *report) writeP3(p func(string, ...any)) {
	if r.p3 == nil {
		return
	}
	var redsync, redsyncWaiter float64
	for _, res := range r.p3 {
		if strings.HasPrefix(res.name, "redsync") {
			redsync, redsyncWaiter = res.rate(), res.waiterRate()
		}
	}
	p("")
	p("### P3 — %d goroutines on one key, blocking obtain → release (samples pooled over rounds)", r.cfg.p3Goroutines)
	p("")
	p("Handoff: from just before Release to the return of the next holder's blocking obtain. \"To another\" counts only the handoffs where the next holder is not the goroutine that released. Wait: time inside a blocking obtain that returned the lock. Per goroutine: the fewest and most acquisitions of one goroutine. Calls: Redis round trips per acquisition, counting the release and every attempt that found the key held (subscriptions not counted). By a waiter: the acquisitions per second that went to another goroutine than the one that released (acquisitions/s × the share), the rate at which a process waiting for the lock gets it; the 20× target is on it (see P3 in README.md).")
	p("")
	p("| implementation | acquisitions/s | vs redsync | handoff p50 | handoff p99 | to another: share | p50 | p99 | wait p50 | wait p99 | per goroutine | calls | gave up | by a waiter: acquisitions/s | vs redsync | p50 ≤ %v | by a waiter ≥ %.0f× redsync |", p3MaxP50, p3VsRedsync)
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
	for _, res := range r.p3 {
		p50 := percentile(res.handoffs, 0.50)
		share := 0.0
		if len(res.handoffs) > 0 {
			share = float64(len(res.toOther)) / float64(len(res.handoffs))
		}
		latTarget, rateTarget := "", ""
		if strings.HasPrefix(res.name, "tasklock") {
			latTarget = r.target("P3", fmt.Sprintf("%s: handoff p50 ≤ %v", res.name, p3MaxP50), dur(p50), len(res.handoffs) > 0 && p50 <= p3MaxP50)
			rateTarget = r.target("P3", fmt.Sprintf("%s: acquisitions/s by a waiter ≥ %.0f× redsync's", res.name, p3VsRedsync), ratio(res.waiterRate(), redsyncWaiter), redsyncWaiter > 0 && res.waiterRate() >= p3VsRedsync*redsyncWaiter)
		}
		name := res.name
		if res.errs > 0 {
			name += fmt.Sprintf(" (%d errors: %v)", res.errs, res.err)
		}
		lo, hi := 0, 0
		if len(res.perG) > 0 {
			lo, hi = slices.Min(res.perG), slices.Max(res.perG)
		}
		p("| %s | %s | %s | %s | %s | %.1f%% | %s | %s | %s | %s | %s–%s | %.1f | %d | %s | %s | %s | %s |", name, thousands(res.rate()), ratio(res.rate(), redsync),
			dur(p50), dur(percentile(res.handoffs, 0.99)), 100*share, dur(percentile(res.toOther, 0.50)), dur(percentile(res.toOther, 0.99)),
			dur(percentile(res.waits, 0.50)), dur(percentile(res.waits, 0.99)), thousands(float64(lo)), thousands(float64(hi)),
			res.callsPerAcq(), res.giveUps, thousands(res.waiterRate()), ratio(res.waiterRate(), redsyncWaiter), latTarget, rateTarget)
	}
	p("")
	for _, res := range r.p3 {
		p("- %s: %s.", res.name, res.note)
	}
}

func (r *report) writeP4(p func(string, ...any)) {
	res := r.p4
	if res == nil {
		return
	}
	n := res.locks
	perCycle := res.perCycle()
	maxRT := float64(n) / p4PerLeases
	p("")
	p("### P4 — keep %s locks alive (TTL %v, renewal on)", thousands(float64(n)), p4TTL)
	p("")
	p("Obtained by 16 goroutines in %v. Counted over %v: %s lease renewals = %.2f renewal cycles of all %s locks; %d round trips = %d pipelines (%d commands) + %d single commands.",
		res.obtainTime.Round(time.Millisecond), res.window.Round(time.Millisecond), thousands(float64(res.renewed)), res.cycles, thousands(float64(n)),
		res.roundTrips, res.pipelines, res.piped, res.single)
	p("")
	p("| measure | tasklock (measured) | redsync v4 / bsm/redislock (computed, not measured) | target | result |")
	p("|---|--:|---|---|---|")
	p("| store round trips per renewal cycle | %.1f | %s: one Mutex.Extend / Lock.Refresh call per lock, neither has a batch call | ≤ %.0f | %s |",
		perCycle, thousands(float64(n)), maxRT, r.target("P4", fmt.Sprintf("≤ %.0f round trips per cycle for %s leases", maxRT, thousands(float64(n))), fmt.Sprintf("%.1f", perCycle), res.cycles > 0 && perCycle <= maxRT))
	p("| leases per round trip | %s | 1 | ≥ %d | |", thousands(float64(n)/perCycle), p4PerLeases)
	p("| goroutines while holding (largest rise over the baseline) | %+d | the libraries start none; a hand-rolled watchdog per lock adds %s | O(1): ≤ %d | %s |",
		res.goroutineDelta, thousands(float64(n)), p4MaxGoroutine, r.target("P4", "O(1) goroutines", fmt.Sprintf("%+d", res.goroutineDelta), res.goroutineDelta <= p4MaxGoroutine))
	samples := make([]string, len(res.heapSamples))
	for i, v := range res.heapSamples {
		samples[i] = strconv.Itoa(int(v))
	}
	p("| heap per held lock (median of %s B, after GC) | %.0f B | — | ≤ %.0f B | %s |", strings.Join(samples, ", "), res.heapPerLock, p4MaxHeap,
		r.target("P4", fmt.Sprintf("≤ %.0f B heap per held lock", p4MaxHeap), fmt.Sprintf("%.0f B", res.heapPerLock), res.heapPerLock <= p4MaxHeap))
	p("| locks lost while held | %d | — | 0 | %s |", res.lost, r.target("P4", "no lock lost", strconv.FormatInt(res.lost, 10), res.lost == 0))
}

// deps names the versions of the libraries built in.
func deps() string {
	return depVersions("github.com/redis/go-redis/v9", "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock",
		"github.com/jackc/pgx/v5", "github.com/lib/pq", "cirello.io/pglock", "github.com/go-sql-driver/mysql",
		"github.com/sanketplus/go-mysql-lock", "modernc.org/sqlite")
}

// depVersions names the versions of the modules built in, of those asked.
func depVersions(want ...string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "library versions unknown"
	}
	var out []string
	for _, path := range want {
		for _, d := range bi.Deps {
			if d.Path == path {
				out = append(out, strings.TrimPrefix(path, "github.com/")+" "+d.Version)
				break
			}
		}
	}
	return strings.Join(out, ", ")
}

func ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// thousands formats v rounded, with thin commas: 36,120.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

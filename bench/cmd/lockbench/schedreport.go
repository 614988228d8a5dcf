package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The targets of P5 (DESIGN.md, "Performance targets").
const (
	p5MaxLateP99  = 100 * time.Millisecond
	p5MaxRTPerRun = 1.0
	// p5ScaleJobs is the size at which P5 asks only that every tick run
	// once (issue 16, item 1): its duplicates and never-run ticks are
	// judged too.
	p5ScaleJobs = 30000
)

// writeP5 prints P5: one column per measurement, the targets judged on the
// first (the DESIGN workload; in -quick, the smaller one).
func (r *report) writeP5(p func(string, ...any)) {
	if r.p5 == nil {
		return
	}
	sp := newSchedParams(r.cfg)
	var ok []*schedResult
	for _, res := range r.p5 {
		if res.err == nil {
			ok = append(ok, res)
		}
	}
	p("")
	p("### P5 — scheduler: jobs `@every 1s` on %d nodes, one ledger (redisstore)", schedNodes)
	p("")
	if r.cfg.p5Prefer {
		p("")
		p("With `Config.PreferredNodes` (-p5prefer): each job's tick is claimed by its preferred node, by the others 1 s later as a fallback.")
	}
	if r.cfg.p5Ahead > 0 {
		p("")
		p("The second column is P5's first size again with `Config.ClaimAhead` %v (-p5ahead): each job's tick is claimed, its lock taken and its running record written up to %v before the tick, and the handler starts at the tick.", r.cfg.p5Ahead, r.cfg.p5Ahead)
	}
	p("%d `schedule.Scheduler`s in lockbench's process, each with its own go-redis client (default options, a counting hook), Locker and `redisstore.Store`, on one private redis-server started per measurement; every node adds the same jobs (`@every 1s`, defaults but MisfireWindow 5 s; OverlapSkip: each run holds the job's lock), whose handler records (job, tick, node, fence) in an in-memory oracle and returns. Counted: the ticks of %v after a %v warm-up, and the same %v of wall time for round trips, runs and CPU; then up to %v for the window's last ticks to run. Lateness: handler start − tick. Round trips: all three clients' single commands + pipelines ÷ handler calls in the window.",
		schedNodes, sp.window, sp.warmup, sp.window, sp.drain)
	for _, res := range r.p5 {
		if res.err != nil {
			p("")
			p("**%s not run**: %v", res.label(), res.err)
		}
	}
	if len(ok) == 0 {
		return
	}
	head := "| measure |"
	sep := "|---|"
	for _, res := range ok {
		head += fmt.Sprintf(" %s |", res.label())
		sep += "--:|"
	}
	p("")
	p("%s target (%s jobs) | result |", head, thousands(float64(ok[0].jobs)))
	p("%s---|---|", sep)
	row := func(name string, f func(*schedResult) string, target, result string) {
		cells := make([]string, len(ok))
		for i, res := range ok {
			cells[i] = f(res)
		}
		p("| %s | %s | %s | %s |", name, strings.Join(cells, " | "), target, result)
	}
	first := ok[0]
	row("startup: New + Add + Start of 3 nodes", func(s *schedResult) string { return dur(s.startup) }, "", "")
	row("(job, tick) pairs in the window", func(s *schedResult) string { return thousands(float64(s.jobs * s.ticks)) }, "", "")
	row("runs/s (handler calls in the window ÷ its length)", func(s *schedResult) string { return thousands(float64(s.runs) / s.window.Seconds()) },
		fmt.Sprintf("%s (every tick)", thousands(float64(first.jobs))), "")
	row("tick lateness p50", func(s *schedResult) string { return dur(percentile(s.late, 0.50)) }, "", "")
	// Lateness is judged on the first measurement and on the one with
	// ClaimAhead; duplicates and never-run ticks on those and on the one
	// at p5ScaleJobs.
	lateJudged := []*schedResult{first}
	judged := []*schedResult{first}
	for _, s := range ok[1:] {
		if s.ahead > 0 {
			lateJudged = append(lateJudged, s)
		}
		if s.jobs == p5ScaleJobs || s.ahead > 0 {
			judged = append(judged, s)
		}
	}
	labels := func(rs []*schedResult) string {
		if len(rs) == 1 {
			return ""
		}
		parts := make([]string, len(rs))
		for i, s := range rs {
			parts[i] = s.label()
		}
		return " (" + strings.Join(parts, "; ") + ")"
	}
	lates := make([]string, len(lateJudged))
	for i, s := range lateJudged {
		p99 := percentile(s.late, 0.99)
		lates[i] = r.target("P5", fmt.Sprintf("tick lateness p99 ≤ %v (%s, %d nodes)", p5MaxLateP99, s.label(), schedNodes),
			dur(p99), len(s.late) > 0 && p99 <= p5MaxLateP99)
	}
	row("tick lateness p99", func(s *schedResult) string { return dur(percentile(s.late, 0.99)) },
		fmt.Sprintf("≤ %v", p5MaxLateP99)+labels(lateJudged), strings.Join(lates, ", "))
	row("tick lateness max", (*schedResult).lateMaxCell, "", "")
	scale := labels(judged)
	judgeOnce := func(what string, v func(*schedResult) int64) string {
		results := make([]string, len(judged))
		for i, s := range judged {
			results[i] = r.target("P5", fmt.Sprintf("%s (%s, %d nodes)", what, s.label(), schedNodes), thousands(float64(v(s))), v(s) == 0)
		}
		return strings.Join(results, ", ")
	}
	row("duplicate runs of a (job, tick)", func(s *schedResult) string { return thousands(float64(s.dups)) },
		"0"+scale, judgeOnce("0 duplicate ticks", func(s *schedResult) int64 { return s.dups }))
	row("window ticks that never ran", func(s *schedResult) string { return thousands(float64(s.missed)) },
		"0"+scale, judgeOnce("every tick of the window runs", func(s *schedResult) int64 { return int64(s.missed) }))
	row("of the runs: catch-up (> 5 s late, misfire policy)", func(s *schedResult) string { return thousands(float64(s.catchUp)) }, "", "")
	row("ledger history of the window's ticks", (*schedResult).historyCell, "", "")
	row("runs per node (window ticks)", (*schedResult).perNodeCell, "", "")
	row("fence not above the job's previous tick's (of them, run on the node that ran that tick)", func(s *schedResult) string {
		return fmt.Sprintf("%s (%s)", thousands(float64(s.fenceOrder)), thousands(float64(s.fenceOrderNode)))
	}, "0", "")
	rt := first.rtPerRun()
	row("**store round trips per run**", func(s *schedResult) string { return fmt.Sprintf("%.2f", s.rtPerRun()) },
		fmt.Sprintf("≤ %.0f", p5MaxRTPerRun), r.target("P5", fmt.Sprintf("≤ %.0f store round trips per run", p5MaxRTPerRun), fmt.Sprintf("%.2f", rt), first.runs > 0 && rt <= p5MaxRTPerRun))
	per := func(v int64, s *schedResult) string {
		if s.runs == 0 {
			return "—"
		}
		return fmt.Sprintf("%.3f", float64(v)/float64(s.runs))
	}
	row("… job lock scripts alone (obtain, release) per run", func(s *schedResult) string { return per(s.c.lockScripts, s) }, "", "")
	row("… history pipelines (RecordRuns) per run", func(s *schedResult) string { return per(s.c.recordPipes, s) }, "", "")
	row("… claim pipelines per run (claim scripts in them)", func(s *schedResult) string {
		return fmt.Sprintf("%s (%s)", per(s.c.claimPipes, s), thousands(float64(s.c.claimScripts)))
	}, "", "")
	row("… job-state polls, other commands and pipelines", func(s *schedResult) string {
		return fmt.Sprintf("%d, %d, %d", s.c.statePolls, s.c.otherSingle, s.c.otherPipes)
	}, "", "")
	row("lock events: released / not obtained / lost", func(s *schedResult) string {
		return fmt.Sprintf("%s / %s / %s", thousands(float64(s.c.released)), thousands(float64(s.c.notObtained)), thousands(float64(s.c.lost)))
	}, "", "")
	row("CPU µs per run, lockbench + redis-server", func(s *schedResult) string {
		c, sv := s.cpuPerRun()
		if c == 0 && sv == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f + %.0f = %.0f", c, sv, c+sv)
	}, "", "")
	row(cmdStatsRow, (*schedResult).cmdStatsPerRun, "", "")
	row("goroutines: largest rise in the window (per job); in the warm-up", func(s *schedResult) string {
		return fmt.Sprintf("%+d (%.2f); %+d", s.goroutines, float64(s.goroutines)/float64(s.jobs), s.warmupGoroutines)
	}, "", "")
	row("heap per job, 3 nodes (median, after GC)", func(s *schedResult) string { return fmt.Sprintf("%.0f B", s.heapPerJob) }, "", "")
	row("Shutdown of the 3 nodes (after the window)", (*schedResult).shutdownCell, "", "")
	row("warnings logged; Redis calls that failed (whole measurement)", func(s *schedResult) string {
		return thousands(float64(s.warnings)) + "; " + thousands(float64(s.storeErrs))
	}, "", "")
	for _, res := range ok {
		if res.firstWarn != "" {
			p("")
			p("- %s, first warning: %s", res.label(), res.firstWarn)
		}
		if res.firstStoreErr != "" {
			p("")
			p("- %s, first failed Redis call: %s", res.label(), res.firstStoreErr)
		}
	}
}

// label names a P5 measurement: its jobs, and its ClaimAhead.
func (s *schedResult) label() string {
	l := thousands(float64(s.jobs)) + " jobs"
	if s.ahead > 0 {
		l += fmt.Sprintf(", ClaimAhead %v", s.ahead)
	}
	return l
}

// p5Failures lists the P5 measurements that could not run.
func p5Failures(rs []*schedResult) []string {
	var out []string
	for _, r := range rs {
		if r.err != nil {
			out = append(out, r.err.Error())
		}
	}
	return out
}

// cmdStatsRow names the row of cmdStatsPerRun.
const cmdStatsRow = "redis-server wall µs per run by command (commandstats, scripts and the commands in them; calls per run)"

// cmdStatsPerRun is the window's commandstats per run: the 8 commands that
// took redis-server most time, "—" when unknown.
func (s *schedResult) cmdStatsPerRun() string {
	if len(s.cmdStats) == 0 || s.runs == 0 {
		return "—"
	}
	var parts []string
	for _, c := range s.cmdStats[:min(len(s.cmdStats), 8)] {
		if c.name == "config|resetstat" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f (%.2f)", c.name, float64(c.usec)/float64(s.runs), float64(c.calls)/float64(s.runs)))
	}
	return strings.Join(parts, ", ")
}

// historyCell is the ledger history row's cell: the window's records by
// status, or the error reading them.
func (s *schedResult) historyCell() string {
	if s.histErr != nil {
		return "error: " + s.histErr.Error()
	}
	keys := make([]string, 0, len(s.statuses))
	for k := range s.statuses {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", k, thousands(float64(s.statuses[k]))))
	}
	return strings.Join(parts, ", ")
}

// lateMaxCell is the largest lateness, "—" with none.
func (s *schedResult) lateMaxCell() string {
	if len(s.late) == 0 {
		return "—"
	}
	return dur(slices.Max(s.late))
}

// perNodeCell is the window's runs (shard-runs) of each node.
func (s *schedResult) perNodeCell() string {
	parts := make([]string, schedNodes)
	for i, v := range s.perNode {
		parts[i] = thousands(float64(v))
	}
	return strings.Join(parts, " / ")
}

// shutdownCell is how long the nodes' Shutdown took, or that it timed out.
func (s *schedResult) shutdownCell() string {
	if s.shutdownErr != nil {
		return fmt.Sprintf("> %v: %v", s.shutdown.Round(time.Second), s.shutdownErr)
	}
	return dur(s.shutdown)
}

package main

import (
	"fmt"
	"strings"
)

// writeP5Variants prints P5-features and P5-shard: a table per measurement,
// its duplicates and never-run shard-runs judged as targets (0), its
// lateness and round trips set beside P5's targets.
func (r *report) writeP5Variants(p func(string, ...any)) {
	if r.p5x == nil {
		return
	}
	sp := newSchedParams(r.cfg)
	for _, res := range r.p5x {
		p("")
		switch res.id {
		case "P5-features":
			p("### P5-features — scheduler features on: %s jobs `@every 1s` on %d nodes, one ledger (redisstore)", thousands(float64(res.jobs)), schedNodes)
			p("")
			p("P5's harness (Config.NodeLister set, so that shards spread over the nodes), with every 10th job (i mod 10 = 9) waiting for the job before it (`After`, `Within` %v), every 10th (i mod 10 = 3) in one of %d pools of %d permits (`Config.Pools`, `Job.Pool`), every 10th (i mod 10 = 5) with `MaxConcurrent` %d, and every 1,000th (i mod 1000 = 7) of %d shards. A slot is a (job, tick, shard); counted over the ticks of %v after a %v warm-up, then up to %v for them to run.",
				featWithin, featPools, featPoolSize, featMaxConc, featShards, sp.window, sp.warmup, sp.drain)
		default:
			p("### P5-shard — %s jobs × %d shards `@every 1s` on %d nodes, one ledger (redisstore)", thousands(float64(res.jobs)), shardJobShards, schedNodes)
			p("")
			p("P5's harness (Config.NodeLister set: each node claims the shards k with k mod 3 = its rank, then the unclaimed ones a poll later); the oracle is keyed by (job, tick, shard): each tick's %d shard-runs must each run once. Counted over the ticks of %v after a %v warm-up, then up to %v for them to run. Lateness and round trips are per shard-run.",
				shardJobShards, sp.window, sp.warmup, sp.drain)
		}
		if res.err != nil {
			p("")
			p("**not run**: %v", res.err)
			continue
		}
		p("")
		p("| measure | %s | target | result |", res.id)
		p("|---|--:|---|---|")
		row := func(name, v, target, result string) { p("| %s | %s | %s | %s |", name, v, target, result) }
		row("load average (1 min) before → after", res.loadBefore+" → "+res.loadAfter, "", "")
		row("startup: New + Add + Start of 3 nodes", dur(res.startup), "", "")
		var kinds []string
		for _, k := range res.cats {
			kinds = append(kinds, fmt.Sprintf("%s %s", thousands(float64(res.catJobs[k])), k))
		}
		row("jobs", strings.Join(kinds, ", "), "", "")
		row("shard-runs per tick (a job not sharded: 1)", thousands(float64(res.units)), "", "")
		row("(job, tick, shard) slots in the window", thousands(float64(res.units*res.ticks)), "", "")
		row("runs/s (handler calls in the window ÷ its length)", thousands(float64(res.runs)/res.window.Seconds()), thousands(float64(res.units))+" (every slot)", "")
		row("lateness p50", dur(percentile(res.late, 0.50)), "", "")
		p99 := percentile(res.late, 0.99)
		within := func(ok bool) string {
			if ok {
				return "within P5's"
			}
			return "**above P5's**"
		}
		row("lateness p99", dur(p99), fmt.Sprintf("P5's: ≤ %v", p5MaxLateP99), within(len(res.late) > 0 && p99 <= p5MaxLateP99))
		row("lateness max", res.lateMaxCell(), "", "")
		if len(res.cats) > 1 {
			for _, k := range res.cats {
				row("… "+k+": lateness p50 / p99; never ran", fmt.Sprintf("%s / %s; %s", dur(percentile(res.catLate[k], 0.50)), dur(percentile(res.catLate[k], 0.99)), thousands(float64(res.catMissed[k]))), "", "")
			}
		}
		row("duplicate runs of a slot", thousands(float64(res.dups)), "0", r.target(res.id, "0 duplicate shard-runs", thousands(float64(res.dups)), res.dups == 0))
		row("window slots that never ran", thousands(float64(res.missed)), "0", r.target(res.id, "every shard-run of the window runs", thousands(float64(res.missed)), res.missed == 0))
		row("of the runs: catch-up (> 5 s late); outside the window", thousands(float64(res.catchUp))+"; "+thousands(float64(res.outside)), "", "")
		row("ledger history of the window's ticks", res.historyCell(), "", "")
		row("shard-runs per node (window slots)", res.perNodeCell(), "", "")
		row("fence not above the (job, shard)'s previous tick's", thousands(float64(res.fenceOrder)), "0", "")
		rt := res.rtPerRun()
		row("**store round trips per run**", fmt.Sprintf("%.2f", rt), fmt.Sprintf("P5's: ≤ %.0f", p5MaxRTPerRun), within(res.runs > 0 && rt <= p5MaxRTPerRun))
		per := func(v int64) string {
			if res.runs == 0 {
				return "—"
			}
			return fmt.Sprintf("%.3f", float64(v)/float64(res.runs))
		}
		row("… scripts sent alone (locks, permits, dependency reads) per run", per(res.c.lockScripts), "", "")
		row("… history pipelines (RecordRuns) per run", per(res.c.recordPipes), "", "")
		row("… claim pipelines per run (claim scripts in them)", fmt.Sprintf("%s (%s)", per(res.c.claimPipes), thousands(float64(res.c.claimScripts))), "", "")
		row("… job-state polls, other commands and pipelines", fmt.Sprintf("%d, %d, %d", res.c.statePolls, res.c.otherSingle, res.c.otherPipes), "", "")
		row("lock events: obtained / released / not obtained / lost", fmt.Sprintf("%s / %s / %s / %s", thousands(float64(res.c.obtained)), thousands(float64(res.c.released)), thousands(float64(res.c.notObtained)), thousands(float64(res.c.lost))), "", "")
		cpu := "—"
		if c, sv := res.cpuPerRun(); c != 0 || sv != 0 {
			cpu = fmt.Sprintf("%.0f + %.0f = %.0f", c, sv, c+sv)
		}
		row("CPU µs per run, lockbench + redis-server", cpu, "", "")
		row(cmdStatsRow, res.cmdStatsPerRun(), "", "")
		row("goroutines: largest rise in the window; in the warm-up", fmt.Sprintf("%+d; %+d", res.goroutines, res.warmupGoroutines), "", "")
		row("heap per job, 3 nodes (median, after GC)", fmt.Sprintf("%.0f B", res.heapPerJob), "", "")
		row("Shutdown of the 3 nodes (after the window)", res.shutdownCell(), "", "")
		row("warnings logged; Redis calls that failed (whole measurement)", thousands(float64(res.warnings))+"; "+thousands(float64(res.storeErrs)), "", "")
		if res.firstWarn != "" {
			p("")
			p("- first warning: %s", res.firstWarn)
		}
		if res.firstStoreErr != "" {
			p("")
			p("- first failed Redis call: %s", res.firstStoreErr)
		}
	}
}

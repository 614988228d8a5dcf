//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/ledger"
)

// TestServePreferredNodeStopped: three serve nodes on one Redis, whose
// ledger keeps claim marks, so each plain job's tick is claimed at the
// tick by its preferred node only. One node is stopped (SIGSTOP) for a few
// ticks, shorter than its node lease, so the others still count it live:
// every tick of its jobs in that window runs once, on the other nodes, a
// fallback delay (1s) late; once it is continued (SIGCONT) nothing runs
// twice.
func TestServePreferredNodeStopped(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// Six jobs, each run a race-enabled `tasklock __supervise` and a
	// shell: with twelve, on a 2-core machine whose race binaries start
	// slowly (150 ms of CPU each), the runs piled up (load average 100)
	// and missed their ticks, and every test running beside this one
	// timed out with them. j01 is node-1's whatever the count.
	const jobs = 6
	var cfg strings.Builder
	cfg.WriteString("store: " + url + "\npreferred_nodes: true\njobs:\n")
	for i := range jobs {
		// overlap: allow, so that a run that takes over a second on a
		// loaded machine does not make the next tick's a skip: what is
		// tested is that every tick is claimed, and run, once.
		cfg.WriteString(indent(fmt.Sprintf("name: j%02d\nschedule: \"@every 1s\"\noverlap: allow\ncommand: [sh, -c, %q]\n",
			i, `echo "$TASKLOCK_JOB $TASKLOCK_TICK $TASKLOCK_NODE" >> "$OUT"`)))
	}
	nodes := startNodes(t, 3, writeConfig(t, dir, cfg.String()), out)
	stopped := nodes[1]
	paused := false
	cont := func() {
		if paused {
			stopped.Signal(syscall.SIGCONT)
			paused = false
		}
	}
	defer cont() // whatever happens, so that the cleanup can end it

	// Wait until every job runs on one node, tick after tick: the nodes
	// agree on the live nodes. The stopped node's jobs are those it runs.
	var mine []string
	waitJobLines(t, out, 30*time.Second, "every job running on one node for 3 ticks", func(runs map[string]map[string]string) bool {
		mine = mine[:0]
		for i := range jobs {
			byTick := runs[fmt.Sprintf("j%02d", i)]
			last := lastTicks(byTick, 3)
			if len(last) < 3 {
				return false
			}
			for _, tick := range last {
				if byTick[tick] != byTick[last[0]] {
					return false
				}
			}
			if byTick[last[0]] == "node-1" {
				mine = append(mine, fmt.Sprintf("j%02d", i))
			}
		}
		return len(mine) > 0
	})
	t.Logf("node-1 prefers %v", mine)

	// Stop node-1 between ticks: the first tick it sleeps through is the
	// next one.
	clitest.WaitFor(t, 10*time.Second, func() bool {
		frac := time.Now().Nanosecond()
		return frac >= 300e6 && frac <= 600e6
	}, "a moment between ticks")
	stopped.Signal(syscall.SIGSTOP)
	paused = true
	stopAt := time.Now()
	first := stopAt.Truncate(time.Second).Add(time.Second) // the first tick node-1 sleeps through
	last := first.Add(3 * time.Second)
	ranThrough := func(runs map[string]map[string]string) bool {
		for _, job := range mine {
			if _, ok := runs[job][last.UTC().Format(time.RFC3339)]; !ok {
				return false
			}
		}
		return true
	}
	if !clitest.Within(30*time.Second, func() bool { runs, _ := readJobLines(t, out); return ranThrough(runs) }) {
		// Go on: the ledger's records below say what became of them.
		t.Errorf("node-1's jobs did not run through %v on the others within 30s", last)
	}
	cont()
	after := time.Now().Truncate(time.Second).Add(3 * time.Second)
	waitJobLines(t, out, 30*time.Second, "node-1 to run its jobs again", func(runs map[string]map[string]string) bool {
		for _, job := range mine {
			if runs[job][after.UTC().Format(time.RFC3339)] != "node-1" {
				return false
			}
		}
		return true
	})
	stopNodes(t, nodes)

	// The ledger: every tick of the window has exactly one record, ok; node-1's
	// jobs' ran elsewhere, at least most of a fallback delay late.
	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	l := store.(ledger.Ledger)
	for i := range jobs {
		job := fmt.Sprintf("j%02d", i)
		rs, err := l.Runs(context.Background(), ledger.RunQuery{Job: job, From: first, To: last.Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		seen := make(map[int64]bool)
		for _, r := range rs {
			if seen[r.Tick.Unix()] {
				t.Errorf("%s@%v: a second record %+v", job, r.Tick, r)
			}
			seen[r.Tick.Unix()] = true
			if r.Status != ledger.RunOK || r.Attempt != 1 {
				t.Errorf("%s@%v: %s attempt %d (%s), want ok", job, r.Tick, r.Status, r.Attempt, r.Error)
			}
			ofStopped := slices.Contains(mine, job)
			if ofStopped && r.Node == "node-1" {
				t.Errorf("%s@%v ran on node-1, which was stopped", job, r.Tick)
			}
			if late := r.Start.Sub(r.Tick); ofStopped && late < 900*time.Millisecond {
				t.Errorf("%s@%v ran %v after its tick on %s: before the fallback delay", job, r.Tick, late, r.Node)
			}
		}
		if len(seen) != 4 {
			t.Errorf("%s: records for %d of the 4 ticks %v..%v: %+v", job, len(seen), first, last, rs)
		}
	}
	runs, dup := readJobLines(t, out)
	if len(dup) > 0 {
		t.Errorf("ran twice: %v", dup)
	}
	if len(runs) != jobs {
		t.Errorf("runs of %d jobs, want %d", len(runs), jobs)
	}
}

// readJobLines reads the lines "job tick node" the jobs wrote: by job, by
// tick, the node; and the (job, tick) written more than once.
func readJobLines(t *testing.T, out string) (map[string]map[string]string, []string) {
	t.Helper()
	b, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	runs := make(map[string]map[string]string)
	var dup []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		if runs[f[0]] == nil {
			runs[f[0]] = make(map[string]string)
		}
		if n, ok := runs[f[0]][f[1]]; ok {
			dup = append(dup, fmt.Sprintf("%s@%s on %s and %s", f[0], f[1], n, f[2]))
		}
		runs[f[0]][f[1]] = f[2]
	}
	return runs, dup
}

// waitJobLines polls the jobs' output until cond holds.
func waitJobLines(t *testing.T, out string, timeout time.Duration, what string, cond func(map[string]map[string]string) bool) {
	t.Helper()
	clitest.WaitFor(t, timeout, func() bool {
		runs, _ := readJobLines(t, out)
		return cond(runs)
	}, what)
}

// lastTicks returns the newest n ticks of byTick (RFC 3339 UTC sorts by
// time), oldest first.
func lastTicks(byTick map[string]string, n int) []string {
	var ticks []string
	for tick := range byTick {
		ticks = append(ticks, tick)
	}
	slices.Sort(ticks)
	return ticks[max(len(ticks)-n, 0):]
}

// TestServeClaimAhead: with claim_ahead, serve claims a job's tick, and
// writes its running record, before the tick (seen in the ledger while the
// tick is still to come), and starts the command at the tick: every tick
// once, none started before its tick.
func TestServeClaimAhead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "ledger.db")
	out := filepath.Join(dir, "out")
	cfg := "store: " + url + "\nclaim_ahead: 600ms\njobs:\n" +
		indent(fmt.Sprintf("name: tick\nschedule: \"@every 1s\"\ncommand: [sh, -c, %q]\n", `echo "$TASKLOCK_JOB $TASKLOCK_TICK $TASKLOCK_NODE" >> "$OUT"`))
	nodes := startNodes(t, 2, writeConfig(t, dir, cfg), out)
	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	l := store.(ledger.Ledger)
	clitest.WaitFor(t, 20*time.Second, func() bool {
		rs, err := l.Runs(context.Background(), ledger.RunQuery{Job: "tick", From: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for _, r := range rs {
			if r.Status == ledger.RunRunning && r.Tick.After(now) {
				return true
			}
		}
		return false
	}, "a running record of a tick still to come")
	waitJobLines(t, out, 30*time.Second, "5 ticks run", func(runs map[string]map[string]string) bool { return len(runs["tick"]) >= 5 })
	stopNodes(t, nodes)
	if _, dup := readJobLines(t, out); len(dup) > 0 {
		t.Errorf("ticks ran twice: %v", dup)
	}
	// Every record of the ledger, which is new: the 5 ticks run may
	// include one claimed before the wait above began.
	rs, err := l.Runs(context.Background(), ledger.RunQuery{Job: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range rs {
		if r.Status != ledger.RunOK {
			continue
		}
		ok++
		if r.Start.Before(r.Tick) {
			t.Errorf("tick %v started %v before it", r.Tick, r.Tick.Sub(r.Start))
		}
	}
	if ok < 5 {
		t.Errorf("%d ok records, want at least 5, one per tick run: %+v", ok, rs)
	}
}

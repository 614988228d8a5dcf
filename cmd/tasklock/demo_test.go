//go:build unix

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/ledger"
)

var (
	demoSummaryRE = regexp.MustCompile(`summary: (\d+) ticks due, (\d+) runs, (\d+) duplicates, (\d+) missed, (\d+) skipped, (\d+) lost, (\d+) interrupted, (\d+) failed`)
	demoShardRE   = regexp.MustCompile(`sharded: (\d+) shard-runs due, (\d+) ran, (\d+) duplicates, (\d+) missed, (\d+) skipped, (\d+) lost, (\d+) interrupted, (\d+) retaken, (\d+) failed`)
	demoNodeRE    = regexp.MustCompile(`\*\* (node-\d+b?) started, pid (\d+)`)
)

// demoPids returns the pids of the nodes the demo says it started.
func demoPids(out string) map[string]int {
	pids := map[string]int{}
	for _, m := range demoNodeRE.FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[2])
		pids[m[1]] = pid
	}
	return pids
}

// waitGone waits until none of pids is alive.
func waitGone(t *testing.T, pids map[string]int, timeout time.Duration) {
	t.Helper()
	clitest.WaitFor(t, timeout, func() bool {
		for _, pid := range pids {
			if clitest.Alive(pid) {
				return false
			}
		}
		return true
	}, "the demo's nodes to be gone")
}

// startLongDemo starts a demo of two nodes that runs a minute, with more
// flags, and waits for its first tick line.
func startLongDemo(t *testing.T, flags ...string) (*proc, map[string]int) {
	t.Helper()
	p := tl.Start(t, []string{"TMPDIR=" + t.TempDir()}, append([]string{"demo", "--duration", "60s", "--nodes", "2"}, flags...)...)
	p.WaitOutput("     1s  ", 60*time.Second)
	pids := demoPids(p.Stdout())
	if len(pids) != 2 {
		t.Fatalf("want 2 nodes, got %v\n%s", pids, p.Stdout())
	}
	return p, pids
}

func TestDemo(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	// serve takes $TASKLOCK_STORE and $TASKLOCK_NODE over its file: the
	// demo's nodes must not.
	p := tl.Start(t, []string{"TMPDIR=" + tmp, "TASKLOCK_STORE=mem://", "TASKLOCK_NODE=shadow"}, "demo", "--duration", "8s")
	code := p.Wait(90 * time.Second)
	out := p.Stdout()
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, p.Stderr())
	}
	m := demoSummaryRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary:\n%s", out)
	}
	n := make([]int, len(m))
	for i := 1; i < len(m); i++ {
		n[i], _ = strconv.Atoi(m[i])
	}
	due, runs, dups, missed, skipped, lost := n[1], n[2], n[3], n[4], n[5], n[6]
	if due != 24 || runs == 0 || dups != 0 || runs+missed+skipped+lost > due {
		t.Errorf("summary %q: want 24 ticks due (3 jobs x 8s), some runs, 0 duplicates, runs+missed+skipped+lost <= due\n%s", m[0], out)
	}
	for _, s := range []string{"killed with SIGKILL", "restarted as node-", "OK: no tick ran twice"} {
		if !strings.Contains(out, s) {
			t.Errorf("stdout lacks %q:\n%s", s, out)
		}
	}
	pids := demoPids(out)
	if len(pids) != 4 {
		t.Errorf("want 3 nodes and a restarted one, got %v\n%s", pids, out)
	}
	waitGone(t, pids, 5*time.Second)
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the demo left %v in its temporary directory", left)
	}
	if rows := regexp.MustCompile(`(?m)^ +\d+s  \d\d:\d\d:\d\d  `).FindAllString(out, -1); len(rows) != 8 {
		t.Errorf("%d tick lines, want 8:\n%s", len(rows), out)
	}
	// The sharded job: 3 shard-runs a tick, each run once; the table shows
	// which node ran each shard.
	sm := demoShardRE.FindStringSubmatch(out)
	if sm == nil {
		t.Fatalf("no summary of the sharded job's shard-runs:\n%s", out)
	}
	sn := make([]int, len(sm))
	for i := 1; i < len(sm); i++ {
		sn[i], _ = strconv.Atoi(sm[i])
	}
	sdue, sran, sdups, smissed, sskipped, slost := sn[1], sn[2], sn[3], sn[4], sn[5], sn[6]
	if sdue != 24 || sran == 0 || sdups != 0 || sran+smissed+sskipped+slost > sdue {
		t.Errorf("%q: want 24 shard-runs due (3 shards x 8s), some ran, 0 duplicates, ran+missed+skipped+lost <= due\n%s", sm[0], out)
	}
	if !regexp.MustCompile(`  [0-3]/3 (n\d+b?(\(k\))?|-) (n\d+b?(\(k\))?|-) (n\d+b?(\(k\))?|-) `).MatchString(out) {
		t.Errorf("no tick line shows the sharded job's shards and their nodes:\n%s", out)
	}
	t.Logf("%s; %s", m[0], sm[0])
}

// TestDemoInterrupt checks that Ctrl-C stops the nodes and still prints a
// summary, and that --keep keeps a directory whose configurations name a
// program that is still there.
func TestDemoInterrupt(t *testing.T) {
	t.Parallel()
	p, pids := startLongDemo(t, "--keep")
	p.Signal(syscall.SIGINT)
	code := p.Wait(30 * time.Second)
	out := p.Stdout()
	if code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, 128+int(syscall.SIGINT), out, p.Stderr())
	}
	if m := demoSummaryRE.FindStringSubmatch(out); m == nil || m[3] != "0" {
		t.Errorf("no summary with 0 duplicates:\n%s", out)
	}
	waitGone(t, pids, 5*time.Second)

	m := regexp.MustCompile(`(?m)^kept (\S+): `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("--keep: no line naming the kept directory:\n%s", out)
	}
	dir := m[1]
	cfg, err := os.ReadFile(filepath.Join(dir, "node-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Each job runs [program, "demo", <job command>, <runs file>, <work>]:
	// the program must be the kept copy, not this run's (which "go run"
	// deletes), and must still run the job.
	cm := regexp.MustCompile(`command: (\[.*\])`).FindSubmatch(cfg)
	var argv []string
	if cm == nil || json.Unmarshal(cm[1], &argv) != nil || len(argv) < 2 {
		t.Fatalf("no command in node-1.yaml:\n%s", cfg)
	}
	if want := filepath.Join(dir, "tasklock"); argv[0] != want {
		t.Fatalf("the kept configuration runs %s, want the kept copy %s", argv[0], want)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "runs.log"))
	job := exec.Command(argv[0], argv[1:]...)
	job.Env = append(os.Environ(), "TASKLOCK_JOB=alpha", "TASKLOCK_TICK=2026-11-27T00:00:00Z", "TASKLOCK_FENCE=1", "TASKLOCK_NODE=kept")
	if b, err := job.CombinedOutput(); err != nil {
		t.Fatalf("the kept program does not run the job: %v\n%s", err, b)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "runs.log")); len(after) <= len(before) {
		t.Errorf("the job run with the kept program wrote nothing to runs.log")
	}
}

// TestDemoKilled checks that the nodes die with the demo, even when it is
// killed: on Linux the kernel sends them SIGKILL.
func TestDemoKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	t.Parallel()
	p, pids := startLongDemo(t)
	p.Signal(syscall.SIGKILL)
	p.Wait(10 * time.Second)
	waitGone(t, pids, 10*time.Second)
}

func TestDemoLock(t *testing.T) {
	t.Parallel()
	start := time.Now()
	code, out, errOut := tl.Run(t, nil, "demo", "--lock")
	d := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if d >= 10*time.Second {
		t.Errorf("demo took %v, want < 10s", d)
	}
	m := regexp.MustCompile(`summary: (\d+) grants, (\d+) distinct holders, 0 stale writes rejected, max fence (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary with 0 stale writes:\n%s", out)
	}
	grants, _ := strconv.Atoi(m[1])
	holders, _ := strconv.Atoi(m[2])
	if grants < 5 || holders < 2 || m[3] != m[1] {
		t.Errorf("summary %q: want several grants, several holders, max fence = grants", m[0])
	}
	if !strings.Contains(out, "CRASHES") {
		t.Errorf("no worker crashed:\n%s", out)
	}
	if lines := strings.Count(out, "granted after"); lines != grants {
		t.Errorf("%d grant lines for %d grants", lines, grants)
	}
}

// A tick whose running record the killed node wrote before its command
// logged a start is counted as killed before the command ran (it was
// "not run (failed)" before, which it never was), and the summary's sum
// names it.
func TestDemoAccountsKilledBeforeCommand(t *testing.T) {
	victim := &demoNode{name: "node-3"}
	d := &clusterDemo{
		victim: victim,
		execs:  map[tickKey][]demoExec{},
		recs:   map[tickKey]ledger.RunRecord{},
		okOn:   map[tickKey]map[string]bool{},
	}
	k := tickKey{job: "alpha", tick: 100}
	d.recs[k] = ledger.RunRecord{Job: "alpha", Attempt: 1, Node: "node-3", Status: ledger.RunRunning}
	var tl tally
	d.account(&tl, k)
	if tl.cutAtStart != 1 || tl.notRun != 0 || len(tl.notes) != 1 || !strings.Contains(tl.notes[0], "killed before the command ran") {
		t.Errorf("killed at its start: %+v", tl)
	}
	// Another node's running record with no run is still "not run".
	k2 := tickKey{job: "alpha", tick: 101}
	d.recs[k2] = ledger.RunRecord{Job: "alpha", Attempt: 1, Node: "node-1", Status: ledger.RunRunning}
	d.account(&tl, k2)
	if tl.cutAtStart != 1 || tl.notRun != 1 {
		t.Errorf("a live node's record: %+v", tl)
	}
}

// A shard-run the killed node began (its running record) but died before
// its command ran is waited for past the end, like one cut short later,
// and once another node ran it, counted as retaken with a note; it was
// counted as a plain run before, with nothing said of the kill.
func TestDemoRetakeOfAShardKilledAtStart(t *testing.T) {
	d := &clusterDemo{
		victim:   &demoNode{name: "node-3"},
		killedAt: time.Now(),
		t0:       100, t1: 110,
		execs: map[tickKey][]demoExec{},
		recs:  map[tickKey]ledger.RunRecord{},
		okOn:  map[tickKey]map[string]bool{},
		begun: map[tickKey]string{},
	}
	k := tickKey{job: demoShardedJob, tick: 101, shard: 2}
	d.begun[k] = "node-3"
	d.recs[k] = ledger.RunRecord{Job: demoShardedJob, Shard: 2, Attempt: 1, Node: "node-3", Status: ledger.RunInterrupted}
	if pending, unstarted := d.pendingRetake(time.Now()); !pending || !unstarted {
		t.Errorf("not retaken yet: pendingRetake = %v, %v; want true, true", pending, unstarted)
	}
	d.execs[k] = []demoExec{{node: "node-3b"}}
	d.recs[k] = ledger.RunRecord{Job: demoShardedJob, Shard: 2, Attempt: 2, Node: "node-3b", Status: ledger.RunOK}
	if pending, _ := d.pendingRetake(time.Now()); pending {
		t.Error("retaken and recorded ok: still waiting")
	}
	var tl tally
	d.account(&tl, k)
	if tl.runs != 1 || tl.retaken != 1 || tl.interrupted != 1 || tl.duplicates != 0 || len(tl.notes) != 1 ||
		!strings.Contains(tl.notes[0], "killed before the command ran; retaken by node-3b (attempt 2, ok)") {
		t.Errorf("retaken after a kill at its start: %+v", tl)
	}
}

// A shard-run is named by its 0-based index, as jobs history, the
// dashboard and the shard's lock key (…/shard/0) name it, so that a
// note quoting the lock names the same shard as the line it is on.
func TestDemoNamesShardsFromZero(t *testing.T) {
	d := &clusterDemo{
		execs: map[tickKey][]demoExec{},
		recs:  map[tickKey]ledger.RunRecord{},
		okOn:  map[tickKey]map[string]bool{},
	}
	k := tickKey{job: demoShardedJob, tick: 100, shard: 0}
	d.recs[k] = ledger.RunRecord{Job: demoShardedJob, Shard: 0, Shards: clusterShards, Attempt: 1, Node: "node-2", Status: ledger.RunSkipped,
		Error: `schedule: the previous run is still in progress: tasklock: not obtained: "tasklock/sharded/shard/0" is held by node-1`}
	var tl tally
	d.account(&tl, k)
	if len(tl.notes) != 1 || !strings.Contains(tl.notes[0], " shard 0/3: ") || !strings.Contains(tl.notes[0], "shard/0") {
		t.Errorf("notes %q: want the shard-run named shard 0/3, as its lock shard/0", tl.notes)
	}
	if got := d.name(tickKey{job: demoShardedJob, tick: 100, shard: 2}); !strings.HasSuffix(got, " shard 2/3") {
		t.Errorf("name = %q, want it to end with shard 2/3", got)
	}
}

// The demo waits past its end for a shard-run the killed node started only
// while another node's run of it may still come: not for one the killed
// node itself ended ok just before the kill.
func TestDemoWaitsOnlyForARetakeToCome(t *testing.T) {
	d := &clusterDemo{
		victim:   &demoNode{name: "node-1"},
		killedAt: time.Now(),
		t0:       100, t1: 110,
		execs: map[tickKey][]demoExec{},
		recs:  map[tickKey]ledger.RunRecord{},
		okOn:  map[tickKey]map[string]bool{},
	}
	k := tickKey{job: demoShardedJob, tick: 101, shard: 0}
	d.execs[k] = []demoExec{{node: "node-1"}}
	for _, tc := range []struct {
		status ledger.RunStatus
		node   string
		wait   bool
	}{
		{ledger.RunOK, "node-1", false},         // it ended the run itself
		{ledger.RunRunning, "node-1", true},     // cut short: settled and retaken later
		{ledger.RunInterrupted, "node-1", true}, // settled, not retaken yet
		{ledger.RunRunning, "node-2", true},     // retaken, under way
		{ledger.RunOK, "node-2", false},         // retaken, done
	} {
		d.recs[k] = ledger.RunRecord{Job: demoShardedJob, Shard: 0, Attempt: 1, Node: tc.node, Status: tc.status}
		if pending, _ := d.pendingRetake(time.Now()); pending != tc.wait {
			t.Errorf("latest record %s on %s: waits %v, want %v", tc.status, tc.node, pending, tc.wait)
		}
	}
}

// The demo waits past its end, a little, for a shard-run of its last
// ticks that no node claimed at the tick: a free node claims it a poll
// later.
func TestDemoWaitsForALeftoverShard(t *testing.T) {
	d := &clusterDemo{t0: 100, t1: 101, recs: map[tickKey]ledger.RunRecord{}}
	for tick := int64(100); tick <= 101; tick++ {
		for shard := range clusterShards {
			if tick == 101 && shard == 2 {
				continue
			}
			d.recs[tickKey{demoShardedJob, tick, shard}] = ledger.RunRecord{Status: ledger.RunOK}
		}
	}
	stopAt := time.Now()
	if !d.unclaimedShard(stopAt, stopAt) {
		t.Error("a shard-run with no record at the end: not waited for")
	}
	if d.unclaimedShard(stopAt.Add(clusterLeftoverIn), stopAt) {
		t.Error("waited for it past clusterLeftoverIn")
	}
	d.recs[tickKey{demoShardedJob, 101, 2}] = ledger.RunRecord{Status: ledger.RunOK}
	if d.unclaimedShard(stopAt, stopAt) {
		t.Error("every shard-run recorded: still waiting")
	}
}

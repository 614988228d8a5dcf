//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/ledger"
)

// leadsMsg starts the log line of a serve elected leader.
const leadsMsg = "leader election: this node leads"

// election is a "this node leads" line of a serve's JSON log.
type election struct {
	at   time.Time
	term uint64
}

// elections returns the times and terms at which p logged that it leads.
func elections(t *testing.T, p *proc) []election {
	t.Helper()
	var out []election
	for _, rec := range jsonLines(t, p.Stderr()) {
		if m, _ := rec["msg"].(string); !strings.HasPrefix(m, leadsMsg) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["time"]))
		term, _ := rec["term"].(float64)
		if err != nil || term <= 0 {
			t.Fatalf("leader line %v: time %v, term %v", rec, err, rec["term"])
		}
		out = append(out, election{at, uint64(term)})
	}
	return out
}

// jobLine is a line a job appended to its file: "NODE TICK".
type jobLine struct {
	node string
	tick time.Time
}

// jobLines reads the lines the jobs appended to path.
func jobLines(t *testing.T, path string) []jobLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []jobLine
	for _, l := range strings.Split(string(b), "\n") {
		node, tick, ok := strings.Cut(l, " ")
		if !ok {
			continue // the last line may still be written
		}
		at, err := time.Parse(time.RFC3339, tick)
		if err != nil {
			continue
		}
		out = append(out, jobLine{node, at})
	}
	return out
}

// ranAfter counts the ticks after at that node ran, by the lines in path.
func ranAfter(t *testing.T, path, node string, at time.Time) int {
	t.Helper()
	n := 0
	for _, l := range jobLines(t, path) {
		if l.node == node && l.tick.After(at) {
			n++
		}
	}
	return n
}

// checkOncePerTick checks that no tick of job ran twice (lines, what the
// command appended) and that every tick from the first to the last has
// exactly one record in the history, final, and, when it appended a line,
// by the node that did. It returns the records by tick.
//
// A tick for which unrecorded is true may have no record, if it did not
// run: a node SIGKILLed between claiming a tick and writing its first
// record leaves a claim that no node records (a known defect: the ledger
// has no way to list claims, so no sweep can find it). The caller passes
// the ticks the killed node can have claimed.
func checkOncePerTick(t *testing.T, url, job string, lines []jobLine, unrecorded func(tick time.Time) bool) map[int64]runRecordJSON {
	t.Helper()
	ran := map[int64]string{}
	for _, l := range lines {
		if n, ok := ran[l.tick.Unix()]; ok {
			t.Errorf("%s: tick %v ran twice, on %s and %s", job, l.tick, n, l.node)
		}
		ran[l.tick.Unix()] = l.node
	}
	recs := map[int64]runRecordJSON{}
	var ticks []int64
	for _, r := range historyJSON(t, url, job) {
		k := r.Tick.Unix()
		if old, ok := recs[k]; ok {
			t.Errorf("%s: tick %v has two records: %+v and %+v", job, r.Tick, old, r)
		}
		if r.Trigger != "" || !ledger.RunStatus(r.Status).Final() || (r.Attempt != 1) != (r.Status == string(ledger.RunMissed)) {
			t.Errorf("%s: record %+v, want a tick's, final, attempt 1 if it ran or was skipped", job, r)
		}
		recs[k] = r
		ticks = append(ticks, k)
	}
	slices.Sort(ticks)
	if len(ticks) == 0 {
		t.Fatalf("%s: no history", job)
	}
	for i := 1; i < len(ticks); i++ {
		for k := ticks[i-1] + 1; k < ticks[i]; k++ {
			tick := time.Unix(k, 0).UTC()
			if _, ran := ran[k]; ran || !unrecorded(tick) {
				t.Errorf("%s: no record of tick %v (ran %v)", job, tick, ran)
				continue
			}
			t.Logf("%s: tick %v has no record: claimed by the killed node, which died before recording it", job, tick)
		}
	}
	for k, node := range ran {
		if r, ok := recs[k]; !ok || r.Node != node || (r.Status != string(ledger.RunOK) && r.Status != string(ledger.RunInterrupted)) {
			t.Errorf("%s: tick %v ran on %s; its record: %+v (recorded %v)", job, time.Unix(k, 0).UTC(), node, r, ok)
		}
	}
	return recs
}

// A job with run_on: leader runs only on the elected leader of two serves;
// when the leader is SIGKILLed in a run, the other serve is elected within
// the election's TTL, runs the job from then on, the ticks of the
// leaderless gap are recorded (late runs, a catch-up, missed ticks, by the
// misfire policy), the killed run is recorded as interrupted, and no tick
// runs twice. A job with run_on: any keeps running on the survivor
// throughout. A leader stopped by SIGTERM resigns: the killed node, back,
// is elected at once. The dashboard names the leader and its term.
func TestServeRunOnLeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "fleet.db")
	leadOut, anyOut := filepath.Join(dir, "lead.out"), filepath.Join(dir, "any.out")
	hold, held := filepath.Join(dir, "hold"), filepath.Join(dir, "held")
	// The leader job sleeps in the first run that finds $HOLD: the leader
	// is killed in that run.
	jobs := `jobs:
  - name: lead
    schedule: "@every 1s"
    run_on: leader
    command: ["sh", "-c", "echo \"$TASKLOCK_NODE $TASKLOCK_TICK\" >> \"$LEAD_OUT\"; if [ -e \"$HOLD\" ]; then rm -f \"$HOLD\"; touch \"$HELD\"; sleep 120; fi"]
  - name: any
    schedule: "@every 1s"
    run_on: any
    command: ["sh", "-c", "echo \"$TASKLOCK_NODE $TASKLOCK_TICK\" >> \"$ANY_OUT\""]
`
	env := []string{"LEAD_OUT=" + leadOut, "ANY_OUT=" + anyOut, "HOLD=" + hold, "HELD=" + held}
	procs := map[string]*proc{}
	start := func(node string) {
		cfg := filepath.Join(dir, node+".yaml")
		if err := os.WriteFile(cfg, []byte("store: "+url+"\nnode: "+node+"\n"+jobs), 0o644); err != nil {
			t.Fatal(err)
		}
		procs[node] = tl.Start(t, env, "serve", "--config", cfg, "--log-format", "json", "--http", "127.0.0.1:0")
	}
	// n2 starts once n1 serves, on a migrated file: two serves migrating
	// a fresh SQLite file at once can meet the other's migration holding
	// the write lock past busy_timeout on a busy machine, and exit.
	dash := map[string]string{}
	for _, node := range []string{"n1", "n2"} {
		start(node)
		dash[node] = dashboardURL(t, procs[node])
	}

	// One of them leads, and runs the job.
	var leader, follower string
	clitest.WaitFor(t, 30*time.Second, func() bool {
		for node, p := range procs {
			if len(elections(t, p)) > 0 {
				leader = node
			}
		}
		return leader != ""
	}, "a serve to be elected")
	follower = map[string]string{"n1": "n2", "n2": "n1"}[leader]
	term := elections(t, procs[leader])[0].term
	procs[leader].WaitUntil(30*time.Second, func() bool { return len(jobLines(t, leadOut)) >= 3 }, "running the leader job three times")
	if _, l := getAPINodes(t, dash[follower]); l == nil || l.Node != leader || l.Term != term {
		t.Errorf("%s's dashboard: leader %+v, want %s in term %d", follower, l, leader, term)
	}
	if ns, _ := getAPINodes(t, dash[follower]); !ns[leader].Leader || ns[leader].LeaderTerm != term || ns[follower].Leader {
		t.Errorf("%s's dashboard: nodes %+v, want %s marked leader in term %d", follower, ns, leader, term)
	}

	// The follower runs any too.
	procs[follower].WaitUntil(30*time.Second, func() bool { return ranAfter(t, anyOut, follower, time.Time{}) > 0 }, "running the run_on: any job as a follower")

	// Kill the leader in a run of the leader job.
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	procs[leader].WaitUntil(30*time.Second, func() bool { return fileExists(held) }, "starting the run that sleeps")
	var killedRun runRecordJSON
	clitest.WaitFor(t, 20*time.Second, func() bool {
		lines := jobLines(t, leadOut)
		last := lines[len(lines)-1]
		for _, r := range historyJSON(t, url, "lead") {
			if r.Tick.Equal(last.tick) && r.Status == string(ledger.RunRunning) {
				killedRun = r
				return true
			}
		}
		return false
	}, "the sleeping run's running record")
	if err := procs[leader].Process().Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	procs[leader].Wait(10 * time.Second)
	t.Logf("%s killed in the run of tick %v", leader, killedRun.Tick)
	for _, l := range jobLines(t, leadOut) {
		if l.node != leader {
			t.Errorf("while %s led, %s ran the leader job's tick %v", leader, l.node, l.tick)
		}
	}
	if e := elections(t, procs[follower]); len(e) > 0 {
		t.Fatalf("%s was elected at %v while %s led", follower, e[0].at, leader)
	}

	// The other one is elected within the TTL (plus slack for a busy
	// machine), and runs the job from then on.
	procs[follower].WaitUntil(tasklock.DefaultTTL+20*time.Second, func() bool { return len(elections(t, procs[follower])) > 0 }, "being elected")
	won := elections(t, procs[follower])[0]
	failover := won.at.Sub(killedAt)
	t.Logf("%s elected in term %d, %v after the kill", follower, won.term, failover.Round(time.Millisecond))
	if failover > tasklock.DefaultTTL+5*time.Second {
		t.Errorf("failover took %v, want at most the TTL %v and a few seconds", failover, tasklock.DefaultTTL)
	}
	if won.term <= term {
		t.Errorf("new term %d, want more than %d", won.term, term)
	}
	procs[follower].WaitUntil(30*time.Second, func() bool { return ranAfter(t, leadOut, follower, won.at) >= 3 },
		"running the leader job's ticks after its election")
	if ns, l := getAPINodes(t, dash[follower]); l == nil || l.Node != follower || l.Term != won.term || !ns[follower].Leader || ns[leader].Leader {
		t.Errorf("after the failover: leader %+v, nodes %+v; want %s in term %d", l, ns, follower, won.term)
	}
	// The killed run is settled.
	clitest.WaitFor(t, 40*time.Second, func() bool {
		for _, r := range historyJSON(t, url, "lead") {
			if r.Tick.Equal(killedRun.Tick) {
				return r.Status != string(ledger.RunRunning)
			}
		}
		return false
	}, "the killed run to be settled")

	// The killed node comes back, as a follower. The leader, stopped by
	// SIGTERM, resigns: the other is elected at once, not a TTL later.
	start(leader)
	dash[leader] = dashboardURL(t, procs[leader])
	if e := elections(t, procs[leader]); len(e) > 0 {
		t.Fatalf("%s, back, was elected at %v while %s led", leader, e[0].at, follower)
	}
	handover := time.Now()
	procs[follower].Signal(syscall.SIGTERM)
	if code := procs[follower].Wait(30 * time.Second); code != 0 {
		t.Fatalf("%s: exit %d\n%s", follower, code, procs[follower].Stderr())
	}
	// It resigns once its running jobs have finished, which takes seconds
	// on a busy machine, and before it exits: the new leader is elected
	// after the SIGTERM and soon after the exit, not a lease later (the
	// lease was renewed a third of the TTL before at the latest).
	exited := time.Now()
	procs[leader].WaitUntil(20*time.Second, func() bool { return len(elections(t, procs[leader])) > 0 }, "being elected after the leader resigned")
	back := elections(t, procs[leader])[0]
	t.Logf("%s elected in term %d, %v after %s got SIGTERM, %v after it exited", leader, back.term, back.at.Sub(handover).Round(time.Millisecond), follower, back.at.Sub(exited).Round(time.Millisecond))
	if back.at.Before(handover) || back.at.Sub(exited) > tasklock.DefaultTTL/2 || back.term <= won.term {
		t.Errorf("%s elected in term %d at %v; %s got SIGTERM at %v and exited by %v; want after the SIGTERM, within the TTL/2 of the exit, in a term after %d",
			leader, back.term, back.at, follower, handover, exited, won.term)
	}
	procs[leader].WaitUntil(30*time.Second, func() bool { return ranAfter(t, leadOut, leader, back.at) >= 2 },
		"running the leader job's ticks after its election")
	if ns, l := getAPINodes(t, dash[leader]); l == nil || l.Node != leader || l.Term != back.term || !ns[leader].Leader || ns[follower].Leader {
		t.Errorf("after the handover: leader %+v, nodes %+v; want %s in term %d", l, ns, leader, back.term)
	}
	procs[leader].Signal(syscall.SIGTERM)
	if code := procs[leader].Wait(30 * time.Second); code != 0 {
		t.Fatalf("%s: exit %d\n%s", leader, code, procs[leader].Stderr())
	}

	// Every tick once: none ran twice, each has one final record.
	// The ticks the killed node can have claimed and not recorded: from
	// the one it was killed in to the kill.
	claimedByKilled := func(tick time.Time) bool { return tick.After(killedRun.Tick) && !tick.After(killedAt) }
	recs := checkOncePerTick(t, url, "lead", jobLines(t, leadOut), claimedByKilled)
	if r := recs[killedRun.Tick.Unix()]; r.Status != string(ledger.RunInterrupted) || r.Node != leader {
		t.Errorf("killed run: %+v, want interrupted on %s", r, leader)
	}
	gap := map[string]int{}     // the ticks from the kill to the election
	handing := map[string]int{} // the ticks from the SIGTERM to the next election
	for _, r := range recs {
		switch {
		case r.Tick.After(killedAt) && r.Tick.Before(won.at):
			gap[r.Status]++
		case r.Tick.After(handover) && r.Tick.Before(back.at):
			handing[r.Status]++
		case !r.Tick.After(killedRun.Tick) && r.Node != leader:
			t.Errorf("tick %v, before the kill, recorded by %s: %+v", r.Tick, r.Node, r)
		case r.Tick.After(won.at) && r.Tick.Before(handover) && r.Node != follower:
			t.Errorf("tick %v, after %s's election, recorded by %s: %+v", r.Tick, follower, r.Node, r)
		case r.Tick.After(back.at) && r.Node != leader:
			t.Errorf("tick %v, after %s's election, recorded by %s: %+v", r.Tick, leader, r.Node, r)
		}
	}
	t.Logf("the ticks of the leaderless gap after the kill: %v; of the handover: %v", gap, handing)
	if gap[string(ledger.RunMissed)] == 0 {
		t.Errorf("no tick of the %v gap recorded as missed: %v", failover, gap)
	}
	anyRecs := checkOncePerTick(t, url, "any", jobLines(t, anyOut), claimedByKilled)
	// While leaderless the survivor goes on with any's ticks: it runs
	// them, or, when the killed node died holding any's lock, skips them
	// until that lease ends (the lock's TTL, as long as the election's:
	// maybe all of the gap). Either way it records them before its
	// election.
	inGap := 0
	anyGap := map[string]int{}
	for _, r := range anyRecs {
		if !r.Tick.After(killedAt) || !r.Tick.Before(won.at) {
			continue
		}
		anyGap[r.Node+" "+r.Status]++
		handled := r.Status == string(ledger.RunOK) || (r.Status == string(ledger.RunSkipped) && strings.Contains(r.Error, "the previous run is still in progress"))
		if r.Node == follower && handled && r.Recorded.Before(won.at) {
			inGap++
		}
	}
	t.Logf("any's ticks of the leaderless gap, by node and status: %v", anyGap)
	if inGap == 0 {
		t.Errorf("%s handled no tick of the run_on: any job between the kill and its election", follower)
		for _, r := range historyJSON(t, url, "any") {
			if r.Tick.After(killedAt.Add(-3*time.Second)) && r.Tick.Before(won.at.Add(time.Second)) {
				t.Logf("any's record: %+v", r)
			}
		}
	}
}

// run_on takes any or leader: validate and serve refuse anything else,
// naming the key and its line.
func TestValidateRunOn(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), memConfig(`  - name: a
    schedule: "@every 1s"
    command: ["true"]
    run_on: primary
`))
	want := cfg + `:7: job "a": run_on: "primary" is not one of any`
	for _, args := range [][]string{{"validate", "--config", cfg}, {"serve", "--config", cfg, "--http", ""}} {
		if code, out, errOut := tl.Run(t, nil, args...); code != exitUsage || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", args, code, out, errOut, exitUsage, want)
		}
	}
}

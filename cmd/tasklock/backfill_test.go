//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

// TestJobsBackfillAndRerun: a node is down for a few ticks, which its
// successor records as missed; jobs backfill runs each of them once, a
// second backfill of the same range runs nothing, and jobs rerun runs one
// tick again as attempt 2. The oracle is the file the job's command
// appends its tick and attempt to.
func TestJobsBackfillAndRerun(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			url := "sqlite://" + filepath.Join(dir, "bf.db")
			if store == "redis" {
				url, _ = redisFor(t)
			}
			logFile := filepath.Join(dir, "runs.log")
			cfg := writeConfig(t, dir, "store: "+url+"\nnode: bf-node\njobs:\n"+`  - name: bf
    schedule: "@every 1s"
    misfire: {policy: skip, grace: 500ms}
    command: ["sh", "-c", "echo \"$TASKLOCK_TICK $TASKLOCK_ATTEMPT\" >> \"$RUNS\""]
`)
			env := []string{"RUNS=" + logFile}
			runs := func() map[string][]string { // tick -> attempts
				b, _ := os.ReadFile(logFile)
				m := map[string][]string{}
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					if f := strings.Fields(line); len(f) == 2 {
						m[f[0]] = append(m[f[0]], f[1])
					}
				}
				return m
			}
			p := tl.Start(t, env, "serve", "--config", cfg, "--http", "", "--grace", "1s")
			clitest.WaitFor(t, 30*time.Second, func() bool { return len(runs()) >= 2 }, "two runs")
			p.Signal(os.Interrupt)
			p.Wait(20 * time.Second)
			down := time.Now()
			// The fleet is down for at least four ticks: elapsed time is
			// the point here, not a wait for an event.
			clitest.WaitFor(t, 10*time.Second, func() bool { return time.Since(down) > 4500*time.Millisecond }, "four ticks of downtime")
			tl.Start(t, env, "serve", "--config", cfg, "--http", "", "--node", "bf-node-2")

			// The downtime's missed ticks: the first four or more
			// consecutive ones. On a busy machine a tick handled or
			// started more than the 500ms grace late is missed too,
			// apart from them.
			var missed []string
			clitest.WaitFor(t, 30*time.Second, func() bool {
				var ticks []time.Time
				for _, r := range historyJSON(t, url, "bf") {
					if r.Status == "missed" {
						ticks = append(ticks, r.Tick.UTC())
					}
				}
				slices.SortFunc(ticks, time.Time.Compare)
				missed = missed[:0]
				for i, tick := range ticks {
					if i > 0 && !tick.Equal(ticks[i-1].Add(time.Second)) {
						if len(missed) >= 4 {
							break
						}
						missed = missed[:0]
					}
					missed = append(missed, tick.Format(time.RFC3339))
				}
				return len(missed) >= 4
			}, "four missed ticks in a row")
			first, last := missed[0], missed[len(missed)-1]
			before := runs()
			for _, tick := range missed {
				if len(before[tick]) != 0 {
					t.Fatalf("missed tick %s ran: %v", tick, before[tick])
				}
			}

			code, out, errOut := tl.Run(t, nil, "jobs", "backfill", "--store", url, "bf", "--from", first, "--to", last)
			if code != exitOK || !strings.Contains(out, fmt.Sprintf("requested %d ticks", len(missed))) {
				t.Fatalf("jobs backfill = %d\n%s%s", code, out, errOut)
			}
			clitest.WaitFor(t, 30*time.Second, func() bool {
				m := runs()
				for _, tick := range missed {
					if len(m[tick]) == 0 {
						return false
					}
				}
				return true
			}, "every missed tick to run")
			// Asked again, the same range runs nothing more.
			if code, out, errOut := tl.Run(t, nil, "jobs", "backfill", "--store", url, "bf", "--from", first, "--to", last); code != exitOK {
				t.Fatalf("second jobs backfill = %d\n%s%s", code, out, errOut)
			}
			waitNoRequests(t, url, "bf")
			code, out, errOut = tl.Run(t, nil, "jobs", "rerun", "--store", url, "bf", first)
			if code != exitOK || !strings.Contains(out, "requested a re-run") {
				t.Fatalf("jobs rerun = %d\n%s%s", code, out, errOut)
			}
			clitest.WaitFor(t, 30*time.Second, func() bool { return len(runs()[first]) == 2 }, "the re-run")
			waitNoRequests(t, url, "bf")
			m := runs()
			for _, tick := range missed {
				want := "[1]"
				if tick == first {
					want = "[1 2]"
				}
				if got := fmt.Sprint(m[tick]); got != want {
					t.Errorf("tick %s ran attempts %s, want %s", tick, got, want)
				}
			}
			var attempts []string
			for _, r := range historyJSON(t, url, "bf") {
				if r.Tick.UTC().Format(time.RFC3339) == first {
					attempts = append(attempts, fmt.Sprintf("%d:%s", r.Attempt, r.Status))
				}
			}
			if fmt.Sprint(attempts) != "[2:ok 1:ok 0:missed]" {
				t.Errorf("history of %s: %v, want [2:ok 1:ok 0:missed]", first, attempts)
			}
		})
	}
}

// waitNoRequests waits until job has no pending trigger request.
func waitNoRequests(t *testing.T, url, job string) {
	t.Helper()
	clitest.WaitFor(t, 30*time.Second, func() bool {
		code, out, _ := tl.Run(t, nil, "jobs", "list", "--store", url, "--json")
		var l struct {
			Jobs []jobJSON `json:"jobs"`
		}
		if code != exitOK || json.Unmarshal([]byte(out), &l) != nil {
			return false
		}
		for _, j := range l.Jobs {
			if j.Job == job && len(j.Triggers) > 0 {
				return false
			}
		}
		return true
	}, "no pending request")
}

// TestJobsRerunSharded: three serve nodes, a job with shards: 6 whose
// only past tick, from before the job existed, is backfilled, then re-run
// twice with jobs rerun (which refuses such a tick until it has a run);
// each time every shard runs once more, as the next attempt, and the
// request is then removed. The oracle is the file the job's command
// appends its tick, shard, attempt and node to.
func TestJobsRerunSharded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three serve processes")
	}
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "rr.db")
	logFile := filepath.Join(dir, "runs.log")
	jobs := `jobs:
  - name: rr
    schedule: "0 0 1 1 *"
    shards: 6
    command: ["sh", "-c", "echo \"$TASKLOCK_TICK $TASKLOCK_SHARD $TASKLOCK_ATTEMPT $TASKLOCK_NODE\" >> \"$RUNS\""]
`
	env := []string{"RUNS=" + logFile}
	for _, node := range []string{"rr-1", "rr-2", "rr-3"} {
		cfg := filepath.Join(dir, node+".yaml")
		if err := os.WriteFile(cfg, []byte("store: "+url+"\nnode: "+node+"\n"+jobs), 0o644); err != nil {
			t.Fatal(err)
		}
		tl.Start(t, env, "serve", "--config", cfg, "--http", "", "--log-format", "json").WaitStderr(`"msg":"serving"`, 30*time.Second)
	}
	tick := time.Date(time.Now().UTC().Year(), 1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
	runs := func(attempt string) map[string][]string { // shard -> nodes that ran it at attempt
		b, _ := os.ReadFile(logFile)
		m := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[0] == tick && f[2] == attempt {
				m[f[1]] = append(m[f[1]], f[3])
			}
		}
		return m
	}
	for _, attempt := range []string{"1", "2", "3"} {
		args, want := []string{"rerun", "rr", tick}, "requested a re-run"
		if attempt == "1" {
			args, want = []string{"backfill", "rr", "--from", tick, "--to", tick}, "requested 1 ticks"
		}
		code, out, errOut := tl.Run(t, nil, append([]string{"jobs", "--store", url}, args...)...)
		if code != exitOK || !strings.Contains(out, want) {
			t.Fatalf("jobs %s = %d\n%s%s", args[0], code, out, errOut)
		}
		clitest.WaitFor(t, 30*time.Second, func() bool { return len(runs(attempt)) == 6 }, "every shard to run attempt "+attempt)
		waitNoRequests(t, url, "rr")
		m := runs(attempt)
		for k := range 6 {
			if nodes := m[fmt.Sprint(k)]; len(nodes) != 1 {
				t.Errorf("attempt %s: shard %d ran on %v, want once", attempt, k, nodes)
			}
		}
		t.Logf("attempt %s ran shards on %v", attempt, m)
	}
	if m := runs("4"); len(m) > 0 {
		t.Errorf("attempt 4 ran: %v", m)
	}
}

//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

// Dependencies end to end, on SQLite and Redis: each tick of load runs after
// extract's run of the same tick ended ok (the oracle: the order of the
// lines the commands append to one file), and report, whose parent always
// fails, is recorded as skipped after within, naming the parent, and never
// runs.
func TestServeJobAfter(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			testServeJobAfter(t, store)
		})
	}
}

func testServeJobAfter(t *testing.T, store string) {
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "deps.db")
	if store == "redis" {
		url, _ = redisFor(t)
	}
	order := filepath.Join(dir, "order")
	cfg := writeConfig(t, dir, "store: "+url+"\nnode: n1\n"+`jobs:
  - name: extract
    schedule: "@every 2s"
    command: ["sh", "-c", "sleep 0.3; echo \"extract $TASKLOCK_TICK\" >> \"$ORDER\""]
  - name: load
    schedule: "@every 2s"
    after: [extract]
    # Longer than the default wait (until load's next tick, 2s): on a busy
    # machine extract's run of a tick may end later than that.
    within: 8s
    command: ["sh", "-c", "echo \"load $TASKLOCK_TICK\" >> \"$ORDER\""]
  - name: broken
    schedule: "@every 2s"
    command: ["false"]
  - name: report
    schedule: "@every 2s"
    after: [broken]
    within: 3s
    command: ["sh", "-c", "echo \"report $TASKLOCK_TICK\" >> \"$ORDER\""]
`)
	p := tl.Start(t, []string{"ORDER=" + order}, "serve", "--config", cfg, "--log-format", "json", "--http", "", "--grace", "5s")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		b, _ := os.ReadFile(order)
		t.Logf("the lines the jobs appended:\n%s", b)
		for _, job := range []string{"extract", "load", "broken", "report"} {
			for _, r := range historyJSON(t, url, job) {
				t.Logf("%s: tick %v %s node %s start %v end %v recorded %v %s", job, r.Tick, r.Status, r.Node, r.Start, r.End, r.Recorded, r.Error)
			}
		}
	})
	var lines []string
	loads := 0
	clitest.WaitFor(t, 180*time.Second, func() bool {
		b, _ := os.ReadFile(order)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		loads = 0
		for _, l := range lines {
			if strings.HasPrefix(l, "load ") {
				loads++
			}
		}
		return loads >= 3
	}, "three runs of load")
	seen := map[string]bool{}
	for _, l := range lines {
		job, tick, _ := strings.Cut(l, " ")
		switch job {
		case "extract":
			seen[tick] = true
		case "load":
			if !seen[tick] {
				t.Errorf("load ran tick %s before extract's run of it ended:\n%s", tick, strings.Join(lines, "\n"))
			}
		case "report":
			t.Errorf("report ran tick %s; its parent always fails", tick)
		}
	}
	// extract's ok records, by tick.
	extractOK := map[time.Time]runRecordJSON{}
	for _, r := range historyJSON(t, url, "extract") {
		if r.Status == "ok" {
			extractOK[r.Tick] = r
		}
	}
	for _, r := range historyJSON(t, url, "load") {
		// A run that outlasts the 2s between ticks, on a busy machine,
		// makes load skip its next tick: overlap: skip, not a dependency.
		// A node that handles a tick later than MisfireAfter records it
		// missed: not run either.
		overlap := r.Status == "skipped" && strings.Contains(r.Error, "the previous run is still in progress")
		if r.Status == "ok" || r.Status == "running" || overlap || r.Status == "missed" {
			continue
		}
		// On a busy machine extract's run of the tick may itself be
		// skipped, fail, or end ok but be recorded after within ran out:
		// load then skips the tick naming extract, rightly, as the ledger
		// showed it. Not when extract's ok record was there well before.
		// Its time is taken before the write ends and wakes the waiter:
		// a second covers that.
		parent, ok := extractOK[r.Tick]
		named := r.Status == "skipped" && strings.Contains(r.Error, "parents not done within 8s: extract (") && r.End != nil
		if !named || ok && parent.Recorded.Before(r.End.Add(-time.Second)) {
			t.Errorf("load's run %+v, want ok (extract's ok record of the tick: %v)", r, ok)
		}
	}
	// Within is long enough for the parent's run of the tick to have
	// ended, failed, on a busy machine too.
	var skipped []runRecordJSON
	clitest.WaitFor(t, 60*time.Second, func() bool {
		skipped = skipped[:0]
		failed := false
		for _, r := range historyJSON(t, url, "report") {
			if r.Status == "skipped" {
				skipped = append(skipped, r)
				failed = failed || strings.Contains(r.Error, "broken (last run failed, tick ")
			}
		}
		return failed
	}, "a tick of report skipped naming its parent's failed run")
	// Each skip names the parent with its last status. A tick of report
	// may be skipped before broken has any record on a busy machine (its
	// first run not claimed within 3s): "no run yet" is right for such a
	// tick, but not for one at or after the time broken's first record was
	// final, which the skip, within later, must have read.
	var firstBroken time.Time
	for _, r := range historyJSON(t, url, "broken") {
		if firstBroken.IsZero() || r.Recorded.Before(firstBroken) {
			firstBroken = r.Recorded
		}
	}
	for _, r := range skipped {
		// As for load: a tick taken up while the previous one is in
		// progress is skipped before it waits for parents.
		if strings.Contains(r.Error, "the previous run is still in progress") {
			continue
		}
		named := strings.Contains(r.Error, "parents not done within 3s: broken (last run ")
		early := r.Tick.Before(firstBroken) && strings.Contains(r.Error, "parents not done within 3s: broken (no run yet)")
		if !named && !early {
			t.Errorf("report skipped tick %v with %q, want the parent named with its last status (broken's first record final at %v)", r.Tick, r.Error, firstBroken)
		}
	}
	for _, r := range historyJSON(t, url, "report") {
		if r.Status != "skipped" && r.Status != "running" && r.Status != "missed" {
			t.Errorf("report's record %+v, want only skipped (or missed) ones", r)
		}
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
}

//go:build unix

package main

// TestFleet runs scheduler processes on every store, opened from URLs as
// the CLI opens them. It lives beside the CLI's store assembly
// (internal/storeurl), not in schedule, so that schedule's tests import no
// store driver: a program importing schedule loads those tests' imports
// into its go.sum.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// skewedClock is the system clock shifted by skew: a node whose wall clock
// is wrong. (A Go process's clock cannot be changed from outside.)
type skewedClock struct {
	tasklock.SystemClock
	skew time.Duration
}

func (c skewedClock) Now() time.Time { return time.Now().Add(c.skew) }

// TestFleetProcess is one node of TestFleet: a scheduler process running
// job "tick" every second on $FLEET_STORE, appending "tick fence node" to
// $FLEET_OUT for every run (one write each, O_APPEND), until SIGTERM.
func TestFleetProcess(t *testing.T) {
	if testserver.HelperRole() != "node" {
		t.Skip("runs only as a helper process started by TestFleet")
	}
	skew, err := time.ParseDuration(os.Getenv("FLEET_SKEW"))
	if err != nil {
		t.Fatal(err)
	}
	node := os.Getenv("FLEET_NODE")
	out, err := os.OpenFile(os.Getenv("FLEET_OUT"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx := context.Background()
	store, closeStore, err := storeurl.Open(ctx, os.Getenv("FLEET_STORE"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	clock := skewedClock{skew: skew}
	lk, err := tasklock.New(store, &tasklock.Config{Owner: node, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	s, err := schedule.New(lk, store.(ledger.Ledger), &schedule.Config{Node: node, Clock: clock, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Add(schedule.Job{Name: "tick", Schedule: "@every 1s", Misfire: schedule.MisfireSkip, Lock: tasklock.ObtainOptions{TTL: 3 * time.Second},
		Handler: func(ctx context.Context, run schedule.Run) error {
			_, err := fmt.Fprintf(out, "%d %d %s\n", run.Tick.Unix(), run.Fence, node)
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	<-term
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
}

// fleetRun is one line a node wrote: a run of tick Tick with Fence.
type fleetRun struct {
	tick  int64
	fence uint64
	node  string
}

func readRuns(t *testing.T, path string) []fleetRun {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var runs []fleetRun
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r fleetRun
		if line == "" {
			continue
		}
		if _, err := fmt.Sscanf(line, "%d %d %s", &r.tick, &r.fence, &r.node); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		runs = append(runs, r)
	}
	return runs
}

// TestFleet runs three scheduler processes whose clocks differ by up to
// four seconds on one store, SIGKILLs the one whose clock runs ahead (it
// claims every tick first), restarts it, and checks the oracle: no tick ran
// twice, fences rise in the order runs happened (runs never overlapped),
// and every tick in the window either ran or is in the history as skipped
// or missed — except at most the one the killed node had claimed.
func TestFleet(t *testing.T) {
	if testserver.HelperRole() != "" {
		t.Skip("not in a helper")
	}
	if testing.Short() {
		t.Skip("runs processes for about 15s per store")
	}
	stores := map[string]func(t *testing.T) string{
		"redis": func(t *testing.T) string { return "redis://" + testserver.StartRedis(t).Addr() },
		"sqlite": func(t *testing.T) string {
			return "sqlite://" + filepath.Join(t.TempDir(), "fleet.db")
		},
	}
	for _, name := range []string{"redis", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			url := stores[name](t)
			out := filepath.Join(t.TempDir(), "runs")
			start := func(node string, skew time.Duration) *testserver.Process {
				p := testserver.StartHelper(t, "TestFleetProcess", "node",
					"FLEET_STORE="+url, "FLEET_NODE="+node, "FLEET_SKEW="+skew.String(), "FLEET_OUT="+out)
				p.WaitLine(t, "ready", 20*time.Second)
				return p
			}
			// waitRuns waits until node (any node: "") has n runs in the file.
			waitRuns := func(node string, n int) {
				t.Helper()
				count := func() int {
					c := 0
					for _, r := range readRuns(t, out) {
						if node == "" || r.node == node {
							c++
						}
					}
					return c
				}
				deadline := time.Now().Add(30 * time.Second)
				for count() < n {
					if time.Now().After(deadline) {
						t.Fatalf("%d runs by %q after 30s, want %d", count(), node, n)
					}
					time.Sleep(50 * time.Millisecond) // polling the oracle file
				}
			}
			start("slow", -2*time.Second)
			start("exact", 0)
			fast := start("fast", 2*time.Second)
			waitRuns("fast", 3)
			fast.Kill(t)
			killedAt := len(readRuns(t, out))
			waitRuns("", killedAt+4)
			start("fast", 2*time.Second)
			waitRuns("fast", 6)

			// The file is in the order the runs happened, each while its
			// node held the job's lock: fences must rise line by line.
			runs := readRuns(t, out)
			for i := 1; i < len(runs); i++ {
				if runs[i].fence <= runs[i-1].fence {
					t.Errorf("tick %d ran with fence %d after tick %d with fence %d: runs overlapped", runs[i].tick, runs[i].fence, runs[i-1].tick, runs[i-1].fence)
				}
			}
			sort.Slice(runs, func(i, j int) bool { return runs[i].tick < runs[j].tick })
			seen := map[int64]string{}
			nodes := map[string]int{}
			for _, r := range runs {
				if prev, ok := seen[r.tick]; ok {
					t.Errorf("tick %d ran twice: on %s and on %s", r.tick, prev, r.node)
				}
				seen[r.tick] = r.node
				nodes[r.node]++
			}
			var missing []int64
			for tick := runs[0].tick; tick <= runs[len(runs)-1].tick; tick++ {
				if _, ok := seen[tick]; !ok {
					missing = append(missing, tick)
				}
			}
			t.Logf("%d runs of ticks %d..%d; by node %v; missing %v", len(runs), runs[0].tick, runs[len(runs)-1].tick, nodes, missing)
			// A tick that did not run must be in the history as skipped
			// (the job's lock was held: a node whose clock runs behind
			// ran an earlier tick late) or missed; only the tick the
			// killed node had claimed may be in neither.
			var lost []int64
			for _, tick := range missing {
				if recs := history(t, url, tick); len(recs) == 0 {
					lost = append(lost, tick)
				} else if st := recs[0].Status; st != ledger.RunSkipped && st != ledger.RunMissed {
					t.Errorf("tick %d did not run but is recorded as %s: %+v", tick, st, recs[0])
				} else {
					t.Logf("tick %d: %s on %s: %s", tick, st, recs[0].Node, recs[0].Error)
				}
			}
			if len(lost) > 1 {
				t.Errorf("ticks %v neither ran nor were recorded; at most the one the killed node claimed may be", lost)
			}
			if len(nodes) < 2 {
				t.Errorf("only %v ran ticks: nobody took over from the killed node", nodes)
			}
		})
	}
}

// history returns the ledger's records of tick.
func history(t *testing.T, url string, tick int64) []ledger.RunRecord {
	t.Helper()
	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	at := time.Unix(tick, 0).UTC()
	recs, err := store.(ledger.Ledger).Runs(context.Background(), ledger.RunQuery{Job: "tick", From: at, To: at.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

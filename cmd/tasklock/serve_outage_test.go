package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
)

// TestServeOutcomeWrittenAfterStoreOutage: a run that ends while the store
// is down (Redis killed, restarted with its data a few seconds later) gets
// its outcome into history once the store is back. The write of the
// outcome used to be tried twice and dropped, so the run stayed "running"
// in jobs history and the dashboard for as long as its node lived: no
// node settles a live node's running records.
func TestServeOutcomeWrittenAfterStoreOutage(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, testserver.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	url := "redis://" + srv.Addr()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// The first run records its tick and waits for $OUT.stop; the later
	// ones end at once.
	script := `[ -e "$OUT.ran" ] && exit 0; echo "$TASKLOCK_TICK" > "$OUT.tick"; touch "$OUT.ran"; while [ ! -e "$OUT.stop" ]; do sleep 0.02; done; touch "$OUT.ended"`
	cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n"+
		indent(fmt.Sprintf("name: outage\nschedule: \"@every 1s\"\nlock_ttl: 30s\ncommand: [sh, -c, %q]\n", script)))
	nodes := startNodes(t, 1, cfg, out)
	node := nodes[0]
	node.WaitUntil(30*time.Second, func() bool { return fileExists(out + ".ran") }, "the first run to start")
	b, err := os.ReadFile(out + ".tick")
	if err != nil {
		t.Fatal(err)
	}
	tick, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Let the running record reach the store (appendfsync always), then
	// take the store down and end the run meanwhile.
	status := func() ledger.RunStatus {
		store, closeStore, err := storeurl.Open(context.Background(), url)
		if err != nil {
			return ""
		}
		defer closeStore()
		rs, err := store.(ledger.Ledger).Runs(context.Background(), ledger.RunQuery{Job: "outage", From: tick, To: tick.Add(time.Second)})
		if err != nil || len(rs) == 0 {
			return ""
		}
		return rs[0].Status
	}
	clitest.WaitFor(t, 30*time.Second, func() bool { return status() == ledger.RunRunning }, "the running record")
	srv.Kill(t)
	if err := os.WriteFile(out+".stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	node.WaitStderr(`"msg":"schedule: recording history","node":"node-0","job":"outage"`, 30*time.Second)
	srv.Restart(t)
	var got ledger.RunStatus
	clitest.WaitFor(t, 30*time.Second, func() bool {
		got = status()
		return got == ledger.RunOK
	}, "the run's outcome in history")
	stopNodes(t, nodes)
	if !strings.Contains(node.Stderr(), "wrote the history records a store error had held back") {
		t.Errorf("serve did not log that it wrote the held back records:\n%s", node.Stderr())
	}
}

// TestServeNoRetakeAfterStoreOutage: two serve nodes whose store is down
// for longer than their node leases, while each runs a shard-run of one
// tick that ends ok meanwhile. When the store is back, every node has lost
// its lease and takes it again at its next sweep; the first to look used
// to find the other's lease missing and take the other's shard-run for
// stopped: recorded interrupted, and run again as attempt 2 (seen by hand
// with 3 nodes and a 25 s Redis outage). No shard-run runs twice now.
// And the failure to read the tick's history, retried every poll during
// the outage, is logged once, not at every poll.
func TestServeNoRetakeAfterStoreOutage(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, testserver.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	url := "redis://" + srv.Addr()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// The runs before $OUT.done note their tick and wait for $OUT.stop;
	// the later ones end at once.
	script := `[ -e "$OUT.done" ] && exit 0; echo "$TASKLOCK_TICK" >> "$OUT.$TASKLOCK_SHARD"; while [ ! -e "$OUT.stop" ]; do sleep 0.02; done`
	cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n"+
		indent(fmt.Sprintf("name: sharded\nschedule: \"@every 2s\"\nshards: 2\nlock_ttl: 30s\ncommand: [sh, -c, %q]\n", script)))
	nodes := startNodes(t, 2, cfg, out)
	clitest.WaitFor(t, 30*time.Second, func() bool { return fileExists(out+".0") && fileExists(out+".1") }, "both shard-runs to start")
	b, err := os.ReadFile(out + ".0")
	if err != nil {
		t.Fatal(err)
	}
	tick, err := time.Parse(time.RFC3339, strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	for _, f := range []string{out + ".done", out + ".stop"} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Longer than the node leases (10s).
	for _, n := range nodes {
		n.WaitStderr(`"msg":"lost the node-name lock; taking it again"`, 60*time.Second)
	}
	srv.Restart(t)
	restarted := time.Now()
	runs := func() []ledger.RunRecord {
		store, closeStore, err := storeurl.Open(context.Background(), url)
		if err != nil {
			return nil
		}
		defer closeStore()
		rs, _ := store.(ledger.Ledger).Runs(context.Background(), ledger.RunQuery{Job: "sharded", From: tick})
		return rs
	}
	// Until a tick well past the time the nodes judge each other again
	// (a node lease after the outage, and a sweep) has run.
	var rs []ledger.RunRecord
	clitest.WaitFor(t, 90*time.Second, func() bool {
		rs = runs()
		for _, r := range rs {
			if r.Tick.After(restarted.Add(16*time.Second)) && r.Status == ledger.RunOK {
				return true
			}
		}
		return false
	}, "a tick 16 s after the store came back to run")
	stopNodes(t, nodes)
	// A failure that recurs on every poll is logged once, then once a
	// minute (internal/repeats): it used to be logged at every poll
	// (500ms), dozens of lines in one outage.
	for _, n := range nodes {
		if c := strings.Count(n.Stderr(), `"msg":"schedule: reading a sharded tick's history"`); c > 2 {
			t.Errorf("the failure to read a sharded tick's history logged %d times in one outage, want at most 2", c)
		}
	}
	for _, r := range rs {
		if r.Tick.Equal(tick) {
			t.Logf("tick %s shard %d attempt %d on %s: %s %s", r.Tick.Format(time.RFC3339), r.Shard, r.Attempt, r.Node, r.Status, r.Error)
			if r.Attempt != 1 || r.Status != ledger.RunOK {
				t.Errorf("shard %d of the tick the outage came in: attempt %d %s (%s), want only attempt 1, ok", r.Shard, r.Attempt, r.Status, r.Error)
			}
		}
	}
}

// TestServeShutdownInterruptedDurationExact: a run that its own serve
// stops at the end of a shutdown's --grace is recorded interrupted with
// its true end, so jobs history gives its duration as it is; it used to
// show it as a bound ("≤1.5s"), and the dashboard said its node had
// stopped mid-run and another node had noticed, as for a killed node.
func TestServeShutdownInterruptedDurationExact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "s.db")
	out := filepath.Join(dir, "out")
	cfg := writeConfig(t, dir, "store: "+store+"\njobs:\n"+
		indent("name: slow\nschedule: \"@every 1s\"\ncommand: [sh, -c, 'touch \"$OUT\"; sleep 30']\n"))
	p := tl.Start(t, []string{"OUT=" + out}, "serve", "--config", cfg, "--http", "", "--grace", "200ms")
	p.WaitUntil(30*time.Second, func() bool { return fileExists(out) }, "the run to start")
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
	code, hist, errOut := tl.Run(t, nil, "jobs", "history", "--job", "slow", "--status", "interrupted", "--store", store)
	if code != 0 || !strings.Contains(hist, "interrupted") {
		t.Fatalf("jobs history: exit %d\n%s%s", code, hist, errOut)
	}
	if strings.Contains(hist, "≤") {
		t.Errorf("jobs history gives the duration of a run its own serve stopped as a bound:\n%s", hist)
	}
}

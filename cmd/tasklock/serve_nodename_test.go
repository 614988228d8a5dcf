//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
)

// TestServeNodeNameTakenWhilePaused: a serve paused (SIGSTOP) for longer
// than its node-name lease, whose name another serve took meanwhile,
// stops scheduling as soon as it runs again (SIGCONT): it starts no
// command, claims and settles nothing, and exits 75 saying its name was
// taken while it could not renew it. It used to log every 5s that another
// process held its name, and go on: it took the other serve's live
// shard-runs for its own, settled them interrupted and ran them again,
// two ok records a shard-run and tick (seen by hand on PostgreSQL, three
// nodes). On PostgreSQL, with a plain job and a sharded one, every
// second.
func TestServeNodeNameTakenWhilePaused(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// Each command writes which serve started it ($WHO, from the serve's
	// environment) first.
	script := `echo "$WHO $TASKLOCK_JOB $TASKLOCK_TICK $TASKLOCK_SHARD $TASKLOCK_ATTEMPT" >> "$OUT"; sleep 0.3`
	cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n"+
		indent(fmt.Sprintf("name: plain\nschedule: \"@every 1s\"\ncommand: [sh, -c, %q]\n", script))+
		indent(fmt.Sprintf("name: sharded\nschedule: \"@every 1s\"\nshards: 4\ncommand: [sh, -c, %q]\n", script)))
	serve := func(who, node string) *proc {
		return tl.Start(t, []string{"OUT=" + out, "WHO=" + who}, "serve", "--config", cfg, "--http", "", "--log-format", "json",
			"--node", node, "--grace", "5s")
	}
	started := func(who string) int { // commands started by who
		b, _ := os.ReadFile(out)
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, who+" ") {
				n++
			}
		}
		return n
	}
	p1, p3 := serve("p1", "p1"), serve("old", "p3")
	p1.WaitStderr(`"msg":"serving"`, 30*time.Second)
	p3.WaitStderr(`"msg":"serving"`, 30*time.Second)
	p3.WaitUntil(30*time.Second, func() bool { return started("old") > 0 }, "the first p3 to run a command")

	p3.Signal(syscall.SIGSTOP)
	paused := true
	defer func() {
		if paused {
			p3.Signal(syscall.SIGCONT)
		}
	}()
	// It waits for the name (the paused serve's lease, 10s), then takes
	// it and runs jobs.
	p3b := serve("new", "p3")
	p3b.WaitStderr(`"msg":"serving"`, 30*time.Second)
	servingAt := time.Now()
	p3b.WaitStderr(`"msg":"run ended"`, 30*time.Second)
	before := started("old")

	p3.Signal(syscall.SIGCONT)
	paused = false
	select {
	case <-p3.Done():
		if code := p3.State().ExitCode(); code != exitTempFail {
			t.Errorf("the resumed serve exited %d, want %d", code, exitTempFail)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the resumed serve still runs 30s after its SIGCONT, its name another serve's")
		p3.Signal(syscall.SIGTERM)
		p3.Wait(30 * time.Second)
	}
	logs := p3.Stderr()
	const taken = `tasklock serve: node name "p3" was taken by another serve (p3 tasklock/`
	if !strings.Contains(logs, taken) || !strings.Contains(logs, "while this one could not renew it (it was paused, or cut off from the store, for longer than the name's 10s lease); this serve stopped scheduling and shut down") {
		t.Errorf("the resumed serve did not say its name was taken; stderr:\n%s", logs)
	}
	if n := started("old") - before; n > 0 {
		t.Errorf("the resumed serve started %d commands after its name was taken", n)
	}
	// The other two run on: a few more ticks, then stop.
	ended := strings.Count(p3b.Stderr(), `"msg":"run ended"`)
	p3b.WaitUntil(30*time.Second, func() bool { return strings.Count(p3b.Stderr(), `"msg":"run ended"`) >= ended+10 }, "the second p3 to run ten more")
	for _, p := range []*proc{p1, p3b} {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range []*proc{p1, p3b} {
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Errorf("exit %d\n%s", code, p.Stderr())
		}
	}

	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	rs, err := store.(ledger.Ledger).Runs(context.Background(), ledger.RunQuery{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	type unit struct {
		job     string
		tick    int64
		trigger string
		shard   int
	}
	ok := map[unit]int{}
	for _, r := range rs {
		switch r.Status {
		case ledger.RunOK:
			u := unit{r.Job, r.Tick.UnixNano(), r.Trigger, r.Shard}
			if ok[u]++; ok[u] == 2 {
				t.Errorf("%s tick %v shard %d recorded ok twice", r.Job, r.Tick, r.Shard)
			}
		case ledger.RunInterrupted:
			// Every run the second p3 started ended: none was cut short.
			if r.Start.After(servingAt) {
				t.Errorf("a run of the second p3 recorded interrupted: %s tick %v shard %d attempt %d: %s", r.Job, r.Tick, r.Shard, r.Attempt, r.Error)
			}
		}
	}
	t.Logf("%d run records; the resumed serve:\n%s", len(rs), logs)
}

// TestNodeNameHeldByAnUnlistedHolder: where serve cannot list the store's
// leases, a node-name lock it lost and finds held may be its own lapsed
// lease, which the store expires within a lease: its Schedulers go on
// meanwhile. Held for longer than a lease and a retry after the first
// refusal, it is another process's: the name is taken, the last line says
// for how long it was held, and the Schedulers' ledger writes nothing
// more but the outcomes of this process's own runs. On a real Redis, its
// listing unused; the lock lost by a forced release, as `tasklock locks
// release --force` does, and then taken by another Locker.
func TestNodeNameHeldByAnUnlistedHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := testserver.StartRedis(t)
	open := func(owner string) (*tasklock.Locker, driver.Store) {
		store, closeStore, err := storeurl.Open(ctx, "redis://"+r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = closeStore() })
		lk, err := tasklock.New(store, &tasklock.Config{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Close() })
		return lk, store
	}
	lk, store := open("n1")
	logs := &syncBuffer{}
	// No lister: as far as this serve knows, the store cannot list leases.
	s := &server{node: "n1", lk: lk, log: slog.New(slog.NewJSONHandler(logs, nil))}
	key := nodeKeyPrefix + s.node
	guard, err := lk.TryObtain(ctx, key, s.nodeLockOptions())
	if err != nil {
		t.Fatal(err)
	}
	n := s.keepNode(guard)
	defer n.release()
	l := n.gate(store.(ledger.Ledger))
	tick := time.Now().UTC().Truncate(time.Second)
	mine := ledger.RunRecord{Job: "mine", Tick: tick, Attempt: 1, Node: "n1", Start: tick, Status: ledger.RunRunning}
	theirs := ledger.RunRecord{Job: "theirs", Tick: tick, Attempt: 1, Node: "n1", Start: tick, Status: ledger.RunRunning}
	if err := l.RecordRuns(ctx, []ledger.RunRecord{mine}); err != nil {
		t.Fatal(err)
	}

	if err := store.(driver.ForceReleaser).ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	lk2, _ := open("n1")
	if _, err := lk2.TryObtain(ctx, key, s.nodeLockOptions()); err != nil {
		t.Fatal(err)
	}
	// Lost at its next renewal, then refused: held, by whom unknown.
	const unknown = `"msg":"cannot take the node-name lock again: it is held, by this node's own lapsed lease until the store expires it, or by another serve using this node name"`
	clitest.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(logs.String(), unknown) }, "a refusal by an unknown holder")
	refused := time.Now()
	if n.isTaken() {
		t.Fatalf("the name taken at the first refusal by an unknown holder; log:\n%s", logs.String())
	}
	if err := n.admit(ctx); err != nil {
		t.Errorf("the Schedulers' writes wait or fail after the first refusal (%v), want them to go on", err)
	}
	select {
	case <-n.taken:
	case <-time.After(30 * time.Second):
		t.Fatalf("the name not taken 30s after the first refusal; log:\n%s", logs.String())
	}
	if held := time.Since(refused); held < nodeNameTTL+retakeRetry-time.Second {
		t.Errorf("the name taken %v after the first refusal, want after a lease and a retry (%v)", held, nodeNameTTL+retakeRetry)
	}
	const last = `node name "n1" was taken by another serve (n1 tasklock/`
	if msg := n.takenError(); !strings.Contains(msg, last) || !strings.Contains(msg, "; held for 15s since this serve lost it, longer than its own lease could have lasted: the store cannot list leases to tell)") {
		t.Errorf("last line %q", msg)
	}
	if err := n.admit(ctx); !errors.Is(err, errNameTaken) {
		t.Errorf("admit once the name is taken: %v, want errNameTaken", err)
	}
	// The outcome of its own run is written; a record of another's run,
	// settled, is not.
	mine.Status, mine.End = ledger.RunOK, time.Now()
	theirs.Status, theirs.End = ledger.RunInterrupted, time.Now()
	if err := l.RecordRuns(ctx, []ledger.RunRecord{mine, theirs}); !errors.Is(err, errNameTaken) {
		t.Errorf("recording another's run once the name is taken: %v, want errNameTaken", err)
	}
	if _, err := l.Claim(ctx, []ledger.ClaimParams{{Job: "mine", Tick: tick.Add(time.Second), Token: "t", Node: "n1", Retain: time.Minute}}); !errors.Is(err, errNameTaken) {
		t.Errorf("claiming once the name is taken: %v, want errNameTaken", err)
	}
	rs, err := store.(ledger.Ledger).Runs(ctx, ledger.RunQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Job != "mine" || rs[0].Status != ledger.RunOK {
		t.Errorf("records %+v, want mine's outcome alone", rs)
	}
}

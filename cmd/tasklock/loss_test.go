//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
)

// lostLine matches exec's message when the lock is lost while COMMAND runs.
const lostLine = `tasklock exec: lock "[^"]+" lost[ :]`

// checkExecExitsAfterLoss runs exec with a COMMAND that runs until it is
// stopped, calls kill (the store goes away), and checks that exec reports
// the loss naming the store (shown as storeShown), stops COMMAND and exits
// 70 within a bound well under the 10 s that closing the store's session
// took before: a short deadline for the release and the close after a loss.
func checkExecExitsAfterLoss(t *testing.T, url, storeShown string, kill func()) {
	t.Helper()
	dir := t.TempDir()
	stop := filepath.Join(dir, "stop")
	p := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", url, "--key", "loss", "--ttl", "3s", "--kill-grace", "500ms",
		"--", "sh", "-c", waitingChild)
	p.WaitOutput("started", 30*time.Second)
	kill()
	// Polled, not WaitStderr: exec may exit before the poll sees the line.
	rx := regexp.MustCompile(lostLine)
	clitest.WaitFor(t, 30*time.Second, func() bool { return rx.MatchString(p.Stderr()) }, "exec to report the loss")
	lostAt := time.Now()
	// COMMAND gets SIGTERM at the loss, SIGKILL --kill-grace later; exec
	// then exits within about a second: 5 s leaves room for a loaded
	// machine and stays well under the 10 s it took before.
	const bound = 5 * time.Second
	code := p.Wait(30 * time.Second)
	took := time.Since(lostAt)
	t.Logf("exit %d %v after the loss was reported\nstderr:\n%s", code, took.Round(time.Millisecond), p.Stderr())
	if code != exitSoftware {
		t.Errorf("exit %d, want %d (lock lost)", code, exitSoftware)
	}
	if took > bound {
		t.Errorf("exec exited %v after reporting the loss, want within %v", took.Round(time.Millisecond), bound)
	}
	m := regexp.MustCompile(lostLine + `.*`).FindString(p.Stderr())
	if !strings.Contains(m, "(store "+storeShown+")") {
		t.Errorf("the loss message %q does not name the store %s", m, storeShown)
	}
}

// TestExecEtcdKilledExitsSoon: etcd killed while COMMAND runs; exec stops
// COMMAND and exits soon after, not once closing its session gives up.
func TestExecEtcdKilledExitsSoon(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	url := "etcd://" + srv.Addr() + "/loss"
	checkExecExitsAfterLoss(t, url, url, func() { srv.Kill(t) })
}

// TestExecZooKeeperKilledExitsSoon is TestExecEtcdKilledExitsSoon on
// ZooKeeper.
func TestExecZooKeeperKilledExitsSoon(t *testing.T) {
	t.Parallel()
	srv := testserver.StartZooKeeper(t)
	url := fmt.Sprintf("zk://%s/loss-%d", srv.Addr(), os.Getpid())
	checkExecExitsAfterLoss(t, url, url, func() { srv.Kill(t) })
}

// TestExecRedisFrozenNamesStore: a Redis server stopped (SIGSTOP) while
// COMMAND runs answers nothing; exec's loss message names the store.
func TestExecRedisFrozenNamesStore(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	url := "redis://" + srv.Addr()
	stopped := false
	defer func() {
		if stopped {
			srv.Cont(t)
		}
	}()
	checkExecExitsAfterLoss(t, url, url, func() { srv.Stop(t); stopped = true })
}

// TestServePausedNodeRecordsLossTruly: a serve node stopped (SIGSTOP) while
// its jobs' commands run, until the job locks' leases have expired at the
// store, and continued (SIGCONT) after the commands ended by themselves
// with status 0. Each attempt is recorded lost, and its error says what
// happened: the lease expired because the node did not renew it (paused),
// and the command exited with status 0 by itself ("command stopped
// (exited with status 0)" was recorded before), so that nobody retries
// work that ran. A plain job's record said only "lock lost" when serve saw
// the command's exit before its run's context learnt of the lease's end,
// both at once after the resume (a race: about one job in three, here
// several plain jobs and a sharded one).
func TestServePausedNodeRecordsLossTruly(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	dir := t.TempDir()
	// Each command runs once, per shard: later ticks' runs find the
	// marker and end.
	script := `m="$OUT.$TASKLOCK_JOB.$TASKLOCK_SHARD"; [ -e "$m.ran" ] && exit 0; touch "$m.ran"; while [ ! -e "$OUT.stop" ]; do sleep 0.02; done; touch "$m.ended"`
	job := func(name, extra string) string {
		return indent(fmt.Sprintf("name: %s\nschedule: \"@every 1s\"\nlock_ttl: 2s\nkill_grace: 500ms\n%scommand: [sh, -c, %q]\n", name, extra, script))
	}
	var jobs string
	type unit struct{ job, lock, marker string }
	var units []unit
	out := filepath.Join(dir, "out")
	for i := range 5 {
		name := fmt.Sprintf("paused%d", i)
		jobs += job(name, "")
		units = append(units, unit{name, "schedule/" + name, out + "." + name + ".0"})
	}
	jobs += job("pausedsh", "shards: 2\n")
	for k := range 2 {
		units = append(units, unit{"pausedsh", fmt.Sprintf("schedule/pausedsh/shard/%d", k), fmt.Sprintf("%s.pausedsh.%d", out, k)})
	}
	cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n"+jobs)
	nodes := startNodes(t, 1, cfg, out)
	node := nodes[0]
	paused := false
	defer func() {
		if paused {
			node.Signal(syscall.SIGCONT)
		}
	}()
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	for _, u := range units {
		node.WaitUntil(30*time.Second, func() bool { return exists(u.marker + ".ran") }, "running the command of "+u.lock)
	}
	node.Signal(syscall.SIGSTOP)
	paused = true
	// The commands end by themselves while the node is stopped.
	if err := os.WriteFile(out+".stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		clitest.WaitFor(t, 30*time.Second, func() bool { return exists(u.marker + ".ended") }, "the command of "+u.lock+" to end")
	}
	// The job locks' leases expire at the store: the node, stopped, did
	// not renew them.
	for _, u := range units {
		clitest.WaitFor(t, 30*time.Second, func() bool {
			n, err := c.Exists(context.Background(), lockKey(u.lock)).Result()
			return err == nil && n == 0
		}, "the lease of "+u.lock+" to expire at the store")
	}
	node.Signal(syscall.SIGCONT)
	paused = false

	lost := waitLostRuns(t, url, "", len(units))
	stopNodes(t, nodes)
	if len(lost) != len(units) {
		t.Errorf("%d lost runs, want %d", len(lost), len(units))
	}
	for _, r := range lost {
		t.Logf("recorded %s shard %d: %s: %s", r.Job, r.Shard, r.Status, r.Error)
		if strings.Contains(r.Error, "command stopped") || strings.Contains(r.Error, "SIGTERM") {
			t.Errorf("%s shard %d: error %q says the command was stopped; it ended by itself", r.Job, r.Shard, r.Error)
		}
		if !strings.Contains(r.Error, "was this process paused") {
			t.Errorf("%s shard %d: error %q does not say the lease expired unrenewed while the node was paused", r.Job, r.Shard, r.Error)
		}
		if !strings.Contains(r.Error, "command exited with status 0 by itself, not signalled, but the run had ended before its exit was seen: tasklock: lock lost") {
			t.Errorf("%s shard %d: error %q does not say the command exited with status 0 by itself", r.Job, r.Shard, r.Error)
		}
	}
}

// waitLostRun waits for a run of job recorded lost in the ledger at url
// and returns it.
func waitLostRun(t *testing.T, url, job string) ledger.RunRecord {
	t.Helper()
	return waitLostRuns(t, url, job, 1)[0]
}

// waitLostRuns waits for at least n runs of job (any job: "") recorded
// lost in the ledger at url and returns them all.
func waitLostRuns(t *testing.T, url, job string, n int) []ledger.RunRecord {
	t.Helper()
	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	var lost []ledger.RunRecord
	clitest.WaitFor(t, 30*time.Second, func() bool {
		lost, err = store.(ledger.Ledger).Runs(context.Background(), ledger.RunQuery{Job: job, Status: ledger.RunLost})
		return err == nil && len(lost) >= n
	}, fmt.Sprintf("%d lost runs of %q in the ledger", n, job))
	return lost
}

// TestExecZooKeeperFrozenExitsSoon is TestExecRedisFrozenNamesStore on
// ZooKeeper: a server that answers nothing does not hold exec up either.
func TestExecZooKeeperFrozenExitsSoon(t *testing.T) {
	t.Parallel()
	srv := testserver.StartZooKeeper(t)
	url := fmt.Sprintf("zk://%s/frozen-%d", srv.Addr(), os.Getpid())
	stopped := false
	defer func() {
		if stopped {
			srv.Cont(t)
		}
	}()
	checkExecExitsAfterLoss(t, url, url, func() { srv.Stop(t); stopped = true })
}

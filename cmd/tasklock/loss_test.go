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
// its job's command runs, until the job lock's lease has expired at the
// store, and continued (SIGCONT) after the command ended by itself with
// status 0. The attempt is recorded lost, and its error says what
// happened: the lease expired because the node did not renew it (paused),
// and the command was not stopped by anything ("command stopped (exited
// with status 0)" was recorded before).
func TestServePausedNodeRecordsLossTruly(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	dir := t.TempDir()
	// The command runs once: later ticks' runs find the marker and end.
	script := `[ -e "$OUT.ran" ] && exit 0; touch "$OUT.ran"; while [ ! -e "$OUT.stop" ]; do sleep 0.02; done; touch "$OUT.ended"`
	cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n"+
		indent(fmt.Sprintf("name: paused\nschedule: \"@every 1s\"\nlock_ttl: 2s\nkill_grace: 500ms\ncommand: [sh, -c, %q]\n", script)))
	out := filepath.Join(dir, "out")
	nodes := startNodes(t, 1, cfg, out)
	node := nodes[0]
	paused := false
	defer func() {
		if paused {
			node.Signal(syscall.SIGCONT)
		}
	}()
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	node.WaitUntil(30*time.Second, func() bool { return exists(out + ".ran") }, "running the command")
	node.Signal(syscall.SIGSTOP)
	paused = true
	// The command ends by itself while the node is stopped.
	if err := os.WriteFile(out+".stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	clitest.WaitFor(t, 30*time.Second, func() bool { return exists(out + ".ended") }, "the command to end")
	// The job lock's lease expires at the store: the node, stopped, did
	// not renew it.
	clitest.WaitFor(t, 30*time.Second, func() bool {
		n, err := c.Exists(context.Background(), lockKey("schedule/paused")).Result()
		return err == nil && n == 0
	}, "the job lock's lease to expire at the store")
	node.Signal(syscall.SIGCONT)
	paused = false

	r := waitLostRun(t, url, "paused")
	stopNodes(t, nodes)
	t.Logf("recorded: %s: %s", r.Status, r.Error)
	if strings.Contains(r.Error, "command stopped") || strings.Contains(r.Error, "SIGTERM") {
		t.Errorf("error %q says the command was stopped; it ended by itself", r.Error)
	}
	if !strings.Contains(r.Error, "was this process paused") {
		t.Errorf("error %q does not say the lease expired unrenewed while the node was paused", r.Error)
	}
	if strings.Contains(r.Error, "command") && !strings.Contains(r.Error, "command exited with status 0 by itself, not signalled") {
		t.Errorf("error %q does not say the command exited with status 0 by itself", r.Error)
	}
}

// waitLostRun waits for a run of job recorded lost in the ledger at url
// and returns it.
func waitLostRun(t *testing.T, url, job string) ledger.RunRecord {
	t.Helper()
	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	var lost []ledger.RunRecord
	clitest.WaitFor(t, 30*time.Second, func() bool {
		lost, err = store.(ledger.Ledger).Runs(context.Background(), ledger.RunQuery{Job: job, Status: ledger.RunLost})
		return err == nil && len(lost) > 0
	}, "a lost run of "+job+" in the ledger")
	return lost[0]
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

//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
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

//go:build unix

package cli

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

// When renewals stop getting through, SIGTERM comes --kill-grace before the
// lease's local validity ends, so a COMMAND that ignores it is SIGKILLed
// before the lease expires at the store and anyone else could obtain it.
func TestExecBlackholeKillsBeforeExpiry(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	px := proxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := tl.Start(t, []string{"PIDFILE=" + pidFile}, "exec", "--store", "redis://"+px.Addr(), "--key", "cut",
		// The margin between local validity and the store's expiry is the
		// drift, 1% of the TTL: 200 ms here. With 80 ms (an 8 s TTL) a
		// machine loaded by other suites delayed the SIGKILL past it.
		"--ttl", "20s", "--kill-grace", "1s",
		"--", "sh", "-c", `trap "" TERM; echo $$ > "$PIDFILE"; echo started; while :; do sleep 0.05; done`)
	p.WaitOutput("started", 20*time.Second)
	pid := clitest.ReadPid(t, pidFile)
	px.Blackhole(t)
	t.Cleanup(func() { px.Restore(t) })
	cut := time.Now()
	var goneAt, expiredAt time.Time
	clitest.WaitFor(t, 30*time.Second, func() bool {
		now := time.Now()
		if goneAt.IsZero() && !clitest.Alive(pid) {
			goneAt = now
		}
		if expiredAt.IsZero() && !exists(t, c, lockKey("cut")) {
			expiredAt = now
		}
		return !goneAt.IsZero() && !expiredAt.IsZero()
	}, "COMMAND to die and the lease to expire")
	t.Logf("COMMAND killed %v after the cut, lease expired at the store %v after", goneAt.Sub(cut).Round(time.Millisecond), expiredAt.Sub(cut).Round(time.Millisecond))
	if !goneAt.Before(expiredAt) {
		t.Fatalf("COMMAND still ran when the lease expired at the store (killed %v after it)", goneAt.Sub(expiredAt))
	}
	px.Restore(t)
	if code := p.Wait(30 * time.Second); code != exitSoftware {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitSoftware, p.Stderr())
	}
}

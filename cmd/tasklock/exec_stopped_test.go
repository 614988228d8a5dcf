//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

// stoppedPids returns the processes carrying marker that are stopped
// (state T: SIGSTOP, or SIGTTIN from reading the terminal in the
// background group COMMAND runs in).
func stoppedPids(marker string) []int {
	var out []int
	for _, p := range markedProcs(marker) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) STATE ...: comm may hold blanks, so read after ")".
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(s[i+1:], " T") {
			out = append(out, p.pid)
		}
	}
	return out
}

// A signal exec passes on must reach a COMMAND that is stopped, as one that
// read the terminal is (SIGTTIN: it runs in its own process group): it
// used to stay pending, so exec waited, holding the lock, until someone
// sent SIGKILL. Like systemd, exec now sends SIGCONT after it.
func TestExecSignalReachesStoppedCommand(t *testing.T) {
	t.Parallel()
	marker := newMarker(t)
	url := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	for _, tt := range []struct {
		sig  syscall.Signal
		want int
	}{
		{syscall.SIGTERM, 5},
		{syscall.SIGINT, 128 + 2},
	} {
		p := tl.Start(t, []string{marker}, "exec", "--store", url, "--key", "stopped", "--",
			"sh", "-c", `trap "echo got-term; exit 5" TERM; echo started; kill -STOP $$; echo resumed-by-itself; exit 0`)
		p.WaitOutput("started", 20*time.Second)
		clitest.WaitFor(t, 10*time.Second, func() bool { return len(stoppedPids(marker)) > 0 }, "COMMAND to stop")
		if err := p.Process().Signal(tt.sig); err != nil {
			t.Fatal(err)
		}
		if code := p.Wait(10 * time.Second); code != tt.want {
			t.Errorf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tt.sig, code, tt.want, p.Stdout(), p.Stderr())
		}
		if strings.Contains(p.Stdout(), "resumed-by-itself") {
			t.Errorf("%v: COMMAND ran on past the signal:\n%s", tt.sig, p.Stdout())
		}
	}
}

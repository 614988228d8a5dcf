//go:build unix

package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/testserver"
)

// TestExecVerboseRedlockNodes: exec --verbose on a redlock:// store warns,
// before it obtains the lock, of each node that does not answer — one
// refusing the URL's password (which it says), one killed, one stopped (silent, reported
// after the check's 1s bound) — naming the node and its error, never the
// password, and saying how many more nodes may fail before every lock
// stops, in the words of locks list; without --verbose it says nothing of
// them. COMMAND runs on the quorum every time.
func TestExecVerboseRedlockNodes(t *testing.T) {
	t.Parallel()
	const pw = "exec-redlock-pw-7Qx2"
	const otherPW = "another-pw-9Lm4"
	up := []*testserver.Redis{testserver.StartRedis(t), testserver.StartRedis(t), testserver.StartRedis(t), testserver.StartRedis(t)}
	for _, r := range up {
		requirePass(t, r, pw)
	}
	wrong := testserver.StartRedis(t)
	requirePass(t, wrong, otherPW)
	addrs := []string{up[0].Addr(), up[1].Addr(), wrong.Addr(), up[2].Addr(), up[3].Addr()}
	store := "redlock://:" + pw + "@" + strings.Join(addrs, ",")

	// exec runs COMMAND and returns its stderr, with every warning of a
	// node checked: it names one of down, which each get one, with spare
	// more to fail.
	exec := func(what string, verbose bool, spare int, down ...string) string {
		t.Helper()
		args := []string{"exec", "--store", store, "--key", "k"}
		if verbose {
			args = append(args, "--verbose")
		}
		start := time.Now()
		code, out, errOut := tl.Run(t, nil, append(args, "--", "echo", "ran")...)
		t.Logf("%s: exit %d in %v, stderr:\n%s", what, code, time.Since(start).Round(time.Millisecond), errOut)
		if code != exitOK || out != "ran\n" {
			t.Fatalf("%s: exit %d, stdout %q, want 0 and COMMAND's output", what, code, out)
		}
		if strings.Contains(errOut, pw) || strings.Contains(errOut, otherPW) {
			t.Errorf("%s: stderr shows a password:\n%s", what, errOut)
		}
		if got := strings.Count(errOut, "redlock node "); got != len(down) {
			t.Errorf("%s: %d warnings of a node, want %d (%v)", what, got, len(down), down)
		}
		tail := "; locks need 3 of the 5 nodes, so " + strconv.Itoa(spare) + " more may fail before every lock stops"
		for _, addr := range down {
			says := " does not answer ("
			if addr == wrong.Addr() {
				says = " refuses the credentials ("
			}
			line := lineContaining(errOut, "redlock node "+addr+says)
			if line == "" || !strings.Contains(line, "level=WARN") || !strings.Contains(line, tail) {
				t.Errorf("%s: no WARN line saying node %s%s and ending %q", what, addr, says, tail)
			}
		}
		return errOut
	}

	errOut := exec("one node refusing the password", true, 1, wrong.Addr())
	if line := lineContaining(errOut, wrong.Addr()); !strings.Contains(line, "WRONGPASS") {
		t.Errorf("the warning of the node refusing the password does not give its error: %s", line)
	}

	up[3].Kill(t)
	errOut = exec("and one node killed", true, 0, wrong.Addr(), up[3].Addr())
	if line := lineContaining(errOut, "redlock node "+up[3].Addr()); !strings.Contains(line, "connection refused") {
		t.Errorf("the warning of the killed node does not give its error: %s", line)
	}
	exec("without --verbose", false, 0)

	up[3].Restart(t)
	requirePass(t, up[3], pw)
	up[2].Stop(t)
	defer up[2].Cont(t)
	errOut = exec("one node stopped", true, 0, wrong.Addr(), up[2].Addr())
	if line := lineContaining(errOut, "redlock node "+up[2].Addr()); !strings.Contains(line, "context deadline exceeded") {
		t.Errorf("the warning of the stopped node does not say it did not answer in time: %s", line)
	}
}

// lineContaining returns the first line of s that contains sub, or "".
func lineContaining(s, sub string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			return line
		}
	}
	return ""
}

// requirePass makes srv's default user require password pw (testserver
// waits for a PING without one as it starts the server).
func requirePass(t *testing.T, srv *testserver.Redis, pw string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
}

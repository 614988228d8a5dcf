//go:build unix

package main

import (
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/tasklock/tasklock/internal/testserver"
)

// clientLogLine is a line go-redis prints on its own with its default
// logger: "redis: 2026/11/29 06:00:01 sentinel.go:807: sentinel: selected
// addr=...". Its errors start with "redis: " too, without the date.
var clientLogLine = regexp.MustCompile(`(?m)^redis: \d{4}/\d\d/\d\d |sentinel\.go:\d`)

// noClientLogs fails the test when stderr holds a line go-redis printed on
// its own.
func noClientLogs(t *testing.T, what, stderr string) {
	t.Helper()
	if clientLogLine.MatchString(stderr) {
		t.Errorf("%s: stderr holds go-redis's own log lines:\n%s", what, stderr)
	}
}

// TestCommandsSentinel runs the locks and jobs commands on a Sentinel
// store: their stderr holds no go-redis log lines (exec's never did), and a
// master name no sentinel knows, or a data node's address where a
// sentinel's belongs, is a bad URL (exit 64) that says so.
func TestCommandsSentinel(t *testing.T) {
	t.Parallel()
	sen := testserver.StartSentinel(t)
	sentinels := strings.Join(sen.SentinelAddrs(), ",")
	url := "redis+sentinel://" + sentinels + "/" + sen.MasterName()

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"locks", "list", "--store", url}, exitOK},
		{[]string{"locks", "show", "--store", url, "nokey"}, exitMissing},
		{[]string{"jobs", "list", "--store", url}, exitOK},
		{[]string{"exec", "--store", url, "--key", "k", "--", "true"}, exitOK},
	} {
		what := strings.Join(tc.args[:2], " ")
		code, _, errOut := tl.Run(t, nil, tc.args...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\nstderr:\n%s", what, code, tc.code, errOut)
		}
		noClientLogs(t, what, errOut)
	}

	for _, tc := range []struct {
		url, want string
	}{
		{"redis+sentinel://" + sentinels + "/nomaster", `knows a master named "nomaster"`},
		{"redis+sentinel://" + sen.Nodes()[0].Addr() + "/" + sen.MasterName(), sen.Nodes()[0].Addr() + " is not a sentinel"},
	} {
		for _, args := range [][]string{
			{"locks", "list", "--store", tc.url},
			{"exec", "--store", tc.url, "--key", "k", "--", "echo", "ran"},
		} {
			code, out, errOut := tl.Run(t, nil, args...)
			if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
				t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant %d saying %q", strings.Join(args, " "), code, out, errOut, exitUsage, tc.want)
			}
			noClientLogs(t, strings.Join(args, " "), errOut)
			t.Logf("%s: %s", args[0], strings.TrimSpace(errOut))
		}
	}
}

// TestCommandsRedlock: exec refuses a redlock:// URL two of whose hosts
// are one server (127.0.0.1 and localhost) as a bad URL, without running
// COMMAND; serve and jobs say in the user's terms, not a Go type's, that a
// redlock:// store keeps no schedule ledger.
func TestCommandsRedlock(t *testing.T) {
	t.Parallel()
	a, b, c := testserver.StartRedis(t).Addr(), testserver.StartRedis(t).Addr(), testserver.StartRedis(t).Addr()
	_, port, _ := net.SplitHostPort(a)
	alias := net.JoinHostPort("localhost", port)

	dup := "redlock://" + a + "," + alias + "," + b
	code, out, errOut := tl.Run(t, nil, "exec", "--store", dup, "--key", "dup", "--", "echo", "ran")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "hosts "+a+" and "+alias+" are the same Redis server") {
		t.Errorf("exec on %s: exit %d, stdout %q, stderr:\n%s\nwant %d naming both hosts as one server", dup, code, out, errOut, exitUsage)
	}
	t.Logf("exec: %s", strings.TrimSpace(errOut))

	store := "redlock://" + a + "," + b + "," + c
	cfg := writeConfig(t, t.TempDir(), "node: n\njobs:\n  - name: j\n    schedule: '@every 1h'\n    command: [true]\n")
	code, _, errOut = tl.Run(t, nil, "serve", "--config", cfg, "--store", store, "--http", "")
	want := "store " + store + " keeps no schedule ledger, which tasklock serve needs: a redlock:// store keeps locks only"
	if code != exitUsage || !strings.Contains(errOut, want) || strings.Contains(errOut, "*redlock.Store") {
		t.Errorf("serve on %s: exit %d, stderr:\n%s\nwant %d saying %q", store, code, errOut, exitUsage, want)
	}
	t.Logf("serve: %s", strings.TrimSpace(errOut))
	code, _, errOut = tl.Run(t, nil, "jobs", "list", "--store", store)
	want = "store " + store + " keeps no schedule ledger, which tasklock jobs needs: a redlock:// store keeps locks only"
	if code != exitUnavailable || !strings.Contains(errOut, want) {
		t.Errorf("jobs list on %s: exit %d, stderr:\n%s\nwant %d saying %q", store, code, errOut, exitUnavailable, want)
	}
	t.Logf("jobs list: %s", strings.TrimSpace(errOut))

	// A node down: locks list works on the quorum, and warns of the node
	// (the locks alone said nothing of it).
	down := testserver.ClosedAddr(t)
	for _, sub := range []string{"list", "show"} {
		args := []string{"locks", sub, "--store", "redlock://" + a + "," + down + "," + b}
		if sub == "show" {
			args = append(args, "k")
		}
		code, _, errOut = tl.Run(t, nil, args...)
		want = "warning: redlock node " + down + " does not answer ("
		if (sub == "list" && code != exitOK) || !strings.Contains(errOut, want) || !strings.Contains(errOut, "locks need 2 of the 3 nodes, so 0 more may fail") {
			t.Errorf("locks %s with a node down: exit %d, stderr:\n%s\nwant a warning naming %s", sub, code, errOut, down)
		}
	}
	if code, _, errOut = tl.Run(t, nil, "locks", "list", "--store", store); code != exitOK || strings.Contains(errOut, "warning") {
		t.Errorf("locks list with every node up: exit %d, stderr:\n%s\nwant 0 and no warning", code, errOut)
	}
}

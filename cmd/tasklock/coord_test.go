//go:build unix

package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tasklock/tasklock/internal/testserver"
)

// checkCoordStore runs exec on a store whose sessions bound lock TTLs (etcd,
// ZooKeeper) or on RedLock: exclusion with fences, migrate status, and, when sessionParam is not empty, a --ttl above the
// session (exit 64 naming --ttl and the parameter). url has no query.
func checkCoordStore(t *testing.T, url, sessionParam string) {
	t.Helper()
	holderURL := url
	if sessionParam != "" {
		// checkExclusion's holder runs with --ttl 30s.
		holderURL += "?" + sessionParam + "=30s"
	}
	checkExclusion(t, holderURL, url, "coord")

	code, out, errOut := tl.Run(t, nil, "migrate", "status", "--store", url)
	if code != 0 || !strings.Contains(out, "keeps no schema") {
		t.Errorf("migrate status: exit %d, stdout %q, stderr %q; want 0 saying it keeps no schema", code, out, errOut)
	}

	if sessionParam == "" {
		return
	}
	// The default session is 11s on etcd, 10s on ZooKeeper.
	code, out, errOut = tl.Run(t, nil, "exec", "--store", url, "--key", "long", "--ttl", "12s", "--", "echo", "must-not-run")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "--ttl 12s") || !strings.Contains(errOut, sessionParam+"=") {
		t.Errorf("--ttl 12s: exit %d, stdout %q, stderr %q; want %d naming --ttl and %s", code, out, errOut, exitUsage, sessionParam)
	}
	t.Logf("--ttl 12s: %s", strings.TrimSpace(errOut))
}

func TestExecEtcd(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	checkCoordStore(t, "etcd://"+srv.Addr()+"/exec-test", "session_ttl")
}

func TestExecZooKeeper(t *testing.T) {
	t.Parallel()
	srv := testserver.SharedZooKeeper(t)
	checkCoordStore(t, fmt.Sprintf("zk://%s/exec-test-%d", srv.Addr(), os.Getpid()), "session_timeout")
}

func TestExecRedlock(t *testing.T) {
	t.Parallel()
	var addrs []string
	for range 3 {
		addrs = append(addrs, testserver.StartRedis(t).Addr())
	}
	checkCoordStore(t, "redlock://"+strings.Join(addrs, ","), "")
}

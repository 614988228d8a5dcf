package testserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tasklock/tasklock/internal/testserver"
)

func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func etcdCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestEtcd: the server starts fast on loopback ports, keeps its data, ports
// and revisions across Kill+Restart, answers nothing while stopped, and its
// smallest lease is one second.
func TestEtcd(t *testing.T) {
	t.Parallel()
	start := time.Now()
	e := testserver.StartEtcd(t)
	t.Logf("etcd healthy %v after start", time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(e.Addr(), "127.0.0.1:") || len(e.Endpoints()) != 1 || e.Endpoints()[0] != "http://"+e.Addr() {
		t.Fatalf("Addr %q, Endpoints %q", e.Addr(), e.Endpoints())
	}
	if _, err := os.Stat(filepath.Join(e.Dir(), "data", "member")); err != nil {
		t.Fatalf("no member directory in Dir(): %v", err)
	}
	c := etcdClient(t, e.Endpoints())
	put, err := c.Put(etcdCtx(t, 5*time.Second), "k", "v1")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := c.Grant(etcdCtx(t, 5*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL != 1 {
		t.Errorf("a 1 s lease was granted with TTL %d: the fast raft timings did not apply", lease.TTL)
	}

	// Stop: no answers; Cont: answers again.
	e.Stop(t)
	_, err = c.Get(etcdCtx(t, 200*time.Millisecond), "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get from a stopped etcd = %v, want a timeout", err)
	}
	e.Cont(t)
	if _, err := c.Get(etcdCtx(t, 5*time.Second), "k"); err != nil {
		t.Fatalf("Get after Cont: %v", err)
	}

	// Kill and Restart: same port, same data, revisions go on.
	addr, pid := e.Addr(), e.Pid()
	start = time.Now()
	e.Restart(t)
	t.Logf("restart took %v", time.Since(start).Round(time.Millisecond))
	if e.Addr() != addr || e.Pid() == pid {
		t.Fatalf("after Restart: addr %s (was %s), pid %d (was %d)", e.Addr(), addr, e.Pid(), pid)
	}
	get, err := c.Get(etcdCtx(t, 10*time.Second), "k")
	if err != nil {
		t.Fatalf("Get after Restart (the client reconnects): %v", err)
	}
	if len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v1" || get.Kvs[0].CreateRevision != put.Header.Revision {
		t.Fatalf("after Restart k = %v, want v1 created at revision %d", get.Kvs, put.Header.Revision)
	}
	put2, err := c.Put(etcdCtx(t, 5*time.Second), "k", "v2")
	if err != nil {
		t.Fatal(err)
	}
	if put2.Header.Revision <= put.Header.Revision {
		t.Fatalf("revision %d after the restart, %d before", put2.Header.Revision, put.Header.Revision)
	}
	log, err := os.ReadFile(e.LogPath())
	if err != nil || !strings.Contains(string(log), "etcd") {
		t.Fatalf("log %s: %v", e.LogPath(), err)
	}

	e.Kill(t)
	if _, err := c.Get(etcdCtx(t, 200*time.Millisecond), "k"); err == nil {
		t.Fatal("Get from a killed etcd succeeded")
	}
}

// TestEtcdArgs: WithEtcdArgs overrides a default.
func TestEtcdArgs(t *testing.T) {
	t.Parallel()
	e := testserver.StartEtcd(t, testserver.WithEtcdArgs("--max-txn-ops", "2"))
	c := etcdClient(t, e.Endpoints())
	ops := []clientv3.Op{clientv3.OpGet("a"), clientv3.OpGet("b"), clientv3.OpGet("c")}
	if _, err := c.Txn(etcdCtx(t, 5*time.Second)).Then(ops...).Commit(); err == nil || !strings.Contains(err.Error(), "too many operations") {
		t.Fatalf("a 3-op txn with --max-txn-ops 2: %v, want too many operations", err)
	}
}

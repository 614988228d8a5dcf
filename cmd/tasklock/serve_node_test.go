//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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
)

// TestRetakeNodeTellsTheCasesApart: when serve tries to take its node-name
// lock back, what it logs says why it could not — its own lapsed lease
// still in the store, another process holding the name, or the store not
// answering — and only the second says another serve may use the name.
// On a real Redis, killed and restarted for the third case.
func TestRetakeNodeTellsTheCasesApart(t *testing.T) {
	ctx := context.Background()
	r := testserver.StartRedis(t)
	url := "redis://" + r.Addr()
	open := func() (*tasklock.Locker, driver.Store) {
		store, closeStore, err := storeurl.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = closeStore() })
		lk, err := tasklock.New(store, &tasklock.Config{Owner: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Close() })
		return lk, store
	}
	lk, store := open()
	logs := &syncBuffer{}
	s := &server{node: "n1", lk: lk, lister: store.(driver.Lister), log: slog.New(slog.NewTextHandler(logs, nil))}
	key := nodeKeyPrefix + s.node
	var last retook
	retake := func(lost *tasklock.Lock) (*tasklock.Lock, time.Duration, string) {
		t.Helper()
		before := len(logs.String())
		last = s.retakeNode(lost)
		return last.lock, last.again, logs.String()[before:]
	}

	// Its own lease, still in the store: the store answers "held" with
	// the lost hold's fence, as when renewals stopped reaching it for
	// longer than the lease here but the store has not expired it yet.
	own, err := lk.TryObtain(ctx, key, s.nodeLockOptions())
	if err != nil {
		t.Fatal(err)
	}
	g, again, line := retake(own)
	if g != nil || !strings.Contains(line, "still this node's own lease") || strings.Contains(line, "another serve") {
		t.Errorf("own lease still in the store: got %v; logged %q", g, line)
	}
	if again <= 0 || again > retakeRetry+10*time.Millisecond {
		t.Errorf("own lease: tries again in %v, want within its TTL and at most %v", again, retakeRetry)
	}
	if !last.held || !last.own || last.other {
		t.Errorf("own lease: found %+v, want held by its own lease", last)
	}

	// Another process with the same node name took it after this one's
	// hold ended: the real warning, naming the holder's fence.
	if err := own.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk2, _ := open()
	other, err := lk2.TryObtain(ctx, key, s.nodeLockOptions())
	if err != nil {
		t.Fatal(err)
	}
	g, _, line = retake(own)
	if g != nil || !strings.Contains(line, "another serve may use this node name") || strings.Contains(line, "own lease") {
		t.Errorf("another holder: got %v; logged %q", g, line)
	}
	if !last.held || last.own || !last.other || last.fence != other.Fence() || !strings.HasPrefix(last.holder, "n1") {
		t.Errorf("another holder: found %+v, want held by another process, with its fence %d and owner n1", last, other.Fence())
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The store does not answer: say so, and nothing about another serve.
	r.Kill(t)
	g, again, line = retake(own)
	if g != nil || !strings.Contains(line, "the store did not answer") || strings.Contains(line, "another serve") {
		t.Errorf("store down: got %v; logged %q", g, line)
	}
	if again != retakeRetry {
		t.Errorf("store down: tries again in %v, want %v", again, retakeRetry)
	}
	if last.held || last.other {
		t.Errorf("store down: found %+v, want nothing held", last)
	}
	// Back again: the lock is taken and the log says so.
	r.Restart(t)
	deadline := time.Now().Add(20 * time.Second)
	for g == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the node-name lock not taken again within 20s of the store's restart; log:\n%s", logs.String())
		}
		if g, _, line = retake(own); g == nil {
			time.Sleep(50 * time.Millisecond) // polling: the client reconnects on its own
		}
	}
	if !strings.Contains(line, "took the node-name lock again") {
		t.Errorf("taken again: logged %q", line)
	}
	_ = g.Release(ctx)
	t.Logf("log:\n%s", logs.String())
}

// serveN1OnRedis starts a serve named n1 on a Redis of its own, with JSON
// logs, and waits until it serves.
func serveN1OnRedis(t *testing.T) (*testserver.Redis, *proc) {
	t.Helper()
	r := testserver.StartRedis(t)
	cfg := writeConfig(t, t.TempDir(), "store: redis://"+r.Addr()+"\nnode: n1\njobs:\n"+`  - name: beat
    schedule: "@every 1h"
    command: ["true"]
`)
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "", "--log-format", "json")
	p.WaitStderr(`"msg":"serving"`, 30*time.Second)
	return r, p
}

// TestServeNodeLeaseLapsesWhileStoreStopped: a serve whose store stops
// answering (SIGSTOP) for longer than its node lease loses its node-name
// lock, says the store did not answer rather than that another serve may
// use its name, and takes the lock again once the store answers.
func TestServeNodeLeaseLapsesWhileStoreStopped(t *testing.T) {
	t.Parallel()
	r, p := serveN1OnRedis(t)
	r.Stop(t)
	stopped := true
	defer func() {
		if stopped {
			r.Cont(t)
		}
	}()
	// The lease is 10s (tasklock.DefaultTTL); then a try to take it back.
	p.WaitStderr(`"msg":"lost the node-name lock; taking it again"`, 60*time.Second)
	p.WaitStderr(`cannot take the node-name lock again: the store did not answer`, 60*time.Second)
	r.Cont(t)
	stopped = false
	p.WaitStderr(`"msg":"took the node-name lock again"`, 60*time.Second)
	if strings.Contains(p.Stderr(), "another serve may use") {
		t.Errorf("serve blamed another serve for its own lapsed lease:\n%s", p.Stderr())
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d\n%s", code, p.Stderr())
	}
}

// TestServeNodeLeaseLapsesWhileStoreDown: a serve whose store refuses
// connections for longer than its node lease says once that it lost its
// node-name lock and tries to take it again every retakeRetry, as it
// logs, not in a loop as fast as the store refuses; and takes it once the
// store is back.
func TestServeNodeLeaseLapsesWhileStoreDown(t *testing.T) {
	t.Parallel()
	r, p := serveN1OnRedis(t)
	r.Kill(t)
	const cannot = `"msg":"cannot take the node-name lock again: the store did not answer; trying again"`
	// The lease is 10s (tasklock.DefaultTTL); then a try every 5s.
	p.WaitUntil(60*time.Second, func() bool { return strings.Count(p.Stderr(), cannot) >= 2 }, "two tries to take the node-name lock again")
	logs := p.Stderr()
	if n := strings.Count(logs, `"msg":"lost the node-name lock; taking it again"`); n != 1 {
		t.Errorf("the loss of the node-name lock was logged %d times, want once", n)
	}
	var tries []time.Time
	for _, line := range strings.Split(logs, "\n") {
		var rec struct{ Time time.Time }
		if strings.Contains(line, cannot) && json.Unmarshal([]byte(line), &rec) == nil {
			tries = append(tries, rec.Time)
		}
	}
	if len(tries) < 2 || tries[1].Sub(tries[0]) < retakeRetry-time.Second {
		t.Errorf("tries to take the node-name lock again at %v, want one every %v", tries, retakeRetry)
	}
	r.Restart(t)
	p.WaitStderr(`"msg":"took the node-name lock again"`, 60*time.Second)
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d\n%s", code, p.Stderr())
	}
}

// TestServeFleetStartsTogetherOnANewSQLiteFile: serve nodes started at
// the same moment on one new SQLite file (a documented way to run a small
// fleet) all start: they create the file, switch it to WAL and migrate it
// together, and the schema is migrated once.
func TestServeFleetStartsTogetherOnANewSQLiteFile(t *testing.T) {
	t.Parallel()
	const rounds, nodes = 4, 4
	for r := range rounds {
		dir := t.TempDir()
		url := "sqlite://" + filepath.Join(dir, "fleet.db")
		cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n"+`  - name: beat
    schedule: "@every 1s"
    command: ["true"]
`)
		var ps []*clitest.Proc
		for i := range nodes {
			ps = append(ps, tl.Start(t, nil, "serve", "--config", cfg, "--http", "", "--log-format", "json", "--node", fmt.Sprintf("n%d", i)))
		}
		for i, p := range ps {
			p.WaitUntil(60*time.Second, func() bool {
				select {
				case <-p.Done():
					t.Fatalf("round %d: node n%d exited %d before serving:\n%s", r, i, p.State().ExitCode(), p.Stderr())
				default:
				}
				return strings.Contains(p.Stderr(), `"msg":"serving"`)
			}, "serving")
		}
		for _, p := range ps {
			p.Signal(syscall.SIGTERM)
		}
		for i, p := range ps {
			if code := p.Wait(30 * time.Second); code != 0 {
				t.Errorf("round %d: node n%d exit %d\n%s", r, i, code, p.Stderr())
			}
		}
		code, out, errOut := tl.Run(t, nil, "migrate", "status", "--store", url)
		if code != exitOK || strings.Contains(out, " no ") || !strings.Contains(out, "shards_catalog") {
			t.Errorf("round %d: migrate status: exit %d\n%s%s", r, code, out, errOut)
		}
	}
}

package redlock

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/redisstore"
)

// batchParams returns one request per key, each with a fresh token.
func batchParams(ttl time.Duration, keys ...string) []driver.AcquireParams {
	ps := make([]driver.AcquireParams, len(keys))
	for i, k := range keys {
		ps[i] = driver.AcquireParams{Key: k, Token: token(), Owner: "batch", TTL: ttl}
	}
	return ps
}

func releaseParams(ps []driver.AcquireParams) []driver.ReleaseParams {
	rps := make([]driver.ReleaseParams, len(ps))
	for i, p := range ps {
		rps[i] = driver.ReleaseParams{Key: p.Key, Token: p.Token}
	}
	return rps
}

// With one of three nodes down, a batch is granted by the other two, item
// by item as Acquire would decide, and released by them.
func TestBatchOneNodeDown(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), patient)
	plant(t, s, 1, "held", token(), "other", 10*time.Second)
	plant(t, s, 2, "held", token(), "other", 10*time.Second)
	srvs[0].Kill(t)

	ps := batchParams(10*time.Second, "a", "b", "c", "held", "}bad")
	rs, err := s.AcquireBatch(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for j, p := range ps[:3] {
		if rs[j].Err != nil || rs[j].Grant.Fence != 1 {
			t.Fatalf("item %d (%s) with node 0 down: %+v, want a grant with fence 1", j, p.Key, rs[j])
		}
		if !onNode(t, s, 1, p.Key) || !onNode(t, s, 2, p.Key) {
			t.Fatalf("item %d (%s) is not held on nodes 1 and 2", j, p.Key)
		}
	}
	var he *driver.HeldError
	if !errors.As(rs[3].Err, &he) || he.Owner != "other" {
		t.Fatalf("held item: %v, want a *driver.HeldError naming other", rs[3].Err)
	}
	if !errors.Is(rs[4].Err, redisstore.ErrKey) {
		t.Fatalf("bad key: %v, want redisstore.ErrKey", rs[4].Err)
	}

	errs, err := s.ReleaseBatch(ctxT(t), releaseParams(ps[:4]))
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []error{nil, nil, nil, driver.ErrNotHeld} {
		if !errors.Is(errs[j], want) || (want == nil && errs[j] != nil) {
			t.Fatalf("release item %d (%s) with node 0 down: %v, want %v", j, ps[j].Key, errs[j], want)
		}
	}
	for _, p := range ps[:3] {
		if onNode(t, s, 1, p.Key) || onNode(t, s, 2, p.Key) {
			t.Fatalf("%s left behind after the batch release", p.Key)
		}
	}
	if !onNode(t, s, 1, "held") || !onNode(t, s, 2, "held") {
		t.Fatal("the other owner's lease was released")
	}
}

// With two of three nodes down, every item of a batch fails with a
// *QuorumError naming both nodes, and nothing is left on the live node.
func TestBatchTwoNodesDown(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), nil)
	srvs[0].Kill(t)
	srvs[1].Kill(t)

	ps := batchParams(time.Second, "a", "b", "c")
	rs, err := s.AcquireBatch(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for j, p := range ps {
		var qe *QuorumError
		if !errors.As(rs[j].Err, &qe) || errors.Is(rs[j].Err, driver.ErrHeld) {
			t.Fatalf("item %d (%s) with two nodes down: %+v, want a *QuorumError", j, p.Key, rs[j])
		}
		if qe.Key != p.Key || len(qe.Failed) != 2 || qe.Failed[0].Addr != srvs[0].Addr() || qe.Failed[1].Addr != srvs[1].Addr() {
			t.Fatalf("item %d: %v, want key %s and failed nodes %s and %s", j, qe, p.Key, srvs[0].Addr(), srvs[1].Addr())
		}
		if onNode(t, s, 2, p.Key) {
			t.Fatalf("the grant of %s on the live node was left behind", p.Key)
		}
	}
	t.Log(rs[0].Err)

	errs, err := s.ReleaseBatch(ctxT(t), releaseParams(ps))
	if err != nil {
		t.Fatal(err)
	}
	for j := range ps {
		var qe *QuorumError
		if !errors.As(errs[j], &qe) {
			t.Fatalf("release item %d with two nodes down: %v, want a *QuorumError", j, errs[j])
		}
	}
}

// A batch's fences are the maximum of the granting nodes' counters, and the
// counters behind are raised (several on one node in one pipeline, falling
// back to EVAL on a node that lost its scripts).
func TestBatchFenceIsMaxAndRaised(t *testing.T) {
	t.Parallel()
	s := newStore(t, addrsOf(startNodes(t, 3)), patient)
	for k, v := range map[string]int{"a": 100, "b": 50} {
		if err := s.nodes[1].client.Set(ctxT(t), s.prefix+"{"+k+"}:fence", v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.nodes[0].client.ScriptFlush(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	ps := batchParams(time.Second, "a", "b", "c")
	rs, err := s.AcquireBatch(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []uint64{101, 51, 1} {
		if rs[j].Err != nil || rs[j].Grant.Fence != want {
			t.Fatalf("item %d (%s): %+v, want fence %d", j, ps[j].Key, rs[j], want)
		}
		for i := range s.nodes {
			if c := counter(t, s, i, ps[j].Key); c != int64(want) {
				t.Fatalf("node %d's counter of %s is %d, want %d", i, ps[j].Key, c, want)
			}
		}
	}
}

// Every item of a batch whose majority answered after the item's validity
// is refused with ErrTooSlow and released on every node; an item whose
// lease is long enough is granted.
func TestBatchTooSlow(t *testing.T) {
	t.Parallel()
	s := newStore(t, addrsOf(startNodes(t, 3)), patient)
	var calls atomic.Int64
	s.now = func() time.Time {
		if calls.Add(1) == 1 {
			return time.Now() // the start
		}
		return time.Now().Add(2 * time.Second) // the answers "took" 2s
	}
	ps := batchParams(time.Second, "a", "b")
	ps = append(ps, batchParams(time.Minute, "long")...)
	rs, err := s.AcquireBatch(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for j, p := range ps[:2] {
		if !errors.Is(rs[j].Err, ErrTooSlow) {
			t.Fatalf("item %d (%s): %+v, want ErrTooSlow", j, p.Key, rs[j])
		}
		for i := range s.nodes {
			if onNode(t, s, i, p.Key) {
				t.Fatalf("grant of %s left behind on node %d", p.Key, i)
			}
		}
	}
	if rs[2].Err != nil {
		t.Fatalf("the long lease: %v, want granted", rs[2].Err)
	}
	for i := range s.nodes {
		if !onNode(t, s, i, "long") {
			t.Fatalf("the granted lease is missing on node %d", i)
		}
	}
}

// Batches of many keys go through a Locker under load with a node down.
func TestBatchLockerNodeDown(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), patient)
	lk := newLocker(t, s, "a")
	srvs[2].Kill(t)
	const n = 64
	errc := make(chan error, n)
	for i := range n {
		go func() {
			key := fmt.Sprintf("k%d", i)
			l, err := lk.TryObtain(ctxT(t), key, nil)
			if err == nil {
				err = l.Release(ctxT(t))
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", key, err)
			}
			errc <- err
		}()
	}
	for range n {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	ls, err := s.Leases(ctxT(t), "")
	if err != nil || len(ls) != 0 {
		t.Fatalf("leases after the burst: %+v, %v; want none", ls, err)
	}
}

// A lone release's call is the one releaseCalls makes for a batch, with
// ordinary strings and integers as hooks read them, in two allocations
// (the call and the fence key; one more for a KeepFor) where the batch's
// way takes nine.
func TestLoneReleaseCall(t *testing.T) {
	var cs []redis.UniversalClient
	for i := range 3 {
		cs = append(cs, closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", i+1)}))) // never dialled
	}
	s, err := New(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	it := releaseItem{p: driver.ReleaseParams{Key: "k", Token: "tok", KeepFor: 1500 * time.Millisecond}, flags: rollBackFence}
	items := []releaseItem{it}
	lone := s.releaseCalls(items)
	want := []any{"evalsha", releaseScript.Hash(), 2, "tasklock:{k}", "tasklock:{k}:fence", "tasklock:released", "tok", int64(1500), rollBackFence, "k"}
	if len(lone) != 1 || len(lone[0].cmd) != len(want) {
		t.Fatalf("calls %+v, want one of %v", lone, want)
	}
	for i := range want {
		if lone[0].cmd[i] != want[i] {
			t.Errorf("argument %d = %#v, want %#v", i, lone[0].cmd[i], want[i])
		}
	}
	if got := evalshaArgs(releaseScript, lone[0].keys, lone[0].args); len(got) != len(want) {
		t.Errorf("keys and args give %v, want %v", got, want)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("keys and args: argument %d = %#v, want %#v", i, got[i], want[i])
			}
		}
	}
	items[0].p.KeepFor = 0 // a Release's
	if n := testing.AllocsPerRun(100, func() { s.releaseCalls(items) }); n > 2 {
		t.Errorf("a lone release's call made %v allocations, want at most 2", n)
	}
}

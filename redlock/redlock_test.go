package redlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/redisstore"
	"github.com/tasklock/tasklock/storetest"
)

func TestMain(m *testing.M) {
	// go-redis logs failed dials to killed nodes; keep the output readable.
	redis.SetLogger(discardLogger{})
	os.Exit(testserver.Main(m))
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// prefixSeq gives every store in the test binary its own key prefix.
var prefixSeq atomic.Int64

func freshPrefix() string { return fmt.Sprintf("t%d:", prefixSeq.Add(1)) }

func closeAtCleanup[C interface{ Close() error }](t *testing.T, c C) C {
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startNodes starts n independent redis-servers.
func startNodes(t *testing.T, n int, opts ...testserver.RedisOption) []*testserver.Redis {
	t.Helper()
	srvs := make([]*testserver.Redis, n)
	for i := range srvs {
		srvs[i] = testserver.StartRedis(t, opts...)
	}
	return srvs
}

func addrsOf(srvs []*testserver.Redis) []string {
	out := make([]string, len(srvs))
	for i, s := range srvs {
		out[i] = s.Addr()
	}
	return out
}

// newClients returns one client per address with go-redis's defaults
// (ContextTimeoutEnabled off: the store must cope with abandoned calls).
func newClients(t *testing.T, addrs []string) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		cs[i] = closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: a}))
	}
	return cs
}

// newStore returns a Store over addrs with a fresh prefix unless opts has
// one.
func newStore(t *testing.T, addrs []string, opts *Options) *Store {
	t.Helper()
	o := Options{Prefix: freshPrefix()}
	if opts != nil {
		o = *opts
		if o.Prefix == "" {
			o.Prefix = freshPrefix()
		}
	}
	s, err := New(newClients(t, addrs), &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func newLocker(t *testing.T, s driver.Store, owner string) *tasklock.Locker {
	t.Helper()
	lk, err := tasklock.New(s, &tasklock.Config{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// patient makes a store wait up to 1s for every node, so that a node slowed
// down by a loaded machine is not given up on by tests that check each
// node's state.
var patient = &Options{NodeTimeout: time.Second}

var tokenSeq atomic.Int64

func token() string { return fmt.Sprintf("tok%d", tokenSeq.Add(1)) }

func acquire(t *testing.T, s *Store, key, tok, owner string, ttl time.Duration) (uint64, error) {
	t.Helper()
	g, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl})
	return g.Fence, err
}

func mustAcquire(t *testing.T, s *Store, key, tok, owner string, ttl time.Duration) uint64 {
	t.Helper()
	f, err := acquire(t, s, key, tok, owner, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return f
}

// plant grants key to tok on node i alone, bypassing the quorum.
func plant(t *testing.T, s *Store, i int, key, tok, owner string, ttl time.Duration) {
	t.Helper()
	if _, err := s.nodes[i].store.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl}); err != nil {
		t.Fatalf("plant %q on node %d: %v", key, i, err)
	}
}

// onNode reports whether node i has a lease on key, read straight from it.
func onNode(t *testing.T, s *Store, i int, key string) bool {
	t.Helper()
	n, err := s.nodes[i].client.Exists(ctxT(t), s.prefix+"{"+key+"}").Result()
	if err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	return n == 1
}

func counter(t *testing.T, s *Store, i int, key string) int64 {
	t.Helper()
	n, err := s.nodes[i].client.Get(ctxT(t), s.prefix+"{"+key+"}:fence").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("node %d: %v", i, err)
	}
	return n
}

func TestNew(t *testing.T) {
	c := func(addr string) redis.UniversalClient {
		return closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: addr}))
	}
	a, b, d := c("127.0.0.1:1"), c("127.0.0.1:2"), c("127.0.0.1:3")
	cluster := closeAtCleanup(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:4"}}))
	var nilClient *redis.Client
	tests := []struct {
		name    string
		clients []redis.UniversalClient
		opts    *Options
		field   string // the *driver.OptionError's Field; "" for success
		want    string // substring of the error
	}{
		{"three", []redis.UniversalClient{a, b, d}, nil, "", ""},
		{"five", []redis.UniversalClient{a, b, d, c("127.0.0.1:5"), c("127.0.0.1:6")}, &Options{NodeTimeout: time.Second}, "", ""},
		{"none", nil, nil, "clients", "clients: 0 given"},
		{"one", []redis.UniversalClient{a}, nil, "clients", "clients: 1 given"},
		{"even", []redis.UniversalClient{a, b, d, c("127.0.0.1:5")}, nil, "clients", "clients: 4 given"},
		{"nil", []redis.UniversalClient{a, nil, d}, nil, "clients[1]", "clients[1]: nil"},
		{"typed nil", []redis.UniversalClient{a, b, nilClient}, nil, "clients[2]", "clients[2]: nil"},
		{"cluster", []redis.UniversalClient{a, cluster, d}, nil, "clients[1]", "clients[1]: type *redis.ClusterClient"},
		{"same client", []redis.UniversalClient{a, b, a}, nil, "clients[2]", "clients[2]: the same client as clients[0]"},
		{"same address", []redis.UniversalClient{a, b, c("127.0.0.1:2")}, nil, "clients[2]", "clients[2]: the same address 127.0.0.1:2 as clients[1]"},
		{"prefix", []redis.UniversalClient{a, b, d}, &Options{Prefix: "x{"}, "Options.Prefix", "Options.Prefix"},
		{"node timeout", []redis.UniversalClient{a, b, d}, &Options{NodeTimeout: -time.Second}, "Options.NodeTimeout", "Options.NodeTimeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before Options
			if tc.opts != nil {
				before = *tc.opts
			}
			s, err := New(tc.clients, tc.opts)
			if tc.opts != nil && *tc.opts != before {
				t.Fatalf("New wrote into the caller's Options: %+v, was %+v", *tc.opts, before)
			}
			var oe *driver.OptionError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.field == "":
				if s.quorum != len(tc.clients)/2+1 {
					t.Fatalf("quorum %d for %d nodes", s.quorum, len(tc.clients))
				}
			case err == nil:
				t.Fatalf("New succeeded, want an error containing %q", tc.want)
			case !errors.As(err, &oe) || oe.Field != tc.field || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "redlock: invalid "):
				t.Fatalf("New = %q, want a *driver.OptionError for %s containing %q", err, tc.field, tc.want)
			}
		})
	}
}

func TestNodeTimeoutDefault(t *testing.T) {
	s := &Store{}
	for _, tc := range []struct{ ttl, want time.Duration }{
		{0, DefaultNodeTimeout},
		{10 * time.Second, 50 * time.Millisecond},
		{time.Second, 50 * time.Millisecond},
		{300 * time.Millisecond, 15 * time.Millisecond},
		{10 * time.Millisecond, 2 * time.Millisecond},
	} {
		if got := s.timeout(tc.ttl); got != tc.want {
			t.Errorf("timeout(%v) = %v, want %v", tc.ttl, got, tc.want)
		}
	}
	s.nodeTimeout = time.Second
	if got := s.timeout(10 * time.Millisecond); got != time.Second {
		t.Errorf("with NodeTimeout set: %v", got)
	}
}

func TestConformance(t *testing.T) {
	addrs := addrsOf(startNodes(t, 3))
	warmUp(t, addrs)
	storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t, addrs, nil) })
}

// warmUp makes a few locks on fresh nodes before a test that expects every
// call to be answered within Acquire's 1 s bound: on a loaded machine a
// redis-server just started has answered its first connections and script
// calls after more than that (1.2–1.5 s in traces of storetest's
// ContendedTryObtainGrantsOne run alone), a QuorumError by the contract
// that the test's first round then reports as a failure.
func warmUp(t *testing.T, addrs []string) {
	t.Helper()
	s := newStore(t, addrs, patient)
	deadline := time.Now().Add(30 * time.Second)
	for done := 0; done < 3; {
		tok := token()
		_, err := acquire(t, s, "warm", tok, "warm", 10*time.Second)
		if err == nil {
			err = s.Release(ctxT(t), driver.ReleaseParams{Key: "warm", Token: tok})
		}
		switch {
		case err == nil:
			done++
		case time.Now().After(deadline):
			t.Fatalf("warming up the nodes: %v", err)
		}
	}
}

// With one of three nodes down, locks are obtained, kept and released.
func TestQuorumOneNodeDown(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), nil)
	a, b := newLocker(t, s, "a"), newLocker(t, s, "b")
	ttl := 600 * time.Millisecond
	la, err := a.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	srvs[0].Kill(t) // while held
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) {
		notObtainedWhileHeld(t, b, la)
		time.Sleep(ttl / 4) // sampling interval
	}
	// b waits; a's release wakes it through the two live nodes.
	got := make(chan *tasklock.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := b.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb.Fence() <= la.Fence() {
			t.Fatalf("fence %d after %d", lb.Fence(), la.Fence())
		}
		if err := lb.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("b never obtained after a's release")
	}
}

// With two of three nodes down (killed, or paused so that they never
// answer), nothing is obtained, the error names both nodes, and the grant on
// the live node is undone.
func TestQuorumTwoNodesDown(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"killed", "paused"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srvs := startNodes(t, 3)
			s := newStore(t, addrsOf(srvs), nil)
			lk := newLocker(t, s, "a")
			for _, srv := range srvs[:2] {
				if mode == "killed" {
					srv.Kill(t)
				} else {
					srv.Stop(t)
					t.Cleanup(func() { srv.Cont(t) })
				}
			}
			start := time.Now()
			l, err := lk.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: time.Second})
			took := time.Since(start)
			if err == nil {
				_ = l.Release(ctxT(t))
				t.Fatal("obtained with two of three nodes down")
			}
			t.Logf("%v after %v", err, took)
			var qe *QuorumError
			if !errors.As(err, &qe) || errors.Is(err, tasklock.ErrNotObtained) {
				t.Fatalf("error %v, want a *QuorumError", err)
			}
			if len(qe.Failed) != 2 || qe.Failed[0].Addr != srvs[0].Addr() || qe.Failed[1].Addr != srvs[1].Addr() {
				t.Fatalf("failed nodes %v, want %s and %s", qe.Failed, srvs[0].Addr(), srvs[1].Addr())
			}
			for _, srv := range srvs[:2] {
				if !strings.Contains(err.Error(), srv.Addr()) {
					t.Fatalf("error %q does not name %s", err, srv.Addr())
				}
			}
			if mode == "paused" && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want it to match context.DeadlineExceeded", err)
			}
			if onNode(t, s, 2, "job") {
				t.Fatal("the grant on the live node was left behind")
			}
			if took > patience+time.Second {
				t.Fatalf("took %v: the wait was not bounded", took)
			}
		})
	}
}

// A failed quorum with answers from every node is "held" when one owner
// holds a majority: the holder is the owner most nodes name, with its
// shortest TTL, and our own grant is undone. When no owner does, the vote
// split: ErrSplitVote, which the Locker tries again.
func TestHeldView(t *testing.T) {
	t.Parallel()
	if h, n := heldView([]*driver.HeldError{{Owner: "x", TTL: 5 * time.Second}, {Owner: "y", TTL: 3 * time.Second}}); h.Owner != "x" || h.TTL != 5*time.Second || n != 1 {
		t.Errorf("heldView of a tie = %+v, %d; want x (the first node) for 5s, named once", h, n)
	}
	// One owner's two grants (a late grant of an attempt it gave up, and
	// its next attempt's) are not a majority: that split the vote, and
	// under load every contender took it for a holder and gave up.
	if h, n := heldView([]*driver.HeldError{{Owner: "x", Token: "t1", TTL: 5 * time.Second}, {Owner: "x", Token: "t2", TTL: 5 * time.Second}}); n != 1 || h.Token != "t1" {
		t.Errorf("heldView of two grants of x = %+v, %d; want x's first grant, named once", h, n)
	}
	s := newStore(t, addrsOf(startNodes(t, 3)), patient)
	plant(t, s, 0, "k", token(), "x", 5*time.Second)
	plant(t, s, 1, "k", token(), "y", 3*time.Second)
	_, err := acquire(t, s, "k", token(), "z", time.Second)
	var he *driver.HeldError
	if !errors.Is(err, ErrSplitVote) || !errors.Is(err, driver.ErrTryAgain) || errors.Is(err, ErrUndecided) || errors.As(err, &he) || !strings.Contains(err.Error(), "by x on 1") {
		t.Fatalf("split vote: %v, want ErrSplitVote (and driver.ErrTryAgain, not ErrUndecided: every node answered) naming x", err)
	}
	if onNode(t, s, 2, "k") {
		t.Fatal("the losing grant on node 2 was left behind")
	}
	ytok := token()
	plant(t, s, 0, "k2", token(), "x", 5*time.Second)
	plant(t, s, 1, "k2", ytok, "y", 3*time.Second)
	plant(t, s, 2, "k2", ytok, "y", 4*time.Second)
	_, err = acquire(t, s, "k2", token(), "z", time.Second)
	if !errors.As(err, &he) || he.Owner != "y" || he.TTL <= 0 || he.TTL > 3*time.Second {
		t.Fatalf("majority holder: %v (%+v), want held by y for up to 3s", err, he)
	}
}

// The fence is the maximum of the granting nodes' counters, and the lower
// counters are raised to it.
func TestFenceIsMaxAndRaised(t *testing.T) {
	t.Parallel()
	s := newStore(t, addrsOf(startNodes(t, 3)), patient)
	if err := s.nodes[1].client.Set(ctxT(t), s.prefix+"{k}:fence", 100, 0).Err(); err != nil {
		t.Fatal(err)
	}
	tok := token()
	if f := mustAcquire(t, s, "k", tok, "a", time.Second); f != 101 {
		t.Fatalf("fence %d, want 101", f)
	}
	for i := range s.nodes {
		if c := counter(t, s, i, "k"); c != 101 {
			t.Fatalf("node %d's counter is %d, want 101", i, c)
		}
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatal(err)
	}
	if f := mustAcquire(t, s, "k", token(), "a", time.Second); f != 102 {
		t.Fatalf("fence %d, want 102", f)
	}
}

// A majority that answered after the lease's validity is refused, and the
// grants are undone.
func TestAcquireTooSlow(t *testing.T) {
	t.Parallel()
	s := newStore(t, addrsOf(startNodes(t, 3)), patient)
	ttl := time.Second
	var calls atomic.Int64
	s.now = func() time.Time {
		if calls.Add(1) == 1 {
			return time.Now() // the start
		}
		return time.Now().Add(ttl) // the answers "took" the whole TTL
	}
	_, err := acquire(t, s, "k", token(), "a", ttl)
	if !errors.Is(err, ErrTooSlow) {
		t.Fatalf("Acquire = %v, want ErrTooSlow", err)
	}
	t.Log(err)
	for i := range s.nodes {
		if onNode(t, s, i, "k") {
			t.Fatalf("grant left behind on node %d", i)
		}
	}
}

// A lease is renewed when a majority renewed it, is not held when a
// majority said so, and is undecided (a transient error) in between.
func TestRenewQuorum(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), patient)
	ttl := 10 * time.Second
	renew := func(keys ...string) ([]error, error) {
		ps := make([]driver.RenewParams, len(keys))
		for i, k := range keys {
			ps[i] = driver.RenewParams{Key: k, Token: "tok-" + k, TTL: ttl}
		}
		return s.Renew(ctxT(t), ps)
	}
	for _, k := range []string{"a", "b", "c"} {
		mustAcquire(t, s, k, "tok-"+k, "o", ttl)
	}
	// b loses node 0; c loses nodes 0 and 1.
	for _, del := range []struct {
		node int
		key  string
	}{{0, "b"}, {0, "c"}, {1, "c"}} {
		if err := s.nodes[del.node].store.ForceRelease(ctxT(t), del.key); err != nil {
			t.Fatal(err)
		}
	}
	res, err := renew("a", "b", "c", "never")
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || res[1] != nil || !errors.Is(res[2], driver.ErrNotHeld) || !errors.Is(res[3], driver.ErrNotHeld) {
		t.Fatalf("renew = %v, want [nil nil ErrNotHeld ErrNotHeld]", res)
	}

	// With node 2 down, b (renewed on node 1 only, not held on node 0) is
	// undecided: a transient error, not ErrNotHeld.
	srvs[2].Kill(t)
	res, err = renew("a", "b")
	if err != nil {
		t.Fatal(err)
	}
	var qe *QuorumError
	if res[0] != nil || !errors.As(res[1], &qe) || errors.Is(res[1], driver.ErrNotHeld) {
		t.Fatalf("renew with node 2 down = %v, want [nil *QuorumError]", res)
	}
	if len(qe.Failed) != 1 || qe.Failed[0].Addr != srvs[2].Addr() || qe.Key != "b" {
		t.Fatalf("undecided lease's error %v does not name node 2 and key b", qe)
	}

	// With two nodes down the whole call fails.
	srvs[1].Kill(t)
	if res, err := renew("a"); !errors.As(err, &qe) || res != nil {
		t.Fatalf("renew with two nodes down = %v, %v, want a *QuorumError", res, err)
	}
}

// Release succeeds when any node released the lease, unless a majority did
// not hold it: then it was not held as a lock, and Release says so (after
// deleting the minority copy all the same).
func TestRelease(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), patient)
	tok := token()
	mustAcquire(t, s, "k", tok, "a", 10*time.Second)
	if err := s.nodes[0].store.ForceRelease(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	rp := driver.ReleaseParams{Key: "k", Token: tok}
	if err := s.Release(ctxT(t), rp); err != nil {
		t.Fatalf("Release with the lease on two nodes = %v, want nil", err)
	}
	if onNode(t, s, 1, "k") || onNode(t, s, 2, "k") {
		t.Fatal("not released on every node")
	}
	if err := s.Release(ctxT(t), rp); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}

	tok = token()
	mustAcquire(t, s, "m", tok, "a", 10*time.Second)
	for _, i := range []int{0, 1} {
		if err := s.nodes[i].store.ForceRelease(ctxT(t), "m"); err != nil {
			t.Fatal(err)
		}
	}
	rp = driver.ReleaseParams{Key: "m", Token: tok}
	if err := s.Release(ctxT(t), rp); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release with the lease on one node = %v, want ErrNotHeld", err)
	}
	if onNode(t, s, 2, "m") {
		t.Fatal("the minority copy on node 2 was left behind")
	}
	if err := s.ForceRelease(ctxT(t), "m"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free key = %v, want ErrNotHeld", err)
	}

	// With one node down, a lease on the other two is released.
	tok = token()
	mustAcquire(t, s, "n", tok, "a", 10*time.Second)
	srvs[0].Kill(t)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "n", Token: tok}); err != nil {
		t.Fatalf("Release with one node down = %v, want nil", err)
	}
	srvs[1].Kill(t)
	var qe *QuorumError
	if err := s.Release(ctxT(t), rp); !errors.As(err, &qe) {
		t.Fatalf("Release with two nodes down = %v, want a *QuorumError", err)
	}
}

// A lease is listed when a majority of the nodes hold the same token.
func TestLeasesMajority(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), patient)
	fa := mustAcquire(t, s, "a", token(), "owner-a", 10*time.Second)
	plant(t, s, 0, "b", token(), "owner-b", 10*time.Second) // one node only
	ctok := token()
	plant(t, s, 0, "c", ctok, "owner-c", 5*time.Second)
	plant(t, s, 1, "c", ctok, "owner-c", 3*time.Second)
	plant(t, s, 2, "c", token(), "other", 8*time.Second) // a different token
	ls, err := s.Leases(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Key != "a" || ls[1].Key != "c" {
		t.Fatalf("leases %+v, want a and c", ls)
	}
	if ls[0].Owner != "owner-a" || ls[0].Fence != fa || ls[0].TTL <= 9*time.Second {
		t.Fatalf("lease a = %+v, want owner-a, fence %d, TTL about 10s", ls[0], fa)
	}
	// c is held by a majority until its shorter copy expires.
	if ls[1].Owner != "owner-c" || ls[1].TTL > 3*time.Second || ls[1].TTL < 2*time.Second {
		t.Fatalf("lease c = %+v, want owner-c for about 3s", ls[1])
	}
	if ls, err := s.Leases(ctxT(t), "c"); err != nil || len(ls) != 1 || ls[0].Key != "c" {
		t.Fatalf("Leases(\"c\") = %+v, %v", ls, err)
	}
	srvs[0].Kill(t)
	if ls, err := s.Leases(ctxT(t), ""); err != nil || len(ls) != 1 || ls[0].Key != "a" {
		t.Fatalf("Leases with node 0 down = %+v, %v, want only a", ls, err)
	}
	srvs[1].Kill(t)
	var qe *QuorumError
	if _, err := s.Leases(ctxT(t), ""); !errors.As(err, &qe) {
		t.Fatalf("Leases with two nodes down = %v, want a *QuorumError", err)
	}
}

// Subscribe works with a node down, and subscribes to it once it is back.
func TestSubscribeNodeDown(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), nil)
	srvs[2].Kill(t)
	var (
		mu   sync.Mutex
		keys = map[string]int{}
	)
	seen := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return keys[k]
	}
	stop, err := s.Subscribe(ctxT(t), func(k string) {
		mu.Lock()
		keys[k]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tok := token()
	mustAcquire(t, s, "k", tok, "a", 10*time.Second)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatal(err)
	}
	// One wake-up for the release, once both live nodes published it.
	waitFor(t, 5*time.Second, func() bool { return seen("k") == 1 })

	srvs[2].Restart(t)
	// The store retries node 2 in the background; publish there until the
	// subscription has come back.
	waitFor(t, 15*time.Second, func() bool {
		_ = s.nodes[2].client.Publish(ctxT(t), s.prefix+"released", "back").Err()
		return seen("back") > 0
	})
}

// notObtainedWhileHeld checks that held is still held and that b cannot
// obtain its key.
func notObtainedWhileHeld(t *testing.T, b *tasklock.Locker, held *tasklock.Lock) {
	t.Helper()
	lb, err := b.TryObtain(ctxT(t), held.Key(), nil)
	select {
	case <-held.Done():
		t.Fatalf("the holder lost its lock: %v", held.Err())
	default:
	}
	if lb != nil {
		t.Fatalf("two holders: another obtained %q with fence %d while it is held with fence %d", held.Key(), lb.Fence(), held.Fence())
	}
	if !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("TryObtain(%q) while held = %v, want ErrNotObtained", held.Key(), err)
	}
}

// waitFor polls cond every 20ms until it holds, failing after timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// Keys that redisstore cannot keep are refused before any node is asked.
func TestBadKey(t *testing.T) {
	s := &Store{}
	if _, err := s.Acquire(context.Background(), driver.AcquireParams{Key: "}x", Token: "t", TTL: time.Second}); !errors.Is(err, redisstore.ErrKey) {
		t.Fatalf("Acquire(\"}x\") = %v, want redisstore.ErrKey", err)
	}
}

// slowHook delays every command of one node's client by delay while on is
// set: a node that answers, but after the node timeout.
type slowHook struct {
	on    atomic.Bool
	delay time.Duration
}

func (h *slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.slow()
		return next(ctx, cmd)
	}
}

func (h *slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.slow()
		return next(ctx, cmds)
	}
}

// slow stands for a node slowed down by a loaded machine (not a
// synchronisation: the test waits for nothing but the Acquire's answer).
func (h *slowHook) slow() {
	if h.on.Load() {
		time.Sleep(h.delay)
	}
}

// A node's answer that comes after the node timeout but decides the vote
// is waited for: without it the vote is a guess, and contenders that each
// count the missing node as another's all report the key held and give
// back their grants, so that nobody gets a free key (storetest's
// ContendedTryObtainGrantsOne on a loaded machine).
func TestSlowNodeDecidesVote(t *testing.T) {
	t.Parallel()
	s := newStore(t, addrsOf(startNodes(t, 3)), &Options{NodeTimeout: 10 * time.Millisecond})
	hook := &slowHook{delay: 100 * time.Millisecond}
	s.nodes[2].client.AddHook(hook)
	// Load the scripts first, so that each slowed Acquire is one command.
	warm := token()
	mustAcquire(t, s, "warm", warm, "z", 10*time.Second)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "warm", Token: warm}); err != nil {
		t.Fatal(err)
	}
	lk := s.prefix + "{k}"
	hold := func(i int, owner string) {
		t.Helper()
		if err := s.nodes[i].client.Set(ctxT(t), lk, owner+":1:"+owner, 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Node 0 is another's, node 1 and the slow node 2 are free: a majority.
	hold(0, "other0")
	hook.on.Store(true)
	tok := token()
	if _, err := acquire(t, s, "k", tok, "z", 10*time.Second); err != nil {
		t.Fatalf("free on a majority with one node slow: Acquire = %v, want the lock", err)
	}
	hook.on.Store(false)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatal(err)
	}

	// Nodes 0 and 1 are two others', the slow node 2 is free: the vote
	// split, nobody holds the key, and the caller should try again.
	hold(0, "other0")
	hold(1, "other1")
	hook.on.Store(true)
	_, err := acquire(t, s, "k", token(), "z", 10*time.Second)
	hook.on.Store(false)
	if !errors.Is(err, ErrSplitVote) {
		t.Fatalf("split between two others with one node slow: Acquire = %v, want ErrSplitVote", err)
	}
	waitFor(t, 5*time.Second, func() bool { return !onNode(t, s, 2, "k") })
}

// A vote that a failed or silent node could decide either way — one grant
// here, one node another's, the third without an answer — is a split, not
// a hold: the other owner may be a contender in the same position, and
// contenders that each reported the key held by another would all give
// back their grants and leave a free key to nobody (storetest's
// ContendedTryObtainGrantsOne, when a node stayed silent past the 1 s
// bound on a loaded machine). Only a holder that the failed nodes could
// give a majority while they could not give one to the request is
// reported as holding the key.
func TestUndecidedVoteTriesAgain(t *testing.T) {
	t.Parallel()
	hold := func(s *Store, i int, owner string) {
		t.Helper()
		if err := s.nodes[i].client.Set(ctxT(t), s.prefix+"{k}", owner+":1:"+owner, 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("down", func(t *testing.T) {
		t.Parallel()
		srvs := startNodes(t, 3)
		s := newStore(t, addrsOf(srvs), nil)
		srvs[1].Kill(t)
		hold(s, 2, "other2")
		_, err := acquire(t, s, "k", token(), "z", 10*time.Second)
		if !errors.Is(err, ErrUndecided) || !errors.Is(err, ErrSplitVote) || !errors.Is(err, driver.ErrTryAgain) {
			t.Fatalf("granted on node 0, node 1 down, node 2 another's: Acquire = %v, want ErrUndecided (an ErrSplitVote)", err)
		}
		if onNode(t, s, 0, "k") {
			t.Fatal("the grant on node 0 was not given back")
		}
		// Another's on two nodes: held, whatever the node that is down
		// would say.
		hold(s, 0, "other2")
		_, err = acquire(t, s, "k", token(), "z", 10*time.Second)
		var he *driver.HeldError
		if !errors.As(err, &he) || he.Owner != "other2" {
			t.Fatalf("nodes 0 and 2 another's, node 1 down: Acquire = %v, want held by other2", err)
		}
	})

	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, addrsOf(startNodes(t, 3)), nil)
		// Load the scripts first, so that each slowed Acquire is one command.
		warm := token()
		mustAcquire(t, s, "warm", warm, "z", 10*time.Second)
		if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "warm", Token: warm}); err != nil {
			t.Fatal(err)
		}
		// A TTL of 200 ms bounds the wait at its validity, 196 ms; node 1
		// answers after 400 ms, past it.
		hook := &slowHook{delay: 400 * time.Millisecond}
		s.nodes[1].client.AddHook(hook)
		hold(s, 2, "other2")
		hook.on.Store(true)
		_, err := acquire(t, s, "k", token(), "z", 200*time.Millisecond)
		hook.on.Store(false)
		if !errors.Is(err, ErrUndecided) || !errors.Is(err, ErrSplitVote) {
			t.Fatalf("granted on node 0, node 1 silent past the wait, node 2 another's: Acquire = %v, want ErrUndecided (an ErrSplitVote)", err)
		}
		if onNode(t, s, 0, "k") {
			t.Fatal("the grant on node 0 was not given back")
		}
		waitFor(t, 5*time.Second, func() bool { return !onNode(t, s, 1, "k") })
	})
}

// A TryObtain is one attempt: a vote that a silent node could decide either
// way is tried again only within a bound, not maxTryAgain times at up to a
// second each. Here another owner holds the key on nodes 1 and 2, and node 1
// is paused (SIGSTOP): every vote is one grant here, one node another's and
// one silent, and each waits for the silent node up to patience (1 s, the
// lease's validity being longer). TryObtain must return within
// 3 × patience: two such attempts and their round trips, with a second to
// spare for a loaded machine. It must not report the key as held by the
// other owner, which it cannot know (the error says the vote was
// undecided: ErrUndecided, not ErrNotObtained), and must give its grant on
// node 0 back.
func TestTryObtainUndecidedIsBounded(t *testing.T) {
	t.Parallel()
	s, lk := undecidedVote(t)

	start := time.Now()
	l, err := lk.TryObtain(ctxT(t), "k", nil)
	took := time.Since(start)
	t.Logf("TryObtain took %v: %v", took.Round(time.Millisecond), err)
	if err == nil {
		_ = l.Release(ctxT(t))
		t.Fatal("obtained a key another owner holds on two of three nodes")
	}
	if bound := 3 * patience; took > bound {
		t.Fatalf("TryObtain took %v, want at most %v", took, bound)
	}
	if errors.Is(err, tasklock.ErrNotObtained) || !errors.Is(err, ErrUndecided) || !errors.Is(err, driver.ErrTryAgain) {
		t.Fatalf("TryObtain = %v, want an undecided vote (ErrUndecided, driver.ErrTryAgain), not ErrNotObtained", err)
	}
	if onNode(t, s, 0, "k") {
		t.Fatal("the grant on node 0 was not given back")
	}
}

// undecidedVote sets up a vote that the silent node decides: key "k" held
// by another owner on nodes 1 and 2 of three, and node 1 SIGSTOPped.
func undecidedVote(t *testing.T) (*Store, *tasklock.Locker) {
	t.Helper()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), nil)
	lk := newLocker(t, s, "z")
	other := token()
	plant(t, s, 1, "k", other, "other", time.Minute)
	plant(t, s, 2, "k", other, "other", time.Minute)
	srvs[1].Stop(t)
	t.Cleanup(func() { srvs[1].Cont(t) })
	return s, lk
}

// TestTryObtainUndecidedShortLease: with a lease short enough that an
// undecided vote waits for the silent node only briefly, TryObtain makes
// all its attempts before its time is up; their last being undecided, the
// key is still not reported as held.
func TestTryObtainUndecidedShortLease(t *testing.T) {
	t.Parallel()
	_, lk := undecidedVote(t)

	l, err := lk.TryObtain(ctxT(t), "k", &tasklock.ObtainOptions{TTL: 100 * time.Millisecond})
	if err == nil {
		_ = l.Release(ctxT(t))
		t.Fatal("obtained a key another owner holds on two of three nodes")
	}
	t.Logf("TryObtain: %v", err)
	if errors.Is(err, tasklock.ErrNotObtained) || !errors.Is(err, ErrUndecided) || !errors.Is(err, driver.ErrUndecided) {
		t.Fatalf("TryObtain = %v, want an undecided vote (ErrUndecided, driver.ErrUndecided), not ErrNotObtained", err)
	}
}

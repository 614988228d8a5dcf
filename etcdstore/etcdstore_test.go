package etcdstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// counter counts the gRPC requests a client sends, by method: unary calls
// (every attempt, inside clientv3's retry interceptor) and streams opened
// (LeaseKeepAlive, Watch).
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(method string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[method[strings.LastIndexByte(method, '/')+1:]]++
	c.mu.Unlock()
}

// take returns the counts so far and starts again from zero.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = nil
	return n
}

func total(n map[string]int) int {
	sum := 0
	for _, v := range n {
		sum += v
	}
	return sum
}

func (c *counter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			c.add(method)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// newClient returns a client for endpoints, closed at cleanup; cnt, when
// not nil, counts its requests.
func newClient(t testing.TB, endpoints []string, cnt *counter) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if cnt != nil {
		cfg.DialOptions = cnt.dialOptions()
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixSeq atomic.Int64

// freshPrefix gives every store of the test binary keys of its own.
func freshPrefix() string {
	return fmt.Sprintf("/test-%d-%d/", os.Getpid(), prefixSeq.Add(1))
}

// newStore returns a Store on a fresh prefix (unless opts names one),
// closed at cleanup.
func newStore(t testing.TB, c *clientv3.Client, opts *Options) *Store {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = freshPrefix()
	}
	s, err := New(c, &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func token() string { return rand.Text() }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, s *Store, key, tok, owner string, ttl time.Duration) uint64 {
	t.Helper()
	g, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return g.Fence
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exists reports whether an etcd key exists, and its lease.
func exists(t testing.TB, c *clientv3.Client, key string) (bool, clientv3.LeaseID) {
	t.Helper()
	resp, err := c.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return false, 0
	}
	return true, clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestConformance runs storetest on one etcd server, a fresh prefix per
// test. It is not parallel: storetest's leak check would see the
// goroutines of tests running beside it. The session lasts a minute, not
// DefaultSessionTTL's 11s: a lock TTL may not exceed it (ErrTTL), and
// SemaphoreDriverRules renews permits for a minute.
func TestConformance(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t, c, &Options{SessionTTL: time.Minute}) })
}

func TestNew(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	bad := []struct {
		opts  Options
		field string
	}{
		{Options{Prefix: "no-slash"}, "Options.Prefix"},
		{Options{Prefix: strings.Repeat("a", 600) + "/"}, "Options.Prefix"},
		{Options{Prefix: "\xff/"}, "Options.Prefix"},
		{Options{SessionTTL: 500 * time.Millisecond}, "Options.SessionTTL"},
		{Options{SessionTTL: 1500 * time.Millisecond}, "Options.SessionTTL"},
		{Options{SessionTTL: -time.Second}, "Options.SessionTTL"},
	}
	for _, b := range bad {
		o := b.opts
		_, err := New(c, &o)
		var oe *driver.OptionError
		if !errors.As(err, &oe) || oe.Field != b.field || !strings.HasPrefix(err.Error(), "etcdstore: invalid "+b.field) {
			t.Errorf("New(%+v) = %v, want a *driver.OptionError naming %s", b.opts, err, b.field)
		}
		if o != b.opts {
			t.Errorf("New wrote into the caller's Options: %+v", o)
		}
	}
	if _, err := New(nil, nil); !errors.As(err, new(*driver.OptionError)) || !strings.Contains(err.Error(), "client") {
		t.Errorf("New(nil client) = %v, want a *driver.OptionError naming client", err)
	}
	var o Options
	s, err := New(c, &o)
	if err != nil {
		t.Fatal(err)
	}
	if o != (Options{}) {
		t.Errorf("New wrote defaults into the caller's Options: %+v", o)
	}
	if s.Prefix() != DefaultPrefix || s.ttl != DefaultSessionTTL {
		t.Errorf("defaults: prefix %q, session TTL %v", s.Prefix(), s.ttl)
	}
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "k", Token: token(), TTL: time.Second}); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
}

// TestStore runs the store-level tests on one server.
func TestStore(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	tests := []struct {
		name string
		fn   func(t *testing.T, c *clientv3.Client)
	}{
		{"Layout", testLayout},
		{"FenceIsCreateRevision", testFenceIsCreateRevision},
		{"Held", testHeld},
		{"ReleaseWrongToken", testReleaseWrongToken},
		{"TTLAboveSession", testTTLAboveSession},
		{"ExpiryDeletesOnlyItsKey", testExpiryDeletesOnlyItsKey},
		{"KeepFor", testKeepFor},
		{"SessionLost", testSessionLost},
		{"RenewMixed", testRenewMixed},
		{"KeepaliveOnDemand", testKeepaliveOnDemand},
		{"KeepaliveAhead", testKeepaliveAhead},
		{"Leases", testLeases},
		{"ForceRelease", testForceRelease},
		{"Subscribe", testSubscribe},
		{"CloseRevokes", testCloseRevokes},
		// Read-write locks and semaphores (kinds_test.go).
		{"KindsLayout", testKindsLayout},
		{"KindsRWRules", testKindsRWRules},
		{"KindsSemaphoreRules", testKindsSemRules},
		{"KindsRoundTrips", testKindsRoundTrips},
		{"KindsExpiry", testKindsExpiry},
		{"KindsNotify", testKindsNotify},
		{"KindsLeasesAndForceRelease", testKindsLeases},
		{"KindsRWLockers", testKindsRWLockers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, c)
		})
	}
}

// heldKey is the etcd key of token's mutex entry for key that s holds, or
// the one named by the token when it holds none.
func heldKey(s *Store, key, tok string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ek, _ := s.mutexKeyLocked(key, tok)
	return ek
}

// testLayout: one key per lock, named by the Store (an Acquire's, when the
// Store has no such key yet) or by its token, on the session lease,
// holding token, TTL and owner; keys with "/" and "%" are escaped.
func testLayout(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	for _, key := range []string{"plain", "a/b", "a", "100%/x%2F"} {
		tok := token()
		f := mustAcquire(t, s, key, tok, "host:1", 3*time.Second)
		ek := s.prefix + strings.NewReplacer("%", "%25", "/", "%2F").Replace(key) + "/" + s.name
		if len(s.name) != 33 || s.name[0] != '%' || heldKey(s, key, tok) != ek {
			t.Errorf("key %q: held as %q, want %q (the Store's name)", key, heldKey(s, key, tok), ek)
		}
		resp, err := c.Get(ctxT(t), ek)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("key %q: etcd key %q: %v %v", key, ek, resp, err)
		}
		kv := resp.Kvs[0]
		if string(kv.Value) != tok+"\n3000\nhost:1" {
			t.Errorf("value %q", kv.Value)
		}
		if uint64(kv.CreateRevision) != f || clientv3.LeaseID(kv.Lease) != s.sess.id {
			t.Errorf("create revision %d (fence %d), lease %x (session %x)", kv.CreateRevision, f, kv.Lease, s.sess.id)
		}
		k, tk, ok := s.parseKey(kv.Key)
		if !ok || k != key || tk != s.name {
			t.Errorf("parseKey(%q) = %q, %q, %v", kv.Key, k, tk, ok)
		}
	}
	// Released and granted again, the key keeps its etcd key; while the
	// Store holds it, another token's Acquire through it is refused.
	tok := token()
	mustAcquire(t, s, "other", tok, "host:1", 3*time.Second)
	first := heldKey(s, "other", tok)
	if _, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "other", Token: token(), Owner: "host:2", TTL: 3 * time.Second}); !errors.As(err, new(*driver.HeldError)) {
		t.Errorf("Acquire of a held key: %v, want a HeldError", err)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "other", Token: tok}); err != nil {
		t.Fatal(err)
	}
	tok = token()
	mustAcquire(t, s, "other", tok, "host:1", 3*time.Second)
	if heldKey(s, "other", tok) != first {
		t.Errorf("granted again as %q, first as %q: want the same etcd key", heldKey(s, "other", tok), first)
	}
	// "a" and "a/b" are different locks: both were granted above.
	leases, err := s.Leases(ctxT(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 2 || leases[0].Key != "a" || leases[1].Key != "a/b" {
		t.Fatalf("Leases(\"a\") = %+v", leases)
	}
}

func testFenceIsCreateRevision(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	var last uint64
	for i := range 5 {
		tok := token()
		f := mustAcquire(t, s, "job", tok, "me", time.Second)
		if f <= last {
			t.Fatalf("grant %d: fence %d after %d", i, f, last)
		}
		last = f
		if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "job", Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	// Another key's writes move the revision too: fences are global.
	other := mustAcquire(t, s, "other", token(), "me", time.Second)
	f := mustAcquire(t, s, "job", token(), "me", time.Second)
	if other <= last || f <= other {
		t.Fatalf("fences %d, %d after %d", other, f, last)
	}
}

func testHeld(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	holder := token()
	mustAcquire(t, s, "k", holder, "host-a:42", 5*time.Second)
	_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "k", Token: token(), Owner: "host-b:7", TTL: time.Second})
	var he *driver.HeldError
	if !errors.As(err, &he) || !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire of a held key: %v, want *HeldError", err)
	}
	if he.Owner != "host-a:42" || he.TTL != 5*time.Second {
		t.Fatalf("HeldError %+v, want owner host-a:42 and TTL 5s (the lock's TTL, below the session's 10s)", he)
	}
	resp, err := c.Get(ctxT(t), s.keyPrefix("k"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the failed attempt left %d entries: %v", len(resp.Kvs), err)
	}
}

func testReleaseWrongToken(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	holder := token()
	mustAcquire(t, s, "k", holder, "a", 5*time.Second)
	for _, tok := range []string{token(), holder[:8], ""} {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Release by a wrong token %q: %v, want ErrNotHeld", tok, err)
		}
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "missing", Token: holder}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a missing key: %v, want ErrNotHeld", err)
	}
	if ok, _ := exists(t, c, heldKey(s, "k", holder)); !ok {
		t.Fatal("wrong releases deleted the holder's key")
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: holder}); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: holder}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
}

func testTTLAboveSession(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, &Options{SessionTTL: 2 * time.Second})
	_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "k", Token: token(), TTL: 2*time.Second + time.Millisecond})
	if !errors.Is(err, ErrTTL) {
		t.Fatalf("Acquire with a TTL above the session's: %v, want ErrTTL", err)
	}
	tok := token()
	mustAcquire(t, s, "k", tok, "a", 2*time.Second)
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "k", Token: tok, TTL: 3 * time.Second}, {Key: "k", Token: tok, TTL: time.Second}})
	if err != nil || !errors.Is(res[0], ErrTTL) || res[1] != nil {
		t.Fatalf("Renew = %v, %v; want ErrTTL for the long one, nil for the other", res, err)
	}
	// Through a Locker the error is the obtain's.
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if _, err := lk.TryObtain(ctxT(t), "other", &tasklock.ObtainOptions{TTL: 3 * time.Second}); !errors.Is(err, ErrTTL) {
		t.Fatalf("TryObtain with a TTL above the session's: %v, want ErrTTL", err)
	}
}

// testExpiryDeletesOnlyItsKey: an unrenewed lock's key is deleted at its
// deadline by the Store's reaper; the session lease and the other locks on
// it stay.
func testExpiryDeletesOnlyItsKey(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	short, long := token(), token()
	// The store's deadline runs from when it started the call, so measure
	// from before the call: a slow Acquire must not make expiry look early.
	acquired := time.Now()
	mustAcquire(t, s, "short", short, "a", 200*time.Millisecond)
	shortKey := heldKey(s, "short", short)
	mustAcquire(t, s, "long", long, "a", 5*time.Second)
	waitFor(t, 3*time.Second, "the short lock's key deleted", func() bool {
		ok, _ := exists(t, c, shortKey)
		return !ok
	})
	if el := time.Since(acquired); el < 200*time.Millisecond {
		t.Fatalf("deleted %v after the grant, before its TTL", el)
	}
	if ok, lease := exists(t, c, heldKey(s, "long", long)); !ok || lease != s.sess.id {
		t.Fatalf("the other lock's key: exists %v, lease %x", ok, lease)
	}
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "short", Token: short, TTL: time.Second}, {Key: "long", Token: long, TTL: time.Second}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) || res[1] != nil {
		t.Fatalf("Renew = %v, %v; want ErrNotHeld, nil", res, err)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "short", Token: short}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release after expiry: %v, want ErrNotHeld", err)
	}
}

// testKeepFor: Release with KeepFor moves the key onto a lease of its own,
// which outlives the session.
func testKeepFor(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	tok := token()
	mustAcquire(t, s, "k", tok, "a", 5*time.Second)
	ek := heldKey(s, "k", tok)
	session := s.sess.id
	start := time.Now()
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok, KeepFor: 700 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ok, lease := exists(t, c, ek)
	if !ok || lease == session || lease == 0 {
		t.Fatalf("after Release with KeepFor: exists %v, lease %x (session %x)", ok, lease, session)
	}
	ttl, err := c.TimeToLive(ctxT(t), lease)
	if err != nil || ttl.GrantedTTL != 1 {
		t.Fatalf("KeepFor lease: granted %d s, %v; want 1 s (700ms rounded up)", ttl.GrantedTTL, err)
	}
	// The session can go: the key stays for KeepFor.
	if _, err := c.Revoke(ctxT(t), session); err != nil {
		t.Fatal(err)
	}
	if ok, _ := exists(t, c, ek); !ok {
		t.Fatal("the key went with the session lease")
	}
	if _, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "k", Token: token(), TTL: time.Second}); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire during KeepFor: %v, want ErrHeld", err)
	}
	waitFor(t, 3*time.Second, "the kept key to expire", func() bool {
		ok, _ := exists(t, c, ek)
		return !ok
	})
	if el := time.Since(start); el < 700*time.Millisecond {
		t.Fatalf("the kept key expired %v after the release", el)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok, KeepFor: time.Second}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release with KeepFor of a lock no longer held: %v, want ErrNotHeld", err)
	}
}

// testSessionLost: when the session lease goes, every lock on it reports
// ErrNotHeld at the next renewal and the next Acquire gets a new session.
func testSessionLost(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	toks := []string{token(), token(), token()}
	var ps []driver.RenewParams
	for i, tok := range toks {
		key := fmt.Sprintf("k%d", i)
		mustAcquire(t, s, key, tok, "a", 5*time.Second)
		ps = append(ps, driver.RenewParams{Key: key, Token: tok, TTL: 5 * time.Second})
	}
	old := s.sess.id
	if _, err := c.Revoke(ctxT(t), old); err != nil {
		t.Fatal(err)
	}
	res, err := s.Renew(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !errors.Is(r, driver.ErrNotHeld) {
			t.Errorf("lease %d after the session was revoked: %v, want ErrNotHeld", i, r)
		}
	}
	f := mustAcquire(t, s, "k0", token(), "a", 5*time.Second)
	if s.sess.id == old || f == 0 {
		t.Fatalf("no new session after the old one was lost (session %x)", s.sess.id)
	}
	// Acquire finds out by itself, too: revoke again, and the next grant
	// retries on a new session.
	cur := s.sess.id
	if _, err := c.Revoke(ctxT(t), cur); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, "k9", token(), "a", time.Second)
	if s.sess.id == cur {
		t.Fatal("Acquire kept using a revoked session")
	}
}

// testRenewMixed: one Renew reports each lease on its own.
func testRenewMixed(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	a, b, gone := token(), token(), token()
	mustAcquire(t, s, "a", a, "x", 2*time.Second)
	mustAcquire(t, s, "b", b, "x", 2*time.Second)
	mustAcquire(t, s, "gone", gone, "x", 2*time.Second)
	if _, err := c.Delete(ctxT(t), heldKey(s, "gone", gone)); err != nil {
		t.Fatal(err)
	}
	res, err := s.Renew(ctxT(t), []driver.RenewParams{
		{Key: "a", Token: a, TTL: 3 * time.Second},
		{Key: "b", Token: "not-b", TTL: 3 * time.Second},
		{Key: "gone", Token: gone, TTL: 3 * time.Second},
		{Key: "b", Token: b, TTL: 3 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, driver.ErrNotHeld, driver.ErrNotHeld, nil}
	for i := range want {
		if !errors.Is(res[i], want[i]) || (want[i] == nil) != (res[i] == nil) {
			t.Errorf("lease %d: %v, want %v", i, res[i], want[i])
		}
	}
}

// testKeepaliveOnDemand: a renewal sends a LeaseKeepAlive only when the
// last one does not cover the TTL asked for.
func testKeepaliveOnDemand(t *testing.T, c *clientv3.Client) {
	var cnt counter
	srvC := newClient(t, c.Endpoints(), &cnt)
	s := newStore(t, srvC, &Options{SessionTTL: 10 * time.Second})
	tok := token()
	mustAcquire(t, s, "k", tok, "a", time.Second)
	cnt.take()
	renew := func(ttl time.Duration) map[string]int {
		t.Helper()
		res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "k", Token: tok, TTL: ttl}})
		if err != nil || res[0] != nil {
			t.Fatalf("Renew: %v %v", res, err)
		}
		return cnt.take()
	}
	if n := renew(time.Second); n["LeaseKeepAlive"] != 0 || total(n) != 1 {
		t.Errorf("renewal for 1s just after the grant of a 10s session sent %v, want one Txn", n)
	}
	if n := renew(10 * time.Second); n["LeaseKeepAlive"] != 1 || total(n) != 2 {
		t.Errorf("renewal for the whole session TTL sent %v, want a Txn and a LeaseKeepAlive", n)
	}
}

// testKeepaliveAhead: on the default session (the default lock TTL plus a
// second), grants of the default TTL in a row for 1.5 s send a keepalive
// ahead of need about every half second, not one per grant, and the
// session lease lives at etcd for at least a lock TTL after the last.
func testKeepaliveAhead(t *testing.T, c *clientv3.Client) {
	var cnt counter
	s := newStore(t, newClient(t, c.Endpoints(), &cnt), nil)
	const ttl = 10 * time.Second
	mustAcquire(t, s, "first", token(), "a", ttl)
	granted := time.Now()
	cnt.take()
	grants, kas := 0, 0
	for time.Since(granted) < 1500*time.Millisecond {
		mustAcquire(t, s, fmt.Sprintf("k%d", grants), token(), "a", ttl)
		grants++
		kas += cnt.take()["LeaseKeepAlive"]
	}
	s.bg.Wait() // the last keepalive, if under way
	kas += cnt.take()["LeaseKeepAlive"]
	t.Logf("%d grants, %d keepalives", grants, kas)
	if kas < 1 || kas > 6 || kas*4 > grants {
		t.Errorf("%d grants in 1.5 s sent %d keepalives, want 1 to 6 and at most one per 4 grants", grants, kas)
	}
	s.mu.Lock()
	id := s.sess.id
	s.mu.Unlock()
	sent := time.Now()
	r, err := c.TimeToLive(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	// etcd rounds down to whole seconds; the last grant began before sent.
	if left := time.Duration(r.TTL+1) * time.Second; left < ttl-time.Since(sent) {
		t.Errorf("session lease has %ds left, want at least the lock TTL %v", r.TTL, ttl)
	}
}

func testLeases(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	mustAcquire(t, s, "jobs/b", token(), "host-b", 3*time.Second)
	fa := mustAcquire(t, s, "jobs/a", token(), "host-a", 2*time.Second)
	mustAcquire(t, s, "other", token(), "host-c", 3*time.Second)
	leases, err := s.Leases(ctxT(t), "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 2 || leases[0].Key != "jobs/a" || leases[1].Key != "jobs/b" {
		t.Fatalf("Leases(jobs/) = %+v", leases)
	}
	if l := leases[0]; l.Owner != "host-a" || l.Fence != fa || l.TTL != 2*time.Second {
		t.Fatalf("lease %+v, want owner host-a, fence %d, TTL 2s", l, fa)
	}
	all, err := s.Leases(ctxT(t), "")
	if err != nil || len(all) != 3 {
		t.Fatalf("Leases(\"\") = %+v, %v", all, err)
	}
}

func testForceRelease(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	tok := token()
	mustAcquire(t, s, "k", tok, "a", 5*time.Second)
	if err := s.ForceRelease(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceRelease(ctxT(t), "k"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second ForceRelease: %v, want ErrNotHeld", err)
	}
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Second}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew after ForceRelease: %v %v, want ErrNotHeld", res, err)
	}
	mustAcquire(t, s, "k", token(), "b", time.Second)
}

// testSubscribe: releases, expiries and forced releases are reported, by
// lock key; grants and KeepFor are not.
func testSubscribe(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	got, stop := subscribeKeys(t, s)
	expect := got.expect(t)
	tok := token()
	mustAcquire(t, s, "a/b", tok, "x", 5*time.Second)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "a/b", Token: tok}); err != nil {
		t.Fatal(err)
	}
	expect("a/b")
	mustAcquire(t, s, "exp", token(), "x", 100*time.Millisecond)
	expect("exp")
	mustAcquire(t, s, "forced", token(), "x", 5*time.Second)
	if err := s.ForceRelease(ctxT(t), "forced"); err != nil {
		t.Fatal(err)
	}
	expect("forced")
	tok = token()
	mustAcquire(t, s, "kept", tok, "x", 5*time.Second)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "kept", Token: tok, KeepFor: time.Second}); err != nil {
		t.Fatal(err)
	}
	expect("kept") // when the KeepFor lease expired, not at the Release
	got.none(t)
	stop()
	stop() // idempotent
}

// notices are the keys a Subscribe announced, in order.
type notices chan string

// subscribeKeys subscribes to s's releases until the test ends (or stop).
func subscribeKeys(t *testing.T, s *Store) (notices, func()) {
	t.Helper()
	got := make(notices, 16)
	stop, err := s.Subscribe(ctxT(t), func(key string) { got <- key })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return got, stop
}

// expect returns a function that waits up to 5s for the next key, which
// must be the one it is given.
func (n notices) expect(t *testing.T) func(key string) {
	return func(key string) {
		t.Helper()
		select {
		case k := <-n:
			if k != key {
				t.Fatalf("notified %q, want %q", k, key)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no notification for %q", key)
		}
	}
}

// none fails the test when a key was announced and not yet expected.
func (n notices) none(t *testing.T) {
	t.Helper()
	select {
	case k := <-n:
		t.Fatalf("unexpected notification %q", k)
	default:
	}
}

// testCloseRevokes: Close revokes the session when nothing is held, and
// leaves it to expire otherwise.
func testCloseRevokes(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	tok := token()
	mustAcquire(t, s, "k", tok, "a", time.Second)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatal(err)
	}
	id := s.sess.id
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if r, err := c.TimeToLive(ctxT(t), id); err != nil || r.TTL != -1 {
		t.Fatalf("session after Close with nothing held: TTL %d, %v; want revoked", r.TTL, err)
	}

	s2 := newStore(t, c, nil)
	tok = token()
	mustAcquire(t, s2, "k", tok, "a", time.Second)
	ek := heldKey(s2, "k", tok)
	id = s2.sess.id
	if err := s2.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := exists(t, c, ek); !ok {
		t.Fatal("Close deleted a held lock's key before its holder could know")
	}
	if r, err := c.TimeToLive(ctxT(t), id); err != nil || r.TTL <= 0 {
		t.Fatalf("session after Close with a lock held: TTL %d, %v; want it left to expire", r.TTL, err)
	}
	if _, err := s2.Renew(ctxT(t), []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Second}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Renew after Close: %v, want ErrClosed", err)
	}
}

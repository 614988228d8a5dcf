package zkstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// testSession is the session timeout of the tests' connections unless a
// test needs another: long enough for storetest's 10 s default TTL.
const testSession = 15 * time.Second

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// connect opens a session to addr with the given timeout and waits until it
// is established. It is closed at cleanup.
func connect(t testing.TB, addr string, session time.Duration) *zk.Conn {
	t.Helper()
	return connectVia(t, addr, session, nil)
}

// connectVia is connect with a dialer of the test's (nil: net.DialTimeout).
func connectVia(t testing.TB, addr string, session time.Duration, dialer zk.Dialer) *zk.Conn {
	t.Helper()
	c, err := dial(addr, session, dialer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// dial opens a session and waits up to 10 s for it.
func dial(addr string, session time.Duration, dialer zk.Dialer) (*zk.Conn, error) {
	if dialer == nil {
		dialer = net.DialTimeout
	}
	c, _, err := zk.Connect([]string{addr}, session, zk.WithLogInfo(false), zk.WithLogger(quietLogger{}), zk.WithDialer(dialer))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			c.Close()
			return nil, fmt.Errorf("no session with %s within 10s (state %v)", addr, c.State())
		}
		time.Sleep(2 * time.Millisecond)
	}
	return c, nil
}

// rootSeq gives every store of the test binary its own root node.
var rootSeq atomic.Int64

func newRoot() string { return fmt.Sprintf("/t%d-%d", os.Getpid(), rootSeq.Add(1)) }

// newStore returns a store on a root of its own (unless opts names one),
// with SessionTimeout session (unless opts sets one). It is closed at
// cleanup, before c (which the caller made first).
func newStore(t testing.TB, c *zk.Conn, session time.Duration, opts *Options) *Store {
	t.Helper()
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Root == "" {
		o.Root = newRoot()
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = session
	}
	s, err := New(c, &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// storesVia returns a store on the shared server whose Conn (c) dials
// through dialer, and another on the same root with a direct Conn: both
// with testSession.
func storesVia(t testing.TB, dialer zk.Dialer) (c *zk.Conn, s, other *Store) {
	t.Helper()
	z := testserver.SharedZooKeeper(t)
	c = connectVia(t, z.Addr(), testSession, dialer)
	s = newStore(t, c, testSession, nil)
	other = newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s.Root()})
	return c, s, other
}

// shared returns a connection to the shared server with testSession.
func shared(t testing.TB) (*testserver.ZooKeeper, *zk.Conn) {
	t.Helper()
	z := testserver.SharedZooKeeper(t)
	return z, connect(t, z.Addr(), testSession)
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

func mustHeld(t testing.TB, s *Store, key string) *driver.HeldError {
	t.Helper()
	_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: token(), Owner: "other", TTL: time.Second})
	var he *driver.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("Acquire(%q) = %v, want a *driver.HeldError", key, err)
	}
	return he
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

// children lists the key node's children ("" for none).
func children(t testing.TB, s *Store, key string) []string {
	t.Helper()
	kids, _, err := s.conn.Children(s.keyPath(key))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(kids)
	return kids
}

// TestConformance runs storetest against the shared server, one root per
// test. It is not parallel: storetest's leak check would see the
// goroutines of tests running beside it.
func TestConformance(t *testing.T) {
	// The longest session the server allows: the suites renew leases of up
	// to a minute.
	z := testserver.SharedZooKeeper(t)
	c := connect(t, z.Addr(), testserver.ZooKeeperMaxSessionTimeout)
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, c, testserver.ZooKeeperMaxSessionTimeout, nil)
	})
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	var oe *driver.OptionError
	if _, err := New(nil, &Options{SessionTimeout: time.Second}); !errors.As(err, &oe) || oe.Field != "conn" {
		t.Errorf("New(nil conn) = %v, want a *driver.OptionError naming conn", err)
	}
	bad := []struct {
		opts  *Options
		field string
	}{
		{nil, "Options.SessionTimeout"},
		{&Options{}, "Options.SessionTimeout"},
		{&Options{SessionTimeout: time.Microsecond}, "Options.SessionTimeout"},
		{&Options{SessionTimeout: time.Second, Root: "tasklock"}, "Options.Root"},
		{&Options{SessionTimeout: time.Second, Root: "/"}, "Options.Root"},
		{&Options{SessionTimeout: time.Second, Root: "/a/"}, "Options.Root"},
		{&Options{SessionTimeout: time.Second, Root: "/a//b"}, "Options.Root"},
		{&Options{SessionTimeout: time.Second, Root: "/a/../b"}, "Options.Root"},
		{&Options{SessionTimeout: time.Second, Root: "/zookeeper/x"}, "Options.Root"},
		{&Options{SessionTimeout: time.Second, Root: "/a\x01"}, "Options.Root"},
		{&Options{SessionTimeout: time.Second, ACL: []zk.ACL{}}, "Options.ACL"},
	}
	for _, b := range bad {
		_, err := New(c, b.opts)
		if !errors.As(err, &oe) || oe.Field != b.field || !strings.HasPrefix(err.Error(), "zkstore: invalid "+b.field) {
			t.Errorf("New(%+v) = %v, want a *driver.OptionError naming %s", b.opts, err, b.field)
		}
	}
	o := &Options{SessionTimeout: 5 * time.Second}
	s, err := New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Root() != DefaultRoot || o.Root != "" || o.ACL != nil {
		t.Fatalf("Root() = %q; caller's options now %+v", s.Root(), o)
	}
}

func TestEscapeName(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"job", "a/b", "100%", ".", "..", "...", "a.b", "é-ü 世界", "\x01", "\uE000", "\uFFF5", "zookeeper", "%2F"} {
		e := escapeName(k)
		if strings.ContainsRune(e, '/') || e == "." || e == ".." {
			t.Errorf("escapeName(%q) = %q: not a node name", k, e)
		}
		for _, r := range e {
			if !nameRune(r) && r != '%' {
				t.Errorf("escapeName(%q) = %q keeps %U", k, e, r)
			}
		}
		if u, ok := unescapeName(e); !ok || u != k {
			t.Errorf("unescapeName(escapeName(%q) = %q) = %q, %v", k, e, u, ok)
		}
	}
	if escapeName("job:report-1") != "job:report-1" {
		t.Errorf("a plain key was escaped: %q", escapeName("job:report-1"))
	}
}

// TestKeys obtains and lists keys that are awkward as node names.
func TestKeys(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	keys := []string{"a/b", "100%", ".", "..", "é 世界", "\uE000", "x:y", "a%2Fb"}
	for _, k := range keys {
		mustAcquire(t, s, k, token(), "owner "+k, 5*time.Second)
		if he := mustHeld(t, s, k); he.Owner != "owner "+k {
			t.Errorf("holder of %q: %q", k, he.Owner)
		}
	}
	ls, err := s.Leases(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range ls {
		got = append(got, l.Key)
	}
	want := append([]string(nil), keys...)
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Leases keys %q, want %q", got, want)
	}
}

// TestFence checks that the fence is the lock node's czxid, increasing
// across releases, expiries and the removal of the key's container node.
func TestFence(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	var last uint64
	for i := range 5 {
		tok := token()
		f := mustAcquire(t, s, "job", tok, "me", 10*time.Second)
		kids := children(t, s, "job")
		if len(kids) != 1 {
			t.Fatalf("children %q", kids)
		}
		_, st, err := c.Get(s.keyPath("job") + "/" + kids[0])
		if err != nil {
			t.Fatal(err)
		}
		if f != uint64(st.Czxid) || st.EphemeralOwner != c.SessionID() {
			t.Fatalf("grant %d: fence %d, node czxid %d, owner session %x (ours %x)", i, f, st.Czxid, st.EphemeralOwner, c.SessionID())
		}
		if f <= last {
			t.Fatalf("grant %d: fence %d after %d", i, f, last)
		}
		last = f
		if err := s.Release(ctx, driver.ReleaseParams{Key: "job", Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	// The server deletes the empty container; the fence keeps increasing.
	waitFor(t, 5*time.Second, "the key's container removed", func() bool {
		ok, _, err := c.Exists(s.keyPath("job"))
		return err == nil && !ok
	})
	if f := mustAcquire(t, s, "job", token(), "me", 10*time.Second); f <= last {
		t.Fatalf("fence %d after the container was recreated, %d before", f, last)
	}
	// A lease that expires instead of being released.
	f := mustAcquire(t, s, "exp", token(), "me", 50*time.Millisecond)
	var g driver.Grant
	waitFor(t, 5*time.Second, "the expired lease taken over", func() bool {
		var err error
		g, err = s.Acquire(ctx, driver.AcquireParams{Key: "exp", Token: token(), Owner: "next", TTL: 10 * time.Second})
		return err == nil
	})
	if g.Fence <= f {
		t.Fatalf("fence %d after an expiry, %d before", g.Fence, f)
	}
}

// TestHeld: a held key names its holder and its remaining lease, and the
// attempt leaves no node behind.
func TestHeld(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	mustAcquire(t, s, "job", token(), "holder", 5*time.Second)
	before := children(t, s, "job")
	he := mustHeld(t, s, "job")
	if he.Owner != "holder" || he.TTL <= 0 || he.TTL > 5*time.Second {
		t.Fatalf("HeldError %+v, want holder with a TTL in (0, 5s]", he)
	}
	if !errors.Is(he, driver.ErrHeld) {
		t.Fatalf("%v does not match ErrHeld", he)
	}
	if after := children(t, s, "job"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("children %q after a held attempt, %q before", after, before)
	}
	// A second Store on its own session sees the same.
	c2 := connect(t, testserver.SharedZooKeeper(t).Addr(), testSession)
	s2 := newStore(t, c2, testSession, &Options{Root: s.Root()})
	if he := mustHeld(t, s2, "job"); he.Owner != "holder" {
		t.Fatalf("other session: %+v", he)
	}
}

// TestAcquireRoundTrips: an Acquire on a free key is one request (the
// multi, whose answer counts the key node's children), on a held key four
// (the multi, the children, the holder's data and the delete), and a
// Ticket alone under its key is granted by Wait with no request, counting
// its lease from the create.
func TestAcquireRoundTrips(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	var d countingDialer
	c := connectVia(t, z.Addr(), testSession, d.dial)
	s := newStore(t, c, testSession, nil)
	other := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s.Root()})
	ctx := ctxT(t)
	count := func(what string, want int64, fn func()) {
		t.Helper()
		r0 := d.requests()
		fn()
		if n := d.requests() - r0; n != want {
			t.Errorf("%s: %d requests, want %d", what, n, want)
		}
	}
	// The Store's first Acquire reads the force-release marker too.
	mustAcquire(t, s, "first", token(), "me", 10*time.Second)
	// key returns a key whose node exists, so that Acquire finds it: the
	// server removes an emptied key node (a container) within 100 ms, but
	// never one that has had no child yet.
	keys := 0
	key := func() string {
		keys++
		k := fmt.Sprintf("job%d", keys)
		if err := other.ensureKey(other.keyPath(k)); err != nil {
			t.Fatal(err)
		}
		return k
	}

	var last uint64
	for i := range 3 {
		k, tok := key(), token()
		var f uint64
		count(fmt.Sprintf("Acquire %d on a free key", i), 1, func() { f = mustAcquire(t, s, k, tok, "me", 10*time.Second) })
		if f <= last {
			t.Fatalf("fence %d after %d", f, last)
		}
		last = f
		if he := mustHeld(t, other, k); he.Owner != "me" {
			t.Fatalf("another Store's Acquire: %+v, want held by me", he)
		}
		count("Release", 1, func() {
			if err := s.Release(ctx, driver.ReleaseParams{Key: k, Token: tok}); err != nil {
				t.Fatal(err)
			}
		})
	}

	k, otok := key(), token()
	mustAcquire(t, other, k, otok, "other", 10*time.Second)
	count("Acquire on a held key", 4, func() {
		if he := mustHeld(t, s, k); he.Owner != "other" {
			t.Fatalf("HeldError %+v, want held by other", he)
		}
	})
	if err := other.Release(ctx, driver.ReleaseParams{Key: k, Token: otok}); err != nil {
		t.Fatal(err)
	}

	k, tok := key(), token()
	start := time.Now()
	var tk driver.Ticket
	count("Enqueue on a free key", 1, func() {
		var err error
		if tk, err = s.Enqueue(ctx, driver.AcquireParams{Key: k, Token: tok, Owner: "me", TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	})
	count("Wait alone under the key", 0, func() {
		g, err := tk.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if g.Fence <= last {
			t.Fatalf("queued grant's fence %d after %d", g.Fence, last)
		}
	})
	if at, ok := tk.(driver.StartedTicket).Started(); !ok || at.Before(start) || at.After(time.Now()) {
		t.Errorf("Started() = %v, %v: want the create's send time, after %v", at, ok, start)
	}
	if he := mustHeld(t, other, k); he.Owner != "me" {
		t.Fatalf("another Store's Acquire after the queued grant: %+v, want held by me", he)
	}
	if err := tk.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d writes were pings, left out of the counts", d.pings.Load(), d.writes.Load())
}

func TestTTLLimit(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, 2*time.Second, nil)
	_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "job", Token: token(), Owner: "me", TTL: 3 * time.Second})
	if !errors.Is(err, ErrTTL) {
		t.Fatalf("Acquire with TTL > SessionTimeout = %v, want ErrTTL", err)
	}
	tok := token()
	mustAcquire(t, s, "job", tok, "me", 2*time.Second)
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "job", Token: tok, TTL: 3 * time.Second}})
	if err != nil || !errors.Is(res[0], ErrTTL) {
		t.Fatalf("Renew with TTL > SessionTimeout = %v, %v; want ErrTTL for the lease", res, err)
	}
}

// countingDialer counts the writes on its connections: go-zookeeper writes
// each request (and each ping) with one Write, so this counts requests.
// pings counts the pings among them.
type countingDialer struct{ writes, bytes, pings atomic.Int64 }

type countingConn struct {
	net.Conn
	d *countingDialer
}

func (c countingConn) Write(b []byte) (int, error) {
	c.d.writes.Add(1)
	c.d.bytes.Add(int64(len(b)))
	// A packet: length, xid, opcode; a ping's xid is -2.
	if len(b) >= 12 && int32(binary.BigEndian.Uint32(b[4:8])) == -2 {
		c.d.pings.Add(1)
	}
	return c.Conn.Write(b)
}

// requests returns the requests sent so far, pings left out.
func (d *countingDialer) requests() int64 { return d.writes.Load() - d.pings.Load() }

func (d *countingDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return countingConn{c, d}, nil
}

// TestRenewRoundTrips renews 10 and 1,000 leases: one request each time,
// of the same size (a multi holding one check of the marker's version), so
// the server's work does not grow with the leases either. Leases
// force-released behind the Store's back cost one read each, once.
func TestRenewRoundTrips(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	var d countingDialer
	// The longest session the server allows: a ping every 20 s, so none
	// falls in the windows counted here.
	c := connectVia(t, z.Addr(), testserver.ZooKeeperMaxSessionTimeout, d.dial)
	s := newStore(t, c, testserver.ZooKeeperMaxSessionTimeout, nil)
	const n = 1000
	ps := make([]driver.RenewParams, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		ps[i] = driver.RenewParams{Key: fmt.Sprintf("k%04d", i), Token: token(), TTL: 30 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: ps[i].Key, Token: ps[i].Token, Owner: "me", TTL: 30 * time.Second})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("acquired %d keys in %v (concurrently)", n, time.Since(start).Round(time.Millisecond))

	renew := func(ps []driver.RenewParams) ([]error, int64, int64, time.Duration) {
		t.Helper()
		w0, b0, t0 := d.writes.Load(), d.bytes.Load(), time.Now()
		res, err := s.Renew(ctxT(t), ps)
		if err != nil {
			t.Fatal(err)
		}
		return res, d.writes.Load() - w0, d.bytes.Load() - b0, time.Since(t0)
	}
	// The first renewal of a Store reads the marker (creating it here).
	_, writes, _, _ := renew(ps[:1])
	t.Logf("first renewal of the Store: %d requests", writes)
	var size10 int64
	for _, size := range []int{10, n} {
		res, writes, bytes, took := renew(ps[:size])
		for i, r := range res {
			if r != nil {
				t.Fatalf("lease %d: %v", i, r)
			}
		}
		t.Logf("renewed %d leases with %d request(s), %d bytes, in %v", size, writes, bytes, took.Round(time.Microsecond))
		if writes != 1 {
			t.Errorf("renewing %d leases took %d requests, want 1", size, writes)
		}
		if size == 10 {
			size10 = bytes
		} else if bytes != size10 {
			t.Errorf("renewing %d leases sent %d bytes, 10 leases %d: want the same", size, bytes, size10)
		}
	}

	// Three leases deleted behind the Store's back: the marker check fails,
	// the marker is read, and it names the three nodes: one read each,
	// then the check again.
	lost := map[int]bool{7: true, 500: true, 999: true}
	other := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s.Root()})
	for i := range lost {
		if err := other.ForceRelease(ctxT(t), ps[i].Key); err != nil {
			t.Fatal(err)
		}
	}
	res, writes, _, took := renew(ps)
	for i, r := range res {
		if lost[i] != errors.Is(r, driver.ErrNotHeld) || (!lost[i] && r != nil) {
			t.Errorf("lease %d (lost %v): %v", i, lost[i], r)
		}
	}
	t.Logf("renewed %d leases, %d of them force-released, with %d requests in %v", n, len(lost), writes, took.Round(time.Microsecond))
	if want := int64(len(lost)) + 3; writes != want {
		t.Errorf("%d requests, want %d", writes, want)
	}
	// Known lost: no request at all; the rest: one again.
	res, writes, _, _ = renew([]driver.RenewParams{ps[7]})
	if !errors.Is(res[0], driver.ErrNotHeld) || writes != 0 {
		t.Errorf("renewing a lease found gone before: %v with %d requests", res[0], writes)
	}
	if _, writes, _, _ = renew(ps[:n/2]); writes != 1 {
		t.Errorf("renewing after the force releases were seen: %d requests, want 1", writes)
	}
}

// TestManyForceReleases: more force releases than the marker names (16)
// between two renewals: every lease created before them is read once.
func TestManyForceReleases(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	other := newStore(t, connect(t, testserver.SharedZooKeeper(t).Addr(), testSession), testSession, &Options{Root: s.Root()})
	const n = 40
	ps := make([]driver.RenewParams, n)
	for i := range ps {
		ps[i] = driver.RenewParams{Key: fmt.Sprintf("k%02d", i), Token: token(), TTL: 10 * time.Second}
		mustAcquire(t, s, ps[i].Key, ps[i].Token, "me", 10*time.Second)
	}
	if res, err := s.Renew(ctxT(t), ps); err != nil || errors.Join(res...) != nil {
		t.Fatalf("Renew = %v, %v", res, err)
	}
	for i := 0; i < n; i += 2 { // 20 > markerHistory
		if err := other.ForceRelease(ctxT(t), ps[i].Key); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Renew(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if lost := i%2 == 0; lost != errors.Is(r, driver.ErrNotHeld) || (!lost && r != nil) {
			t.Errorf("lease %d (lost %v): %v", i, lost, r)
		}
	}
	s.mu.Lock()
	for tok, l := range s.leases {
		if l.check != 0 {
			t.Errorf("lease %s still marked for a check", tok)
		}
	}
	s.mu.Unlock()
}

// TestUnrenewedLeaseEnds: a lease that is not renewed ends at the store
// after its own TTL although the session lives on (the reaper deletes its
// node), and a renewal moves that end.
func TestUnrenewedLeaseEnds(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	// The renewal comes a quarter of the TTL after the grants, leaving
	// the rest for the grants themselves on a busy machine.
	const ttl = time.Second
	a, b := token(), token()
	start := time.Now()
	mustAcquire(t, s, "a", a, "me", ttl)
	mustAcquire(t, s, "b", b, "me", ttl)
	time.Sleep(time.Until(start.Add(ttl / 4)))
	renewed := time.Now()
	if res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "b", Token: b, TTL: ttl}}); err != nil || res[0] != nil {
		t.Fatalf("Renew = %v, %v", res, err)
	}
	var goneA, goneB time.Duration
	waitFor(t, 5*time.Second, "both nodes deleted", func() bool {
		if goneA == 0 && len(children(t, s, "a")) == 0 {
			goneA = time.Since(start)
		}
		if goneB == 0 && len(children(t, s, "b")) == 0 {
			goneB = time.Since(start)
		}
		return goneA > 0 && goneB > 0
	})
	t.Logf("a's node deleted %v after the grant, b's (renewed at %v) %v after", goneA.Round(time.Millisecond), renewed.Sub(start).Round(time.Millisecond), goneB.Round(time.Millisecond))
	if goneA < ttl {
		t.Errorf("a's node deleted %v after the grant, before its TTL %v", goneA, ttl)
	}
	if goneB < renewed.Sub(start)+ttl {
		t.Errorf("b's node deleted %v after the grant, before its renewal (at %v) + TTL", goneB, renewed.Sub(start))
	}
	if res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "b", Token: b, TTL: ttl}}); err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew after the deadline = %v, %v; want ErrNotHeld", res, err)
	}
}

// TestClose: after Close, Acquire, Enqueue and Renew return ErrClosed,
// Release still deletes its node, and the reaper is stopped: Close returns
// once a firing under way has ended (here one retrying a delete while the
// server cannot be reached), and fires no more.
func TestClose(t *testing.T) {
	t.Parallel()
	var d downDialer
	c, s, other := storesVia(t, d.dial)
	held := token()
	mustAcquire(t, s, "held", held, "me", 10*time.Second)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	ctx := ctxT(t)
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "new", Token: token(), Owner: "me", TTL: time.Second}); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Enqueue(ctx, driver.AcquireParams{Key: "new", Token: token(), Owner: "me", TTL: time.Second}); !errors.Is(err, ErrClosed) {
		t.Errorf("Enqueue after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Renew(ctx, []driver.RenewParams{{Key: "held", Token: held, TTL: 10 * time.Second}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Renew after Close = %v, want ErrClosed", err)
	}
	if kids := children(t, other, "new"); len(kids) != 0 {
		t.Errorf("nodes created after Close: %q", kids)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "held", Token: held}); err != nil {
		t.Errorf("Release after Close = %v", err)
	}
	if kids := children(t, other, "held"); len(kids) != 0 {
		t.Errorf("the released node is still there: %q", kids)
	}

	// A second Store, whose timer retries a delete while the server is
	// out of reach.
	s2 := newStore(t, c, testSession, &Options{Root: s.Root()})
	mustAcquire(t, s2, "lost", token(), "me", 200*time.Millisecond)
	d.Down()
	waitFor(t, 10*time.Second, "a failed delete retried", func() bool {
		s2.mu.Lock()
		defer s2.mu.Unlock()
		return len(s2.orphans) == 1 && s2.orphans[0].attempts >= 2
	})
	start := time.Now()
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v with a delete under way or due", time.Since(start).Round(time.Millisecond))
	s2.mu.Lock()
	attempts := s2.orphans[0].attempts
	s2.mu.Unlock()
	s2.reap.fire() // as the timer would: it must do nothing now
	s2.mu.Lock()
	defer s2.mu.Unlock()
	if len(s2.orphans) != 1 || s2.orphans[0].attempts != attempts {
		t.Errorf("the reaper ran after Close: %d orphans, %d attempts (had %d)", len(s2.orphans), s2.orphans[0].attempts, attempts)
	}
}

// downDialer dials as net.DialTimeout does until Down, which closes the
// connections made so far and refuses new ones, as a server that went down
// would, until Up.
type downDialer struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (d *downDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return nil, fmt.Errorf("dial %s: the test took the server down", addr)
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

// Down closes the connections made so far and refuses new ones.
func (d *downDialer) Down() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = true
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}

// Up lets new connections through again.
func (d *downDialer) Up() {
	d.mu.Lock()
	d.down = false
	d.mu.Unlock()
}

// TestRenewMixed: a batch with live, released, unknown and foreign-key
// leases gets one answer per lease.
func TestRenewMixed(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	a, b := token(), token()
	granted := time.Now()
	mustAcquire(t, s, "a", a, "me", time.Second)
	mustAcquire(t, s, "b", b, "me", time.Second)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "b", Token: b}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Renew(ctx, []driver.RenewParams{
		{Key: "a", Token: a, TTL: 10 * time.Second},
		{Key: "b", Token: b, TTL: time.Second},
		{Key: "c", Token: token(), TTL: time.Second},
		{Key: "b", Token: a, TTL: time.Second}, // a's token, another key
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || !errors.Is(res[1], driver.ErrNotHeld) || !errors.Is(res[2], driver.ErrNotHeld) || !errors.Is(res[3], driver.ErrNotHeld) {
		t.Fatalf("Renew = %v", res)
	}
	// The renewal moved a's deadline to 10 s from its send: past the 1 s
	// of the grant, a is still held.
	time.Sleep(time.Until(granted.Add(1500 * time.Millisecond)))
	if he := mustHeld(t, s, "a"); he.Owner != "me" {
		t.Fatalf("a held by %+v after its renewal to 10s", he)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "a", Token: b}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release with the wrong token = %v", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "a", Token: a}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "a", Token: a}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
}

// TestKeepFor covers MinHold with TTL nodes (the test servers have
// extendedTypesEnabled) and, on a server without them, with persistent
// nodes created in a multi.
func TestKeepFor(t *testing.T) {
	t.Parallel()
	t.Run("TTLNode", func(t *testing.T) {
		t.Parallel()
		_, c := shared(t)
		testKeepFor(t, c, 1)
	})
	t.Run("PersistentNode", func(t *testing.T) {
		t.Parallel()
		z := testserver.StartZooKeeper(t, testserver.WithZooKeeperConfig("extendedTypesEnabled=false"))
		c := connect(t, z.Addr(), testSession)
		testKeepFor(t, c, -1)
	})
}

func testKeepFor(t *testing.T, c *zk.Conn, ttlNodes int32) {
	s := newStore(t, c, testSession, nil)
	other := newStore(t, c, testSession, &Options{Root: s.Root()})
	ctx := ctxT(t)
	tok := token()
	f := mustAcquire(t, s, "job", tok, "keeper", 10*time.Second)
	const keep = 600 * time.Millisecond
	released := time.Now()
	if err := s.Release(ctx, driver.ReleaseParams{Key: "job", Token: tok, KeepFor: keep}); err != nil {
		t.Fatal(err)
	}
	if got := s.ttlNodes.Load(); got != ttlNodes {
		t.Fatalf("ttlNodes = %d, want %d", got, ttlNodes)
	}
	kids := children(t, s, "job")
	if len(kids) != 1 || !strings.HasSuffix(kids[0], keepSuffix) {
		t.Fatalf("children after a MinHold release: %q", kids)
	}
	he := mustHeld(t, other, "job")
	if he.Owner != "keeper" || he.TTL <= 0 || he.TTL > keep {
		t.Fatalf("HeldError during MinHold: %+v", he)
	}
	ls, err := other.Leases(ctx, "")
	if err != nil || len(ls) != 1 || ls[0].Fence != f || ls[0].Owner != "keeper" {
		t.Fatalf("Leases during MinHold = %+v, %v; want fence %d", ls, err, f)
	}
	var g driver.Grant
	waitFor(t, 5*time.Second, "the key free after MinHold", func() bool {
		g, err = other.Acquire(ctx, driver.AcquireParams{Key: "job", Token: token(), Owner: "next", TTL: time.Second})
		return err == nil
	})
	el := time.Since(released)
	t.Logf("obtained %v after a release with KeepFor %v", el.Round(time.Millisecond), keep)
	if el < keep-20*time.Millisecond {
		t.Fatalf("obtained %v after the release, before KeepFor %v", el, keep)
	}
	if g.Fence <= f {
		t.Fatalf("fence %d after %d", g.Fence, f)
	}
	// The expired MinHold node was deleted by that Acquire.
	for _, k := range children(t, s, "job") {
		if strings.HasSuffix(k, keepSuffix) {
			t.Fatalf("MinHold node %q left after it expired", k)
		}
	}
}

// TestLeases lists held keys by prefix, with owner, fence and TTL by the
// server's clock, and leaves out expired ones.
func TestLeases(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	if ls, err := s.Leases(ctx, ""); err != nil || len(ls) != 0 {
		t.Fatalf("Leases before any lock = %v, %v", ls, err)
	}
	fa := mustAcquire(t, s, "job:a", token(), "owner-a", 5*time.Second)
	fb := mustAcquire(t, s, "job:b", token(), "owner-b", 5*time.Second)
	mustAcquire(t, s, "other", token(), "owner-o", 5*time.Second)
	mustAcquire(t, s, "job:expired", token(), "gone", 20*time.Millisecond)
	waitFor(t, 5*time.Second, "the short lease over", func() bool {
		ls, err := s.Leases(ctx, "job:expired")
		return err == nil && len(ls) == 0
	})
	ls, err := s.Leases(ctx, "job:")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Key != "job:a" || ls[1].Key != "job:b" {
		t.Fatalf("Leases(job:) = %+v", ls)
	}
	for i, want := range []struct {
		owner string
		fence uint64
	}{{"owner-a", fa}, {"owner-b", fb}} {
		if ls[i].Owner != want.owner || ls[i].Fence != want.fence || ls[i].TTL <= 0 || ls[i].TTL > 5*time.Second {
			t.Errorf("lease %d = %+v, want owner %s fence %d", i, ls[i], want.owner, want.fence)
		}
	}
	if kids := children(t, s, "job:expired"); len(kids) != 0 {
		t.Errorf("expired lock node left after Leases: %q", kids)
	}
	if err := s.ForceRelease(ctx, "job:a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceRelease(ctx, "job:a"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second ForceRelease = %v, want ErrNotHeld", err)
	}
	if err := s.ForceRelease(ctx, "never"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of an unknown key = %v, want ErrNotHeld", err)
	}
}

// TestLeaseMemory measures what the Store keeps per held lease (the
// Locker's own share comes on top). Not parallel: other tests' allocations
// would count.
func TestLeaseMemory(t *testing.T) {
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	const n = 1000
	ps := make([]driver.AcquireParams, n)
	for i := range ps {
		ps[i] = driver.AcquireParams{Key: fmt.Sprintf("key-%05d", i), Token: token(), Owner: "owner", TTL: 10 * time.Second}
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 16 { // pipelined: the count is what matters, not the order
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if _, err := s.Acquire(context.Background(), ps[i]); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d Acquire calls failed", failed.Load())
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	per := (int64(m1.HeapAlloc) - int64(m0.HeapAlloc)) / n
	runtime.KeepAlive(s)
	runtime.KeepAlive(ps)
	t.Logf("heap per held lease in the Store: %d B", per)
	if per > 256 {
		t.Errorf("%d B per lease, want at most 256", per)
	}
}

// TestLockName: lock node names are the escaped token, "-lock-" and the
// sequence number padded to ten digits, as the server names them (%010d).
func TestLockName(t *testing.T) {
	for _, seq := range []int64{0, 7, 1 << 30, 9999999999, 12345678901, -5} {
		for _, tok := range []string{"tok", "a/b"} {
			want := fmt.Sprintf("%s%s%010d", escapeName(tok), lockInfix, seq)
			if got := lockName(tok, seq); got != want {
				t.Errorf("lockName(%q, %d) = %q, want %q", tok, seq, got, want)
			}
			if got, ok := lockSeq(lockName(tok, seq)); seq >= 0 && (!ok || got != seq) {
				t.Errorf("lockSeq(lockName(%q, %d)) = %d, %v", tok, seq, got, ok)
			}
		}
	}
}

// TestEncodeData: the node data is what json.Marshal writes, whatever the
// owner holds.
func TestEncodeData(t *testing.T) {
	for _, owner := range []string{"", "host-1/4242", "a b~", `q"uote`, `back\slash`, "<&>", "tab\there", "ünï", "\x7f", string([]byte{0xff})} {
		for _, fence := range []uint64{0, 1, 1 << 63} {
			want, err := json.Marshal(nodeData{Owner: owner, TTL: 1500, Fence: fence})
			if err != nil {
				t.Fatal(err)
			}
			if got := encodeData(owner, 1500*time.Millisecond, fence); string(got) != string(want) {
				t.Errorf("encodeData(%q, 1.5s, %d) = %s, want %s", owner, fence, got, want)
			}
		}
	}
}

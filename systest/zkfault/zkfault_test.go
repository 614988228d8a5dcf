package zkfault

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
	"github.com/tasklock/tasklock/zkstore"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m, proxy.IgnoreToxics)) }

// testSession is the session timeout of the tests' connections unless a
// test needs another.
const testSession = 15 * time.Second

// faultSession is the session timeout (and the lock TTL) of the holders in
// the fault tests.
const faultSession = 2 * time.Second

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// quietLog drops a Locker's warnings (an expected loss is not news).
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// connect opens a session to addr with the given timeout and waits until it
// is established. It is closed at cleanup.
func connect(t testing.TB, addr string, session time.Duration) *zk.Conn {
	t.Helper()
	return connectVia(t, addr, session, net.DialTimeout)
}

// connectVia is connect with a dialer of the test's.
func connectVia(t testing.TB, addr string, session time.Duration, dialer zk.Dialer) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, session, zk.WithLogInfo(false), zk.WithLogger(quietLogger{}), zk.WithDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.Now().Add(10 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatalf("no session with %s within 10s (state %v)", addr, c.State())
		}
		time.Sleep(2 * time.Millisecond)
	}
	return c
}

// rootSeq gives every store of the test binary its own root node.
var rootSeq atomic.Int64

func newRoot() string { return fmt.Sprintf("/t%d-%d", os.Getpid(), rootSeq.Add(1)) }

// newStore returns a store on a root of its own (unless opts names one),
// with SessionTimeout session (unless opts sets one). It is closed at
// cleanup, before c (which the caller made first).
func newStore(t testing.TB, c *zk.Conn, session time.Duration, opts *zkstore.Options) *zkstore.Store {
	t.Helper()
	o := zkstore.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Root == "" {
		o.Root = newRoot()
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = session
	}
	s, err := zkstore.New(c, &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// shared returns a connection to the shared server with testSession.
func shared(t testing.TB) (*testserver.ZooKeeper, *zk.Conn) {
	t.Helper()
	z := testserver.SharedZooKeeper(t)
	return z, connect(t, z.Addr(), testSession)
}

func newLocker(t testing.TB, s driver.Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner, Logger: quietLog})
}

func token() string { return rand.Text() }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, s *zkstore.Store, key, tok, owner string, ttl time.Duration) uint64 {
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

// keyPath is the node of key under s's Root, as the package documentation
// of zkstore lays it out (Root/<K escaped>), for a key that needs no
// escaping.
func keyPath(s *zkstore.Store, key string) string { return s.Root() + "/" + key }

// children lists the node's children (none when it does not exist).
func children(t testing.TB, c *zk.Conn, path string) []string {
	t.Helper()
	kids, _, err := c.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(kids)
	return kids
}

// countingDialer counts the writes on its connections: go-zookeeper writes
// each request (and each ping) with one Write, so this counts requests.
type countingDialer struct{ writes atomic.Int64 }

type countingConn struct {
	net.Conn
	d *countingDialer
}

func (c countingConn) Write(b []byte) (int, error) {
	c.d.writes.Add(1)
	return c.Conn.Write(b)
}

func (d *countingDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return countingConn{c, d}, nil
}

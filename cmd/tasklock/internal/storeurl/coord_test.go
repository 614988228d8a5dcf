package storeurl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/etcdstore"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/redlock"
	"github.com/tasklock/tasklock/zkstore"
)

// openErr opens rawURL within timeout, which must fail; it returns how long
// Open took and the error.
func openErr(t *testing.T, rawURL string, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	s, closeFn, err := Open(ctx, rawURL)
	if err == nil {
		closeFn()
		t.Fatalf("Open(%s) = %T, want an error", redact.URL(rawURL), s)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error %q contains the password", err)
	}
	return time.Since(start), err
}

func acquire(t *testing.T, s driver.Store, key string, ttl time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Acquire(ctx, driver.AcquireParams{Key: key, Token: "tok-" + key, Owner: "storeurl-test", TTL: ttl})
	return err
}

// etcdClient returns a client of the test's own for srv.
func etcdClient(t *testing.T, srv *testserver.Etcd, user, password string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: user, Password: password,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestOpenEtcd(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	checkStore(t, open(t, "etcd://"+srv.Addr()))

	ctx := context.Background()
	check := etcdClient(t, srv, "", "")
	s, closeFn, err := Open(ctx, "etcd://"+srv.Addr()+",127.0.0.1:1/app?session_ttl=3s&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	// The session TTL reached the store: no lock may outlast it.
	if err := acquire(t, s, "long", 4*time.Second); !errors.Is(err, etcdstore.ErrTTL) || !errors.Is(err, tasklock.ErrUnsupported) {
		t.Errorf("Acquire with a TTL above session_ttl=3s: %v, want ErrTTL", err)
	}
	if err := acquire(t, s, "k", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	// The path is the key prefix.
	resp, err := check.Get(ctx, "/app/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("keys under /app/: %v, %v; want 1", resp, err)
	}
	session := clientv3.LeaseID(resp.Kvs[0].Lease)
	// Closing revokes the store's session lease (once nothing is held) and
	// closes the client.
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "tok-k"}); err != nil {
		t.Fatal(err)
	}
	if ttl, err := check.TimeToLive(ctx, session); err != nil || ttl.TTL <= 0 {
		t.Fatalf("session lease before close: %v, %v; want it alive", ttl, err)
	}
	if err := closeFn(); err != nil {
		t.Errorf("close: %v", err)
	}
	if ttl, err := check.TimeToLive(ctx, session); err != nil || ttl.TTL != -1 {
		t.Errorf("session lease after close: %v, %v; want it revoked", ttl, err)
	}
	if err := acquire(t, s, "k", time.Second); !errors.Is(err, etcdstore.ErrClosed) {
		t.Errorf("Acquire after close: %v, want ErrClosed", err)
	}
}

func TestOpenEtcdAuth(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	ctx := context.Background()
	admin := etcdClient(t, srv, "", "")
	if _, err := admin.UserAdd(ctx, "root", secret); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	checkStore(t, open(t, "etcd://root:"+secret+"@"+srv.Addr()))

	for _, u := range []string{
		"etcd://root:wrong-" + secret + "@" + srv.Addr(),
		"etcd://" + srv.Addr(),
	} {
		_, err := openErr(t, u, 10*time.Second)
		if !errors.Is(err, ErrUnreachable) {
			t.Errorf("Open(%s) = %v, want ErrUnreachable", redact.URL(u), err)
		}
		if !errors.Is(err, ErrAuth) {
			t.Errorf("Open(%s) = %v, want ErrAuth", redact.URL(u), err)
		}
		t.Logf("%v", err)
	}
}

func TestOpenEtcdUnreachable(t *testing.T) {
	t.Parallel()
	addr := testserver.ClosedAddr(t)
	for _, u := range []string{
		"etcd://" + addr + "?dial_timeout=300ms",
		"etcd://root:" + secret + "@" + addr + "?dial_timeout=300ms", // fails authenticating
		"etcds://" + addr + "?dial_timeout=300ms",
	} {
		d, err := openErr(t, u, 10*time.Second)
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "dial_timeout 300ms") || !strings.Contains(err.Error(), redact.URL(u)) ||
			!strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Open(%s) = %v, want ErrUnreachable naming the URL, dial_timeout and why", redact.URL(u), err)
		}
		if d > 3*time.Second {
			t.Errorf("Open(%s) took %v with dial_timeout=300ms", redact.URL(u), d)
		}
		t.Logf("%v (%v)", err, d.Round(time.Millisecond))
	}

	// Without dial_timeout the caller's context bounds Open, and so does
	// its cancellation (a signal, in exec).
	d, err := openErr(t, "etcd://root:"+secret+"@"+addr, 300*time.Millisecond)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) || d > 3*time.Second {
		t.Errorf("Open with a 300ms context: %v after %v", err, d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, _, err = Open(ctx, "etcd://"+addr)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.Canceled) || time.Since(start) > 3*time.Second {
		t.Errorf("Open with a cancelled context: %v after %v", err, time.Since(start))
	}
}

// startTLSProxy accepts TLS connections on a loopback port with cert and
// key, requiring a client certificate signed by ca, and passes what they
// carry on to target in the clear: a TLS front for a plain etcd. It returns
// its address.
func startTLSProxy(t *testing.T, ca, cert, key, target string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{"h2"}, // gRPC
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !track(c) {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			if !track(up) {
				c.Close()
				return
			}
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

func TestOpenEtcds(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	ca, cert, key := writeTLSFiles(t, t.TempDir())
	addr := startTLSProxy(t, ca, cert, key, srv.Addr())
	files := "tls_ca_file=" + url.QueryEscape(ca) + "&tls_cert_file=" + url.QueryEscape(cert) + "&tls_key_file=" + url.QueryEscape(key)
	checkStore(t, open(t, "etcds://"+addr+"/tls?"+files))

	for _, tt := range []struct{ url, want string }{
		// The server's CA is not trusted.
		{"etcds://" + addr + "?dial_timeout=500ms&tls_cert_file=" + url.QueryEscape(cert) + "&tls_key_file=" + url.QueryEscape(key), "x509"},
		// No client certificate, no TLS.
		{"etcds://" + addr + "?dial_timeout=500ms&tls_ca_file=" + url.QueryEscape(ca), "dial_timeout 500ms"},
		{"etcd://" + addr + "?dial_timeout=500ms", "dial_timeout 500ms"},
	} {
		_, err := openErr(t, tt.url, 10*time.Second)
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%s) = %v, want ErrUnreachable saying %q", tt.url, err, tt.want)
		}
		t.Logf("%v", err)
	}
	for _, u := range []string{
		"etcds://" + addr + "?tls_ca_file=/nonexistent.pem",
		"etcds://" + addr + "?tls_ca_file=" + url.QueryEscape(key),
		"etcds://" + addr + "?tls_cert_file=" + url.QueryEscape(cert) + "&tls_key_file=/nonexistent.pem",
	} {
		if _, err := openErr(t, u, 10*time.Second); !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "tls_") {
			t.Errorf("Open(%s) = %v, want ErrBadURL naming the parameter", u, err)
		}
	}
}

// zkRootSeq gives every ZooKeeper store of the test binary a root of its own.
var zkRootSeq atomic.Int64

func zkRoot() string { return fmt.Sprintf("/storeurl-%d-%d", os.Getpid(), zkRootSeq.Add(1)) }

func TestOpenZK(t *testing.T) {
	t.Parallel()
	srv := testserver.SharedZooKeeper(t)
	root := zkRoot()
	s := open(t, "zk://"+srv.Addr()+root)
	checkStore(t, s)
	if zs, ok := s.(*zkstore.Store); !ok || zs.Root() != root {
		t.Errorf("Open returned %T with root %v, want %s", s, s, root)
	}

	// The store's session timeout is the one the server granted, which
	// lock TTLs may not exceed: the server raises one below its
	// minSessionTimeout and lowers one above its maxSessionTimeout.
	for _, tt := range []struct {
		asked, granted time.Duration
	}{
		{100 * time.Millisecond, testserver.ZooKeeperMinSessionTimeout},
		{3 * time.Second, 3 * time.Second},
		{2 * testserver.ZooKeeperMaxSessionTimeout, testserver.ZooKeeperMaxSessionTimeout},
	} {
		s := open(t, "zk://"+srv.Addr()+zkRoot()+"?session_timeout="+tt.asked.String())
		if err := acquire(t, s, "at", tt.granted); err != nil {
			t.Errorf("session_timeout=%v: Acquire with TTL %v (granted): %v", tt.asked, tt.granted, err)
		}
		if err := acquire(t, s, "above", tt.granted+time.Millisecond); !errors.Is(err, zkstore.ErrTTL) {
			t.Errorf("session_timeout=%v: Acquire with TTL above %v: %v, want ErrTTL", tt.asked, tt.granted, err)
		}
	}

	// Closing ends the session, and with it the locks: another client gets
	// the key at once.
	ctx := context.Background()
	root = zkRoot()
	a, closeA, err := Open(ctx, "zk://"+srv.Addr()+root)
	if err != nil {
		t.Fatal(err)
	}
	if err := acquire(t, a, "k", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b := open(t, "zk://"+srv.Addr()+root)
	var held *driver.HeldError
	if err := acquire(t, b, "k", 5*time.Second); !errors.As(err, &held) {
		t.Fatalf("Acquire of a held key: %v, want HeldError", err)
	}
	if err := closeA(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := acquire(t, b, "k", 5*time.Second); err != nil {
		t.Errorf("Acquire after the holder's store was closed: %v", err)
	}
}

func TestOpenZKUnreachable(t *testing.T) {
	t.Parallel()
	// Every server refuses: Open gives up after one round (go-zookeeper
	// waits a second before the next), naming each.
	a, b := testserver.ClosedAddr(t), testserver.ClosedAddr(t)
	u := "zk://" + a + "," + b + "/x"
	d, err := openErr(t, u, 10*time.Second)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) ||
		!strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), redact.URL(u)) {
		t.Errorf("Open = %v, want ErrUnreachable naming both servers", err)
	}
	if d > 5*time.Second {
		t.Errorf("Open took %v", d)
	}
	t.Logf("%v (%v)", err, d.Round(time.Millisecond))

	// A server that hangs up at once, and one that never answers.
	hangup := listen(t, func(c net.Conn) { c.Close() })
	d, err = openErr(t, "zk://"+hangup, 10*time.Second)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "handshake") || d > 5*time.Second {
		t.Errorf("Open against a server that hangs up: %v after %v", err, d)
	}
	t.Logf("%v (%v)", err, d.Round(time.Millisecond))
	silent := listen(t, nil)
	d, err = openErr(t, "zk://"+silent, 300*time.Millisecond)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) || d > 3*time.Second {
		t.Errorf("Open against a silent server: %v after %v", err, d)
	}

	if _, _, err := Open(context.Background(), "zk://no-such-host.invalid"); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Open with an unknown host name: %v, want ErrUnreachable", err)
	}
}

// listen accepts connections on a loopback port until the test ends and
// passes each to serve (nil: keeps it open, silent). It returns the address.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if serve != nil {
				serve(c)
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); <-done; c.Close() }()
		}
	}()
	t.Cleanup(func() { l.Close(); close(done); wg.Wait() })
	return l.Addr().String()
}

// redisNodes starts n Redis servers and returns their addresses.
func redisNodes(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = testserver.StartRedis(t).Addr()
	}
	return addrs
}

// connectedClients is how many clients are connected to the Redis server
// at addr, besides the one asking.
func connectedClients(t *testing.T, addr string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(strings.TrimSpace(list), "\n")
}

func TestOpenRedlock(t *testing.T) {
	t.Parallel()
	addrs := redisNodes(t, 3)
	ctx := context.Background()
	u := "redlock://" + strings.Join(addrs, ",") + "/2?prefix=rl:&node_timeout=20ms"
	s, closeFn, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*redlock.Store); !ok {
		t.Errorf("Open returned %T", s)
	}
	checkStore(t, s)
	// Every node holds the lock, in the URL's database, under its prefix.
	if err := acquire(t, s, "k", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, DB: 2})
		n, err := c.Exists(ctx, "rl:{k}").Result()
		c.Close()
		if err != nil || n != 1 {
			t.Errorf("node %s: EXISTS rl:{k} in db 2 = %d, %v; want 1", a, n, err)
		}
	}
	// Closing closes every node's client.
	if err := closeFn(); err != nil {
		t.Errorf("close: %v", err)
	}
	for _, a := range addrs {
		clitest.WaitFor(t, 5*time.Second, func() bool { return connectedClients(t, a) == 0 }, "the store's connections to "+a+" to close")
	}
}

func TestOpenRedlockPassword(t *testing.T) {
	t.Parallel()
	var addrs []string
	for range 3 {
		srv := testserver.StartRedis(t)
		requirePassword(t, srv)
		addrs = append(addrs, srv.Addr())
	}
	hosts := strings.Join(addrs, ",")
	checkStore(t, open(t, "redlock://:"+secret+"@"+hosts))
	checkStore(t, open(t, "redlock://alice:"+secret+"@"+hosts+"/1"))
	for _, u := range []string{"redlock://alice:wrong-" + secret + "@" + hosts, "redlock://" + hosts} {
		_, err := openErr(t, u, 10*time.Second)
		if !errors.Is(err, ErrAuth) || !errors.Is(err, ErrUnreachable) {
			t.Errorf("Open(%s) = %v, want ErrAuth (and so ErrUnreachable)", redact.URL(u), err)
		}
		t.Logf("%v", err)
	}
}

func TestOpenRedlockMinorityDown(t *testing.T) {
	t.Parallel()
	up := redisNodes(t, 2)
	down1, down2 := testserver.ClosedAddr(t), testserver.ClosedAddr(t)

	// One node of three down: RedLock runs on, and so does Open.
	checkStore(t, open(t, "redlock://:"+secret+"@"+up[0]+","+down1+","+up[1]))

	// Two down: no majority. The error names each failed node.
	u := "redlock://:" + secret + "@" + down1 + "," + up[0] + "," + down2
	d, err := openErr(t, u, 10*time.Second)
	var ne nodeErrors
	if !errors.Is(err, ErrUnreachable) || !errors.As(err, &ne) || len(ne) != 2 ||
		!strings.Contains(err.Error(), down1) || !strings.Contains(err.Error(), down2) || strings.Contains(err.Error(), up[0]+":") {
		t.Errorf("Open = %v, want ErrUnreachable naming the two nodes down", err)
	}
	if d > 5*time.Second {
		t.Errorf("Open took %v", d)
	}
	t.Logf("%v (%v)", err, d.Round(time.Millisecond))
}

// TestOpenRedlockSameServer checks that Open refuses, as a bad URL, two
// hosts that name one server (127.0.0.1 and localhost): the hosts differ
// as text, so only the servers' run_id tells. A node that is down does not
// fail the check.
func TestOpenRedlockSameServer(t *testing.T) {
	t.Parallel()
	var addrs []string
	for range 2 {
		srv := testserver.StartRedis(t)
		requirePassword(t, srv)
		addrs = append(addrs, srv.Addr())
	}
	_, port, _ := net.SplitHostPort(addrs[0])
	alias := net.JoinHostPort("localhost", port)
	down := testserver.ClosedAddr(t)

	for _, hosts := range [][]string{
		{addrs[0], alias, addrs[1]},
		{down, alias, addrs[1], addrs[0], testserver.ClosedAddr(t)}, // a majority of 5 answers
	} {
		u := "redlock://:" + secret + "@" + strings.Join(hosts, ",")
		d, err := openErr(t, u, 10*time.Second)
		if !errors.Is(err, ErrBadURL) {
			t.Fatalf("Open(%s) = %v, want ErrBadURL", redact.URL(u), err)
		}
		for _, want := range []string{"hosts ", addrs[0], alias, "are the same Redis server (same run_id ", "independent"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%s) = %v, want it to contain %q", redact.URL(u), err, want)
			}
		}
		if d > 5*time.Second {
			t.Errorf("Open took %v", d)
		}
		t.Logf("%v (%v)", err, d.Round(time.Millisecond))
	}

	// Independent servers with one down: the check skips it.
	checkStore(t, open(t, "redlock://:"+secret+"@"+addrs[0]+","+down+","+addrs[1]))

	// One that accepts connections but never answers costs the open at
	// most probeWait (1s) more, and is skipped too.
	silent := listen(t, nil)
	start := time.Now()
	checkStore(t, open(t, "redlock://:"+secret+"@"+addrs[0]+","+silent+","+addrs[1]))
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open and checkStore with a silent node took %v", d)
	}
}

func TestNoMigrationsWithoutSchema(t *testing.T) {
	for _, u := range []string{"etcd://127.0.0.1:1", "zk://127.0.0.1:1", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"} {
		if _, err := OpenMigrator(context.Background(), u); !errors.Is(err, ErrNoMigrations) {
			t.Errorf("OpenMigrator(%s) = %v, want ErrNoMigrations", u, err)
		}
	}
}

// TestOpenZKSilentServerOnReconnect: a store whose connection drops and
// whose next server accepts the connection but never answers it (as
// ZooKeeper 3.8 does in the moments after it starts listening, before it
// serves) gives that server up within zkstore.HandshakeTimeout and works again
// on the next one in seconds. go-zookeeper waits ten receive timeouts for
// the connect response, 66.7 s with the default 10 s session: serve nodes
// stayed cut off for 75 s after a ZooKeeper restart while the others
// worked, so the others took them for stopped and ran their shard-runs
// again.
func TestOpenZKSilentServerOnReconnect(t *testing.T) {
	t.Parallel()
	srv := testserver.StartZooKeeper(t)
	silent := listen(t, nil)
	// Two servers: after the real one drops the connection, go-zookeeper
	// dials the next in its list, the silent one, whichever order it
	// shuffled them in.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, closeStore, err := Open(ctx, "zk://"+srv.Addr()+","+silent+zkRoot())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeStore() })
	lister := s.(driver.Lister)
	srv.Restart(t)
	back := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := lister.Leases(ctx, "")
		cancel()
		if err == nil {
			break
		}
		if time.Since(back) > 15*time.Second {
			t.Fatalf("the store does not answer %v after ZooKeeper came back: %v", time.Since(back).Round(time.Millisecond), err)
		}
	}
	t.Logf("the store answered %v after ZooKeeper came back", time.Since(back).Round(time.Millisecond))
}

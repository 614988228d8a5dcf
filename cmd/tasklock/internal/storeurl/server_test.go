package storeurl

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/internal/testserver"
)

// checkStore obtains and releases a few locks through s.
func checkStore(t *testing.T, s driver.Store) {
	t.Helper()
	lk, err := tasklock.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range []string{"storeurl-a", "storeurl-b", "storeurl-c"} {
		l, err := lk.TryObtain(ctx, key, &tasklock.ObtainOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatalf("TryObtain(%q): %v", key, err)
		}
		if l.Fence() == 0 {
			t.Errorf("%q: fence 0", key)
		}
		if _, err := lk.TryObtain(ctx, key, nil); !errors.Is(err, tasklock.ErrNotObtained) {
			t.Errorf("second TryObtain(%q): %v, want ErrNotObtained", key, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%q): %v", key, err)
		}
	}
}

// open opens rawURL with a deadline and closes it at cleanup.
func open(t *testing.T, rawURL string) driver.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, closeFn, err := Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", redact.URL(rawURL), err)
	}
	t.Cleanup(func() {
		if err := closeFn(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func TestOpenRedis(t *testing.T) {
	srv := testserver.StartRedis(t)
	checkStore(t, open(t, "redis://"+srv.Addr()))
}

func TestOpenRedisDBAndPrefix(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := open(t, "redis://"+srv.Addr()+"/3?prefix=app:")
	if _, err := s.Acquire(context.Background(), driver.AcquireParams{Key: "k", Token: "t", Owner: "o", TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 3})
	defer c.Close()
	n, err := c.Exists(context.Background(), "app:{k}").Result()
	if err != nil || n != 1 {
		t.Errorf("EXISTS app:{k} in db 3 = %d, %v; want 1", n, err)
	}
}

// requirePassword adds user alice with password secret to srv, and gives
// the default user that password too.
func requirePassword(t *testing.T, srv *testserver.Redis) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.Do(ctx, "ACL", "SETUSER", "alice", "on", ">"+secret, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "requirepass", secret).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRedisPassword(t *testing.T) {
	srv := testserver.StartRedis(t)
	requirePassword(t, srv)
	checkStore(t, open(t, "redis://:"+secret+"@"+srv.Addr()))
	checkStore(t, open(t, "redis://alice:"+secret+"@"+srv.Addr()+"/1"))

	for _, u := range []string{
		"redis://:wrong-" + secret + "@" + srv.Addr(),
		"redis://alice:wrong-" + secret + "@" + srv.Addr(),
		"redis://" + srv.Addr(),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := Open(ctx, u)
		cancel()
		if !errors.Is(err, ErrAuth) || !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "store refused the credentials") {
			t.Fatalf("Open(%s) = %v, want ErrAuth (and so ErrUnreachable)", redact.URL(u), err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q contains the password", err)
		}
		t.Logf("%v", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now

	for _, u := range []string{
		"redis://u:" + secret + "@" + addr,
		"redis+sentinel://u:" + secret + "@" + addr + "/mymaster",
		"redis+cluster://u:" + secret + "@" + addr,
	} {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := Open(ctx, u)
		cancel()
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("Open(%s) = %v, want ErrUnreachable", redact.URL(u), err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q contains the password", err)
		}
		if !strings.Contains(err.Error(), redact.URL(u)) {
			t.Errorf("error %q does not name the URL", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Open(%s) took %v", redact.URL(u), d)
		}
		t.Logf("%v (%v)", err, time.Since(start).Round(time.Millisecond))
	}
}

func TestOpenUnreachableContext(t *testing.T) {
	// A server that accepts connections but never answers: PING is bounded
	// by the caller's context.
	addr := listen(t, nil)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err := Open(ctx, "redis://"+addr)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Open = %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open took %v with a 300ms context", d)
	}
}

func TestOpenRedissPlainServer(t *testing.T) {
	srv := testserver.StartRedis(t)
	// The plain server never answers the TLS handshake: PING ends with ctx.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _, err := Open(ctx, "rediss://:"+secret+"@"+srv.Addr())
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Open(rediss) against a plain server = %v, want ErrUnreachable", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error %q contains the password", err)
	}
}

func TestOpenRedisBadStoreOption(t *testing.T) {
	srv := testserver.StartRedis(t)
	// redisstore.New rejects a WAIT timeout that is not below the read timeout.
	_, _, err := Open(context.Background(), "redis://"+srv.Addr()+"?wait_replicas=1&wait_timeout=5s&read_timeout=1s")
	if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "WaitTimeout") {
		t.Fatalf("Open = %v, want ErrBadURL about WaitTimeout", err)
	}
}

func TestOpenSentinel(t *testing.T) {
	sen := testserver.StartSentinel(t)
	u := "redis+sentinel://" + strings.Join(sen.SentinelAddrs(), ",") + "/" + sen.MasterName()
	checkStore(t, open(t, u))

	// A master no sentinel knows is a mistake in the URL, said so: not a
	// store that is down (go-redis: "all sentinels specified in
	// configuration are unreachable: redis: nil").
	_, err := openErr(t, "redis+sentinel://:"+secret+"@"+strings.Join(sen.SentinelAddrs(), ",")+"/nosuchmaster", 10*time.Second)
	want := "no sentinel at " + strings.Join(sen.SentinelAddrs(), ", ") + ` knows a master named "nosuchmaster"`
	if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), want) {
		t.Errorf("Open with an unknown master = %v, want ErrBadURL saying %q", err, want)
	}
	t.Logf("%v", err)

	// A data node's address instead of a sentinel's.
	node := sen.Nodes()[0].Addr()
	_, err = openErr(t, "redis+sentinel://:"+secret+"@"+node+"/"+sen.MasterName(), 10*time.Second)
	if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), node+" is not a sentinel") ||
		!strings.Contains(err.Error(), "takes the sentinels' addresses") {
		t.Errorf("Open with a data node's address = %v, want ErrBadURL saying %s is not a sentinel", err, node)
	}
	t.Logf("%v", err)

	// A sentinel that knows the master among addresses that are down or
	// are data nodes: the URL is not wrong, the open succeeds.
	checkStore(t, open(t, "redis+sentinel://"+testserver.ClosedAddr(t)+","+node+","+sen.SentinelAddrs()[1]+"/"+sen.MasterName()))
}

func TestOpenCluster(t *testing.T) {
	c := testserver.StartCluster(t)
	checkStore(t, open(t, "redis+cluster://"+strings.Join(c.Addrs(), ",")))
	// One seed node is enough.
	checkStore(t, open(t, "redis+cluster://"+c.Addrs()[1]))
}

// writeTLSFiles writes a CA and a certificate for 127.0.0.1 signed by it,
// good for a server and a client, into dir, and returns the paths of the
// CA, the certificate and its key.
func writeTLSFiles(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "storeurl test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

func TestOpenRediss(t *testing.T) {
	ca, cert, key := writeTLSFiles(t, t.TempDir())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr := l.Addr().String()
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	l.Close()
	// The plain port stays open for testserver's readiness PING.
	testserver.StartRedis(t, testserver.WithRedisArgs(
		"--tls-port", tlsPort, "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", ca, "--tls-auth-clients", "no"))

	checkStore(t, open(t, "rediss://"+tlsAddr+"/2?tls_ca_file="+url.QueryEscape(ca)))

	// Without the CA the server's certificate is not trusted.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = Open(ctx, "rediss://"+tlsAddr)
	var uae x509.UnknownAuthorityError
	if !errors.Is(err, ErrUnreachable) || !errors.As(err, &uae) {
		t.Errorf("Open without tls_ca_file = %v, want ErrUnreachable with an unknown authority", err)
	}

	_, _, err = Open(ctx, "rediss://"+tlsAddr+"?tls_ca_file=/nonexistent.pem")
	if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "tls_ca_file") {
		t.Errorf("Open with a missing CA file = %v, want ErrBadURL naming tls_ca_file", err)
	}
	_, _, err = Open(ctx, "rediss://"+tlsAddr+"?tls_ca_file="+url.QueryEscape(key))
	if !errors.Is(err, ErrBadURL) {
		t.Errorf("Open with a key as CA file = %v, want ErrBadURL", err)
	}
}

package proxy_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m, proxy.IgnoreToxics)) }

func ping(addr string, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, PoolSize: 1,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

func TestProxyBlackholeAndRestore(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	p := proxy.Start(t, r.Addr())
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") || p.Addr() == r.Addr() {
		t.Fatalf("proxy Addr() = %q", p.Addr())
	}
	const timeout = 300 * time.Millisecond
	c := redis.NewClient(&redis.Options{
		Addr: p.Addr(), DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1,
	})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}

	p.Blackhole(t)
	start := time.Now()
	err := c.Ping(ctx).Err()
	if err == nil {
		t.Fatal("PING through a blackholed proxy succeeded")
	}
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING through a blackholed proxy: %v, want a timeout", err)
	}
	t.Logf("blackholed PING failed after %v: %v", time.Since(start), err)
	if err := ping(p.Addr(), timeout); err == nil {
		t.Fatal("PING on a new connection through a blackholed proxy succeeded")
	}

	p.Restore(t)
	if err := ping(p.Addr(), timeout); err != nil {
		t.Fatalf("PING on a fresh connection after Restore: %v", err)
	}

	// Latency: a round trip takes at least d longer.
	const d = 150 * time.Millisecond
	lc := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 2 * time.Second})
	defer lc.Close()
	if err := lc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Latency(t, d)
	start = time.Now()
	if err := lc.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with latency: %v", err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("PING with %v latency took %v", d, took)
	}
	p.Latency(t, 0)
	start = time.Now()
	if err := lc.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after removing latency: %v", err)
	}
	if took := time.Since(start); took >= d {
		t.Fatalf("PING after removing latency took %v", took)
	}
}

package redlock

import (
	"context"
	"crypto/rand"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// The benchmarks below measure a lone Acquire+Release on three nodes from
// one goroutine (lockbench's P1-redlock-floor-1) against the raw floor: SET
// NX PX on every node at once, then a compare-and-delete script on every
// node at once. Each reports the client's CPU per pair (cpu-µs/op, from
// getrusage: the test process's, not the servers'), which a loaded machine
// disturbs far less than ns/op. Run them with -benchmem, and -cpuprofile to
// see where the client's time goes.

// benchNodes starts three redis-servers for a benchmark.
func benchNodes(b *testing.B) []string {
	b.Helper()
	addrs := make([]string, 3)
	for i := range addrs {
		addrs[i] = testserver.StartRedis(b).Addr()
	}
	return addrs
}

// benchStore is a Store over addrs with clients as lockbench makes them.
func benchStore(b *testing.B, addrs []string) *Store {
	b.Helper()
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		b.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	s, err := New(cs, &Options{Prefix: freshPrefix()})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkAcquireRelease: the Store's Acquire and Release, a fresh token
// per pair, from one goroutine.
func BenchmarkAcquireRelease(b *testing.B) {
	s := benchStore(b, benchNodes(b))
	ctx := context.Background()
	key := rand.Text()
	measure(b, func() {
		tok := rand.Text()
		if _, err := s.Acquire(ctx, driver.AcquireParams{Key: key, Token: tok, Owner: "host:1", TTL: 10 * time.Second}); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok}); err != nil {
			b.Fatal(err)
		}
	})
}

// benchFloorUnlock is the floor's compare-and-delete (lockbench's).
var benchFloorUnlock = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// BenchmarkFloor: the raw floor, as lockbench's P1-redlock measures it (a
// goroutine per node per step).
func BenchmarkFloor(b *testing.B) {
	addrs := benchNodes(b)
	ctx := context.Background()
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		b.Cleanup(func() { _ = cs[i].Close() })
		if err := benchFloorUnlock.Load(ctx, cs[i]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	each := func(do func(c *redis.Client) bool) int {
		var (
			wg sync.WaitGroup
			mu sync.Mutex
			n  int
		)
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if do(c) {
					mu.Lock()
					n++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return n
	}
	key := rand.Text()
	keys := []string{key}
	measure(b, func() {
		token := rand.Text()
		if each(func(c *redis.Client) bool { return c.SetNX(ctx, key, token, 10*time.Second).Val() }) < 2 {
			b.Fatal("not obtained")
		}
		if each(func(c *redis.Client) bool { return benchFloorUnlock.EvalSha(ctx, c, keys, token).Val() == int64(1) }) < 2 {
			b.Fatal("not released")
		}
	})
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs pair b.N times and reports the client's CPU µs per pair.
func measure(b *testing.B, pair func()) {
	b.ReportAllocs()
	pair() // warm: connections, scripts
	b.ResetTimer()
	c0 := cpuTime(b)
	for range b.N {
		pair()
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-c0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkLockerTryObtainRelease: a Locker's TryObtain and Release over
// the Store, as lockbench's P1-redlock makes them.
func BenchmarkLockerTryObtainRelease(b *testing.B) {
	s := benchStore(b, benchNodes(b))
	lk, err := tasklock.New(s, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lk.Close() })
	ctx := context.Background()
	key := rand.Text()
	measure(b, func() {
		l, err := lk.TryObtain(ctx, key, &tasklock.ObtainOptions{TTL: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	})
}

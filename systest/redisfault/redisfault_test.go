package redisfault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/fence"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/redisstore"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

func TestMain(m *testing.M) {
	// go-redis logs failed dials through the cut proxy; keep the output
	// readable.
	redis.SetLogger(discardLogger{})
	os.Exit(testserver.Main(m, proxy.IgnoreToxics))
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

func closeAtCleanup[C redis.UniversalClient](t *testing.T, c C) C {
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// prefixSeq gives every store in the test binary its own key prefix.
var prefixSeq atomic.Int64

func freshPrefix() string { return fmt.Sprintf("t%d:", prefixSeq.Add(1)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newFaultLocker returns a Locker on a redisstore at addr with prefix,
// closed when the test ends.
func newFaultLocker(t *testing.T, addr, prefix, owner string) *tasklock.Locker {
	t.Helper()
	s, err := redisstore.New(closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: addr})), &redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner})
}

// (c) The network to Redis is blackholed: the holder's Done closes before
// its lease could expire at the server, and another client obtains after,
// with a higher fence — for a mutex, a RWMutex's writer and a Semaphore's
// permit.
func TestFaultBlackhole(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name   string
		obtain func(ctx context.Context, lk *tasklock.Locker, opts *tasklock.ObtainOptions) (*tasklock.Lock, error)
	}{
		{"mutex", func(ctx context.Context, lk *tasklock.Locker, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
			return lk.Obtain(ctx, "job", opts)
		}},
		{"write", func(ctx context.Context, lk *tasklock.Locker, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
			return lk.RWMutex("job").Lock(ctx, opts)
		}},
		{"permit", func(ctx context.Context, lk *tasklock.Locker, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
			return lk.Semaphore("pool", 1).Acquire(ctx, opts)
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartRedis(t)
			proxy := proxy.Start(t, srv.Addr())
			ttl := time.Second
			opts := &tasklock.ObtainOptions{TTL: ttl}
			prefix := freshPrefix()
			a := newFaultLocker(t, proxy.Addr(), prefix, "a")
			b := newFaultLocker(t, srv.Addr(), prefix, "b")
			var reg fence.Register

			la, err := k.obtain(ctxT(t), a, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := reg.Write(la.Fence()); err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			proxy.Blackhole(t)
			t.Cleanup(func() { proxy.Restore(t) }) // before the Lockers close

			closedAtTTL := faulttest.LookAt(la, cut.Add(ttl))
			aDone := make(chan time.Time, 1)
			go func() { <-la.Done(); aDone <- time.Now() }()
			lb, err := k.obtain(ctxT(t), b, opts)
			if err != nil {
				t.Fatal(err)
			}
			bAt := time.Now()
			select {
			case <-la.Done():
			default:
				t.Fatalf("b obtained %v after the cut while a's Done was still open", bAt.Sub(cut))
			}
			t.Logf("a told %v after the cut, b obtained %v after (TTL %v)", (<-aDone).Sub(cut), bAt.Sub(cut), ttl)
			if !<-closedAtTTL {
				t.Fatalf("a's Done still open at a look one TTL (%v) after the cut", ttl)
			}
			if !errors.Is(la.Err(), tasklock.ErrLockLost) {
				t.Fatalf("a's cause = %v", la.Err())
			}
			faulttest.RefuseStale(t, &reg, la.Fence(), lb.Fence())
		})
	}
}

package redlockfault

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
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/redlock"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

func TestMain(m *testing.M) {
	// go-redis logs failed dials to cut-off and killed nodes; keep the
	// output readable.
	redis.SetLogger(discardLogger{})
	os.Exit(testserver.Main(m, proxy.IgnoreToxics))
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// patience is the most redlock waits for a majority of the nodes to answer
// (see redlock.Store.Acquire: "at most 1 s").
const patience = time.Second

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

// newStoreOn returns a Store over clients with a fresh prefix unless opts
// has one.
func newStoreOn(t *testing.T, clients []redis.UniversalClient, opts *redlock.Options) *redlock.Store {
	t.Helper()
	o := redlock.Options{Prefix: freshPrefix()}
	if opts != nil {
		o = *opts
		if o.Prefix == "" {
			o.Prefix = freshPrefix()
		}
	}
	s, err := redlock.New(clients, &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// newStore returns a Store over addrs with a fresh prefix unless opts has
// one.
func newStore(t *testing.T, addrs []string, opts *redlock.Options) *redlock.Store {
	t.Helper()
	return newStoreOn(t, newClients(t, addrs), opts)
}

// newStoreCtx is newStore with clients that have ContextTimeoutEnabled set
// as given.
func newStoreCtx(t *testing.T, addrs []string, prefix string, ctxTimeout bool) *redlock.Store {
	t.Helper()
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		cs[i] = closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: ctxTimeout}))
	}
	return newStoreOn(t, cs, &redlock.Options{Prefix: prefix})
}

func newLocker(t *testing.T, s driver.Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner})
}

var tokenSeq atomic.Int64

func token() string { return fmt.Sprintf("tok%d", tokenSeq.Add(1)) }

func acquire(t *testing.T, s *redlock.Store, key, tok, owner string, ttl time.Duration) (uint64, error) {
	t.Helper()
	g, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl})
	return g.Fence, err
}

func mustAcquire(t *testing.T, s *redlock.Store, key, tok, owner string, ttl time.Duration) uint64 {
	t.Helper()
	f, err := acquire(t, s, key, tok, owner, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return f
}

// onNode reports whether the node c talks to has a lease on key under
// prefix, read straight from it: redlock keeps each node's copy as
// redisstore does, the string key prefix+"{"+key+"}".
func onNode(t *testing.T, c redis.UniversalClient, prefix, key string) bool {
	t.Helper()
	n, err := c.Exists(ctxT(t), prefix+"{"+key+"}").Result()
	if err != nil {
		t.Fatalf("node %v: %v", c, err)
	}
	return n == 1
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

// inFlight is a go-redis hook that counts the calls under way on a client,
// each with its retries.
type inFlight struct{ n atomic.Int64 }

func (f *inFlight) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *inFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f.n.Add(1)
		defer f.n.Add(-1)
		return next(ctx, cmd)
	}
}

func (f *inFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f.n.Add(1)
		defer f.n.Add(-1)
		return next(ctx, cmds)
	}
}

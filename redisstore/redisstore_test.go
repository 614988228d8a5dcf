package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest"
)

func TestMain(m *testing.M) {
	// go-redis logs Sentinel master changes; keep the test output readable.
	redis.SetLogger(discardLogger{})
	os.Exit(testserver.Main(m))
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// deployment is one kind of Redis deployment the suite runs against.
type deployment struct {
	name      string
	cluster   bool
	newClient func(t *testing.T) redis.UniversalClient
}

func singleDeployment(t *testing.T) deployment {
	srv := testserver.StartRedis(t)
	return deployment{name: "single", newClient: func(t *testing.T) redis.UniversalClient {
		return closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	}}
}

func clusterDeployment(t *testing.T) deployment {
	c := testserver.StartCluster(t)
	return deployment{name: "cluster", cluster: true, newClient: func(t *testing.T) redis.UniversalClient {
		return closeAtCleanup(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}))
	}}
}

func sentinelDeployment(t *testing.T, s *testserver.Sentinel) deployment {
	return deployment{name: "sentinel", newClient: func(t *testing.T) redis.UniversalClient {
		return closeAtCleanup(t, redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:    s.MasterName(),
			SentinelAddrs: s.SentinelAddrs(),
		}))
	}}
}

func closeAtCleanup[C redis.UniversalClient](t *testing.T, c C) C {
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// prefixSeq gives every store in the test binary its own key prefix.
var prefixSeq atomic.Int64

func freshPrefix() string { return fmt.Sprintf("t%d:", prefixSeq.Add(1)) }

func newStore(t *testing.T, c redis.UniversalClient, opts *Options) *Store {
	t.Helper()
	o := Options{Prefix: freshPrefix()}
	if opts != nil {
		o = *opts
		if o.Prefix == "" {
			o.Prefix = freshPrefix()
		}
	}
	s, err := New(c, &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, s *Store, key, tok, owner string, ttl time.Duration) uint64 {
	t.Helper()
	g, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return g.Fence
}

// countHook counts the script calls and pipelines a client sends.
type countHook struct {
	mu        sync.Mutex
	evalsha   int
	eval      int
	pipelines int
	keys      [][]string // keys of every EVALSHA/EVAL
	shaArgs   [][]any    // arguments of every EVALSHA
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		h.mu.Unlock()
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h *countHook) count(cmd redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return
	}
	if name == "evalsha" {
		h.evalsha++
		h.shaArgs = append(h.shaArgs, cmd.Args())
	} else {
		h.eval++
	}
	args := cmd.Args()
	n := int(args[2].(int))
	keys := make([]string, n)
	for i := range n {
		keys[i] = args[3+i].(string)
	}
	h.keys = append(h.keys, keys)
}

func (h *countHook) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.evalsha, h.eval, h.pipelines, h.keys = 0, 0, 0, nil
}

func (h *countHook) snapshot() (evalsha, eval, pipelines int, keys [][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.evalsha, h.eval, h.pipelines, h.keys
}

// forEachMaster runs fn on every master behind c.
func forEachMaster(t *testing.T, c redis.UniversalClient, fn func(c *redis.Client) error) {
	t.Helper()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctxT(t), func(_ context.Context, c *redis.Client) error { return fn(c) })
	} else {
		err = fn(c.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestSingle(t *testing.T) {
	t.Parallel()
	runSuite(t, singleDeployment(t))
}

func TestCluster(t *testing.T) {
	t.Parallel()
	d := clusterDeployment(t)
	runSuite(t, d)
	t.Run("SlotMatchesClusterKeyslot", func(t *testing.T) { testSlot(t, d) })
	t.Run("WaitReplicasWithoutReplicas", func(t *testing.T) { testWaitNoReplicas(t, d) })
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	s := testserver.StartSentinel(t)
	d := sentinelDeployment(t, s)
	runSuite(t, d)
	t.Run("WaitReplicas", func(t *testing.T) { testWaitReplicas(t, d) })
}

func TestConformanceSingle(t *testing.T) {
	t.Parallel()
	runConformance(t, singleDeployment(t))
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	runConformance(t, clusterDeployment(t))
}

func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	runConformance(t, sentinelDeployment(t, testserver.StartSentinel(t)))
}

// TestSentinelFailover checks that a grant acknowledged by the replica
// (WaitReplicas 1) survives a failover, fence counter included, and that the
// store follows the Sentinel client to the new master.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	sen := testserver.StartSentinel(t)
	c := sentinelDeployment(t, sen).newClient(t)
	s := newStore(t, c, &Options{WaitReplicas: 1})
	ctx := ctxT(t)
	tok := token()
	f := mustAcquire(t, s, "k", tok, "me", time.Minute)

	start := time.Now()
	newMaster := sen.Failover(t)
	t.Logf("failover to %s took %s", newMaster, time.Since(start))
	direct := closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: newMaster}))
	if v, err := direct.Get(ctx, s.lockKey("k")).Result(); err != nil || !strings.HasPrefix(v, tok+":") {
		t.Fatalf("lease on the new master: %q, %v", v, err)
	}

	// Until go-redis hears of the switch it may still write to the old
	// master, and until the old master is turned into a replica of the new
	// one (about 10s) the new master has no replica to acknowledge a grant:
	// wait for a grant that lands on the new master.
	i := 0
	seen := map[string]int{}
	waitFor(t, 30*time.Second, func() bool {
		i++
		key := fmt.Sprintf("after-%d", i)
		_, err := s.Acquire(ctx, driver.AcquireParams{Key: key, Token: token(), Owner: "me", TTL: time.Minute})
		if err != nil {
			seen[strings.ReplaceAll(err.Error(), key, "K")]++
			return false
		}
		return direct.Exists(ctx, s.lockKey(key)).Val() == 1
	})
	t.Logf("store granting on the new master %s after the failover started; errors meanwhile: %v", time.Since(start), seen)

	_, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "x", TTL: time.Second})
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire of the pre-failover lease: %v, want ErrHeld", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatalf("Release after failover: %v", err)
	}
	// The replica may still be settling (resync): retry ErrReplicas. Each
	// undone grant burns a fence, so the next fence is above f, not f+1.
	var g driver.Grant
	waitFor(t, 20*time.Second, func() bool {
		g, err = s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "me", TTL: time.Minute})
		return !errors.Is(err, ErrReplicas)
	})
	if err != nil || g.Fence <= f {
		t.Fatalf("Acquire after failover: fence %d, %v, want a fence above %d", g.Fence, err, f)
	}
}

// runConformance runs storetest with a fresh client and key prefix per test.
func runConformance(t *testing.T, d deployment) {
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, d.newClient(t), nil)
	})
}

// runSuite runs the tests that hold on every deployment.
func runSuite(t *testing.T, d deployment) {
	t.Run("FenceIncreases", func(t *testing.T) { testFenceIncreases(t, d) })
	t.Run("Held", func(t *testing.T) { testHeld(t, d) })
	t.Run("AcquireRetryIsIdempotent", func(t *testing.T) { testAcquireRetry(t, d) })
	t.Run("ReleaseWrongToken", func(t *testing.T) { testReleaseWrongToken(t, d) })
	t.Run("RenewMixed", func(t *testing.T) { testRenewMixed(t, d) })
	t.Run("RenewBatches", func(t *testing.T) { testRenewBatches(t, d) })
	t.Run("LoneRenewal", func(t *testing.T) { testLoneRenewal(t, d) })
	t.Run("KeepFor", func(t *testing.T) { testKeepFor(t, d) })
	t.Run("Subscribe", func(t *testing.T) { testSubscribe(t, d) })
	t.Run("SubscribeCancelled", func(t *testing.T) { testSubscribeCancelled(t, d) })
	t.Run("NoScript", func(t *testing.T) { testNoScript(t, d) })
	t.Run("Leases", func(t *testing.T) { testLeases(t, d) })
	t.Run("BraceKeys", func(t *testing.T) { testBraceKeys(t, d) })
	t.Run("ForceRelease", func(t *testing.T) { testForceRelease(t, d) })
	runKindsSuite(t, d)
}

// A lone mutex renewal (an Extend alone) is one EVALSHA, not in a
// pipeline, carrying the lock key, the token and the TTL and nothing else;
// it renews only the exact token, and still works after SCRIPT FLUSH.
func testLoneRenewal(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	tok := token()
	mustAcquire(t, s, "k", tok, "me", time.Second)
	// Load the script on the key's node, so the counts below are of one call.
	if _, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Second}}); err != nil {
		t.Fatal(err)
	}
	hook := &countHook{}
	c.AddHook(hook)
	var args []any
	c.AddHook(argsHook{func(a []any) { args = a }})
	res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Minute}})
	if err != nil || res[0] != nil {
		t.Fatalf("Renew: %v %v", res, err)
	}
	evalsha, eval, pipelines, _ := hook.snapshot()
	if evalsha != 1 || eval != 0 || pipelines != 0 {
		t.Errorf("%d EVALSHA, %d EVAL, %d pipelines; want one EVALSHA alone", evalsha, eval, pipelines)
	}
	want := []any{"evalsha", extendScript.sha, 1, s.lockKey("k"), tok, int64(60000)}
	if fmt.Sprint(args) != fmt.Sprint(want) {
		t.Errorf("sent %v, want %v", args, want)
	}
	if ms := pttl(t, c, s.lockKey("k")); ms < 50*time.Second {
		t.Errorf("PTTL after renewal: %v, want about a minute", ms)
	}
	// Only the exact token renews: not a prefix of it, not one that runs
	// on into the fence ("tok:1" matches the value's start), not another.
	for _, bad := range []string{tok[:len(tok)-1], tok + ":1", token(), ""} {
		res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: bad, TTL: time.Hour}})
		if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
			t.Errorf("Renew with token %q: %v %v, want ErrNotHeld", bad, res, err)
		}
	}
	if ms := pttl(t, c, s.lockKey("k")); ms > time.Minute {
		t.Errorf("PTTL %v: a wrong token renewed the lease", ms)
	}
	forEachMaster(t, c, func(c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
	res, err = s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: tok, TTL: 2 * time.Minute}})
	if err != nil || res[0] != nil {
		t.Fatalf("Renew after SCRIPT FLUSH: %v %v", res, err)
	}
	if ms := pttl(t, c, s.lockKey("k")); ms <= time.Minute {
		t.Errorf("PTTL after renewal after SCRIPT FLUSH: %v, want about two minutes", ms)
	}
	res, err = s.Renew(ctx, []driver.RenewParams{{Key: "gone", Token: tok, TTL: time.Minute}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Errorf("Renew of a key never held: %v %v, want ErrNotHeld", res, err)
	}
}

// argsHook passes the arguments of every command sent alone to f.
type argsHook struct{ f func([]any) }

func (h argsHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h argsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.f(cmd.Args())
		return next(ctx, cmd)
	}
}

func (h argsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// pttl is the remaining TTL of key.
func pttl(t *testing.T, c redis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(ctxT(t), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func testForceRelease(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	woken := make(chan string, 1)
	stop, err := s.Subscribe(ctx, func(key string) { woken <- key })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tok := token()
	f := mustAcquire(t, s, "k", tok, "me", time.Minute)
	if err := s.ForceRelease(ctx, "k"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if got := <-woken; got != "k" {
		t.Fatalf("woken for %q, want k", got)
	}
	if err := s.ForceRelease(ctx, "k"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second ForceRelease: %v, want ErrNotHeld", err)
	}
	res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Minute}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew after ForceRelease: %v %v, want ErrNotHeld", res, err)
	}
	if g := mustAcquire(t, s, "k", token(), "next", time.Minute); g != f+1 {
		t.Fatalf("fence after ForceRelease: %d, want %d", g, f+1)
	}
}

func testFenceIncreases(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	var last uint64
	for i := range 20 {
		tok := token()
		f := mustAcquire(t, s, "job", tok, "me", time.Second)
		if f <= last {
			t.Fatalf("cycle %d: fence %d, not above %d", i, f, last)
		}
		last = f
		if err := s.Release(ctx, driver.ReleaseParams{Key: "job", Token: tok}); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	// A lease that expires instead of being released also never repeats.
	tok := token()
	f := mustAcquire(t, s, "job", tok, "me", 20*time.Millisecond)
	if f <= last {
		t.Fatalf("fence %d, not above %d", f, last)
	}
	last = f
	waitFor(t, time.Second, func() bool {
		_, err := s.Acquire(ctx, driver.AcquireParams{Key: "job", Token: token(), Owner: "next", TTL: time.Second})
		return err == nil
	})
	if got := readFence(t, s, "job"); got != last+1 {
		t.Fatalf("fence after expiry: %d, want %d", got, last+1)
	}
}

// readFence reads the fence of the current lease of key.
func readFence(t *testing.T, s *Store, key string) uint64 {
	t.Helper()
	v, err := s.client.Get(ctxT(t), s.lockKey(key)).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", s.lockKey(key), err)
	}
	f, _, ok := parseValue(v)
	if !ok {
		t.Fatalf("bad lease value %q", v)
	}
	return f
}

func testHeld(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	holder := token()
	mustAcquire(t, s, "k", holder, "host-a:42", 5*time.Second)
	_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "k", Token: token(), Owner: "host-b:7", TTL: time.Second})
	var held *driver.HeldError
	if !errors.As(err, &held) || !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire of held key: %v, want *HeldError", err)
	}
	if held.Owner != "host-a:42" {
		t.Errorf("Owner %q, want host-a:42", held.Owner)
	}
	if held.TTL <= 0 || held.TTL > 5*time.Second {
		t.Errorf("TTL %s, want in (0, 5s]", held.TTL)
	}

	// The rejected attempt changed nothing: the holder still holds it.
	if v, _ := s.client.Get(ctxT(t), s.lockKey("k")).Result(); !strings.HasPrefix(v, holder+":") {
		t.Fatalf("lease value %q, want the holder's", v)
	}
}

func testAcquireRetry(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	tok := token()
	f1 := mustAcquire(t, s, "k", tok, "me", 5*time.Second)
	// The same token again (a retry after a lost reply) gets the same grant.
	f2 := mustAcquire(t, s, "k", tok, "me", 5*time.Second)
	if f1 != f2 {
		t.Fatalf("retry fence %d, want %d", f2, f1)
	}
}

func testReleaseWrongToken(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	holder := token()
	mustAcquire(t, s, "k", holder, "a", 5*time.Second)
	for _, tok := range []string{token(), holder[:8], holder + "0", holder + ":1"} {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Release(%q) by wrong token: %v, want ErrNotHeld", tok, err)
		}
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "missing", Token: holder}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a missing key: %v, want ErrNotHeld", err)
	}
	if v, _ := s.client.Get(ctx, s.lockKey("k")).Result(); !strings.HasPrefix(v, holder+":") {
		t.Fatalf("lease value %q after wrong releases, want the holder's", v)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: holder}); err != nil {
		t.Fatalf("Release by holder: %v", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: holder}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
}

func testRenewMixed(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	mine, theirs := token(), token()
	mustAcquire(t, s, "a", mine, "me", time.Second)
	mustAcquire(t, s, "b", theirs, "them", time.Second)
	mustAcquire(t, s, "c", mine, "me", time.Second)
	ps := []driver.RenewParams{
		{Key: "a", Token: mine, TTL: time.Minute},
		{Key: "b", Token: mine, TTL: time.Minute},       // someone else's
		{Key: "missing", Token: mine, TTL: time.Minute}, // nobody's
		{Key: "c", Token: mine, TTL: time.Minute},
	}
	res, err := s.Renew(ctx, ps)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	want := []error{nil, driver.ErrNotHeld, driver.ErrNotHeld, nil}
	if len(res) != len(want) {
		t.Fatalf("Renew returned %d results, want %d", len(res), len(want))
	}
	for i := range want {
		if !errors.Is(res[i], want[i]) || (want[i] == nil) != (res[i] == nil) {
			t.Errorf("result %d (%s): %v, want %v", i, ps[i].Key, res[i], want[i])
		}
	}
	for _, k := range []string{"a", "c"} {
		if ttl := s.client.PTTL(ctx, s.lockKey(k)).Val(); ttl < 50*time.Second {
			t.Errorf("%s: PTTL %s after renewing for 1m", k, ttl)
		}
	}
	if ttl := s.client.PTTL(ctx, s.lockKey("b")).Val(); ttl > time.Second {
		t.Errorf("b: PTTL %s, the foreign lease was extended", ttl)
	}
	if n := s.client.Exists(ctx, s.lockKey("missing")).Val(); n != 0 {
		t.Errorf("renew created the missing key")
	}
	if res, err := s.Renew(ctx, nil); err != nil || len(res) != 0 {
		t.Errorf("Renew(nil): %v, %v", res, err)
	}
}

func testRenewBatches(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	const n = 1200
	tok := token()
	ps := make([]driver.RenewParams, n)
	acq := c.Pipeline()
	for i := range ps {
		ps[i] = driver.RenewParams{Key: fmt.Sprintf("job-%d", i), Token: tok, TTL: time.Minute}
		// Set up the leases fast; the store's own Acquire is tested above.
		acq.Set(ctx, s.lockKey(ps[i].Key), tok+":1:me", 10*time.Second)
	}
	if _, err := acq.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// One lease in the middle is someone else's.
	c.Set(ctx, s.lockKey(ps[n/2].Key), token()+":1:other", 10*time.Second)

	// Warm the script cache, so the counts below are of one cycle.
	if _, err := s.Renew(ctx, ps[:1]); err != nil {
		t.Fatal(err)
	}
	hook := &countHook{}
	c.AddHook(hook)
	start := time.Now()
	res, err := s.Renew(ctx, ps)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	for i, e := range res {
		if i == n/2 {
			if !errors.Is(e, driver.ErrNotHeld) {
				t.Errorf("lease %d: %v, want ErrNotHeld", i, e)
			}
		} else if e != nil {
			t.Errorf("lease %d: %v", i, e)
		}
	}
	evalsha, eval, pipelines, keys := hook.snapshot()
	t.Logf("%s: renewed %d leases in %s: %d EVALSHA, %d EVAL, %d pipelines", d.name, n, elapsed, evalsha, eval, pipelines)
	if pipelines != 1 || eval != 0 {
		t.Errorf("%d pipelines and %d EVAL, want 1 pipeline and no EVAL", pipelines, eval)
	}
	if !d.cluster {
		if evalsha > 3 {
			t.Errorf("%d EVALSHA for %d leases, want at most 3", evalsha, n)
		}
		return
	}
	slots := make(map[uint16]bool)
	for _, p := range ps {
		slots[slot(s.lockKey(p.Key))] = true
	}
	if evalsha != len(slots) {
		t.Errorf("%d EVALSHA, want one per slot: %d", evalsha, len(slots))
	}
	for _, ks := range keys {
		for _, k := range ks[1:] {
			if slot(k) != slot(ks[0]) {
				t.Fatalf("one script call spans slots %d and %d", slot(ks[0]), slot(k))
			}
		}
	}
}

func testKeepFor(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	tok := token()
	mustAcquire(t, s, "k", tok, "me", time.Minute)

	woken := make(chan string, 10)
	stop, err := s.Subscribe(ctx, func(key string) { woken <- key })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	const keep = 2 * time.Second
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok, KeepFor: keep}); err != nil {
		t.Fatalf("Release with KeepFor: %v", err)
	}
	ttl := c.PTTL(ctx, s.lockKey("k")).Val()
	if ttl <= keep-500*time.Millisecond || ttl > keep {
		t.Fatalf("PTTL %s after KeepFor %s", ttl, keep)
	}
	// Still held, and by the same token: others cannot take it.
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "x", TTL: time.Second}); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire during KeepFor: %v, want ErrHeld", err)
	}
	// KeepFor does not wake waiters. A plain release of another key
	// afterwards is the first message.
	tok2 := token()
	mustAcquire(t, s, "other", tok2, "me", time.Minute)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "other", Token: tok2}); err != nil {
		t.Fatal(err)
	}
	if got := <-woken; got != "other" {
		t.Fatalf("first notification %q, want other (KeepFor must not publish)", got)
	}
}

func testSubscribe(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	other := newStore(t, c, nil) // a different prefix: a different channel
	ctx := ctxT(t)

	woken := make(chan string, 10)
	stop, err := s.Subscribe(ctx, func(key string) { woken <- key })
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer stop()
	// A second subscriber on the same store gets its own subscription.
	woken2 := make(chan string, 10)
	stop2, err := s.Subscribe(ctx, func(key string) { woken2 <- key })
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}

	otok := token()
	mustAcquire(t, other, "x", otok, "me", time.Minute)
	if err := other.Release(ctx, driver.ReleaseParams{Key: "x", Token: otok}); err != nil {
		t.Fatal(err)
	}

	const key = "a{b}c"
	release := func() time.Time {
		tok := token()
		mustAcquire(t, s, key, tok, "me", time.Minute)
		start := time.Now()
		if err := s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok}); err != nil {
			t.Fatal(err)
		}
		return start
	}
	// On a Cluster the message crosses the cluster bus, whose connections
	// Redis opens without TCP_NODELAY: Nagle's algorithm against a delayed
	// ACK can hold it back ~40ms (valkey-io/valkey#1758).
	limit := 50 * time.Millisecond
	if d.cluster {
		limit = 100 * time.Millisecond
	}
	// Each release is timed to its two notifications. A delay on the
	// path (a poll, a batch, Nagle) makes most of them late: a delay of
	// limit or more makes every one late, a poll every 2×limit at least
	// half of them, and then 4 or fewer late of 20 has a 0.6% chance. A
	// loaded machine that deschedules the test or the subscriber for a
	// while makes one or two late, which is not what this checks.
	const releases, lateAllowed = 20, 4
	var worst time.Duration
	var late []time.Duration
	for range releases {
		start := release()
		for _, ch := range []chan string{woken, woken2} {
			select {
			case got := <-ch:
				if got != key {
					t.Fatalf("notified of %q, want %q", got, key)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no notification within 5s")
			}
		}
		took := time.Since(start)
		worst = max(worst, took)
		if took > limit {
			late = append(late, took)
		}
	}
	t.Logf("%s: release to notification: worst of %d %s, %d over %s", d.name, releases, worst, len(late), limit)
	if len(late) > lateAllowed {
		t.Errorf("%d of %d notifications took over %s (%v), want at most %d", len(late), releases, limit, late, lateAllowed)
	}

	stop2()
	stop2() // idempotent
	release()
	<-woken
	select {
	case got := <-woken2:
		t.Fatalf("stopped subscriber notified of %q", got)
	default:
	}
}

func testSubscribeCancelled(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stop, err := s.Subscribe(ctx, func(string) {})
	if err == nil {
		stop()
		t.Fatal("Subscribe with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe: %v, want context.Canceled", err)
	}
}

func testNoScript(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	hook := &countHook{}
	c.AddHook(hook)
	flush := func() {
		forEachMaster(t, c, func(c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
		hook.reset()
	}

	flush()
	tok := token()
	mustAcquire(t, s, "k", tok, "me", time.Minute)
	if evalsha, eval, _, _ := hook.snapshot(); evalsha != 1 || eval != 1 {
		t.Errorf("Acquire after SCRIPT FLUSH: %d EVALSHA, %d EVAL, want 1 and 1", evalsha, eval)
	}

	flush()
	ps := []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Minute}, {Key: "nope", Token: tok, TTL: time.Minute}}
	res, err := s.Renew(ctx, ps)
	if err != nil || res[0] != nil || !errors.Is(res[1], driver.ErrNotHeld) {
		t.Fatalf("Renew after SCRIPT FLUSH: %v, %v", res, err)
	}
	if _, eval, pipelines, _ := hook.snapshot(); eval == 0 || pipelines != 2 {
		t.Errorf("Renew after SCRIPT FLUSH: %d EVAL in %d pipelines, want EVAL in a second pipeline", eval, pipelines)
	}
	hook.reset()
	if _, err := s.Renew(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, eval, pipelines, _ := hook.snapshot(); eval != 0 || pipelines != 1 {
		t.Errorf("second Renew: %d EVAL in %d pipelines, want none in 1 (EVAL loaded the script)", eval, pipelines)
	}

	flush()
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
	if evalsha, eval, _, _ := hook.snapshot(); evalsha != 1 || eval != 1 {
		t.Errorf("Release after SCRIPT FLUSH: %d EVALSHA, %d EVAL, want 1 and 1", evalsha, eval)
	}
}

func testLeases(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	type want struct {
		owner string
		fence uint64
	}
	wants := map[string]want{}
	for i, key := range []string{"report:daily", "report:weekly", "clean*up", "x{y}", "a}b"} {
		owner := fmt.Sprintf("host-%d:%d", i, 100+i)
		f := mustAcquire(t, s, key, token(), owner, time.Minute)
		wants[key] = want{owner, f}
	}
	// A second grant of one key: its fence is 2.
	tok := token()
	mustAcquire(t, s, "gone", tok, "x", time.Minute)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "gone", Token: tok}); err != nil {
		t.Fatal(err)
	}
	wants["gone"] = want{"y:1", mustAcquire(t, s, "gone", token(), "y:1", time.Minute)}
	if wants["gone"].fence != 2 {
		t.Fatalf("second grant fence %d, want 2", wants["gone"].fence)
	}
	// Another store's leases are not listed.
	mustAcquire(t, newStore(t, c, nil), "report:daily", token(), "foreign", time.Minute)

	all, err := s.Leases(ctx, "")
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	if len(all) != len(wants) {
		t.Fatalf("Leases listed %d: %+v, want %d", len(all), all, len(wants))
	}
	for i, l := range all {
		w, ok := wants[l.Key]
		if !ok {
			t.Errorf("unexpected lease %+v", l)
			continue
		}
		if l.Owner != w.owner || l.Fence != w.fence || l.TTL <= 50*time.Second || l.TTL > time.Minute {
			t.Errorf("lease %+v, want owner %q fence %d TTL ≈1m", l, w.owner, w.fence)
		}
		if i > 0 && all[i-1].Key >= l.Key {
			t.Errorf("not sorted: %q before %q", all[i-1].Key, l.Key)
		}
	}

	for prefix, n := range map[string]int{"report:": 2, "clean*": 1, "clean": 1, "x{": 1, "a}": 1, "*": 0, "zzz": 0} {
		got, err := s.Leases(ctx, prefix)
		if err != nil {
			t.Fatalf("Leases(%q): %v", prefix, err)
		}
		if len(got) != n {
			t.Errorf("Leases(%q) listed %+v, want %d", prefix, got, n)
		}
		for _, l := range got {
			if !strings.HasPrefix(l.Key, prefix) {
				t.Errorf("Leases(%q) listed %q", prefix, l.Key)
			}
		}
	}
}

func testBraceKeys(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	// Every key that can be granted keeps its lock and fence keys in one slot.
	for _, key := range []string{"{", "{}", "{a}", "a}b{c", "x{y}", "a{}", "{{}}", "a}"} {
		lk := s.lockKey(key)
		if slot(lk) != slot(lk+":fence") {
			t.Errorf("%q: lock key slot %d, fence key slot %d", key, slot(lk), slot(lk+":fence"))
		}
		tok := token()
		mustAcquire(t, s, key, tok, "me", time.Minute)
		if res, err := s.Renew(ctx, []driver.RenewParams{{Key: key, Token: tok, TTL: time.Minute}}); err != nil || res[0] != nil {
			t.Errorf("Renew(%q): %v %v", key, res, err)
		}
		if err := s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok}); err != nil {
			t.Errorf("Release(%q): %v", key, err)
		}
	}
	for _, key := range []string{"}", "}a{b}", ""} {
		_, err := s.Acquire(ctx, driver.AcquireParams{Key: key, Token: token(), Owner: "me", TTL: time.Second})
		if !errors.Is(err, ErrKey) {
			t.Errorf("Acquire(%q): %v, want ErrKey", key, err)
		}
	}
}

func testSlot(t *testing.T, d deployment) {
	c := d.newClient(t).(*redis.ClusterClient)
	ctx := ctxT(t)
	keys := []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
		"{}", "}{", "{", "tasklock:{job}", "tasklock:{job}:fence", "tasklock:{a}b{c}", "tasklock:{}x}", "é{ü}"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("tasklock:{job-%d}", i), token())
	}
	for _, k := range keys {
		want, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		if got := slot(k); int64(got) != want {
			t.Errorf("slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// testWaitNoReplicas runs WaitReplicas on a Cluster without replicas: the
// WAIT goes to the key's master, and the grant is undone.
func testWaitNoReplicas(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, &Options{WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	ctx := ctxT(t)
	for _, key := range []string{"a", "b", "c", "d"} {
		_, err := s.Acquire(ctx, driver.AcquireParams{Key: key, Token: token(), Owner: "me", TTL: time.Minute})
		if !errors.Is(err, ErrReplicas) {
			t.Fatalf("Acquire(%q) without replicas: %v, want ErrReplicas", key, err)
		}
		if n := c.Exists(ctx, s.lockKey(key)).Val(); n != 0 {
			t.Fatalf("lease %q left behind after ErrReplicas", key)
		}
	}
	// A semaphore's permit too is given back.
	_, err := s.Acquire(ctx, driver.AcquireParams{Key: "p", Token: token(), Owner: "me", TTL: time.Minute, Mode: driver.ModePermit, Limit: 1})
	if !errors.Is(err, ErrReplicas) {
		t.Fatalf("permit without replicas: %v, want ErrReplicas", err)
	}
	if n := c.Exists(ctx, s.kindsKeys("p").h, s.kindsKeys("p").held).Val(); n != 0 {
		t.Fatal("permit left behind after ErrReplicas")
	}
	// A batch makes each item an Acquire of its own, WAIT included.
	keys := []string{"e", "f", "g", "h"}
	ps := make([]driver.AcquireParams, len(keys))
	for i, key := range keys {
		ps[i] = driver.AcquireParams{Key: key, Token: token(), Owner: "me", TTL: time.Minute}
	}
	rs, err := s.AcquireBatch(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if !errors.Is(r.Err, ErrReplicas) {
			t.Errorf("AcquireBatch item %q without replicas: %v, want ErrReplicas", keys[i], r.Err)
		}
		if n := c.Exists(ctx, s.lockKey(keys[i])).Val(); n != 0 {
			t.Errorf("lease %q left behind after a batch's ErrReplicas", keys[i])
		}
	}
}

func testWaitReplicas(t *testing.T, d deployment) {
	c := d.newClient(t)
	ctx := ctxT(t)
	s1 := newStore(t, c, &Options{WaitReplicas: 1})
	tok := token()
	start := time.Now()
	f := mustAcquire(t, s1, "k", tok, "me", time.Minute)
	t.Logf("Acquire with WAIT 1: %s, fence %d", time.Since(start), f)
	// The same key held: a HeldError, not ErrReplicas.
	_, err := s1.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "x", TTL: time.Second})
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire of a held key with WaitReplicas: %v, want ErrHeld", err)
	}
	// Likewise for a writer's lock.
	mustKind(t, s1, "rw", token(), "w", driver.ModeWrite, 0, time.Minute)
	_, err = s1.Acquire(ctx, driver.AcquireParams{Key: "rw", Token: token(), Owner: "x", TTL: time.Second, Mode: driver.ModeRead})
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("reader beside a writer with WaitReplicas: %v, want ErrHeld", err)
	}

	s2 := newStore(t, c, &Options{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	woken := make(chan string, 1)
	stop, err := s2.Subscribe(ctx, func(key string) { woken <- key })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	_, err = s2.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "me", TTL: time.Minute})
	if !errors.Is(err, ErrReplicas) {
		t.Fatalf("Acquire with WaitReplicas 2 of 1: %v, want ErrReplicas", err)
	}
	t.Logf("ErrReplicas: %v", err)
	if n := c.Exists(ctx, s2.lockKey("k")).Val(); n != 0 {
		t.Fatal("lease left behind after ErrReplicas")
	}
	if got := <-woken; got != "k" {
		t.Fatalf("undoing the grant woke %q, want k", got)
	}
	// The undone grant's fence is burnt, never reused.
	g, err := New(c, &Options{Prefix: s2.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if f := mustAcquire(t, g, "k", token(), "me", time.Second); f != 2 {
		t.Fatalf("fence after an undone grant: %d, want 2", f)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	srv := testserver.StartRedis(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	s, err := New(c, &Options{Prefix: freshPrefix()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := token()
		tok := token()
		for pb.Next() {
			if _, err := s.Acquire(ctx, driver.AcquireParams{Key: key, Token: tok, Owner: "host:1", TTL: time.Minute}); err != nil {
				b.Fatal(err)
			}
			if err := s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestNew(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: time.Second})
	defer c.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()

	opts := &Options{}
	s, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	if *opts != (Options{}) {
		t.Errorf("New wrote into the caller's options: %+v", *opts)
	}
	if s.prefix != DefaultPrefix || s.channel != DefaultPrefix+"released" || s.waitTimeout != DefaultWaitTimeout {
		t.Errorf("defaults: %+v", s)
	}
	if _, err := New(c, nil); err != nil {
		t.Errorf("New(nil options): %v", err)
	}

	var nilClient *redis.Client
	for _, tc := range []struct {
		client redis.UniversalClient
		opts   *Options
		field  string
		want   string
	}{
		{nil, nil, "client", "client"},
		{nilClient, nil, "client", "client"},
		{ring, nil, "client", "*redis.Ring"},
		{c, &Options{Prefix: "a{b}"}, "Options.Prefix", "Options.Prefix"},
		{c, &Options{Prefix: "a}"}, "Options.Prefix", "Options.Prefix"},
		{c, &Options{WaitReplicas: -1}, "Options.WaitReplicas", "Options.WaitReplicas"},
		{c, &Options{WaitTimeout: -time.Second}, "Options.WaitTimeout", "Options.WaitTimeout"},
		{c, &Options{WaitTimeout: time.Microsecond}, "Options.WaitTimeout", "Options.WaitTimeout"},
		{c, &Options{WaitReplicas: 1, WaitTimeout: 2 * time.Second}, "Options.WaitTimeout", "Options.WaitTimeout"},
	} {
		_, err := New(tc.client, tc.opts)
		var oe *driver.OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "redisstore: invalid "+tc.field) {
			t.Errorf("New(%T, %+v): %v, want a *driver.OptionError naming %s", tc.client, tc.opts, err, tc.field)
		}
	}
}

func TestTransportError(t *testing.T) {
	// Nothing listens on port 1.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	s, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "me", TTL: time.Second}); err == nil || errors.Is(err, driver.ErrHeld) {
		t.Errorf("Acquire: %v, want a transport error", err)
	}
	res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: token(), TTL: time.Second}})
	if err == nil || res != nil {
		t.Errorf("Renew: %v, %v, want a transport error and no results", res, err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: token()}); err == nil || errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Release: %v, want a transport error", err)
	}
	if _, err := s.Leases(ctx, ""); err == nil {
		t.Error("Leases: no error")
	}
	if stop, err := s.Subscribe(ctx, func(string) {}); err == nil {
		stop()
		t.Error("Subscribe: no error")
	}
}

// TestRestartWithoutPersistence shows what the package documentation says:
// a node without persistence forgets leases and fence counters on restart,
// so fences repeat.
func TestRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	c := closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	s := newStore(t, c, nil)
	f := mustAcquire(t, s, "k", token(), "me", time.Minute)
	srv.Restart(t)
	// The lease is gone (a second holder gets the key at once) and the
	// fence repeats.
	if g := waitAcquire(t, s, "k"); g != f {
		t.Fatalf("fence after restart without persistence: %d, want %d repeated", g, f)
	}
}

// TestRestartWithAOF shows that with appendfsync always the lease and the
// fence counter survive a restart.
func TestRestartWithAOF(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, testserver.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	c := closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	s := newStore(t, c, nil)
	tok := token()
	f := mustAcquire(t, s, "k", tok, "me", time.Minute)
	srv.Restart(t)
	var err error
	waitFor(t, 10*time.Second, func() bool {
		_, err = s.Acquire(ctxT(t), driver.AcquireParams{Key: "k", Token: token(), Owner: "x", TTL: time.Second})
		return err != nil && !isTransient(err)
	})
	if !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire after restart: %v, want the lease to survive", err)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatal(err)
	}
	if g := mustAcquire(t, s, "k", token(), "me", time.Minute); g != f+1 {
		t.Fatalf("fence after restart with AOF: %d, want %d", g, f+1)
	}
}

func isTransient(err error) bool {
	return !errors.Is(err, driver.ErrHeld) && !errors.Is(err, driver.ErrNotHeld)
}

// waitAcquire acquires key, retrying transport errors while a server comes
// back, and returns the fence.
func waitAcquire(t *testing.T, s *Store, key string) uint64 {
	t.Helper()
	var fence uint64
	var err error
	waitFor(t, 10*time.Second, func() bool {
		var g driver.Grant
		g, err = s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: token(), Owner: "me", TTL: time.Minute})
		fence = g.Fence
		return err == nil || !isTransient(err)
	})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return fence
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

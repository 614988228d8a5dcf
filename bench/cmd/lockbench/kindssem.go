package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/etcdstore"
)

// sem-redis and sem-etcd: 64 goroutines loop Acquire → Release on one
// semaphore of semPermits permits. tasklock and the peer take turns in
// slices as P1's contenders do (runSlices); the goroutines' pairs all go
// to the one key the implementation opened, whatever key runSlices names.

// semImpl is one implementation of a semaphore measurement.
type semImpl struct {
	name, role, note string
	// open prepares it on the part's servers, its clients counting into
	// c; every pair of the returned instance works on one semaphore.
	open func(ctx context.Context, e *kindsEnv, c *reqCounter) (*instance, error)
}

// semResult is what one semaphore measurement gave.
type semResult struct {
	id, store string
	impls     []semImpl
	res       []*p1Result
	reqs      []reqs  // requests of the whole run, warm-ups included
	pairs     []int64 // pairs of the whole run, to divide them by
	err       error
}

// Peer names.
const (
	semFloorName = "raw Lua semaphore (floor)"
	semEtcdName  = "etcd concurrency recipe"
)

var semRedisImpls = []semImpl{
	{semFloorName, coordPeer,
		"one script call: TIME, ZREMRANGEBYSCORE of the expired holders, ZCARD < N → ZADD holder (score: expiry) and PEXPIRE of the set; release: ZREM; a refused waiter sleeps a jittered backoff from 1 ms, doubling up to 8 ms, and tries again",
		openSemFloor},
	{"tasklock", coordTasklock,
		"Semaphore(key, N).Acquire + Lock.Release (TTL 10 s, renewal on), one Locker over redisstore.New(client, nil) shared by the goroutines: waiters queue in the Locker, woken by its Releases and by Redis pub/sub",
		openSemTasklockRedis},
}

var semEtcdImpls = []semImpl{
	{semEtcdName, coordPeer,
		"one concurrency.Session (TTL 10 s) shared by the goroutines; acquire: one Txn that puts a key of the session's lease under the semaphore's prefix and counts the prefix (the keys created before it: the Txn's own revision orders them); fewer than N before it: held; else it watches the prefix from its revision for deletes (WithPrevKV) and counts down those of keys created before it until fewer than N remain; release: Delete",
		openSemEtcdRecipe},
	{"tasklock", coordTasklock,
		"Semaphore(key, N).Acquire + Lock.Release (TTL 10 s, renewal on), one Locker over etcdstore.New(client, SessionTTL 11 s, the default) shared by the goroutines: waiters queue in the Locker, woken by its Releases and by an etcd watch",
		openSemTasklockEtcd},
}

// runSem runs the implementations of one semaphore measurement in turns
// of slices, as P1 does, and counts their requests per pair.
func (r *kindsReport) runSem(ctx context.Context, res *semResult, impls []semImpl, serverCPU func() (time.Duration, bool)) {
	res.impls = impls
	names := make([]string, len(impls))
	opens := make([]func() (*instance, error), len(impls))
	cs := make([]*reqCounter, len(impls))
	pairs := make([]*atomic.Int64, len(impls))
	for i, im := range impls {
		names[i] = im.name
		cs[i] = &reqCounter{}
		pairs[i] = new(atomic.Int64)
		opens[i] = func() (*instance, error) {
			inst, err := im.open(ctx, r.env, cs[i])
			if err != nil {
				return nil, err
			}
			return inst.countingPairs(pairs[i]), nil
		}
	}
	p := r.params
	res.res, res.err = runSlices(ctx, res.id, names, opens, serverCPU,
		fmt.Sprintf("lockbench-sem-%d-", time.Now().UnixNano()), p.goroutines, p.warmup, p1Slice, p.slices)
	if res.err != nil {
		return
	}
	for i := range impls {
		res.reqs = append(res.reqs, cs[i].snapshot())
		res.pairs = append(res.pairs, pairs[i].Load())
	}
}

// semKey names the semaphore of one implementation in one run.
func semKey(impl string) string {
	return fmt.Sprintf("lockbench-sem-%s-%d", impl, time.Now().UnixNano())
}

// semPair is the pair of a blocking acquire and its release, with a
// safety check: the goroutines between the two never outnumber the
// permits.
func semPair(acquire obtainFunc) func(string) pairFunc {
	var holders atomic.Int64
	return func(string) pairFunc {
		return func(ctx context.Context) error {
			release, err := acquire(ctx)
			if err != nil {
				return err
			}
			n := holders.Add(1)
			holders.Add(-1)
			if n > semPermits {
				err = fmt.Errorf("lockbench: %d holders of a semaphore of %d permits at once", n, semPermits)
			}
			if rerr := release(ctx); err == nil {
				err = rerr
			}
			return err
		}
	}
}

// tasklockSemPair acquires and releases permits of the semaphore key of lk.
func tasklockSemPair(lk *tasklock.Locker, key string) func(string) pairFunc {
	sem := lk.Semaphore(key, semPermits)
	return semPair(func(ctx context.Context) (func(context.Context) error, error) {
		l, err := sem.Acquire(ctx, nil)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	})
}

// --- Redis -------------------------------------------------------------

// floorSemAcquire is the floor's acquire: prune the expired holders by
// the server's clock, then add the holder if fewer than N hold. The set
// expires with its last holder.
var floorSemAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
`)

// The floor's polling: a refused waiter sleeps a jittered backoff between
// half and all of d, d starting at floorSemMinWait and doubling up to
// floorSemMaxWait.
const (
	floorSemMinWait = time.Millisecond
	floorSemMaxWait = 8 * time.Millisecond
)

func openSemFloor(ctx context.Context, e *kindsEnv, c *reqCounter) (*instance, error) {
	cl := newClient(e.redis.addr)
	cl.AddHook(redisHook{c})
	if err := floorSemAcquire.Load(ctx, cl).Err(); err != nil {
		_ = cl.Close()
		return nil, fmt.Errorf("lockbench: load the floor's semaphore script: %w", err)
	}
	key := semKey("floor")
	keys := []string{key}
	ttl := benchTTL.Milliseconds()
	acquire := func(ctx context.Context) (func(context.Context) error, error) {
		token := rand.Text()
		wait := floorSemMinWait
		for {
			ok, err := floorSemAcquire.EvalSha(ctx, cl, keys, token, semPermits, ttl).Int()
			if err != nil {
				return nil, err
			}
			if ok == 1 {
				break
			}
			t := time.NewTimer(wait/2 + mrand.N(wait/2+1))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
			wait = min(2*wait, floorSemMaxWait)
		}
		return func(ctx context.Context) error {
			n, err := cl.ZRem(ctx, key, token).Result()
			if err == nil && n != 1 {
				err = fmt.Errorf("lockbench: floor semaphore: release of %q removed nothing", key)
			}
			return err
		}, nil
	}
	return &instance{pair: semPair(acquire), close: func() { _ = cl.Close() }}, nil
}

func openSemTasklockRedis(_ context.Context, e *kindsEnv, c *reqCounter) (*instance, error) {
	cl := newClient(e.redis.addr)
	cl.AddHook(redisHook{c})
	lk, err := newLocker(cl, nil)
	if err != nil {
		_ = cl.Close()
		return nil, err
	}
	return &instance{
		pair: tasklockSemPair(lk, semKey("tasklock")),
		close: func() {
			_ = lk.Close()
			_ = cl.Close()
		},
	}, nil
}

// --- etcd --------------------------------------------------------------

func openSemTasklockEtcd(_ context.Context, e *kindsEnv, c *reqCounter) (*instance, error) {
	lk, closeAll, err := etcdTasklock(e.etcd.addr, c, fmt.Sprintf("/lockbench/sem/tasklock/%d/", time.Now().UnixNano()), etcdstore.DefaultSessionTTL, nil)
	if err != nil {
		return nil, err
	}
	return &instance{pair: tasklockSemPair(lk, "sem"), close: closeAll}, nil
}

func openSemEtcdRecipe(ctx context.Context, e *kindsEnv, c *reqCounter) (*instance, error) {
	s, closeAll, err := etcdSession(ctx, e.etcd.addr, c, etcdSessionTTL)
	if err != nil {
		return nil, err
	}
	sem := &etcdSemaphore{s: s, prefix: fmt.Sprintf("/lockbench/sem/recipe/%d/", time.Now().UnixNano()), n: semPermits}
	return &instance{pair: semPair(sem.acquire), close: closeAll}, nil
}

// etcdSemaphore is a counting semaphore built on etcd's concurrency
// package the way its Mutex is built: every acquire puts a key of the
// Session's lease under the semaphore's prefix, and the keys' create
// revisions order the claims. A claim holds a permit while fewer than n
// live keys were created before it; a claim only moves up (keys before it
// go, none come), so at most n claims hold at once. A waiter counts down
// the deletes of the keys before it (a release, or the lease of a dead
// holder's Session expiring) on one watch instead of asking again.
type etcdSemaphore struct {
	s      *concurrency.Session
	prefix string
	n      int64
	seq    atomic.Int64
}

// acquire blocks until the claim holds a permit, or ctx ends or the
// Session is lost (then the claim is deleted).
func (m *etcdSemaphore) acquire(ctx context.Context) (func(context.Context) error, error) {
	cl := m.s.Client()
	key := fmt.Sprintf("%s%x-%d", m.prefix, m.s.Lease(), m.seq.Add(1))
	// One Txn: the put and the count see the same revision, so the keys
	// counted are exactly those created before this one, plus itself.
	resp, err := cl.Txn(ctx).Then(
		clientv3.OpPut(key, "", clientv3.WithLease(m.s.Lease())),
		clientv3.OpGet(m.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return nil, err
	}
	release := func(ctx context.Context) error {
		_, err := cl.Delete(ctx, key)
		return err
	}
	rev := resp.Header.Revision
	before := resp.Responses[1].GetResponseRange().Count - 1
	if before < m.n {
		return release, nil
	}
	if err := m.wait(ctx, rev, before); err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = release(dctx)
		cancel()
		return nil, err
	}
	return release, nil
}

// wait counts down the deletes of the keys created before revision rev
// (before of them live at rev) until fewer than n are left.
func (m *etcdSemaphore) wait(ctx context.Context, rev, before int64) error {
	cl := m.s.Client()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	counted := rev // events up to this revision are in before
	wch := cl.Watch(wctx, m.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut(), clientv3.WithPrevKV())
	for before >= m.n {
		var (
			wr clientv3.WatchResponse
			ok bool
		)
		select {
		case wr, ok = <-wch:
		case <-m.s.Done():
			return errors.New("lockbench: etcd semaphore: session lost")
		}
		if !ok || wr.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("lockbench: etcd semaphore: watch ended: %v", wr.Err())
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision <= counted {
				continue
			}
			if ev.PrevKv == nil {
				// Compacted away: count again at the current revision.
				g, err := cl.Get(ctx, m.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithMaxCreateRev(rev-1))
				if err != nil {
					return err
				}
				before, counted = g.Count, g.Header.Revision
				continue
			}
			if ev.PrevKv.CreateRevision < rev {
				before--
			}
		}
	}
	return nil
}

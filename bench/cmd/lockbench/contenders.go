package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/redisstore"
)

// benchTTL is the lease length every contender asks for in P1–P3 (redsync:
// its expiry option).
const benchTTL = 10 * time.Second

// redislockBackoff is the retry interval of redislock in P3: the interval of
// redislock's README example (LinearBackoff(100*time.Millisecond)), without
// its LimitRetry, so that it waits as long as the others.
const redislockBackoff = 100 * time.Millisecond

// errNotObtained is what a pair returns when the lock it just asked for on
// a key nobody else uses was not granted.
var errNotObtained = errors.New("lockbench: not obtained")

// pairFunc makes one Obtain+Release pair.
type pairFunc func(ctx context.Context) error

// obtainFunc blocks until the lock is held or ctx ends, and returns the
// function that releases it.
type obtainFunc func(ctx context.Context) (release func(context.Context) error, err error)

// contender is one lock implementation under test.
type contender struct {
	name string
	// open prepares the contender against the server at addr for one
	// measurement; the returned close frees everything it made.
	open func(ctx context.Context, addr string) (*instance, error)
}

// instance is a contender ready to measure.
type instance struct {
	// pair returns the Obtain+Release function one goroutine runs on key.
	pair  func(key string) pairFunc
	close func()
	// counter, for SQL contenders, counts the statements and round trips
	// of the contender's pool.
	counter *sqlCounter
}

// countingPairs makes inst's pairs add 1 to n each time one succeeds, and
// returns inst.
func (inst *instance) countingPairs(n *atomic.Int64) *instance {
	pair := inst.pair
	inst.pair = func(key string) pairFunc {
		f := pair(key)
		return func(ctx context.Context) error {
			err := f(ctx)
			if err == nil {
				n.Add(1)
			}
			return err
		}
	}
	return inst
}

// newClient returns a go-redis client with default options: every contender
// gets the same kind of client and its own connection pool.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}

// floorUnlock is the compare-and-delete script of the raw floor.
var floorUnlock = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// contenders are the P1/P2 implementations, the raw floor first.
var contenders = []contender{
	{"raw floor", openFloor},
	{"tasklock", openTasklock},
	{"redsync v4", openRedsync},
	{"bsm/redislock", openRedislock},
}

// openFloor is the least any Redis lock does: SET key token PX ttl NX, then
// EVALSHA of a compare-and-delete script, with a fresh random token per pair.
func openFloor(ctx context.Context, addr string) (*instance, error) {
	c := newClient(addr)
	if err := floorUnlock.Load(ctx, c).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("lockbench: load the floor's script: %w", err)
	}
	ttl := benchTTL.Milliseconds()
	return &instance{
		pair: func(key string) pairFunc {
			keys := []string{key}
			return func(ctx context.Context) error {
				token := rand.Text()
				set := redis.NewBoolCmd(ctx, "set", key, token, "px", ttl, "nx")
				_ = c.Process(ctx, set)
				ok, err := set.Result()
				if err != nil {
					return err
				}
				if !ok {
					return errNotObtained
				}
				n, err := floorUnlock.EvalSha(ctx, c, keys, token).Int64()
				if err != nil {
					return err
				}
				if n != 1 {
					return fmt.Errorf("lockbench: floor: compare-and-delete of %q removed nothing", key)
				}
				return nil
			}
		},
		close: func() { _ = c.Close() },
	}, nil
}

// openTasklock shares one Locker (default Config) between all goroutines and
// obtains with default ObtainOptions: TTL 10s, renewal on.
func openTasklock(_ context.Context, addr string) (*instance, error) {
	c := newClient(addr)
	lk, err := newLocker(c, nil)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &instance{
		pair: func(key string) pairFunc {
			return func(ctx context.Context) error {
				l, err := lk.TryObtain(ctx, key, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		},
		close: func() {
			_ = lk.Close()
			_ = c.Close()
		},
	}, nil
}

// newLocker returns a Locker over a redisstore.Store on c.
func newLocker(c *redis.Client, cfg *tasklock.Config) (*tasklock.Locker, error) {
	st, err := redisstore.New(c, nil)
	if err != nil {
		return nil, err
	}
	return tasklock.New(st, cfg)
}

// openRedsync uses one pool (one Redis server) and, per goroutine, one
// Mutex reused for every pair, made with tries=1: a single attempt, like
// TryObtain. Reusing the Mutex spares redsync an allocation per pair.
func openRedsync(_ context.Context, addr string) (*instance, error) {
	c := newClient(addr)
	rs := redsync.New(goredis.NewPool(c))
	return &instance{
		pair: func(key string) pairFunc {
			m := rs.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(benchTTL))
			return func(ctx context.Context) error {
				if err := m.LockContext(ctx); err != nil {
					return err
				}
				ok, err := m.UnlockContext(ctx)
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("lockbench: redsync: unlock of %q failed", key)
				}
				return nil
			}
		},
		close: func() { _ = c.Close() },
	}, nil
}

// openRedislock uses Client.Obtain with nil options (no retry) and
// Lock.Release.
func openRedislock(_ context.Context, addr string) (*instance, error) {
	c := newClient(addr)
	rl := redislock.New(c)
	return &instance{
		pair: func(key string) pairFunc {
			return func(ctx context.Context) error {
				l, err := rl.Obtain(ctx, key, benchTTL, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		},
		close: func() { _ = c.Close() },
	}, nil
}

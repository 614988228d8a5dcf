package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/etcdstore"
	"github.com/tasklock/tasklock/redisstore"
	"github.com/tasklock/tasklock/redlock"
	"github.com/tasklock/tasklock/zkstore"
)

// The implementations of the etcd, ZooKeeper and RedLock part: tasklock on
// its store, and on the same servers the Go library users would pick
// instead. Every client counts its requests into a reqCounter (per node for
// RedLock). Each gets clients of its own.

// counters are the counters of one implementation: one per server.
type counters []*reqCounter

func newCounters(n int) counters {
	cs := make(counters, n)
	for i := range cs {
		cs[i] = &reqCounter{}
	}
	return cs
}

func (cs counters) snapshot() []reqs {
	out := make([]reqs, len(cs))
	for i, c := range cs {
		out[i] = c.snapshot()
	}
	return out
}

// sumReqs adds up per-server snapshots.
func sumReqs(rs []reqs) reqs {
	var t reqs
	for _, r := range rs {
		t = t.add(r)
	}
	return t
}

// subReqs returns a − b, server by server.
func subReqs(a, b []reqs) []reqs {
	out := make([]reqs, len(a))
	for i := range a {
		out[i] = a[i].sub(b[i])
	}
	return out
}

// coordImpl is one implementation in P1 and P3 of one store.
type coordImpl struct {
	name, role string
	p1Note     string
	p3Note     string
	// p1 prepares it for P1, its clients counting into cs; nil for a
	// reference that runs in P3 only.
	p1 func(ctx context.Context, e *coordEnv, cs counters) (*instance, error)
	// p3 returns n obtainFuncs on key, as n processes would have them.
	p3 func(ctx context.Context, e *coordEnv, key string, n int, cs counters) ([]obtainFunc, func(), error)
}

// coordHolder is one P4 implementation, ready to hold locks.
type coordHolder struct {
	// obtain takes the lock on key and returns it as the library's own
	// pointer; release and lost take that pointer.
	obtain  func(ctx context.Context, key string) (any, error)
	release func(ctx context.Context, lock any) error
	lost    func(lock any) bool
	// renewals, for tasklock, counts the leases its store renewed
	// (renewCount); nil for the peers, which renew no lock (their session
	// does).
	renewals *renewCount
	close    func()
}

// coordHoldImpl is one implementation in P4 of one store.
type coordHoldImpl struct {
	name, role, note string
	open             func(ctx context.Context, e *coordEnv, ttl time.Duration, prefix string, cs counters) (*coordHolder, error)
}

// Roles in this part: the row the targets apply to, and the peer it is
// compared with.
const (
	coordTasklock = "tasklock"
	coordPeer     = "peer"
	coordFloor    = "floor" // etcd, ZooKeeper: the fewest requests a lock can take; P1 only
	// coordOneRedis is tasklock on one of RedLock's servers alone: what
	// P3-redlock's requests per acquisition are compared with.
	coordOneRedis = "one Redis"
)

// Peer names (their versions are in the report's header).
const (
	etcdMutexName = "etcd concurrency.Mutex"
	etcdFloorName = "etcd raw floor"
	zkLockName    = "go-zookeeper zk.Lock"
	zkFloorName   = "ZooKeeper raw floor"
	redsyncName   = "redsync v4 (3 pools)"
	oneRedisName  = "tasklock, one Redis (redisstore)"
)

func coordImpls(k coordKind) []coordImpl {
	switch k {
	case kindEtcd:
		return []coordImpl{
			{"tasklock", coordTasklock,
				"Locker.TryObtain + Lock.Release (TTL 10 s, renewal on), one Locker over etcdstore.New(client, nil): SessionTTL 11 s, the default",
				"Locker.Obtain; one client, Store and Locker per goroutine, as 16 processes would: waiters woken by an etcd watch",
				p1EtcdTasklock, p3EtcdTasklock},
			{etcdMutexName, coordPeer,
				"one concurrency.Session (TTL 10 s) for all goroutines; per goroutine one NewMutex on its key per slice, TryLock + Unlock",
				"Mutex.Lock; one client and Session per goroutine (a Session's Mutexes on one key share its lease's key, so they do not exclude each other): the waiters queue by create revision and each watches the key before it",
				p1EtcdMutex, p3EtcdMutex},
			{etcdFloorName, coordFloor,
				"the fewest requests a fenced lock on etcd takes: one lease (TTL 10 s, kept alive by clientv3's stream) for all goroutines; per pair one Txn putting the key on it if absent (the fence: the Txn's revision) and one Delete",
				"", p1EtcdFloor, nil},
		}
	case kindZK:
		return []coordImpl{
			{"tasklock", coordTasklock,
				"Locker.TryObtain + Lock.Release (TTL 10 s, renewal on), one Locker over zkstore.New(conn, SessionTimeout 10 s)",
				"Locker.Obtain; one Conn, Store and Locker per goroutine, as 16 processes would: waiters woken by ZooKeeper watches",
				p1ZKTasklock, p3ZKTasklock},
			{zkLockName, coordPeer,
				"one Conn (session 10 s) for all goroutines; per goroutine one zk.NewLock on its node per slice, Lock (on a free key it returns at once) + Unlock",
				"Lock.Lock (no context, no timeout); one Conn per goroutine: the waiters queue as sequential nodes and each watches the node before it",
				p1ZKLock, p3ZKLock},
			{zkFloorName, coordFloor,
				"the fewest requests a lock on ZooKeeper takes: one Conn (session 10 s) for all goroutines; per pair one create of an ephemeral node (not sequential: no queue, no fence) and one delete",
				"", p1ZKFloor, nil},
		}
	default:
		return []coordImpl{
			{"tasklock", coordTasklock,
				"Locker.TryObtain + Lock.Release (TTL 10 s, renewal on), one Locker over redlock.New(3 clients, nil)",
				"Locker.Obtain; three clients, a Store and a Locker per goroutine, as 16 processes would: waiters woken by pub/sub on every node",
				p1RedlockTasklock, p3RedlockTasklock},
			{redsyncName, coordPeer,
				"redsync.New(3 goredis pools); per goroutine one Mutex made with WithTries(1) and reused, LockContext + UnlockContext",
				"Mutex.LockContext with the defaults (32 tries, 50–250 ms random delay), tried again when it gives up; three clients per goroutine",
				p1Redsync, p3Redsync},
			{oneRedisName, coordOneRedis, "",
				"Locker.Obtain over redisstore.New on the first of the three servers alone; one client, Store and Locker per goroutine: the same work on one Redis, the reference of P3-redlock's target",
				nil, p3OneRedis},
		}
	}
}

func coordHoldImpls(k coordKind) []coordHoldImpl {
	switch k {
	case kindEtcd:
		return []coordHoldImpl{
			{"tasklock", coordTasklock, "one Locker over etcdstore.New(client, SessionTTL = TTL): every lock's key on the Store's one session lease; each renewal checks the keys exist and keeps the lease alive", holdEtcdTasklock},
			{etcdMutexName, coordPeer, "one concurrency.Session (TTL = TTL): every Mutex's key on its lease, which the client keeps alive with one LeaseKeepAlive every TTL/3 on one stream; the locks have no TTL of their own", holdEtcdMutex},
		}
	case kindZK:
		return []coordHoldImpl{
			{"tasklock", coordTasklock, "one Locker over zkstore.New(conn, SessionTimeout = TTL): ephemeral nodes on the Conn's session; each renewal is one multi checking the force-release marker's version (proves the session alive, whatever the number of leases); plus the session's pings", holdZKTasklock},
			{zkLockName, coordPeer, "zk.NewLock on one Conn (session timeout = TTL): ephemeral nodes kept by the session alone, which go-zookeeper pings every timeout/3; the locks have no TTL of their own", holdZKLock},
		}
	default:
		return []coordHoldImpl{
			{"tasklock", coordTasklock, "one Locker over redlock.New(3 clients, nil): each renewal is one batched redisstore call per node", holdRedlockTasklock},
		}
	}
}

// --- clients -----------------------------------------------------------

// etcdClient returns a clientv3 client of the etcd server at addr counting
// into c.
func etcdClient(addr string, c *reqCounter) (*clientv3.Client, error) {
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: c.grpcOptions(),
	})
	if err != nil {
		return nil, fmt.Errorf("lockbench: etcd client: %w", err)
	}
	return cl, nil
}

// zkQuiet keeps go-zookeeper from logging.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// zkConnect opens a session of the given timeout with e's server, counting
// into c, and waits until it is established.
func zkConnect(e *coordEnv, session time.Duration, c *reqCounter) (*zk.Conn, error) {
	conn, _, err := zk.Connect([]string{e.srvs[0].addr}, session,
		zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}), zk.WithDialer(c.zkDialer()))
	if err != nil {
		return nil, fmt.Errorf("lockbench: zookeeper: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); conn.State() != zk.StateHasSession; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			conn.Close()
			return nil, fmt.Errorf("lockbench: zookeeper: no session within 10s (state %v)", conn.State())
		}
	}
	return conn, nil
}

// zkACL is the ACL of every node the peers create.
var zkACL = zk.WorldACL(zk.PermAll)

// redisNodes returns one client per RedLock node, each counting into its
// counter: go-redis defaults, with ContextTimeoutEnabled as redlock's
// documentation asks.
func redisNodes(e *coordEnv, cs counters) []*redis.Client {
	out := make([]*redis.Client, len(e.srvs))
	for i, s := range e.srvs {
		out[i] = redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true})
		out[i].AddHook(redisHook{cs[i]})
	}
	return out
}

func closeRedis(cs []*redis.Client) {
	for _, c := range cs {
		_ = c.Close()
	}
}

func universalClients(cs []*redis.Client) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// tasklockPair is the P1 pair of a Locker: TryObtain with default options
// (TTL 10 s, renewal on) and Release.
func tasklockPair(lk *tasklock.Locker) func(key string) pairFunc {
	return func(key string) pairFunc {
		return func(ctx context.Context) error {
			l, err := lk.TryObtain(ctx, key, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	}
}

// tasklockWait is the P3 blocking obtain of a Locker.
func tasklockWait(lk *tasklock.Locker, key string) obtainFunc {
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := lk.Obtain(ctx, key, nil)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

// closers runs its functions in reverse order.
type closers []func()

func (c closers) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// --- etcd --------------------------------------------------------------

// etcdTasklock opens a client of the etcd server at addr, an
// etcdstore.Store on it and a Locker.
func etcdTasklock(addr string, c *reqCounter, prefix string, sessionTTL time.Duration, rc *renewCount) (*tasklock.Locker, func(), error) {
	cl, err := etcdClient(addr, c)
	if err != nil {
		return nil, nil, err
	}
	st, err := etcdstore.New(cl, &etcdstore.Options{Prefix: prefix, SessionTTL: sessionTTL})
	if err != nil {
		_ = cl.Close()
		return nil, nil, err
	}
	lk, err := tasklock.New(rc.wrap(st), nil)
	if err != nil {
		_ = cl.Close()
		return nil, nil, err
	}
	return lk, func() {
		_ = lk.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = st.Close(ctx)
		cancel()
		_ = cl.Close()
	}, nil
}

func p1EtcdTasklock(_ context.Context, e *coordEnv, cs counters) (*instance, error) {
	lk, closeAll, err := etcdTasklock(e.srvs[0].addr, cs[0], fmt.Sprintf("/lockbench/p1/tasklock/%d/", time.Now().UnixNano()), etcdstore.DefaultSessionTTL, nil)
	if err != nil {
		return nil, err
	}
	return &instance{pair: tasklockPair(lk), close: closeAll}, nil
}

func p3EtcdTasklock(_ context.Context, e *coordEnv, key string, n int, cs counters) ([]obtainFunc, func(), error) {
	var cl closers
	fs := make([]obtainFunc, n)
	for i := range n {
		lk, closeOne, err := etcdTasklock(e.srvs[0].addr, cs[0], "/lockbench/p3/tasklock/", etcdstore.DefaultSessionTTL, nil)
		if err != nil {
			cl.run()
			return nil, nil, err
		}
		cl = append(cl, closeOne)
		fs[i] = tasklockWait(lk, key)
	}
	return fs, cl.run, nil
}

// etcdSessionTTL is the TTL of the peer's Session in P1 and P3: tasklock's
// default lease (and etcdstore's default SessionTTL), where the Session's
// own default is 60 s.
const etcdSessionTTL = 10 * time.Second

// etcdSession opens a client of the etcd server at addr, counting into c,
// and a concurrency.Session on it whose lease has the TTL ttl (rounded up
// to whole seconds); closing it closes both.
func etcdSession(ctx context.Context, addr string, c *reqCounter, ttl time.Duration) (*concurrency.Session, func(), error) {
	cl, err := etcdClient(addr, c)
	if err != nil {
		return nil, nil, err
	}
	s, err := concurrency.NewSession(cl, concurrency.WithTTL(int((ttl+time.Second-1)/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		_ = cl.Close()
		return nil, nil, fmt.Errorf("lockbench: etcd session: %w", err)
	}
	return s, func() {
		_ = s.Close()
		_ = cl.Close()
	}, nil
}

func p1EtcdMutex(ctx context.Context, e *coordEnv, cs counters) (*instance, error) {
	s, closeAll, err := etcdSession(ctx, e.srvs[0].addr, cs[0], etcdSessionTTL)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("/lockbench/p1/mutex/%d/", time.Now().UnixNano())
	return &instance{
		pair: func(key string) pairFunc {
			m := concurrency.NewMutex(s, prefix+key)
			return func(ctx context.Context) error {
				if err := m.TryLock(ctx); err != nil {
					if errors.Is(err, concurrency.ErrLocked) {
						return errNotObtained
					}
					return err
				}
				return m.Unlock(ctx)
			}
		},
		close: closeAll,
	}, nil
}

func p3EtcdMutex(ctx context.Context, e *coordEnv, key string, n int, cs counters) ([]obtainFunc, func(), error) {
	var cl closers
	fs := make([]obtainFunc, n)
	for i := range n {
		s, closeOne, err := etcdSession(ctx, e.srvs[0].addr, cs[0], etcdSessionTTL)
		if err != nil {
			cl.run()
			return nil, nil, err
		}
		cl = append(cl, closeOne)
		m := concurrency.NewMutex(s, "/lockbench/p3/mutex/"+key)
		fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return m.Unlock, nil
		}
	}
	return fs, cl.run, nil
}

func p1EtcdFloor(ctx context.Context, e *coordEnv, cs counters) (*instance, error) {
	cl, err := etcdClient(e.srvs[0].addr, cs[0])
	if err != nil {
		return nil, err
	}
	lease, err := cl.Grant(ctx, int64(etcdSessionTTL/time.Second))
	if err != nil {
		_ = cl.Close()
		return nil, fmt.Errorf("lockbench: etcd floor: %w", err)
	}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	kas, err := cl.KeepAlive(kctx, lease.ID)
	if err != nil {
		cancel()
		_ = cl.Close()
		return nil, fmt.Errorf("lockbench: etcd floor: %w", err)
	}
	go func() {
		for range kas {
		}
	}()
	prefix := fmt.Sprintf("/lockbench/p1/floor/%d/", time.Now().UnixNano())
	return &instance{
		pair: func(key string) pairFunc {
			k := prefix + key
			return func(ctx context.Context) error {
				resp, err := cl.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
					Then(clientv3.OpPut(k, "", clientv3.WithLease(lease.ID))).Commit()
				switch {
				case err != nil:
					return err
				case !resp.Succeeded:
					return errNotObtained
				}
				_, err = cl.Delete(ctx, k)
				return err
			}
		},
		close: func() {
			cancel()
			_ = cl.Close()
		},
	}, nil
}

func holdEtcdTasklock(_ context.Context, e *coordEnv, ttl time.Duration, prefix string, cs counters) (*coordHolder, error) {
	rc := &renewCount{}
	lk, closeAll, err := etcdTasklock(e.srvs[0].addr, cs[0], "/lockbench/p4/tasklock/"+prefix+"/", ttl, rc)
	if err != nil {
		return nil, err
	}
	return tasklockHolder(lk, ttl, rc, closeAll), nil
}

func holdEtcdMutex(ctx context.Context, e *coordEnv, ttl time.Duration, prefix string, cs counters) (*coordHolder, error) {
	s, closeAll, err := etcdSession(ctx, e.srvs[0].addr, cs[0], ttl)
	if err != nil {
		return nil, err
	}
	pfx := "/lockbench/p4/mutex/" + prefix + "/"
	return &coordHolder{
		obtain: func(ctx context.Context, key string) (any, error) {
			m := concurrency.NewMutex(s, pfx+key)
			if err := m.TryLock(ctx); err != nil {
				return nil, err
			}
			return m, nil
		},
		release: func(ctx context.Context, m any) error { return m.(*concurrency.Mutex).Unlock(ctx) },
		lost: func(any) bool {
			select {
			case <-s.Done():
				return true
			default:
				return false
			}
		},
		close: closeAll,
	}, nil
}

// renewCount wraps a Locker's store and counts the leases it renews, with
// the renewal calls under way, so that a window can start and end when
// none is: then every request a renewal sent inside the window and every
// lease it renewed are counted together. Only driver.Store passes
// through (not driver.Notifier): P4 never waits.
type renewCount struct {
	driver.Store
	mu       sync.Mutex
	inflight int
	renewed  int64
	calls    int64 // Renew calls answered; read it in between's read
}

// wrap returns st wrapped, or st when rc is nil.
func (rc *renewCount) wrap(st driver.Store) driver.Store {
	if rc == nil {
		return st
	}
	rc.Store = st
	return rc
}

func (rc *renewCount) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	rc.mu.Lock()
	rc.inflight++
	rc.mu.Unlock()
	errs, err := rc.Store.Renew(ctx, ps)
	rc.mu.Lock()
	rc.inflight--
	rc.calls++
	if err == nil {
		for _, e := range errs {
			if e == nil {
				rc.renewed++
			}
		}
	}
	rc.mu.Unlock()
	return errs, err
}

// between waits until no renewal is under way (up to max), then calls read
// and returns the leases renewed so far, both at that instant.
func (rc *renewCount) between(read func(), max time.Duration) int64 {
	deadline := time.Now().Add(max)
	for {
		rc.mu.Lock()
		if rc.inflight == 0 || time.Now().After(deadline) {
			read()
			n := rc.renewed
			rc.mu.Unlock()
			return n
		}
		rc.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

// tasklockHolder holds locks of TTL ttl through lk.
func tasklockHolder(lk *tasklock.Locker, ttl time.Duration, rc *renewCount, closeAll func()) *coordHolder {
	opts := &tasklock.ObtainOptions{TTL: ttl}
	return &coordHolder{
		obtain: func(ctx context.Context, key string) (any, error) {
			l, err := lk.TryObtain(ctx, key, opts)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		release: func(ctx context.Context, l any) error { return l.(*tasklock.Lock).Release(ctx) },
		lost: func(l any) bool {
			select {
			case <-l.(*tasklock.Lock).Done():
				return true
			default:
				return false
			}
		},
		renewals: rc,
		close:    closeAll,
	}
}

// --- ZooKeeper ---------------------------------------------------------

// zkSession is the session timeout of P1 and P3: tasklock's default TTL,
// which a lock's TTL may not exceed on zkstore.
const zkSession = tasklock.DefaultTTL

// zkTasklock opens a Conn, a zkstore.Store on it and a Locker.
func zkTasklock(e *coordEnv, c *reqCounter, root string, session time.Duration, rc *renewCount) (*tasklock.Locker, func(), error) {
	conn, err := zkConnect(e, session, c)
	if err != nil {
		return nil, nil, err
	}
	st, err := zkstore.New(conn, &zkstore.Options{Root: root, SessionTimeout: session})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	lk, err := tasklock.New(rc.wrap(st), nil)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return lk, func() {
		_ = lk.Close()
		conn.Close()
	}, nil
}

func p1ZKTasklock(_ context.Context, e *coordEnv, cs counters) (*instance, error) {
	lk, closeAll, err := zkTasklock(e, cs[0], fmt.Sprintf("/lockbench-p1-tasklock-%d", time.Now().UnixNano()), zkSession, nil)
	if err != nil {
		return nil, err
	}
	return &instance{pair: tasklockPair(lk), close: closeAll}, nil
}

func p3ZKTasklock(_ context.Context, e *coordEnv, key string, n int, cs counters) ([]obtainFunc, func(), error) {
	var cl closers
	fs := make([]obtainFunc, n)
	for i := range n {
		lk, closeOne, err := zkTasklock(e, cs[0], "/lockbench-p3-tasklock", zkSession, nil)
		if err != nil {
			cl.run()
			return nil, nil, err
		}
		cl = append(cl, closeOne)
		fs[i] = tasklockWait(lk, key)
	}
	return fs, cl.run, nil
}

func p1ZKLock(_ context.Context, e *coordEnv, cs counters) (*instance, error) {
	conn, err := zkConnect(e, zkSession, cs[0])
	if err != nil {
		return nil, err
	}
	root := fmt.Sprintf("/lockbench-p1-zklock-%d/", time.Now().UnixNano())
	return &instance{
		pair: func(key string) pairFunc {
			l := zk.NewLock(conn, root+key, zkACL)
			return func(ctx context.Context) error {
				if err := l.Lock(); err != nil {
					return err
				}
				return l.Unlock()
			}
		},
		close: conn.Close,
	}, nil
}

func p1ZKFloor(_ context.Context, e *coordEnv, cs counters) (*instance, error) {
	conn, err := zkConnect(e, zkSession, cs[0])
	if err != nil {
		return nil, err
	}
	root := fmt.Sprintf("/lockbench-p1-floor-%d", time.Now().UnixNano())
	if _, err := conn.Create(root, nil, 0, zkACL); err != nil {
		conn.Close()
		return nil, fmt.Errorf("lockbench: zookeeper floor: %w", err)
	}
	return &instance{
		pair: func(key string) pairFunc {
			path := root + "/" + key
			return func(context.Context) error {
				if _, err := conn.Create(path, nil, zk.FlagEphemeral, zkACL); err != nil {
					if errors.Is(err, zk.ErrNodeExists) {
						return errNotObtained
					}
					return err
				}
				return conn.Delete(path, -1)
			}
		},
		close: conn.Close,
	}, nil
}

func p3ZKLock(_ context.Context, e *coordEnv, key string, n int, cs counters) ([]obtainFunc, func(), error) {
	var cl closers
	fs := make([]obtainFunc, n)
	for i := range n {
		conn, err := zkConnect(e, zkSession, cs[0])
		if err != nil {
			cl.run()
			return nil, nil, err
		}
		cl = append(cl, conn.Close)
		l := zk.NewLock(conn, "/lockbench-p3-zklock/"+key, zkACL)
		fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
			// Lock takes no context and waits as long as it takes: once
			// the run is over, the waiters still queued get the lock in
			// turn and release it (outside the measured window).
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := l.Lock(); err != nil {
				return nil, err
			}
			return func(context.Context) error { return l.Unlock() }, nil
		}
	}
	return fs, cl.run, nil
}

func holdZKTasklock(_ context.Context, e *coordEnv, ttl time.Duration, prefix string, cs counters) (*coordHolder, error) {
	rc := &renewCount{}
	lk, closeAll, err := zkTasklock(e, cs[0], "/lockbench-p4-tasklock-"+prefix, ttl, rc)
	if err != nil {
		return nil, err
	}
	return tasklockHolder(lk, ttl, rc, closeAll), nil
}

func holdZKLock(_ context.Context, e *coordEnv, ttl time.Duration, prefix string, cs counters) (*coordHolder, error) {
	conn, err := zkConnect(e, ttl, cs[0])
	if err != nil {
		return nil, err
	}
	root := "/lockbench-p4-zklock-" + prefix + "/"
	return &coordHolder{
		obtain: func(_ context.Context, key string) (any, error) {
			l := zk.NewLock(conn, root+key, zkACL)
			if err := l.Lock(); err != nil {
				return nil, err
			}
			return l, nil
		},
		release: func(_ context.Context, l any) error { return l.(*zk.Lock).Unlock() },
		// go-zookeeper tells a Lock's holder nothing: the session's state
		// is all there is to look at.
		lost:  func(any) bool { return conn.State() != zk.StateHasSession },
		close: conn.Close,
	}, nil
}

// --- RedLock -----------------------------------------------------------

func redlockTasklock(e *coordEnv, cs counters, rc *renewCount) (*tasklock.Locker, func(), error) {
	clients := redisNodes(e, cs)
	st, err := redlock.New(universalClients(clients), nil)
	if err != nil {
		closeRedis(clients)
		return nil, nil, err
	}
	lk, err := tasklock.New(rc.wrap(st), nil)
	if err != nil {
		closeRedis(clients)
		return nil, nil, err
	}
	return lk, func() {
		_ = lk.Close()
		closeRedis(clients)
	}, nil
}

func p1RedlockTasklock(_ context.Context, e *coordEnv, cs counters) (*instance, error) {
	lk, closeAll, err := redlockTasklock(e, cs, nil)
	if err != nil {
		return nil, err
	}
	return &instance{pair: tasklockPair(lk), close: closeAll}, nil
}

func p3RedlockTasklock(_ context.Context, e *coordEnv, key string, n int, cs counters) ([]obtainFunc, func(), error) {
	var cl closers
	fs := make([]obtainFunc, n)
	for i := range n {
		lk, closeOne, err := redlockTasklock(e, cs, nil)
		if err != nil {
			cl.run()
			return nil, nil, err
		}
		cl = append(cl, closeOne)
		fs[i] = tasklockWait(lk, key)
	}
	return fs, cl.run, nil
}

// p3OneRedis is P3's tasklock on the first server alone, through
// redisstore: one client (counting into cs[0]), Store and Locker per
// goroutine.
func p3OneRedis(_ context.Context, e *coordEnv, key string, n int, cs counters) ([]obtainFunc, func(), error) {
	var cl closers
	fs := make([]obtainFunc, n)
	for i := range n {
		c := redis.NewClient(&redis.Options{Addr: e.srvs[0].addr, ContextTimeoutEnabled: true})
		c.AddHook(redisHook{cs[0]})
		cl = append(cl, func() { _ = c.Close() })
		st, err := redisstore.New(c, nil)
		if err == nil {
			var lk *tasklock.Locker
			if lk, err = tasklock.New(st, nil); err == nil {
				cl = append(cl, func() { _ = lk.Close() })
				fs[i] = tasklockWait(lk, key)
			}
		}
		if err != nil {
			cl.run()
			return nil, nil, err
		}
	}
	return fs, cl.run, nil
}

// redsyncOn returns a Redsync over one pool per node.
func redsyncOn(clients []*redis.Client) *redsync.Redsync {
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	return redsync.New(pools...)
}

func p1Redsync(_ context.Context, e *coordEnv, cs counters) (*instance, error) {
	clients := redisNodes(e, cs)
	rs := redsyncOn(clients)
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
		close: func() { closeRedis(clients) },
	}, nil
}

func p3Redsync(_ context.Context, e *coordEnv, key string, n int, cs counters) ([]obtainFunc, func(), error) {
	var all []*redis.Client
	fs := make([]obtainFunc, n)
	for i := range n {
		clients := redisNodes(e, cs)
		all = append(all, clients...)
		m := redsyncOn(clients).NewMutex(key, redsync.WithExpiry(benchTTL))
		fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
			if err := m.LockContext(ctx); err != nil {
				// After its last try redsync returns why that try failed
				// (*ErrTaken), not ErrFailed: either way it gave up.
				var (
					taken     *redsync.ErrTaken
					nodeTaken *redsync.ErrNodeTaken
				)
				if errors.As(err, &taken) || errors.As(err, &nodeTaken) {
					err = fmt.Errorf("%w: %w", redsync.ErrFailed, err)
				}
				return nil, err
			}
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = errors.New("lockbench: redsync: unlock failed")
				}
				return err
			}, nil
		}
	}
	return fs, func() { closeRedis(all) }, nil
}

func holdRedlockTasklock(_ context.Context, e *coordEnv, ttl time.Duration, _ string, cs counters) (*coordHolder, error) {
	rc := &renewCount{}
	lk, closeAll, err := redlockTasklock(e, cs, rc)
	if err != nil {
		return nil, err
	}
	return tasklockHolder(lk, ttl, rc, closeAll), nil
}

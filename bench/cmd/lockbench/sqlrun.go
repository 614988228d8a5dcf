package main

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"cirello.io/pglock"
	gomysqllock "github.com/sanketplus/go-mysql-lock"

	"github.com/tasklock/tasklock"
)

// Roles of the SQL contenders: the report's ratios and targets use them.
const (
	roleFloor    = "floor"
	roleTasklock = "tasklock" // the row the targets apply to
	roleExtra    = "extra"    // tasklock in another mode: shown, no target
	rolePeer     = "peer"     // a library users would pick instead
	roleAlgo     = "algo"     // ShedLock, written out here
)

// sqlContender is one P1-sql implementation.
type sqlContender struct {
	name, role, note string
	open             func(ctx context.Context, e *sqlEnv, c *sqlCounter) (*instance, error)
}

const (
	pglockName      = "pglock v1.16.1"
	goMySQLLockName = "go-mysql-lock v0.0.5"
	shedLockName    = "ShedLock (its algorithm)"
	floorSQLName    = "raw upsert floor"
)

func sqlContenders(k storeKind) []sqlContender {
	floor := sqlContender{floorSQLName, roleFloor, "one upsert that takes a free or expired key, one token-checked UPDATE that ends the lease", openSQLFloor}
	tl := sqlContender{"tasklock", roleTasklock, "Locker.TryObtain + Lock.Release, lease mode, renewal on", openSQLTasklock("lease")}
	tlConn := sqlContender{"tasklock, connection mode", roleExtra, "the same in connection mode: each held lock also holds a connection of its own", openSQLTasklock("connection")}
	shed := sqlContender{shedLockName, roleAlgo, "INSERT once per name, then UPDATE … WHERE lock_until <= now to lock, UPDATE … SET lock_until = now to unlock", openSQLShedLock}
	switch k {
	case kindPG:
		return []sqlContender{floor, tl, tlConn,
			{pglockName, rolePeer, "AcquireContext with FailIfLocked, heartbeat every TTL/3, ReleaseContext (DELETE), over lib/pq", openPglock},
			shed}
	case kindMySQL:
		return []sqlContender{floor, tl, tlConn,
			{goMySQLLockName, rolePeer, "ObtainTimeoutContext(ctx, key, 0): GET_LOCK(key, 0) on a connection kept until Release (DO RELEASE_LOCK)", openGoMySQLLock},
			shed}
	default:
		return []sqlContender{floor, tl, shed}
	}
}

// sqlP1Result is P1-sql on one store with one number of goroutines.
type sqlP1Result struct {
	env        *sqlEnv
	goroutines int
	res        []*p1Result
	conts      []sqlContender
	err        error
}

// runP1SQL measures Obtain+Release pairs/s with n goroutines on distinct
// keys for every contender of e's store, taking turns in slices as P1 does.
func runP1SQL(ctx context.Context, e *sqlEnv, cfg config, n int) *sqlP1Result {
	conts := sqlContenders(e.kind)
	out := &sqlP1Result{env: e, goroutines: n, conts: conts}
	names := make([]string, len(conts))
	opens := make([]func() (*instance, error), len(conts))
	for i, c := range conts {
		names[i] = c.name
		opens[i] = func() (*instance, error) { return c.open(ctx, e, &sqlCounter{}) }
	}
	slice := min(p1Slice, cfg.sqlDuration)
	cycles := int((cfg.sqlDuration + slice - 1) / slice)
	out.res, out.err = runSlices(ctx, fmt.Sprintf("P1-sql %s %s", e.kind, plural(n, "goroutine")), names, opens, e.cpu,
		fmt.Sprintf("lockbench:p1sql:%d:", time.Now().UnixNano()), n, cfg.warmup, slice, cycles)
	return out
}

// --- P3-sql ------------------------------------------------------------

// sqlWaitContender is one P3-sql implementation: open returns n
// obtainFuncs on key, all counted by c; with own set, each with clients
// of its own (a pool, a Client, a Locker), as n processes would.
type sqlWaitContender struct {
	name, role, note string
	open             func(ctx context.Context, e *sqlEnv, key string, n int, own bool, c *sqlCounter) ([]obtainFunc, func(), error)
}

// p3LockerPool is the pool of each of P3-sql's 16 Lockers, as 16 processes
// would each have: pgxpool's default size on this 2-core machine.
const p3LockerPool = 4

// sqlWaitContenders are the P3-sql implementations of store k with n
// goroutines; with own set, the peers too give each goroutine clients of
// its own.
func sqlWaitContenders(k storeKind, n int, own bool) []sqlWaitContender {
	lockers := fmt.Sprintf("%d Lockers", n)
	tl := sqlWaitContender{"tasklock, " + lockers, roleTasklock, "", openTasklockSQLWait("lease")}
	shared := fmt.Sprintf("; %d goroutines on one ", n)
	if own {
		shared = "; one per goroutine, its "
	}
	switch k {
	case kindPG:
		tl.note = fmt.Sprintf("Locker.Obtain; one Locker and pool per goroutine, as %d processes would: waiters woken by LISTEN/NOTIFY", n)
		return []sqlWaitContender{tl,
			{"tasklock, connection mode, " + lockers, roleExtra, "the same in connection mode (LISTEN/NOTIFY too)", openTasklockSQLWait("connection")},
			{pglockName, rolePeer, "AcquireContext, which retries once per lease duration (10 s)" + shared + "Client", openPglockWait}}
	case kindMySQL:
		tl.note = fmt.Sprintf("Locker.Obtain; one Locker and pool per goroutine, as %d processes would: no notifications on MySQL, waiters poll (jittered backoff 5 ms → 250 ms)", n)
		return []sqlWaitContender{tl,
			{"tasklock, connection mode, " + lockers, roleExtra, "the same in connection mode", openTasklockSQLWait("connection")},
			{goMySQLLockName, rolePeer, fmt.Sprintf("ObtainTimeoutContext(ctx, key, %d): GET_LOCK(key, %d), the server queues the waiters and wakes one on RELEASE_LOCK"+shared+"pool. (Its Obtain and ObtainContext ask GET_LOCK(key, -1), which MariaDB answers with NULL: they fail at once with ErrMySQLInternalError, and leave the connection checked out)", goMySQLLockWait, goMySQLLockWait), openGoMySQLLockWait}}
	default:
		tl.note = "Locker.Obtain; one Locker and pool per goroutine: waiters poll (jittered backoff 5 ms → 250 ms)"
		return []sqlWaitContender{tl}
	}
}

func openTasklockSQLWait(mode string) func(ctx context.Context, e *sqlEnv, key string, n int, own bool, c *sqlCounter) ([]obtainFunc, func(), error) {
	return func(ctx context.Context, e *sqlEnv, key string, n int, _ bool, c *sqlCounter) ([]obtainFunc, func(), error) {
		var ts []*tasklockSQL
		closeAll := func() {
			for _, t := range ts {
				t.close()
			}
		}
		fs := make([]obtainFunc, n)
		for i := range n {
			t, err := openTasklockSQL(ctx, e, mode, c, p3LockerPool, nil)
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			ts = append(ts, t)
			fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
				l, err := t.lk.Obtain(ctx, key, nil)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		}
		return fs, closeAll, nil
	}
}

func openPglockWait(ctx context.Context, e *sqlEnv, key string, n int, own bool, c *sqlCounter) ([]obtainFunc, func(), error) {
	var dbs []*sql.DB
	closeAll := func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	}
	fs := make([]obtainFunc, n)
	var cl *pglock.Client
	for i := range n {
		if i == 0 || own {
			pool := sqlPoolSize
			if own {
				pool = p3LockerPool
			}
			var (
				db  *sql.DB
				err error
			)
			cl, db, err = openPglockClient(ctx, e, c, pool, benchTTL)
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			dbs = append(dbs, db)
		}
		cl := cl
		fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
			l, err := cl.AcquireContext(ctx, key)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return cl.ReleaseContext(ctx, l) }, nil
		}
	}
	return fs, closeAll, nil
}

// goMySQLLockWait is the GET_LOCK timeout, in seconds, of go-mysql-lock's
// blocking obtain in P3-sql: longer than any run, so waiters wait in the
// server until the lock is theirs.
const goMySQLLockWait = 3600

func openGoMySQLLockWait(ctx context.Context, e *sqlEnv, key string, n int, own bool, c *sqlCounter) ([]obtainFunc, func(), error) {
	// Every waiter blocks in GET_LOCK on a connection of its own. Bounded:
	// go-mysql-lock does not give a connection back when GET_LOCK fails.
	var dbs []*sql.DB
	closeAll := func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	}
	fs := make([]obtainFunc, n)
	var lk *gomysqllock.MysqlLocker
	for i := range n {
		if i == 0 || own {
			conns := n + 1
			if own {
				conns = 2
			}
			db, err := mysqlDB(e, c, conns)
			if err == nil {
				dbs = append(dbs, db)
				err = warmSQL(ctx, db, conns)
			}
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			lk = gomysqllock.NewMysqlLocker(db)
		}
		lk := lk
		fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
			l, err := lk.ObtainTimeoutContext(ctx, key, goMySQLLockWait)
			if err != nil {
				return nil, err
			}
			return func(context.Context) error { return l.Release() }, nil
		}
	}
	return fs, closeAll, nil
}

// sqlP3Result is P3-sql on one store with n goroutines (own: each with
// clients of its own).
type sqlP3Result struct {
	env   *sqlEnv
	n     int
	own   bool
	res   []*p3Result
	conts []sqlWaitContender
	err   error
}

// runP3SQL runs every wait contender of e's store with n goroutines for
// cfg.sqlP3Rounds rounds (odd rounds in reverse order) and pools each one's
// samples, as P3 does. With own set every goroutine has clients of its own
// (the handoff rows).
func runP3SQL(ctx context.Context, e *sqlEnv, cfg config, n int, own bool) *sqlP3Result {
	conts := sqlWaitContenders(e.kind, n, own)
	out := &sqlP3Result{env: e, n: n, own: own, conts: conts, res: make([]*p3Result, len(conts))}
	for i, c := range conts {
		out.res[i] = &p3Result{name: c.name, note: c.note}
	}
	d := cfg.sqlDuration / time.Duration(cfg.sqlP3Rounds)
	for round := range cfg.sqlP3Rounds {
		for j := range conts {
			i := j
			if round%2 == 1 {
				i = len(conts) - 1 - j
			}
			c := conts[i]
			key := fmt.Sprintf("lockbench:p3sql:%d:%d:%d:%d", n, i, round, time.Now().UnixNano())
			h := &sqlCounter{}
			fs, closeAll, err := c.open(ctx, e, key, n, own, h)
			if err != nil {
				out.err = fmt.Errorf("P3-sql %s %s: %w", e.kind, c.name, err)
				return out
			}
			r := out.res[i]
			if r.perG == nil {
				r.perG = make([]int, len(fs))
			}
			before := len(r.handoffs)
			overlap := measureHandoffs(ctx, fs, r, cfg.warmup, d)
			closeAll()
			r.calls += h.snapshot().stmts
			if overlap > 0 {
				out.err = fmt.Errorf("P3-sql %s %s: %d times two goroutines held the lock at once", e.kind, c.name, overlap)
				return out
			}
			progress("P3-sql %s %d round %d %-38s %6d handoffs, p50 %v", e.kind, n, round+1, c.name, len(r.handoffs)-before, percentile(r.handoffs[before:], 0.50))
		}
	}
	return out
}

// --- P4-sql ------------------------------------------------------------

// holder is one P4-sql implementation, ready to hold locks.
type holder struct {
	// warm opens the caller's pool connections: they exist before the
	// baseline, as the keys and the slice of locks do.
	warm func(ctx context.Context) error
	// obtain takes the lock on key and returns it as the library's own
	// pointer (storing it costs the harness no allocation); release and
	// lost take that pointer.
	obtain  func(ctx context.Context, key string) (any, error)
	release func(ctx context.Context, lock any) error
	lost    func(lock any) bool
	// renewals counts the renewals made so far: tasklock's EventRenewed,
	// pglock's heartbeat UPDATEs, go-mysql-lock's pings.
	renewals func() int64
	close    func()
	// settle is how long what close leaves behind may still change: the
	// next measurement's baseline waits for it.
	settle time.Duration
}

type sqlHoldContender struct {
	name, role, renewal, note string
	open                      func(ctx context.Context, e *sqlEnv, ttl time.Duration, c *sqlCounter) (*holder, error)
}

func sqlHoldContenders(k storeKind) []sqlHoldContender {
	tl := sqlHoldContender{"tasklock", roleTasklock, "lease renewals (EventRenewed)", "one Locker, lease mode, pool of 16", holdTasklock("lease")}
	tlConn := sqlHoldContender{"tasklock, connection mode", roleExtra, "lease renewals (EventRenewed)", fmt.Sprintf("one Locker, connection mode: a connection per held lock, renewed (pinged) one by one; TTL at least %v (a new connection is a server process forked for it, and with hundreds already open one can take seconds: an obtain answered past its TTL fails)", p4ConnMinTTL), holdTasklock("connection")}
	switch k {
	case kindPG:
		return []sqlHoldContender{tl, tlConn,
			{pglockName, rolePeer, "heartbeat UPDATEs", "one Client, lib/pq pool of 16, lease = TTL, heartbeat = TTL/3: a goroutine per lock", holdPglock}}
	case kindMySQL:
		return []sqlHoldContender{tl, tlConn,
			{goMySQLLockName, rolePeer, "pings", "GET_LOCK on a connection per lock, refresh (ping) every TTL/3 by a goroutine per lock", holdGoMySQLLock}}
	default:
		return []sqlHoldContender{tl}
	}
}

// p4ConnMinTTL is the least TTL of connection mode's locks in P4-sql. On
// the project's 2-core VM PostgreSQL forks its 1,000th backend in seconds,
// not milliseconds: with P4-sql's 3 s some obtains were answered past
// their TTL (failed), and the pings of 1,000 connections every second fell
// behind. The row has no target; its cost per cycle is per renewal.
const p4ConnMinTTL = 10 * time.Second

func holdTasklock(mode string) func(ctx context.Context, e *sqlEnv, ttl time.Duration, c *sqlCounter) (*holder, error) {
	return func(ctx context.Context, e *sqlEnv, ttl time.Duration, c *sqlCounter) (*holder, error) {
		var renewed atomic.Int64
		cfg := &tasklock.Config{OnEvent: func(ev tasklock.Event) {
			if ev.Type == tasklock.EventRenewed {
				renewed.Add(1)
			}
		}}
		maxConns := sqlPoolSize
		if mode == "connection" && e.kind == kindMySQL {
			maxConns = 0 // each held lock keeps one of db's connections
		}
		t, err := openTasklockSQL(ctx, e, mode, c, maxConns, cfg)
		if err != nil {
			return nil, err
		}
		if mode == "connection" {
			ttl = max(ttl, p4ConnMinTTL)
		}
		opts := &tasklock.ObtainOptions{TTL: ttl}
		return &holder{
			warm: func(ctx context.Context) error { return t.warm(ctx, sqlPoolSize) },
			obtain: func(ctx context.Context, key string) (any, error) {
				l, err := t.lk.TryObtain(ctx, key, opts)
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
			renewals: renewed.Load,
			close:    t.close,
		}, nil
	}
}

func holdPglock(ctx context.Context, e *sqlEnv, ttl time.Duration, c *sqlCounter) (*holder, error) {
	cl, db, err := openPglockClient(ctx, e, c, sqlPoolSize, ttl)
	if err != nil {
		return nil, err
	}
	return &holder{
		warm: func(ctx context.Context) error { return warmSQL(ctx, db, sqlPoolSize) },
		obtain: func(ctx context.Context, key string) (any, error) {
			// The heartbeat's context derives from the Acquire's: give it
			// one that outlives this call.
			l, err := cl.AcquireContext(context.WithoutCancel(ctx), key, pglock.FailIfLocked())
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		release:  func(ctx context.Context, l any) error { return cl.ReleaseContext(ctx, l.(*pglock.Lock)) },
		lost:     func(l any) bool { return l.(*pglock.Lock).IsReleased() },
		renewals: c.updates.Load,
		close:    func() { _ = db.Close() },
	}, nil
}

func holdGoMySQLLock(ctx context.Context, e *sqlEnv, ttl time.Duration, c *sqlCounter) (*holder, error) {
	db, err := mysqlDB(e, c, 0)
	if err != nil {
		return nil, err
	}
	lk := gomysqllock.NewMysqlLocker(db, gomysqllock.WithRefreshInterval(ttl/3))
	return &holder{
		warm: func(ctx context.Context) error { return warmSQL(ctx, db, sqlPoolSize) },
		obtain: func(ctx context.Context, key string) (any, error) {
			l, err := lk.ObtainTimeoutContext(ctx, key, 0)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		release:  func(_ context.Context, l any) error { return l.(*gomysqllock.Lock).Release() },
		lost:     func(l any) bool { return l.(*gomysqllock.Lock).GetContext().Err() != nil },
		renewals: c.pings.Load,
		close:    func() { _ = db.Close() },
		// Each released lock's refresher wakes once more after the
		// refresh interval, fails to ping, and blocks for good.
		settle: ttl/3 + 200*time.Millisecond,
	}, nil
}

// p4SQLResult is what holding n locks cost one implementation.
type p4SQLResult struct {
	name, role, renewal, note string
	locks                     int
	ttl                       time.Duration
	obtainTime                time.Duration
	window                    time.Duration
	renewals                  int64
	cycles                    float64
	counts                    sqlCounts // inside the window
	network                   bool
	goroutineDelta            int     // the largest rise while holding
	goroutinesLeft            int     // after releasing everything and closing
	heapPerLock               float64 // median of the samples
	heapSamples               []float64
	stackPerLock              float64
	lost                      int64
	releaseFailed             int64 // releases that failed or did not return
	releaseErr                error // the first of them
	err                       error
}

func (r *p4SQLResult) perCycle() (stmts, trips float64) {
	if r.cycles == 0 {
		return 0, 0
	}
	return float64(r.counts.stmts) / r.cycles, float64(r.counts.trips) / r.cycles
}

type sqlP4Result struct {
	env *sqlEnv
	res []*p4SQLResult
}

// runP4SQL holds cfg.sqlP4Locks locks with every hold contender of e's
// store in turn and measures what it costs while they are held.
func runP4SQL(ctx context.Context, e *sqlEnv, cfg config) *sqlP4Result {
	out := &sqlP4Result{env: e}
	// What the previous measurements left behind settles first: on
	// MariaDB, go-mysql-lock's released locks wake their refresher once
	// more a second (its default refresh interval) after Release.
	time.Sleep(1500 * time.Millisecond)
	for _, hc := range sqlHoldContenders(e.kind) {
		r := &p4SQLResult{name: hc.name, role: hc.role, renewal: hc.renewal, note: hc.note, locks: cfg.sqlP4Locks, ttl: cfg.sqlP4TTL}
		r.err = holdLocks(ctx, e, hc, cfg, r)
		if r.err != nil {
			progress("P4-sql %s %s: %v", e.kind, hc.name, r.err)
		}
		out.res = append(out.res, r)
	}
	return out
}

func holdLocks(ctx context.Context, e *sqlEnv, hc sqlHoldContender, cfg config, r *p4SQLResult) error {
	n, ttl := cfg.sqlP4Locks, cfg.sqlP4TTL
	const workers = 16
	gStart := settledGoroutines()
	c := &sqlCounter{}
	h, err := hc.open(ctx, e, ttl, c)
	if err != nil {
		return err
	}
	r.network = c.network
	closed := false
	defer func() {
		if !closed {
			h.close()
		}
	}()
	keys := make([]string, n)
	prefix := fmt.Sprintf("lockbench:p4sql:%d:", time.Now().UnixNano())
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	locks := make([]any, n)
	if err := h.warm(ctx); err != nil {
		return err
	}
	if cfg.heapProfile != "" && hc.role == roleTasklock {
		if err := writeHeapProfile(cfg.heapProfile + "." + string(e.kind) + ".base"); err != nil {
			return err
		}
	}
	heap0, stack0 := memAfterGC()
	g0 := runtime.NumGoroutine()

	var (
		failed  atomic.Int64
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	t0 := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				l, err := h.obtain(ctx, keys[i])
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { first = err })
					continue
				}
				locks[i] = l
			}
		}()
	}
	wg.Wait()
	r.obtainTime = time.Since(t0)
	var (
		relFailed atomic.Int64
		relOnce   sync.Once
	)
	releaseAll := func() {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += workers {
					if locks[i] != nil {
						if err := releaseBounded(ctx, h, locks[i]); err != nil {
							relFailed.Add(1)
							relOnce.Do(func() { r.releaseErr = err })
						}
					}
				}
			}()
		}
		wg.Wait()
		r.releaseFailed = relFailed.Load()
	}
	if first != nil {
		releaseAll()
		return fmt.Errorf("%d of %d obtains failed: %w", failed.Load(), n, first)
	}
	progress("P4-sql %s %-26s obtained %d locks in %v", e.kind, hc.name, n, r.obtainTime.Round(time.Millisecond))

	cycle := ttl / 3
	maxG := 0
	sampleGoroutines := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			maxG = max(maxG, runtime.NumGoroutine()-g0)
		}
	}
	sampleGoroutines(cycle) // one renewal cycle before counting
	c0, rn0, w0 := c.snapshot(), h.renewals(), time.Now()
	sampleGoroutines(2 * cycle)
	c1, rn1 := c.snapshot(), h.renewals()
	r.window = time.Since(w0)
	r.renewals = rn1 - rn0
	r.cycles = float64(r.renewals) / float64(n)
	r.counts = c1.sub(c0)

	samples := 5
	if cfg.quick {
		samples = 3
	}
	var stacks []float64
	for i := range samples {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		hp, st := memAfterGC()
		r.heapSamples = append(r.heapSamples, float64(int64(hp)-int64(heap0))/float64(n))
		stacks = append(stacks, float64(int64(st)-int64(stack0))/float64(n))
		maxG = max(maxG, runtime.NumGoroutine()-g0)
	}
	r.heapPerLock, r.stackPerLock = median(r.heapSamples), median(stacks)
	if cfg.heapProfile != "" && hc.role == roleTasklock {
		path := cfg.heapProfile + "." + string(e.kind)
		if err := writeHeapProfile(path); err != nil {
			return err
		}
		progress("P4-sql %s: heap profile in %s (baseline: %s.base)", e.kind, path, path)
	}
	r.goroutineDelta = maxG
	for _, l := range locks {
		if l != nil && h.lost(l) {
			r.lost++
		}
	}
	s, t := r.perCycle()
	progress("P4-sql %s %-26s %.2f cycles in %v: %.1f statements, %.1f round trips per cycle; %+d goroutines, %.0f B heap per lock",
		e.kind, hc.name, r.cycles, r.window.Round(time.Millisecond), s, t, r.goroutineDelta, r.heapPerLock)

	releaseAll()
	closed = true
	h.close()
	time.Sleep(h.settle)
	r.goroutinesLeft = settledGoroutines() - gStart
	return nil
}

// releaseTimeout bounds one release in P4-sql.
const releaseTimeout = 5 * time.Second

// releaseBounded releases l, or gives up after releaseTimeout and leaves
// the call behind: go-mysql-lock v0.0.5's Release blocks for good once its
// refresher has given the lock up (a ping slower than the refresh
// interval), as both then send on the same unbuffered channel.
func releaseBounded(ctx context.Context, h *holder, l any) error {
	done := make(chan error, 1)
	go func() { done <- h.release(ctx, l) }()
	select {
	case err := <-done:
		return err
	case <-time.After(releaseTimeout):
		return fmt.Errorf("release did not return within %v", releaseTimeout)
	}
}

// settledGoroutines returns the goroutine count once it has stopped
// falling for 300 ms (at most 3 s): what a run leaves behind for good.
func settledGoroutines() int {
	last, since := runtime.NumGoroutine(), time.Now()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if g := runtime.NumGoroutine(); g < last {
			last, since = g, time.Now()
		} else if time.Since(since) >= 300*time.Millisecond {
			break
		}
	}
	return last
}

// memAfterGC returns the live heap and the goroutine stacks in use after a
// full collection.
func memAfterGC() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.StackInuse
}

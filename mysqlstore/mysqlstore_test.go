package mysqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest"
)

func TestMain(m *testing.M) {
	// go-sql-driver logs broken connections to stderr; the fault tests
	// break many on purpose.
	_ = mysql.SetLogger(quietLogger{})
	os.Exit(testserver.Main(m))
}

type quietLogger struct{}

func (quietLogger) Print(...any) {}

// warmConns is how many connections openDB opens up front.
const warmConns = 8

// openDB opens a pool on dsn, closed at cleanup. It opens warmConns
// connections at once and keeps them idle: storetest's Close test checks
// for goroutine leaks, and every go-sql-driver connection runs a goroutine,
// so connections dialled during that test would count as leaked.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxIdleConns(2 * warmConns)
	ctx := ctxT(t)
	conns := make([]*sql.Conn, warmConns)
	for i := range conns {
		if conns[i], err = db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	return db
}

// newStore makes a store on a fresh database of the shared server.
func newStore(t testing.TB, mode Mode) (*Store, *sql.DB, string) {
	t.Helper()
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	db := openDB(t, dsn)
	return mustNew(t, db, &Options{Mode: mode, Migrate: true}), db, dsn
}

// mustNew returns a Store that is closed at cleanup, before db is.
func mustNew(t testing.TB, db *sql.DB, opts *Options) *Store {
	t.Helper()
	s, err := New(db, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, s *Store, key, tok, owner string, ttl time.Duration) uint64 {
	t.Helper()
	g, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return g.Fence
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var modes = []Mode{ModeLease, ModeConnection}

// The conformance tests do not run in parallel with the others: storetest's
// Close test checks that no goroutine outlives it, and would count those of
// other tests (helpers' readers, new connections').

func TestConformanceLease(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store {
		s, _, _ := newStore(t, ModeLease)
		return s
	})
}

func TestConformanceConnection(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store {
		s, _, _ := newStore(t, ModeConnection)
		return s
	})
}

// counter counts the statements and pings that pass through a connector:
// each is one round trip to the server. START TRANSACTION, COMMIT and
// ROLLBACK are counted as statements. hook, when set, sees every statement
// before it is sent, and an error it returns is the statement's.
type counter struct {
	mu    sync.Mutex
	stmts []string
	pings int
	hook  func(q string) error
}

func (c *counter) add(q string) error {
	c.mu.Lock()
	c.stmts = append(c.stmts, q)
	hook := c.hook
	c.mu.Unlock()
	if hook != nil {
		return hook(q)
	}
	return nil
}

// setHook sets c.hook.
func (c *counter) setHook(hook func(q string) error) {
	c.mu.Lock()
	c.hook = hook
	c.mu.Unlock()
}

func (c *counter) reset() {
	c.mu.Lock()
	c.stmts, c.pings = nil, 0
	c.mu.Unlock()
}

// count returns the number of statements and pings since the last reset.
func (c *counter) count() (stmts, pings int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.stmts), c.pings
}

// countingConnector wraps go-sql-driver's connector and counts what its
// connections send. It forwards everything: nothing is mocked.
type countingConnector struct {
	sqldriver.Connector
	c *counter
}

// mysqlDriverConn is what go-sql-driver's connections implement.
type mysqlDriverConn interface {
	sqldriver.Conn
	sqldriver.ConnBeginTx
	sqldriver.ConnPrepareContext
	sqldriver.ExecerContext
	sqldriver.QueryerContext
	sqldriver.Pinger
	sqldriver.SessionResetter
	sqldriver.Validator
	sqldriver.NamedValueChecker
}

func (cc countingConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := cc.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{conn.(mysqlDriverConn), cc.c}, nil
}

type countingConn struct {
	mysqlDriverConn
	c *counter
}

func (cc *countingConn) ExecContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	if err := cc.c.add(q); err != nil {
		return nil, err
	}
	return cc.mysqlDriverConn.ExecContext(ctx, q, args)
}

func (cc *countingConn) QueryContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	if err := cc.c.add(q); err != nil {
		return nil, err
	}
	return cc.mysqlDriverConn.QueryContext(ctx, q, args)
}

func (cc *countingConn) PrepareContext(ctx context.Context, q string) (sqldriver.Stmt, error) {
	if err := cc.c.add("PREPARE " + q); err != nil {
		return nil, err
	}
	return cc.mysqlDriverConn.PrepareContext(ctx, q)
}

func (cc *countingConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	if err := cc.c.add("START TRANSACTION"); err != nil {
		return nil, err
	}
	tx, err := cc.mysqlDriverConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{tx, cc.c}, nil
}

// countingTx counts a transaction's COMMIT or ROLLBACK.
type countingTx struct {
	sqldriver.Tx
	c *counter
}

func (t countingTx) Commit() error {
	if err := t.c.add("COMMIT"); err != nil {
		_ = t.Tx.Rollback()
		return err
	}
	return t.Tx.Commit()
}

func (t countingTx) Rollback() error {
	_ = t.c.add("ROLLBACK")
	return t.Tx.Rollback()
}

func (cc *countingConn) Ping(ctx context.Context) error {
	cc.c.mu.Lock()
	cc.c.pings++
	cc.c.mu.Unlock()
	return cc.mysqlDriverConn.Ping(ctx)
}

// openCountingDB opens a pool whose statements and pings c counts.
func openCountingDB(t testing.TB, dsn string, c *counter) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(countingConnector{conn, c})
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	if err := Migrate(ctxT(t), openDB(t, dsn), nil); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	c := &counter{}
	db := openCountingDB(t, dsn, c)
	check := func(t *testing.T, what string, wantStmts, wantPings int) {
		t.Helper()
		stmts, pings := c.count()
		if stmts != wantStmts || pings != wantPings {
			c.mu.Lock()
			t.Errorf("%s: %d statements %d pings, want %d and %d: %q", what, stmts, pings, wantStmts, wantPings, c.stmts)
			c.mu.Unlock()
		} else {
			t.Logf("%s: %d statements, %d pings", what, stmts, pings)
		}
		c.reset()
	}

	t.Run("Lease", func(t *testing.T) {
		s := mustNew(t, db, nil)
		c.reset()
		// Acquire: one statement when granted, two when held (the holder
		// is read); on MariaDB, after an Acquire that found its key held,
		// one either way (RETURNING; the first asks VERSION()).
		tok := token()
		mustAcquire(t, s, "rt", tok, "me", time.Minute)
		check(t, "Acquire (granted)", 1, 0)
		held := func(what string, stmts int) {
			t.Helper()
			_, err := s.Acquire(ctx, driver.AcquireParams{Key: "rt", Token: token(), Owner: "x", TTL: time.Second})
			if he, ok := err.(*driver.HeldError); !ok || he.Owner != "me" || he.TTL <= 50*time.Second {
				t.Fatalf("%s: Acquire of a held key: %v", what, err)
			}
			check(t, what, stmts, 0)
		}
		held("Acquire (held, with owner and TTL)", 2)
		held("Acquire (held again; MariaDB, first VERSION())", 2)
		held("Acquire (held again; MariaDB)", 1)
		mustAcquire(t, s, "rt2", token(), "me", time.Minute)
		check(t, "Acquire (granted after held; MariaDB)", 1, 0)
		mustAcquire(t, s, "rt3", token(), "me", time.Minute)
		check(t, "Acquire (granted after granted)", 1, 0)
		s.dialect.Store(dialectNoReturning)
		held("Acquire (held; MySQL)", 2)
		held("Acquire (held again; MySQL)", 2)
		s.dialect.Store(dialectReturning)
		if res, err := s.Renew(ctx, []driver.RenewParams{{Key: "rt", Token: tok, TTL: time.Minute}}); err != nil || res[0] != nil {
			t.Fatal(res, err)
		}
		check(t, "Renew 1", 1, 0)
		res, err := s.Renew(ctx, []driver.RenewParams{{Key: "rt", Token: tok, TTL: time.Minute}, {Key: "rt-none", Token: tok, TTL: time.Minute}})
		if err != nil || res[0] != nil || res[1] == nil {
			t.Fatal(res, err)
		}
		check(t, "Renew 2, one lost", 2, 0)
		if err := s.Release(ctx, driver.ReleaseParams{Key: "rt", Token: tok}); err != nil {
			t.Fatal(err)
		}
		check(t, "Release", 1, 0)

		// Batches: one statement per acquire batch and per release batch
		// on MariaDB; on MySQL a transaction of four per acquire batch and
		// of three per release batch, and one more of four when a lease
		// of the release batch was not held.
		batch := func(n int) ([]driver.AcquireParams, []driver.ReleaseParams) {
			aps := make([]driver.AcquireParams, n)
			rps := make([]driver.ReleaseParams, n)
			for i := range aps {
				aps[i] = driver.AcquireParams{Key: fmt.Sprintf("batch/%d", i), Token: token(), Owner: "me", TTL: time.Minute}
				rps[i] = driver.ReleaseParams{Key: aps[i].Key, Token: aps[i].Token}
			}
			return aps, rps
		}
		for _, tc := range []struct {
			what                       string
			stmts, release, notAllHeld int
		}{
			{"AcquireBatch 10 (MariaDB)", 1, 1, 1},
			{"AcquireBatch 10 (MySQL)", 4, 3, 7},
		} {
			if strings.Contains(tc.what, "MySQL") {
				s.dialect.Store(dialectNoReturning)
			}
			aps, rps := batch(10)
			rs, err := s.AcquireBatch(ctx, aps)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range rs {
				if r.Err != nil || r.Grant.Fence == 0 {
					t.Fatalf("%s: item %d: %+v", tc.what, i, r)
				}
			}
			check(t, tc.what, tc.stmts, 0)
			errs, err := s.ReleaseBatch(ctx, rps[:5])
			if err != nil || errs[0] != nil || errs[4] != nil {
				t.Fatal(errs, err)
			}
			check(t, "ReleaseBatch 5", tc.release, 0)
			// One not held: on MySQL the optimistic transaction is rolled
			// back, and a second one reads which.
			errs, err = s.ReleaseBatch(ctx, append(rps[5:], driver.ReleaseParams{Key: "batch/none", Token: tok}))
			if err != nil || errs[0] != nil || errs[5] != driver.ErrNotHeld {
				t.Fatal(errs, err)
			}
			check(t, "ReleaseBatch 6, one not held", tc.notAllHeld, 0)
		}

		// 1,000 leases set up in one statement, renewed in one.
		const n = 1000
		ps := make([]driver.RenewParams, n)
		var b strings.Builder
		b.WriteString("INSERT INTO tasklock_locks (lock_key, token, owner, fence, acquired_at, expires_at) VALUES ")
		for i := range ps {
			ps[i] = driver.RenewParams{Key: fmt.Sprintf("job/%04d", i), Token: token(), TTL: time.Minute}
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "('%s', '%s', 'me', 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 10 SECOND)", ps[i].Key, ps[i].Token)
		}
		if _, err := db.ExecContext(ctx, b.String()); err != nil {
			t.Fatal(err)
		}
		c.reset()
		start := time.Now()
		res, err = s.Renew(ctx, ps)
		el := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r != nil {
				t.Fatalf("lease %d: %v", i, r)
			}
		}
		check(t, fmt.Sprintf("Renew %d (%v)", n, el.Round(time.Millisecond)), 1, 0)
		var renewed int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM tasklock_locks WHERE lock_key LIKE 'job/%' AND expires_at > UTC_TIMESTAMP(6) + INTERVAL 50 SECOND").Scan(&renewed); err != nil {
			t.Fatal(err)
		}
		if renewed != n {
			t.Fatalf("%d leases extended to a minute, want %d", renewed, n)
		}
		c.reset()
	})

	t.Run("Connection", func(t *testing.T) {
		s := mustNew(t, db, &Options{Mode: ModeConnection, Table: "conn_locks", Migrate: true})
		s.spareIdle = time.Minute // however slow the machine, kept connections stay
		c.reset()
		// The first call asks the server once for its version and its
		// start time (see startSQL).
		if _, err := s.Leases(ctx, "none/"); err != nil {
			t.Fatal(err)
		}
		check(t, "Leases (first call)", 3, 0)
		// A connection new to the Store is set up once: its wait_timeout,
		// and the server's start read on it (two statements).
		tok := token()
		mustAcquire(t, s, "rt", tok, "me", time.Minute)
		check(t, "Acquire (granted, new connection)", 3, 0)
		_, err := s.Acquire(ctx, driver.AcquireParams{Key: "rt", Token: token(), Owner: "x", TTL: time.Minute})
		if he, ok := err.(*driver.HeldError); !ok || he.Owner != "me" {
			t.Fatalf("Acquire of a held key: %v", err)
		}
		check(t, "Acquire (held, with owner, new connection)", 4, 0)
		// That connection is kept for the next hold: an Acquire and a
		// Release on it are one statement each.
		for i := range 3 {
			tok := token()
			mustAcquire(t, s, "rt-pair", tok, "me", time.Minute)
			if err := s.Release(ctx, driver.ReleaseParams{Key: "rt-pair", Token: tok}); err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("Acquire + Release %d (kept connection)", i), 2, 0)
		}
		// Another TTL in whole seconds sets its wait_timeout first.
		tok2 := token()
		mustAcquire(t, s, "rt-pair", tok2, "me", 5*time.Second)
		check(t, "Acquire (kept connection, another wait_timeout)", 2, 0)
		if err := s.Release(ctx, driver.ReleaseParams{Key: "rt-pair", Token: tok2}); err != nil {
			t.Fatal(err)
		}
		c.reset()
		toks := []string{tok}
		for i := range 3 {
			toks = append(toks, token())
			mustAcquire(t, s, fmt.Sprintf("rt-%d", i), toks[i+1], "me", time.Minute)
		}
		c.reset()
		ps := []driver.RenewParams{{Key: "rt", Token: tok, TTL: time.Minute}}
		for i := range 3 {
			ps = append(ps, driver.RenewParams{Key: fmt.Sprintf("rt-%d", i), Token: toks[i+1], TTL: time.Minute})
		}
		if res, err := s.Renew(ctx, ps); err != nil || res[0] != nil || res[3] != nil {
			t.Fatal(res, err)
		}
		check(t, "Renew 4", 0, 4)
		if err := s.Release(ctx, driver.ReleaseParams{Key: "rt", Token: tok}); err != nil {
			t.Fatal(err)
		}
		check(t, "Release", 1, 0)
		rps := make([]driver.ReleaseParams, 3)
		for i := range rps {
			rps[i] = driver.ReleaseParams{Key: fmt.Sprintf("rt-%d", i), Token: toks[i+1]}
		}
		if errs, err := s.ReleaseBatch(ctx, rps); err != nil || errs[0] != nil || errs[2] != nil {
			t.Fatal(errs, err)
		}
		check(t, "ReleaseBatch 3", 3, 0)
		aps := make([]driver.AcquireParams, 3)
		for i := range aps {
			aps[i] = driver.AcquireParams{Key: fmt.Sprintf("rt-%d", i), Token: token(), Owner: "me", TTL: time.Minute}
			rps[i].Token = aps[i].Token
		}
		if rs, err := s.AcquireBatch(ctx, aps); err != nil || rs[0].Err != nil || rs[2].Err != nil {
			t.Fatal(rs, err)
		}
		check(t, "AcquireBatch 3 (kept connections)", 3, 0)
		if errs, err := s.ReleaseBatch(ctx, rps); err != nil || errs[0] != nil || errs[2] != nil {
			t.Fatal(errs, err)
		}
		c.reset()
	})
}

// TestKeptConnections: connection mode keeps a released lock's connection
// for the next hold, never one whose session has ended, never more than
// half of db's MaxOpenConns, and gives it back to the pool after spareIdle.
func TestKeptConnections(t *testing.T) {
	t.Parallel()
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	db := openDB(t, dsn)
	db.SetMaxOpenConns(6)
	ctx := ctxT(t)
	s := mustNew(t, db, &Options{Mode: ModeConnection, Migrate: true})
	s.spareIdle = time.Minute
	holder := func(key string) int64 {
		t.Helper()
		var id sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK("+string(s.lockName(appendHex(nil, key)))+")").Scan(&id); err != nil || !id.Valid {
			t.Fatalf("IS_USED_LOCK(%q): %v %v", key, id, err)
		}
		return id.Int64
	}
	release := func(key, tok string) {
		t.Helper()
		if err := s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok}); err != nil {
			t.Fatal(err)
		}
	}

	tok := token()
	f1 := mustAcquire(t, s, "k", tok, "me", time.Minute)
	id := holder("k")
	release("k", tok)
	tok = token()
	mustAcquire(t, s, "k", tok, "me", time.Minute)
	if got := holder("k"); got != id {
		t.Fatalf("the next hold is on session %d, want the kept %d", got, id)
	}
	release("k", tok)

	// A kept session killed meanwhile is not used.
	if _, err := db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the killed session to end", func() bool {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = "+strconv.FormatInt(id, 10)).Scan(&n)
		return err == nil && n == 0
	})
	tok = token()
	if f := mustAcquire(t, s, "k", tok, "me", time.Minute); f <= f1 {
		t.Fatalf("fence %d after %d", f, f1)
	}
	if got := holder("k"); got == id {
		t.Fatalf("the hold is on the killed session %d", id)
	}
	release("k", tok)

	// At most half of MaxOpenConns kept.
	toks := make([]string, 5)
	for i := range toks {
		toks[i] = token()
		mustAcquire(t, s, fmt.Sprint("m", i), toks[i], "me", time.Minute)
	}
	for i, tok := range toks {
		release(fmt.Sprint("m", i), tok)
	}
	s.mu.Lock()
	kept := len(s.spare)
	s.mu.Unlock()
	if kept != 3 {
		t.Errorf("%d connections kept with MaxOpenConns 6, want 3", kept)
	}

	// Kept connections go back to the pool once idle for spareIdle, open,
	// with the server's default wait_timeout.
	s2 := mustNew(t, db, &Options{Mode: ModeConnection})
	s2.spareIdle = 100 * time.Millisecond
	s.Close()
	tok = token()
	mustAcquire(t, s2, "k2", tok, "me", time.Minute)
	id2 := holder("k2")
	if err := s2.Release(ctx, driver.ReleaseParams{Key: "k2", Token: tok}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "kept connections back in the pool", func() bool { return db.Stats().InUse == 0 })
	var alive int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = "+strconv.FormatInt(id2, 10)).Scan(&alive); err != nil || alive != 1 {
		t.Errorf("the kept session %d: %d in the processlist (%v), want it open in the pool", id2, alive, err)
	}
	conns := make([]*sql.Conn, 0, 6)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	found := false
	for !found && len(conns) < 6 { // the pool's connections, until the kept one
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var cid int64
		var same bool
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID(), @@session.wait_timeout = @@global.wait_timeout").Scan(&cid, &same); err != nil {
			t.Fatal(err)
		}
		if cid == id2 {
			found = true
			if !same {
				t.Errorf("the kept session %d is back in the pool with its lock's wait_timeout", id2)
			}
		}
	}
	if !found {
		t.Errorf("the kept session %d is not among the pool's connections", id2)
	}
	s2.mu.Lock()
	kept = len(s2.spare)
	s2.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d connections still kept", kept)
	}
}

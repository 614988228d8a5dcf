package sqlitestore

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// countingConnector opens real modernc.org/sqlite connections with Open's
// DSN and counts the statements run through them (directly or as prepared
// statements), and separately the statements prepared (compiled) and the
// transactions begun. The pragmas the driver runs when it opens a
// connection are not counted. A hook, when set, runs before each counted
// statement, and an error it returns is that statement's.
type countingConnector struct {
	drv      sqldriver.Driver
	dsn      string
	stmts    atomic.Int64
	prepares atomic.Int64
	txs      atomic.Int64
	hook     atomic.Pointer[func() error]
}

func (c *countingConnector) Connect(context.Context) (sqldriver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

// ran counts a statement and runs the hook.
func (c *countingConnector) ran() error {
	c.stmts.Add(1)
	if h := c.hook.Load(); h != nil {
		return (*h)()
	}
	return nil
}

func (c *countingConnector) Driver() sqldriver.Driver { return c.drv }

type countingConn struct {
	sqldriver.Conn
	c *countingConnector
}

// countingStmt counts the runs of a prepared statement.
type countingStmt struct {
	sqldriver.Stmt
	c *countingConnector
}

func (s *countingStmt) ExecContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	if err := s.c.ran(); err != nil {
		return nil, err
	}
	return s.Stmt.(sqldriver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	if err := s.c.ran(); err != nil {
		return nil, err
	}
	return s.Stmt.(sqldriver.StmtQueryContext).QueryContext(ctx, args)
}

// ExecContext and QueryContext run a statement given as text, which the
// driver compiles for this run alone: each counts as a statement and as a
// compilation.
func (c *countingConn) ExecContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	c.c.prepares.Add(1)
	if err := c.c.ran(); err != nil {
		return nil, err
	}
	return c.Conn.(sqldriver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	c.c.prepares.Add(1)
	if err := c.c.ran(); err != nil {
		return nil, err
	}
	return c.Conn.(sqldriver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (sqldriver.Stmt, error) {
	c.c.prepares.Add(1)
	st, err := c.Conn.(sqldriver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: st, c: c.c}, nil
}

func (c *countingConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	c.c.txs.Add(1)
	return c.Conn.(sqldriver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	return c.Conn.(sqldriver.SessionResetter).ResetSession(ctx)
}

func (c *countingConn) IsValid() bool { return c.Conn.(sqldriver.Validator).IsValid() }

// openCounting opens path like Open does, through a countingConnector.
func openCounting(t *testing.T, path string) (*sql.DB, *countingConnector) {
	t.Helper()
	c, err := resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := sql.Open("sqlite", "")
	if err != nil {
		t.Fatal(err)
	}
	drv := probe.Driver()
	probe.Close()
	cc := &countingConnector{drv: drv, dsn: dsn(path, c)}
	db := sql.OpenDB(cc)
	t.Cleanup(func() { _ = db.Close() })
	return db, cc
}

// TestStatementsPerOperation counts the statements each call sends; a
// renewal of 1,000 leases is one statement. On a pool of one connection,
// every statement is compiled once and never again: a single call's when
// New prepares it, a batch's the first time a batch of its size comes.
func TestStatementsPerOperation(t *testing.T) {
	db, cc := openCounting(t, dbPath(t))
	db.SetMaxOpenConns(1)
	s := newStoreT(t, db)
	ctx := ctxT(t)
	countCompiled := func(name string, want, compiled int64, fn func()) {
		t.Helper()
		before, prepared := cc.stmts.Load(), cc.prepares.Load()
		start := time.Now()
		fn()
		took := time.Since(start)
		if got := cc.stmts.Load() - before; got != want {
			t.Fatalf("%s: %d statements, want %d", name, got, want)
		}
		if got := cc.prepares.Load() - prepared; got != compiled {
			t.Fatalf("%s: %d statements compiled, want %d", name, got, compiled)
		}
		t.Logf("%-28s %d statement(s), %v", name, want, took)
	}
	count := func(name string, want int64, fn func()) {
		t.Helper()
		countCompiled(name, want, 0, fn) // prepared once by New
	}

	count("Acquire (free)", 1, func() { mustAcquire(t, s, "k", "a", time.Minute) })
	count("Acquire (held)", 2, func() {
		if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: "b", TTL: time.Minute}); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("Acquire of a held key = %v", err)
		}
	})
	count("Release", 1, func() {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "a"}); err != nil {
			t.Fatal(err)
		}
	})
	count("Release (not held)", 1, func() {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "a"}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatal(err)
		}
	})

	// A batch is one statement, its own transaction; the holder of a key
	// found held is read afterwards.
	mustAcquire(t, s, "b-held", "other", time.Minute)
	txs := cc.txs.Load()
	for round, compiled := range []int64{1, 0} { // a batch of 3 is compiled the first time only
		countCompiled(fmt.Sprintf("AcquireBatch (2 free, 1 held) #%d", round+1), 2, compiled, func() {
			rs, err := s.AcquireBatch(ctx, []driver.AcquireParams{
				{Key: "b1", Token: "t1", TTL: time.Minute},
				{Key: "b2", Token: "t2", TTL: time.Minute},
				{Key: "b-held", Token: "t3", TTL: time.Minute},
			})
			if err != nil || rs[0].Err != nil || rs[1].Err != nil || !errors.Is(rs[2].Err, driver.ErrHeld) {
				t.Fatalf("AcquireBatch = %+v, %v", rs, err)
			}
		})
		countCompiled(fmt.Sprintf("ReleaseBatch (2 held, 1 not) #%d", round+1), 1, compiled, func() {
			errs, err := s.ReleaseBatch(ctx, []driver.ReleaseParams{
				{Key: "b1", Token: "t1"},
				{Key: "b2", Token: "t2"},
				{Key: "b-held", Token: "t3"},
			})
			if err != nil || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], driver.ErrNotHeld) {
				t.Fatalf("ReleaseBatch = %v, %v", errs, err)
			}
		})
	}
	if got := cc.txs.Load() - txs; got != 0 {
		t.Fatalf("the batches began %d transactions, want none", got)
	}

	// 1,000 held leases, written in one statement as 1,000 Acquire calls
	// would leave them (those take seconds under -race).
	const n = 1000
	if _, err := db.ExecContext(ctx, `WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
INSERT INTO `+DefaultTable+` ("key", token, owner, fence, acquired_at, expires_at)
SELECT printf('lease-%04d', i), printf('tok-%04d', i), 'bulk', 1, `+nowUS+`, `+nowUS+` + 60000000 FROM seq`, n-1); err != nil {
		t.Fatal(err)
	}
	ps := make([]driver.RenewParams, n)
	for i := range ps {
		ps[i] = driver.RenewParams{Key: fmt.Sprintf("lease-%04d", i), Token: fmt.Sprintf("tok-%04d", i), TTL: 2 * time.Minute}
	}
	ps[7].Token = "not-the-token"
	ps[500].Key = "never-acquired"
	var res []error
	count("Renew (1,000 leases)", 1, func() {
		var err error
		if res, err = s.Renew(ctx, ps); err != nil {
			t.Fatal(err)
		}
	})
	for i, err := range res {
		notHeld := i == 7 || i == 500
		if notHeld != errors.Is(err, driver.ErrNotHeld) || (!notHeld && err != nil) {
			t.Fatalf("Renew result %d = %v", i, err)
		}
	}
	if r := readRow(t, db, DefaultTable, "lease-0999"); r.expiresInUS < 110_000_000 {
		t.Fatalf("lease-0999 ends in %dµs after renewal, want ~2min", r.expiresInUS)
	}
	// The mutex's UPDATE and the DELETE of the read-write lock's or
	// semaphore's entries of the same name, in one transaction; the DELETE
	// is sent as text (a forced release is rare).
	countCompiled("ForceRelease", 2, 1, func() {
		if err := s.ForceRelease(ctx, "lease-0001"); err != nil {
			t.Fatal(err)
		}
	})
	count("Leases", 1, func() {
		if ls, err := s.Leases(ctx, "lease-"); err != nil || len(ls) != n-1 {
			t.Fatalf("Leases = %d, %v", len(ls), err)
		}
	})
}

package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"testing"
)

// The SQLITE_BUSY that lockbench's `sqlitestore.New` with Migrate met after
// P3-sql (bench/README.md, "P4-sql SQLite did not run"): modernc.org/sqlite
// v1.34 watches the context of every statement it is handed whose Done is
// not nil, and when that context ends after sqlite3_step has returned the
// first row but before the query call returns, it answers ctx.Err() and
// drops the rows without finalizing the statement. An INSERT/UPDATE …
// RETURNING left stepped holds SQLite's write lock until it is finalized,
// that is for as long as the process lives, so every later writer on the
// file waits out busy_timeout and fails with SQLITE_BUSY. P3-sql's waiters
// end by their contexts' deadlines, so one run in 5 to 12 hit that
// window. The window is a few instructions wide, so no test can land a
// cancellation in it on purpose; what a test can check, deterministically,
// is the condition for it: that no statement of the Store ever reaches the
// driver with a context that can end (stmtCtx). TestConformance and
// TestLedgerConformance check it, on pools from openWatched.

// openWatched returns a pool on a fresh database file, as Open makes it
// (the same DSN and driver), whose connections fail t when a statement, a
// query or a transaction reaches them with a context whose Done is not nil.
// The conformance suites run on it: their calls carry contexts with
// deadlines and cancelled ones, and before stmtCtx every statement got
// them.
func openWatched(t *testing.T) *sql.DB {
	t.Helper()
	c, err := resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(watchConnector{dsn: dsn(dbPath(t), c), drv: sqliteDriver(t), watch: &ctxWatch{t}})
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sqliteDriver returns modernc.org/sqlite's driver.
func sqliteDriver(t *testing.T) driver.Driver {
	db, err := sql.Open("sqlite", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return db.Driver()
}

// ctxWatch fails its test when a statement is handed a context that can
// end.
type ctxWatch struct{ t *testing.T }

func (w *ctxWatch) check(ctx context.Context, what string) {
	if ctx.Done() != nil {
		w.t.Errorf("%s reached the driver with a context that can end: a cancellation after its first step would leave it unfinalized, holding SQLite's lock", what)
	}
}

type watchConnector struct {
	dsn   string
	drv   driver.Driver
	watch *ctxWatch
}

func (c watchConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return watchConn{conn, c.watch}, nil
}

func (c watchConnector) Driver() driver.Driver { return c.drv }

// watchConn passes everything to modernc's connection, checking the
// contexts of what runs SQL.
type watchConn struct {
	c     driver.Conn
	watch *ctxWatch
}

func (c watchConn) Prepare(q string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), q)
}

func (c watchConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	st, err := c.c.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return watchStmt{st, q, c.watch}, nil
}

func (c watchConn) Close() error { return c.c.Close() }

func (c watchConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c watchConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.watch.check(ctx, "BEGIN")
	return c.c.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c watchConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.watch.check(ctx, fmt.Sprintf("Exec %.60q", q))
	return c.c.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c watchConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.watch.check(ctx, fmt.Sprintf("Query %.60q", q))
	return c.c.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c watchConn) ResetSession(ctx context.Context) error {
	return c.c.(driver.SessionResetter).ResetSession(ctx)
}

func (c watchConn) IsValid() bool { return c.c.(driver.Validator).IsValid() }

type watchStmt struct {
	s     driver.Stmt
	q     string
	watch *ctxWatch
}

func (s watchStmt) Close() error  { return s.s.Close() }
func (s watchStmt) NumInput() int { return s.s.NumInput() }

func (s watchStmt) Exec(args []driver.Value) (driver.Result, error) {
	return nil, fmt.Errorf("sqlitestore test: Exec without a context (%.60q)", s.q)
}

func (s watchStmt) Query(args []driver.Value) (driver.Rows, error) {
	return nil, fmt.Errorf("sqlitestore test: Query without a context (%.60q)", s.q)
}

func (s watchStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.watch.check(ctx, fmt.Sprintf("prepared Exec %.60q", s.q))
	return s.s.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s watchStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.watch.check(ctx, fmt.Sprintf("prepared Query %.60q", s.q))
	return s.s.(driver.StmtQueryContext).QueryContext(ctx, args)
}

package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqlCounter counts what one SQL client sends to its server, at two levels:
//
//   - statements: every statement the client library hands to the driver
//     (Exec, Query, a prepared statement's execution), plus pings, prepares
//     and transaction commands, each of which is a request of its own. It is
//     counted by a pgx QueryTracer on pgx pools and by a wrapping
//     database/sql connector (countingConnector) on database/sql pools;
//   - round trips: on the TCP connections the client dials through
//     countingDialer, each time it writes after having read (or writes
//     first), i.e. each request the server must answer before the client
//     goes on. A driver that sends one statement in two exchanges (lib/pq's
//     Parse/Describe, then Bind/Execute) makes two round trips of it.
//
// updates and pings count the statements that start with UPDATE and the
// pings, which is how peers' renewals are told apart.
type sqlCounter struct {
	stmts   atomic.Int64
	updates atomic.Int64
	pings   atomic.Int64
	trips   atomic.Int64
	network bool // round trips are counted (the client dials through countingDialer)

	fails callFailures // statements, prepares, transaction commands that returned an error
}

type sqlCounts struct{ stmts, updates, pings, trips int64 }

func (c *sqlCounter) snapshot() sqlCounts {
	return sqlCounts{c.stmts.Load(), c.updates.Load(), c.pings.Load(), c.trips.Load()}
}

func (a sqlCounts) sub(b sqlCounts) sqlCounts {
	return sqlCounts{a.stmts - b.stmts, a.updates - b.updates, a.pings - b.pings, a.trips - b.trips}
}

// statement counts one statement of text q.
func (c *sqlCounter) statement(q string) {
	c.stmts.Add(1)
	q = strings.TrimLeft(q, " \t\r\n(")
	if len(q) >= 6 && strings.EqualFold(q[:6], "UPDATE") {
		c.updates.Add(1)
	}
}

// failed counts err, unless it is nil or driver.ErrSkip (database/sql
// then tries another way), and keeps the first.
func (c *sqlCounter) failed(err error) {
	if err == nil || errors.Is(err, driver.ErrSkip) {
		return
	}
	c.fails.note(err)
}

func (c *sqlCounter) ping() {
	c.stmts.Add(1)
	c.pings.Add(1)
}

// --- pgx ---------------------------------------------------------------

// pgxTracer counts every Query, QueryRow and Exec of a pgx connection (and
// each batch and explicit prepare as one request).
type pgxTracer struct{ c *sqlCounter }

var (
	_ pgx.QueryTracer   = pgxTracer{}
	_ pgx.BatchTracer   = pgxTracer{}
	_ pgx.PrepareTracer = pgxTracer{}
)

func (t pgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.c.statement(d.SQL)
	return ctx
}

func (t pgxTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	t.c.failed(d.Err)
}

func (t pgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.c.stmts.Add(1)
	return ctx
}

func (pgxTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (t pgxTracer) TraceBatchEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	t.c.failed(d.Err)
}

func (t pgxTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	t.c.stmts.Add(1)
	return ctx
}

func (t pgxTracer) TracePrepareEnd(_ context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	t.c.failed(d.Err)
}

// --- network -----------------------------------------------------------

// countingDialer dials TCP and counts the round trips of every connection
// it makes into c.
type countingDialer struct {
	c *sqlCounter
	d net.Dialer
}

func newCountingDialer(c *sqlCounter) *countingDialer {
	c.network = true
	return &countingDialer{c: c, d: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}}
}

func (d *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := d.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &tripConn{Conn: nc, c: d.c}
	tc.state.Store(stateRead)
	return tc, nil
}

// Dial and DialTimeout make it a lib/pq Dialer.
func (d *countingDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d *countingDialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, addr)
}

const (
	stateRead int32 = iota
	stateWrite
)

// tripConn counts a round trip each time its client writes after reading.
type tripConn struct {
	net.Conn
	c     *sqlCounter
	state atomic.Int32
}

func (t *tripConn) Write(b []byte) (int, error) {
	if t.state.Swap(stateWrite) != stateWrite {
		t.c.trips.Add(1)
	}
	return t.Conn.Write(b)
}

func (t *tripConn) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	if n > 0 {
		t.state.Store(stateRead)
	}
	return n, err
}

// NetConn lets code that tunes the socket (pgstore sets TCP keepalive and
// TCP_USER_TIMEOUT on holders' connections) reach the *net.TCPConn.
func (t *tripConn) NetConn() net.Conn { return t.Conn }

// --- database/sql ------------------------------------------------------

// countingConnector wraps a database/sql connector so that every statement
// sent through the pool it opens is counted. Each optional interface of the
// driver's connection is passed through, or refused with driver.ErrSkip so
// that database/sql falls back exactly as it would without the wrapper.
type countingConnector struct {
	base driver.Connector
	c    *sqlCounter
}

// openCounted returns a *sql.DB over base whose statements c counts.
func openCounted(base driver.Connector, c *sqlCounter) *sql.DB {
	return sql.OpenDB(&countingConnector{base: base, c: c})
}

func (cc *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := cc.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: cc.c}, nil
}

func (cc *countingConnector) Driver() driver.Driver { return cc.base.Driver() }

// dsnConnector is a connector for a driver that only has Open(dsn).
type dsnConnector struct {
	dsn string
	drv driver.Driver
}

func (d dsnConnector) Connect(context.Context) (driver.Conn, error) { return d.drv.Open(d.dsn) }
func (d dsnConnector) Driver() driver.Driver                        { return d.drv }

type countingConn struct {
	driver.Conn
	c *sqlCounter
}

var (
	_ driver.ConnPrepareContext = (*countingConn)(nil)
	_ driver.ConnBeginTx        = (*countingConn)(nil)
	_ driver.ExecerContext      = (*countingConn)(nil)
	_ driver.QueryerContext     = (*countingConn)(nil)
	_ driver.Pinger             = (*countingConn)(nil)
	_ driver.SessionResetter    = (*countingConn)(nil)
	_ driver.Validator          = (*countingConn)(nil)
	_ driver.NamedValueChecker  = (*countingConn)(nil)
)

func (cn *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var (
		st  driver.Stmt
		err error
	)
	if p, ok := cn.Conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = cn.Conn.Prepare(query)
	}
	if err != nil {
		cn.c.failed(err)
		return nil, err
	}
	cn.c.stmts.Add(1) // the prepare itself
	return &countingStmt{Stmt: st, c: cn.c, query: query, conn: cn.Conn}, nil
}

func (cn *countingConn) Prepare(query string) (driver.Stmt, error) {
	return cn.PrepareContext(context.Background(), query)
}

func (cn *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := cn.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 the fallback database/sql itself uses for such a driver
		tx, err = cn.Conn.Begin()
	}
	if err != nil {
		cn.c.failed(err)
		return nil, err
	}
	cn.c.stmts.Add(1)
	return countingTx{Tx: tx, c: cn.c}, nil
}

func (cn *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := cn.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := e.ExecContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		cn.c.statement(query)
		cn.c.failed(err)
	}
	return res, err
}

func (cn *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := cn.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := q.QueryContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		cn.c.statement(query)
		cn.c.failed(err)
	}
	return rows, err
}

func (cn *countingConn) Ping(ctx context.Context) error {
	p, ok := cn.Conn.(driver.Pinger)
	if !ok {
		return nil // what database/sql does for a driver without Pinger
	}
	cn.c.ping()
	return p.Ping(ctx)
}

func (cn *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := cn.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (cn *countingConn) IsValid() bool {
	if v, ok := cn.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (cn *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := cn.Conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type countingTx struct {
	driver.Tx
	c *sqlCounter
}

func (t countingTx) Commit() error {
	t.c.stmts.Add(1)
	err := t.Tx.Commit()
	t.c.failed(err)
	return err
}

func (t countingTx) Rollback() error {
	t.c.stmts.Add(1)
	return t.Tx.Rollback()
}

type countingStmt struct {
	driver.Stmt
	c     *sqlCounter
	query string
	conn  driver.Conn // for its NamedValueChecker, which database/sql would use
}

var (
	_ driver.StmtExecContext   = (*countingStmt)(nil)
	_ driver.StmtQueryContext  = (*countingStmt)(nil)
	_ driver.NamedValueChecker = (*countingStmt)(nil)
)

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.statement(s.query)
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		res, err := e.ExecContext(ctx, args)
		s.c.failed(err)
		return res, err
	}
	vs, err := namedToValues(args)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 the fallback database/sql itself uses for such a driver
	return s.Stmt.Exec(vs)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.statement(s.query)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		rows, err := q.QueryContext(ctx, args)
		s.c.failed(err)
		return rows, err
	}
	vs, err := namedToValues(args)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 the fallback database/sql itself uses for such a driver
	return s.Stmt.Query(vs)
}

func (s *countingStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	if c, ok := s.conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func namedToValues(args []driver.NamedValue) ([]driver.Value, error) {
	vs := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("lockbench: the driver does not support named parameters")
		}
		vs[i] = a.Value
	}
	return vs, nil
}

package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
	_ "modernc.org/sqlite" // the "sqlite" driver, as sqlitestore uses it

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/mysqlstore"
	"github.com/tasklock/tasklock/pgstore"
	"github.com/tasklock/tasklock/sqlitestore"
)

// storeKind names one SQL store of the run.
type storeKind string

const (
	kindPG     storeKind = "postgres"
	kindMySQL  storeKind = "mysql"
	kindSQLite storeKind = "sqlite"
)

// sqlKinds in the order they run. MySQL comes last: go-mysql-lock v0.0.5
// leaves a goroutine behind per Obtain (tens of thousands after P1-sql),
// which every later garbage collection has to scan.
var sqlKinds = []storeKind{kindPG, kindSQLite, kindMySQL}

// sqlPoolSize is the connection pool every P1-sql contender gets: one
// connection per goroutine (pgxpool's default would be 4 on this machine,
// database/sql's keeps only 2 idle and would reconnect all the time).
const sqlPoolSize = 16

// sqlEnv is one SQL store of the run: its server (nil for SQLite, which runs
// inside lockbench) and how to reach it.
type sqlEnv struct {
	kind    storeKind
	title   string // "PostgreSQL", "MariaDB", "SQLite"
	version string
	srv     *sqlServer
	path    string // SQLite: the database file
	dir     string // SQLite: its temporary directory
	err     error  // the store could not be set up: its sections are not run
}

// cpu returns the server's CPU time; SQLite has no server (its work is in
// lockbench's own CPU time), which counts as zero.
func (e *sqlEnv) cpu() (time.Duration, bool) {
	if e.srv == nil {
		return 0, true
	}
	return e.srv.cpu()
}

func (e *sqlEnv) close() {
	if e.srv != nil {
		e.srv.stop()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// startSQL starts the servers of the kinds wanted, in parallel. A store
// that cannot be started is returned with err set.
func startSQL(ctx context.Context, kinds []storeKind, started func(func())) []*sqlEnv {
	envs := make([]*sqlEnv, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		e := &sqlEnv{kind: k}
		envs[i] = e
		reg := func(s *sqlServer) { started(s.stop) }
		switch k {
		case kindPG:
			e.title = "PostgreSQL"
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.srv, e.err = startPostgres(ctx, reg)
				if e.err == nil {
					e.version = e.srv.version
				}
			}()
		case kindMySQL:
			e.title = "MariaDB"
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.srv, e.err = startMariaDB(ctx, reg)
				if e.err == nil {
					e.version = e.srv.version
				}
			}()
		case kindSQLite:
			e.title = "SQLite"
			e.err = e.openSQLite(ctx)
			started(e.close)
		}
	}
	wg.Wait()
	return envs
}

func (e *sqlEnv) openSQLite(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "lockbench-sqlite-")
	if err != nil {
		return fmt.Errorf("lockbench: %w", err)
	}
	e.dir, e.path = dir, filepath.Join(dir, "lockbench.db")
	db := sqliteDB(e, &sqlCounter{}, 1)
	defer db.Close()
	return db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&e.version)
}

// --- pools -------------------------------------------------------------

// pgPool returns a pgx pool of at most maxConns connections to the
// server's database "postgres", whose statements and round trips c counts.
func pgPool(ctx context.Context, e *sqlEnv, c *sqlCounter, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(pgURL(e.srv.addr))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	cfg.ConnConfig.Tracer = pgxTracer{c}
	cfg.ConnConfig.DialFunc = newCountingDialer(c).DialContext
	return pgxpool.NewWithConfig(ctx, cfg)
}

// libpqDB returns a database/sql pool over lib/pq (the driver pglock is
// written for), counted by c.
func libpqDB(e *sqlEnv, c *sqlCounter, maxConns int) (*sql.DB, error) {
	conn, err := pq.NewConnector(pgURL(e.srv.addr))
	if err != nil {
		return nil, err
	}
	conn.Dialer(newCountingDialer(c))
	db := openCounted(conn, c)
	setPool(db, maxConns)
	return db, nil
}

// mysqlDB returns a go-sql-driver/mysql pool on the database "lockbench",
// counted by c; maxConns 0 means unlimited.
func mysqlDB(e *sqlEnv, c *sqlCounter, maxConns int) (*sql.DB, error) {
	cfg := mysqlConfig(e.srv.addr, mysqlDatabase)
	cfg.Net = registerCountingNet(c)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := openCounted(conn, c)
	setPool(db, maxConns)
	return db, nil
}

var netSeq struct {
	sync.Mutex
	n int
}

// registerCountingNet registers a go-sql-driver network name that dials
// TCP through a countingDialer of c.
func registerCountingNet(c *sqlCounter) string {
	netSeq.Lock()
	netSeq.n++
	name := fmt.Sprintf("lockbench%d", netSeq.n)
	netSeq.Unlock()
	d := newCountingDialer(c)
	mysql.RegisterDialContext(name, func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
	return name
}

// sqliteDB returns a pool on the run's SQLite file with the DSN
// sqlitestore.Open uses (busy_timeout 5 s, WAL, synchronous NORMAL,
// foreign keys, BEGIN IMMEDIATE), counted by c.
func sqliteDB(e *sqlEnv, c *sqlCounter, maxConns int) *sql.DB {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqlitestore.DefaultBusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	u := url.URL{Path: filepath.Clean(e.path)}
	db := openCounted(dsnConnector{dsn: "file:" + u.EscapedPath() + "?" + q.Encode(), drv: sqliteDriver()}, c)
	setPool(db, maxConns)
	return db
}

var sqliteDriverOnce = sync.OnceValue(func() driver.Driver {
	db, err := sql.Open("sqlite", "")
	if err != nil {
		panic(err) // the driver is registered by the import above
	}
	defer db.Close()
	return db.Driver()
})

func sqliteDriver() driver.Driver { return sqliteDriverOnce() }

// setPool keeps up to n connections open and idle (n 0: unlimited open,
// sqlPoolSize idle).
func setPool(db *sql.DB, n int) {
	db.SetMaxOpenConns(n)
	if n == 0 {
		n = sqlPoolSize
	}
	db.SetMaxIdleConns(n)
}

// warmPool opens n connections of db at once, so that they exist before a
// measurement starts.
func warmPool(ctx context.Context, n int, ping func(context.Context) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ping(ctx); err != nil {
				mu.Lock()
				first = errors.Join(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// warmQueries is how many queries warmSQL and warmPgx run on each
// connection: a pool in steady state, as an application's is, so that what
// a connection allocates and keeps on its own (pgxpool keeps the last 64
// rows of each connection, go-sql-driver grows its buffer) is the caller's
// before any baseline.
const warmQueries = 100

// warmSQL opens n connections of db, runs warmQueries queries on each, and
// keeps them in the pool.
func warmSQL(ctx context.Context, db *sql.DB, n int) error {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	var mu sync.Mutex
	return warmPool(ctx, n, func(ctx context.Context) error {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		var one int
		for range warmQueries {
			if err := c.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				return err
			}
		}
		return nil
	})
}

// warmPgx opens n connections of pool and then runs warmQueries queries
// per connection through the pool from n goroutines, as an application's
// own queries would (pgxpool keeps up to 128 rows of each connection's
// recent queries), so that the pool is in steady state before a baseline.
func warmPgx(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	var mu sync.Mutex
	err := warmPool(ctx, n, func(ctx context.Context) error {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c.Ping(ctx)
	})
	for _, c := range conns {
		c.Release()
	}
	if err != nil {
		return err
	}
	return warmPool(ctx, n, func(ctx context.Context) error {
		var one int
		for range warmQueries {
			if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				return err
			}
		}
		return nil
	})
}

// --- tasklock ----------------------------------------------------------

// tasklockSQL is a Locker over one of the SQL stores, on a pool of its own.
type tasklockSQL struct {
	lk      *tasklock.Locker
	closeFn func()
	warm    func(ctx context.Context, n int) error
}

func (t *tasklockSQL) close() {
	_ = t.lk.Close()
	t.closeFn()
}

// openTasklockSQL opens a Locker (with cfg) over e's store in the given
// mode ("lease" or "connection"; SQLite has only lease), on a pool of at
// most maxConns connections (0: unlimited) counted by c. Each mode has a
// table of its own.
func openTasklockSQL(ctx context.Context, e *sqlEnv, mode string, c *sqlCounter, maxConns int, cfg *tasklock.Config) (*tasklockSQL, error) {
	table := "tasklock_locks"
	if mode == "connection" {
		table = "tasklock_conn_locks"
	}
	t := &tasklockSQL{}
	switch e.kind {
	case kindPG:
		if maxConns == 0 {
			maxConns = sqlPoolSize
		}
		pool, err := pgPool(ctx, e, c, maxConns)
		if err != nil {
			return nil, err
		}
		s, err := pgstore.New(pool, &pgstore.Options{Table: table, Migrate: true, Mode: pgstore.Mode(mode)})
		if err != nil {
			pool.Close()
			return nil, err
		}
		if t.lk, err = tasklock.New(s, cfg); err != nil {
			pool.Close()
			return nil, err
		}
		t.closeFn = pool.Close
		t.warm = func(ctx context.Context, n int) error { return warmPgx(ctx, pool, n) }
	case kindMySQL:
		db, err := mysqlDB(e, c, maxConns)
		if err != nil {
			return nil, err
		}
		s, err := mysqlstore.New(db, &mysqlstore.Options{Table: table, Migrate: true, Mode: mysqlstore.Mode(mode)})
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		if t.lk, err = tasklock.New(s, cfg); err != nil {
			_ = db.Close()
			return nil, err
		}
		t.closeFn = func() {
			_ = s.Close()
			_ = db.Close()
		}
		t.warm = func(ctx context.Context, n int) error { return warmSQL(ctx, db, n) }
	case kindSQLite:
		db := sqliteDB(e, c, maxConns)
		s, err := sqlitestore.New(db, &sqlitestore.Options{Table: table, Migrate: true})
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		if t.lk, err = tasklock.New(s, cfg); err != nil {
			_ = db.Close()
			return nil, err
		}
		t.closeFn = func() { _ = db.Close() }
		t.warm = func(ctx context.Context, n int) error { return warmSQL(ctx, db, n) }
	}
	return t, nil
}

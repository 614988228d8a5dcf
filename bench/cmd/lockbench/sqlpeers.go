package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"cirello.io/pglock"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	gomysqllock "github.com/sanketplus/go-mysql-lock"
	"modernc.org/sqlite"
)

// execer runs one statement and returns the rows it affected: the floor and
// ShedLock need nothing else.
type execer interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
}

type pgxExec struct{ p *pgxpool.Pool }

func (x pgxExec) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := x.p.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

type dbExec struct{ db *sql.DB }

func (x dbExec) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := x.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// dialect holds the statements of the raw floor and of ShedLock for one
// store. Every time is the database's clock.
type dialect struct {
	// The raw upsert floor: the least a lease lock in a table does. One
	// statement grants the key when it is free or its lease expired (args:
	// key, token, ttl µs), one token-checked statement ends the lease
	// (args: key, token). The row stays, as tasklock's does.
	floorDDL, floorObtain, floorRelease string
	floorGranted                        func(affected int64) bool

	// ShedLock's JdbcTemplateLockProvider with usingDbTime(): its table as
	// its documentation creates it, and its statements.
	shedDDL    string
	shedInsert string // name, lock_until = now + ttl, locked_at = now, locked_by
	shedUpdate string // args: ttl, locked_by, name: takes an expired lock
	shedUnlock string // args: name: lock_until = now (lockAtLeastFor 0)
	shedTTL    func(time.Duration) any
	isDup      func(error) bool
}

var dialects = map[storeKind]*dialect{
	kindPG: {
		floorDDL: `CREATE TABLE IF NOT EXISTS lockbench_floor (key text COLLATE "C" PRIMARY KEY, token text, expires_at timestamptz NOT NULL)`,
		floorObtain: `INSERT INTO lockbench_floor AS f (key, token, expires_at) VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at WHERE f.expires_at <= now()`,
		floorRelease: `UPDATE lockbench_floor SET token = NULL, expires_at = now() WHERE key = $1 AND token = $2`,
		floorGranted: func(n int64) bool { return n == 1 },

		shedDDL: `CREATE TABLE IF NOT EXISTS shedlock (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,
locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))`,
		shedInsert: `INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
VALUES ($1, timezone('utc', CURRENT_TIMESTAMP) + $2::interval, timezone('utc', CURRENT_TIMESTAMP), $3)`,
		shedUpdate: `UPDATE shedlock SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + $1::interval,
locked_at = timezone('utc', CURRENT_TIMESTAMP), locked_by = $2
WHERE name = $3 AND lock_until <= timezone('utc', CURRENT_TIMESTAMP)`,
		shedUnlock: `UPDATE shedlock SET lock_until = timezone('utc', CURRENT_TIMESTAMP) WHERE name = $1`,
		shedTTL:    func(d time.Duration) any { return d },
		isDup: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505"
		},
	},
	kindMySQL: {
		floorDDL: `CREATE TABLE IF NOT EXISTS lockbench_floor (k VARBINARY(512) NOT NULL PRIMARY KEY, token VARBINARY(128) NULL,
expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB`,
		// MySQL has no WHERE on ON DUPLICATE KEY UPDATE: each assignment
		// keeps its value unless the lease expired (both read the old
		// expires_at, which is assigned last).
		floorObtain: `INSERT INTO lockbench_floor (k, token, expires_at) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(token), token),
expires_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(expires_at), expires_at)`,
		floorRelease: `UPDATE lockbench_floor SET token = NULL, expires_at = UTC_TIMESTAMP(6) WHERE k = ? AND token = ?`,
		floorGranted: func(n int64) bool { return n == 1 || n == 2 }, // inserted, or updated

		shedDDL: `CREATE TABLE IF NOT EXISTS shedlock (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3) NOT NULL,
locked_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))`,
		shedInsert: `INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
VALUES (?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), UTC_TIMESTAMP(3), ?)`,
		shedUpdate: `UPDATE shedlock SET lock_until = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), locked_at = UTC_TIMESTAMP(3), locked_by = ?
WHERE name = ? AND lock_until <= UTC_TIMESTAMP(3)`,
		shedUnlock: `UPDATE shedlock SET lock_until = UTC_TIMESTAMP(3) WHERE name = ?`,
		shedTTL:    func(d time.Duration) any { return d.Microseconds() },
		isDup: func(err error) bool {
			var me *mysql.MySQLError
			return errors.As(err, &me) && me.Number == 1062
		},
	},
	kindSQLite: {
		floorDDL: `CREATE TABLE IF NOT EXISTS lockbench_floor (k TEXT PRIMARY KEY, token TEXT, expires_at INTEGER NOT NULL)`,
		floorObtain: `INSERT INTO lockbench_floor AS f (k, token, expires_at) VALUES (?, ?, ` + sqliteNowUS + ` + ?)
ON CONFLICT (k) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at WHERE f.expires_at <= ` + sqliteNowUS,
		floorRelease: `UPDATE lockbench_floor SET token = NULL, expires_at = ` + sqliteNowUS + ` WHERE k = ? AND token = ?`,
		floorGranted: func(n int64) bool { return n == 1 },

		shedDDL: `CREATE TABLE IF NOT EXISTS shedlock (name VARCHAR(64) NOT NULL PRIMARY KEY, lock_until TEXT NOT NULL,
locked_at TEXT NOT NULL, locked_by VARCHAR(255) NOT NULL)`,
		shedInsert: `INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
VALUES (?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), strftime('%Y-%m-%d %H:%M:%f', 'now'), ?)`,
		shedUpdate: `UPDATE shedlock SET lock_until = strftime('%Y-%m-%d %H:%M:%f', 'now', ?), locked_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), locked_by = ?
WHERE name = ? AND lock_until <= strftime('%Y-%m-%d %H:%M:%f', 'now')`,
		shedUnlock: `UPDATE shedlock SET lock_until = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE name = ?`,
		shedTTL:    func(d time.Duration) any { return fmt.Sprintf("+%.3f seconds", d.Seconds()) },
		isDup: func(err error) bool {
			var se *sqlite.Error
			return errors.As(err, &se) && se.Code()&0xff == 19 // SQLITE_CONSTRAINT
		},
	},
}

// sqliteNowUS is SQLite's clock in integer unix microseconds, as
// sqlitestore computes it.
const sqliteNowUS = "(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)"

// sqlHandle is a pool of one contender: an execer for the floor and
// ShedLock, and what to close.
type sqlHandle struct {
	x     execer
	warm  func(ctx context.Context, n int) error
	close func()
}

// openHandle opens a pool of maxConns connections on e's store, counted by
// c: pgx for PostgreSQL (as tasklock's pgstore uses), database/sql for the
// others.
func openHandle(ctx context.Context, e *sqlEnv, c *sqlCounter, maxConns int) (*sqlHandle, error) {
	switch e.kind {
	case kindPG:
		pool, err := pgPool(ctx, e, c, maxConns)
		if err != nil {
			return nil, err
		}
		return &sqlHandle{x: pgxExec{pool}, close: pool.Close, warm: func(ctx context.Context, n int) error { return warmPgx(ctx, pool, n) }}, nil
	case kindMySQL:
		db, err := mysqlDB(e, c, maxConns)
		if err != nil {
			return nil, err
		}
		return &sqlHandle{x: dbExec{db}, close: func() { _ = db.Close() }, warm: func(ctx context.Context, n int) error { return warmSQL(ctx, db, n) }}, nil
	default:
		db := sqliteDB(e, c, maxConns)
		return &sqlHandle{x: dbExec{db}, close: func() { _ = db.Close() }, warm: func(ctx context.Context, n int) error { return warmSQL(ctx, db, n) }}, nil
	}
}

// --- the raw upsert floor ----------------------------------------------

func openSQLFloor(ctx context.Context, e *sqlEnv, c *sqlCounter) (*instance, error) {
	h, err := openHandle(ctx, e, c, sqlPoolSize)
	if err != nil {
		return nil, err
	}
	d := dialects[e.kind]
	if _, err := h.x.exec(ctx, d.floorDDL); err != nil {
		h.close()
		return nil, fmt.Errorf("lockbench: create the floor's table: %w", err)
	}
	ttl := benchTTL.Microseconds()
	return &instance{
		pair: func(key string) pairFunc {
			return func(ctx context.Context) error {
				token := rand.Text()
				n, err := h.x.exec(ctx, d.floorObtain, key, token, ttl)
				if err != nil {
					return err
				}
				if !d.floorGranted(n) {
					return errNotObtained
				}
				if n, err = h.x.exec(ctx, d.floorRelease, key, token); err != nil {
					return err
				}
				if n != 1 {
					return fmt.Errorf("lockbench: floor: release of %q changed %d rows", key, n)
				}
				return nil
			}
		},
		close:   h.close,
		counter: c,
	}, nil
}

// --- ShedLock ----------------------------------------------------------

// shedLock is ShedLock's StorageBasedLockProvider over its
// JdbcTemplateStorageAccessor, with usingDbTime(), written out in Go:
//
//   - lock: unless the lock's name is in the registry of records this
//     process knows exist, INSERT the record (lock_until = now + ttl); if
//     that succeeds the lock is held, and either way the name goes into the
//     registry. Then (a record existed) UPDATE ... SET lock_until = now +
//     ttl, locked_at = now, locked_by = ? WHERE name = ? AND lock_until <=
//     now: one row changed means the lock is held;
//   - unlock: UPDATE ... SET lock_until = now WHERE name = ? (lockAtLeastFor
//     zero);
//   - extend (KeepAliveLockProvider): one UPDATE ... SET lock_until = now +
//     ttl WHERE name = ? AND locked_by = ? AND lock_until > now per lock.
//
// So in steady state a lock+unlock is two UPDATEs; the INSERT (and its
// duplicate-key error) happens once per name and process.
type shedLock struct {
	x        execer
	d        *dialect
	lockedBy string
	registry sync.Map // names whose record is known to exist
}

func (s *shedLock) lock(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	if _, known := s.registry.Load(name); !known {
		_, err := s.x.exec(ctx, s.d.shedInsert, name, s.d.shedTTL(ttl), s.lockedBy)
		if err == nil {
			s.registry.Store(name, true)
			return true, nil
		}
		if !s.d.isDup(err) {
			return false, err
		}
		s.registry.Store(name, true)
	}
	n, err := s.x.exec(ctx, s.d.shedUpdate, s.d.shedTTL(ttl), s.lockedBy, name)
	return n == 1, err
}

func (s *shedLock) unlock(ctx context.Context, name string) error {
	n, err := s.x.exec(ctx, s.d.shedUnlock, name)
	if err == nil && n != 1 {
		err = fmt.Errorf("lockbench: ShedLock: unlock of %q changed %d rows", name, n)
	}
	return err
}

func openSQLShedLock(ctx context.Context, e *sqlEnv, c *sqlCounter) (*instance, error) {
	h, err := openHandle(ctx, e, c, sqlPoolSize)
	if err != nil {
		return nil, err
	}
	d := dialects[e.kind]
	if _, err := h.x.exec(ctx, d.shedDDL); err != nil {
		h.close()
		return nil, fmt.Errorf("lockbench: create ShedLock's table: %w", err)
	}
	host, _ := os.Hostname()
	s := &shedLock{x: h.x, d: d, lockedBy: host}
	return &instance{
		pair: func(key string) pairFunc {
			return func(ctx context.Context) error {
				ok, err := s.lock(ctx, key, benchTTL)
				if err != nil {
					return err
				}
				if !ok {
					return errNotObtained
				}
				return s.unlock(ctx, key)
			}
		},
		close:   h.close,
		counter: c,
	}, nil
}

// --- tasklock ----------------------------------------------------------

// openSQLTasklock shares one Locker (default Config, pool of 16) between
// all goroutines and obtains with default ObtainOptions: TTL 10 s, renewal
// on.
func openSQLTasklock(mode string) func(ctx context.Context, e *sqlEnv, c *sqlCounter) (*instance, error) {
	return func(ctx context.Context, e *sqlEnv, c *sqlCounter) (*instance, error) {
		t, err := openTasklockSQL(ctx, e, mode, c, sqlPoolSize, nil)
		if err != nil {
			return nil, err
		}
		return &instance{
			pair: func(key string) pairFunc {
				return func(ctx context.Context) error {
					l, err := t.lk.TryObtain(ctx, key, nil)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
			},
			close:   t.close,
			counter: c,
		}, nil
	}
}

// --- pglock ------------------------------------------------------------

// pglockHeartbeat is pglock's heartbeat for a lease of ttl: a third of it,
// as tasklock renews (pglock's default is a quarter: 5 s of 20 s).
func pglockHeartbeat(ttl time.Duration) time.Duration { return ttl / 3 }

// openPglockClient opens a pglock Client with lease ttl on a lib/pq pool of
// maxConns counted by c, and creates its table. pglock.New accepts only a
// *sql.DB whose driver is lib/pq's; the counting wrapper hides that, hence
// UnsafeNew, which is the same client without the check.
func openPglockClient(ctx context.Context, e *sqlEnv, c *sqlCounter, maxConns int, ttl time.Duration) (*pglock.Client, *sql.DB, error) {
	db, err := libpqDB(e, c, maxConns)
	if err != nil {
		return nil, nil, err
	}
	cl, err := pglock.UnsafeNew(db, pglock.WithCustomTable("pglock_locks"), pglock.WithLeaseDuration(ttl), pglock.WithHeartbeatFrequency(pglockHeartbeat(ttl)))
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	if err := cl.TryCreateTable(); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	if err := warmSQL(ctx, db, min(maxConns, sqlPoolSize)); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return cl, db, nil
}

// openPglock: AcquireContext with FailIfLocked (one attempt, like
// TryObtain), heartbeat on, then ReleaseContext (which deletes the row, its
// default).
func openPglock(ctx context.Context, e *sqlEnv, c *sqlCounter) (*instance, error) {
	cl, db, err := openPglockClient(ctx, e, c, sqlPoolSize, benchTTL)
	if err != nil {
		return nil, err
	}
	return &instance{
		pair: func(key string) pairFunc {
			return func(ctx context.Context) error {
				l, err := cl.AcquireContext(ctx, key, pglock.FailIfLocked())
				if err != nil {
					return err
				}
				return cl.ReleaseContext(ctx, l)
			}
		},
		close:   func() { _ = db.Close() },
		counter: c,
	}, nil
}

// --- go-mysql-lock -----------------------------------------------------

// openGoMySQLLock: ObtainTimeoutContext(ctx, key, 0), i.e. GET_LOCK(key, 0)
// on a connection it keeps until Release (DO RELEASE_LOCK, and the
// connection goes back to the pool), with its default refresh (a ping of
// the connection every second by a goroutine per lock).
func openGoMySQLLock(ctx context.Context, e *sqlEnv, c *sqlCounter) (*instance, error) {
	db, err := mysqlDB(e, c, sqlPoolSize)
	if err != nil {
		return nil, err
	}
	if err := warmSQL(ctx, db, sqlPoolSize); err != nil {
		_ = db.Close()
		return nil, err
	}
	lk := gomysqllock.NewMysqlLocker(db)
	return &instance{
		pair: func(key string) pairFunc {
			return func(ctx context.Context) error {
				l, err := lk.ObtainTimeoutContext(ctx, key, 0)
				if err != nil {
					return err
				}
				return l.Release()
			}
		},
		close:   func() { _ = db.Close() },
		counter: c,
	}, nil
}

package sqlitestore

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"text/template"
	"time"

	"github.com/tasklock/tasklock/internal/sqlmigrate"
	"github.com/tasklock/tasklock/ledger"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migration is one embedded migration file, NNNN_name.up.sql: a
// text/template over migrationData.
type migration struct {
	version int
	name    string
	sql     *template.Template
}

// migrationData is what a migration's template sees.
type migrationData struct {
	Table string // the quoted lock table
	table string
}

// Ident returns the quoted name made of the lock table's name and suffix,
// for indexes and the like: {{.Ident "_expires_idx"}}.
func (d migrationData) Ident(suffix string) string { return `"` + d.table + suffix + `"` }

// Minute returns the SQL of the minute of tick, unix µs, floored: the key
// of the run rollups (migration 0007).
func (migrationData) Minute(tick string) string {
	return "(" + tick + " - ((" + tick + " % 60000000) + 60000000) % 60000000)"
}

// Late returns the SQL of the lateness bucket (ledger.LatenessBounds) of a
// record with columns started_at, tick and attempt; -1 when it has none.
func (migrationData) Late(startedAt, tick, attempt string) string {
	return "(CASE WHEN " + startedAt + " IS NULL OR " + attempt + " > 1 THEN -1 ELSE " +
		ledger.LatenessSQL("("+startedAt+" - "+tick+")") + " END)"
}

// id returns m's version and name, for sqlmigrate.
func (m migration) id() (int, string) { return m.version, m.name }

// loadMigrations reads NNNN_name.up.sql files from dir in fsys, in version
// order, and parses each as a template.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	return sqlmigrate.LoadTemplates(fsys, dir, ".up.sql", "sqlitestore", func(t sqlmigrate.Template) migration {
		return migration{version: t.Version, name: t.Name, sql: t.SQL}
	})
}

// migrations are the embedded migrations, in version order.
var migrations = sqlmigrate.Must(loadMigrations(migrationFiles, "migrations"))

// render returns m's SQL for the lock table of c.
func (m migration) render(c config) (string, error) {
	var b strings.Builder
	if err := m.sql.Execute(&b, migrationData{Table: c.quoted, table: c.table}); err != nil {
		return "", fmt.Errorf("sqlitestore: migration %04d_%s: %w", m.version, m.name, err)
	}
	return b.String(), nil
}

// MigrationState is one migration as MigrationStatus reports it.
type MigrationState struct {
	Version   int       // the number the file name starts with: 1 for 0001_create_locks.up.sql
	Name      string    // the rest of the file name: "create_locks"; "" for a version this library does not know
	Applied   bool      // recorded in the version table
	AppliedAt time.Time // when it was applied, by SQLite's clock; zero when not applied
}

// Migrate applies the embedded migrations that db lacks, in version order,
// for the lock table named by opts (nil: defaults), and records each in the
// version table Options.Table+"_migrations". It first reads the version
// table, and when nothing is pending it returns without taking SQLite's
// write lock, so starting a Store on a file that others are busy writing
// does not queue for the lock. Otherwise all of it runs in one BEGIN
// IMMEDIATE transaction on one connection, which reads the versions again,
// so processes that migrate the same file at once apply each migration
// exactly once, and a failed migration leaves nothing behind. When BEGIN
// IMMEDIATE waits out busy_timeout (other connections kept the write lock
// all that time) it tries again until ctx ends, and then fails with an
// error wrapping ErrBusy and ctx's error. Migrate is
// what `tasklock migrate up` runs; applying it when nothing is pending
// changes nothing. ctx is honoured between statements, never during one
// (see "Waiting for the write lock" in the package documentation).
func Migrate(ctx context.Context, db *sql.DB, opts *Options) error {
	if db == nil {
		return badOption("db", "", "nil")
	}
	c, err := resolve(opts)
	if err != nil {
		return err
	}
	return migrate(ctx, db, c)
}

func migrate(ctx context.Context, db *sql.DB, c config) (err error) {
	// Read first: a migrated file needs no write lock.
	states, err := status(ctx, db, c)
	if err != nil {
		return err
	}
	if !pending(states) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return wrap(ctx, "migrate", c.table, err)
	}
	octx, ctx := ctx, stmtCtx(ctx)
	conn, err := db.Conn(ctx)
	if err != nil {
		return openError("migrate", "", err)
	}
	defer conn.Close()
	// BEGIN IMMEDIATE whatever the DSN's _txlock says: the version check
	// and the writes must not be split by another migrating process.
	if err := beginMigration(octx, conn, c); err != nil {
		return err
	}
	defer func() {
		if err == nil {
			return
		}
		// Roll back even when ctx has ended; if that fails too, drop the
		// connection rather than return it to the pool inside a transaction.
		if _, rerr := conn.ExecContext(ctx, "ROLLBACK"); rerr != nil {
			_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		}
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+c.versions+` (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
)`); err != nil {
		return wrap(ctx, "migrate", c.table, err)
	}
	applied, err := appliedVersions(ctx, conn, c)
	if err != nil {
		return err
	}
	for _, m := range sqlmigrate.Pending(migrations, migration.id, applied) {
		if err := octx.Err(); err != nil {
			return wrap(octx, "migrate", c.table, err)
		}
		q, err := m.render(c)
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return wrap(ctx, "migrate", fmt.Sprintf("%s: %04d_%s", c.table, m.version, m.name), err)
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO `+c.versions+` (version, name, applied_at) VALUES (?1, ?2, `+nowUS+`)`,
			m.version, m.name); err != nil {
			return wrap(ctx, "migrate", c.table, err)
		}
	}
	if err := octx.Err(); err != nil {
		return wrap(octx, "migrate", c.table, err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return wrap(ctx, "migrate", c.table, err)
	}
	return nil
}

// beginMigration starts the migration's write transaction on conn. BEGIN
// IMMEDIATE waits for the write lock up to busy_timeout; when it still
// answers busy, the lock went to other writers all that time (SQLite's
// busy handler polls, so a waiter has no place in a queue: processes
// starting together on one file, each migrating and then writing, can
// keep it from one waiter for a whole busy_timeout on a loaded machine).
// It tries again until ctx ends, and then fails naming the cause.
func beginMigration(ctx context.Context, conn *sql.Conn, c config) error {
	start := time.Now()
	for tries := 1; ; tries++ {
		_, err := conn.ExecContext(stmtCtx(ctx), "BEGIN IMMEDIATE")
		if err == nil {
			return nil
		}
		if !isBusy(err) {
			return wrap(ctx, "migrate", c.table, err)
		}
		t := time.NewTimer(migrateRetryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sqlitestore: migrate %q: other connections kept SQLite's write lock for %v (%d tries of busy_timeout each) until %w; "+
				"a process holding a write transaction open, or many writing without pause, keeps a migration out: %w: %w",
				c.table, time.Since(start).Round(time.Millisecond), tries, ctx.Err(), ErrBusy, err)
		case <-t.C:
		}
	}
}

// migrateRetryDelay is the pause between a migration's tries to take the
// write lock.
const migrateRetryDelay = 10 * time.Millisecond

// pending reports whether any of states is not applied.
func pending(states []MigrationState) bool {
	for _, s := range states {
		if !s.Applied {
			return true
		}
	}
	return false
}

// queryer is a *sql.DB or a *sql.Conn.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// appliedVersions reads the version table: version → when applied. It
// reads no names: a version this library does not know is listed without
// one.
func appliedVersions(ctx context.Context, q queryer, c config) (map[int]sqlmigrate.Applied, error) {
	rows, err := q.QueryContext(ctx, `SELECT version, applied_at FROM `+c.versions)
	if err != nil {
		return nil, wrap(ctx, "read migrations", c.table, err)
	}
	defer rows.Close()
	applied := make(map[int]sqlmigrate.Applied)
	for rows.Next() {
		var v int
		var at int64
		if err := rows.Scan(&v, &at); err != nil {
			return nil, wrap(ctx, "read migrations", c.table, err)
		}
		applied[v] = sqlmigrate.Applied{At: time.UnixMicro(at)}
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "read migrations", c.table, err)
	}
	return applied, nil
}

// MigrationStatus returns every embedded migration, in version order, with
// whether and when db has it, for the lock table named by opts (nil:
// defaults). It only reads; it is what `tasklock migrate status` shows.
func MigrationStatus(ctx context.Context, db *sql.DB, opts *Options) ([]MigrationState, error) {
	if db == nil {
		return nil, badOption("db", "", "nil")
	}
	c, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	return status(ctx, db, c)
}

func status(ctx context.Context, db *sql.DB, c config) ([]MigrationState, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "read migrations", c.table, err)
	}
	ctx = stmtCtx(ctx)
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1`,
		c.table+"_migrations").Scan(&n)
	if err != nil {
		return nil, openError("read migrations", "", err)
	}
	var applied map[int]sqlmigrate.Applied
	if n > 0 {
		if applied, err = appliedVersions(ctx, db, c); err != nil {
			return nil, err
		}
	}
	states := sqlmigrate.Status(migrations, migration.id, applied)
	out := make([]MigrationState, len(states))
	for i, st := range states {
		out[i] = MigrationState(st)
	}
	return out, nil
}

package mysqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/internal/sqlmigrate"
)

// migrationsSuffix names the migration table after the lock table.
const migrationsSuffix = "_migrations"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one embedded migration file, NNN_name.sql.
type migration struct {
	version int
	name    string
	stmts   []string // with {{table}} still in them
}

// id returns m's version and name, for sqlmigrate.
func (m migration) id() (int, string) { return m.version, m.name }

var loadMigrations = sync.OnceValues(func() ([]migration, error) {
	files, err := sqlmigrate.Load(migrationFiles, "migrations", ".sql", "mysqlstore")
	if err != nil {
		return nil, err
	}
	ms := make([]migration, 0, len(files))
	for _, f := range files {
		ms = append(ms, migration{version: f.Version, name: f.Name, stmts: splitStatements(f.Text)})
	}
	return ms, nil
})

// splitStatements drops "--" comment lines and splits at semicolons that end
// a line. The migrations contain no semicolons inside literals.
func splitStatements(src string) []string {
	var stmts []string
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		stmts = append(stmts, strings.TrimSpace(cur.String()))
	}
	return stmts
}

// MigrationState is the state of one migration in a database.
type MigrationState struct {
	Version   int
	Name      string
	AppliedAt time.Time // UTC by the database's clock; zero while pending
}

// Applied reports whether the migration has been applied.
func (m MigrationState) Applied() bool { return !m.AppliedAt.IsZero() }

// Migrate applies the migrations that db does not have yet, in order, for
// the lock table named by opts (only Options.Table matters here), and
// records each in the table Table+"_migrations". It is idempotent, and safe
// to run from several processes at once: they take turns under a GET_LOCK
// named after the database and table. MySQL commits DDL implicitly, so a
// failed migration is not rolled back; every migration can be run again.
// `tasklock migrate up` calls it.
func Migrate(ctx context.Context, db *sql.DB, opts *Options) error {
	c, err := resolve(db, opts)
	if err != nil {
		return err
	}
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysqlstore: migrate: %w", err)
	}
	lockName := "CONCAT('tasklock-migrate:', LEFT(SHA2(CONCAT_WS(0x00, DATABASE(), '" + c.table + "'), 256), 47))"
	if err := migrateLock(ctx, conn, lockName); err != nil {
		discard(conn)
		return err
	}
	err = migrateLocked(ctx, conn, c.table, ms)
	// Release even when ctx has ended; a connection that cannot is closed,
	// which releases the lock too.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, rerr := conn.ExecContext(rctx, "DO RELEASE_LOCK("+lockName+")"); rerr != nil {
		discard(conn)
	} else {
		conn.Close()
	}
	return err
}

// migrateLock waits for the migration lock, a second at a time, until ctx
// ends.
func migrateLock(ctx context.Context, conn *sql.Conn, name string) error {
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+name+", 1)").Scan(&got); err != nil {
			return fmt.Errorf("mysqlstore: migrate: take the migration lock: %w", err)
		}
		if got.Valid && got.Int64 == 1 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mysqlstore: migrate: waiting for another migration: %w", err)
		}
	}
}

func migrateLocked(ctx context.Context, conn *sql.Conn, table string, ms []migration) error {
	vt := "`" + table + migrationsSuffix + "`"
	_, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+vt+` (
  version    INT          NOT NULL PRIMARY KEY,
  name       VARCHAR(255) NOT NULL,
  applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`)
	if err != nil {
		return fmt.Errorf("mysqlstore: migrate: create %s: %w", vt, err)
	}
	applied, err := appliedVersions(ctx, conn, vt)
	if err != nil {
		return err
	}
	for _, m := range sqlmigrate.Pending(ms, migration.id, applied) {
		for _, stmt := range m.stmts {
			stmt = expandTable(stmt, table)
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !duplicateKey(err) {
				return fmt.Errorf("mysqlstore: migrate: migration %03d_%s: %w", m.version, m.name, err)
			}
		}
		q := "INSERT INTO " + vt + " (version, name, applied_at) VALUES (" + strconv.Itoa(m.version) +
			", " + string(appendText(nil, m.name)) + ", UTC_TIMESTAMP(6))"
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("mysqlstore: migrate: record migration %03d_%s: %w", m.version, m.name, err)
		}
	}
	return nil
}

// duplicateKey reports whether err is MySQL's "Duplicate key name" (1061)
// or "Duplicate column name" (1060): an ADD KEY, or an ALTER TABLE that
// adds a column (with whatever else the same statement changes, applied
// with it), that a migration cut short before it was recorded made
// already. DDL commits on its own, so migrations are run again that far.
func duplicateKey(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1061 || me.Number == 1060)
}

// tableRef matches {{table}}, the lock table, and {{table_suffix}}, a table
// named after it (the ledger's {{table_claims}}, ...), in migrations.
var tableRef = regexp.MustCompile(`\{\{table(_[a-z]+)?\}\}`)

// expandTable replaces the table references in stmt with quoted names.
func expandTable(stmt, table string) string {
	return tableRef.ReplaceAllStringFunc(stmt, func(ref string) string {
		return "`" + table + strings.TrimSuffix(strings.TrimPrefix(ref, "{{table"), "}}") + "`"
	})
}

// querier is what a read runs on: a *sql.DB, a *sql.Conn (appliedVersions)
// or a batch's *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// appliedVersions reads the migration table vt (quoted).
func appliedVersions(ctx context.Context, q querier, vt string) (map[int]sqlmigrate.Applied, error) {
	rows, err := q.QueryContext(ctx, "SELECT version, name, DATE_FORMAT(applied_at, '%Y-%m-%d %H:%i:%s.%f') FROM "+vt)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: read %s: %w", vt, err)
	}
	defer rows.Close()
	out := make(map[int]sqlmigrate.Applied)
	for rows.Next() {
		var v int
		var name, at string
		if err := rows.Scan(&v, &name, &at); err != nil {
			return nil, fmt.Errorf("mysqlstore: read %s: %w", vt, err)
		}
		t, err := time.ParseInLocation("2006-01-02 15:04:05.000000", at, time.UTC)
		if err != nil {
			return nil, fmt.Errorf("mysqlstore: read %s: applied_at %q: %w", vt, at, err)
		}
		out[v] = sqlmigrate.Applied{Name: name, At: t}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlstore: read %s: %w", vt, err)
	}
	return out, nil
}

// MigrationStatus returns every migration this package knows, and any
// newer one recorded in db by a later version of it, in order, with when
// each was applied (zero while pending). A database never migrated has every
// migration pending. `tasklock migrate status` prints it.
func MigrationStatus(ctx context.Context, db *sql.DB, opts *Options) ([]MigrationState, error) {
	c, err := resolve(db, opts)
	if err != nil {
		return nil, err
	}
	ms, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	applied, err := appliedVersions(ctx, db, "`"+c.table+migrationsSuffix+"`")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erNoSuchTable {
		applied, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	states := sqlmigrate.Status(ms, migration.id, applied)
	out := make([]MigrationState, len(states))
	for i, st := range states {
		out[i] = MigrationState{Version: st.Version, Name: st.Name, AppliedAt: st.AppliedAt}
	}
	return out, nil
}

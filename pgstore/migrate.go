package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock/internal/sqlmigrate"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// MigrationState is one migration as MigrationStatus reports it.
type MigrationState struct {
	Version   int       // the number the file name starts with: 1 for 0001_create.up.sql
	Name      string    // the rest of the file name: "create"; "" for a version this library does not know
	Applied   bool      // recorded in the version table
	AppliedAt time.Time // when it was applied, by the database's clock; zero when not applied
}

// migration is one embedded migration file.
type migration struct {
	version int
	name    string
	sql     *template.Template
}

// migrationData is what a migration's template sees.
type migrationData struct {
	Schema string // the quoted schema name
	Table  string // the quoted, schema-qualified lease table
	table  string
	schema string
}

// Ident returns the quoted, unqualified name made of the lease table's name
// and suffix, for indexes and constraints (which live in the table's
// schema): CREATE INDEX {{.Ident "_expires_idx"}} ON {{.Table}} (...).
func (d migrationData) Ident(suffix string) string {
	return pgx.Identifier{d.table + suffix}.Sanitize()
}

// Qualified returns the quoted, schema-qualified name made of the lease
// table's name and suffix, for tables and other schema objects.
func (d migrationData) Qualified(suffix string) string {
	return pgx.Identifier{d.schema, d.table + suffix}.Sanitize()
}

// id returns m's version and name, for sqlmigrate.
func (m migration) id() (int, string) { return m.version, m.name }

// loadMigrations reads NNNN_name.up.sql files from dir in fsys, in version
// order, and parses each as a template.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	return sqlmigrate.LoadTemplates(fsys, dir, ".up.sql", "pgstore", func(t sqlmigrate.Template) migration {
		return migration{version: t.Version, name: t.Name, sql: t.SQL}
	})
}

// migrations are this library's migrations, in order.
var migrations = sqlmigrate.Must(loadMigrations(migrationFiles, "migrations"))

// Migrate brings the lease table named by opts (Schema, Table; other fields
// are ignored) up to date: it creates the schema when missing, keeps applied
// versions in the table <Table>_migrations next to it, and applies each
// missing embedded migration in order, all in one transaction under a
// transaction-level advisory lock, so concurrent callers (replicas starting
// together) apply each migration once. It needs the privileges to create
// tables in the schema. There are no down migrations: to remove tasklock,
// drop both tables.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts *Options) error {
	o, err := resolve(pool, opts)
	if err != nil {
		return err
	}
	return migrateWith(ctx, pool, o, migrations)
}

func migrateWith(ctx context.Context, pool *pgxpool.Pool, o resolved, ms []migration) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", o.seed^migrateSalt); err != nil {
			return err
		}
		if o.schema != DefaultSchema {
			var exists bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", o.schema).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				if _, err := tx.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{o.schema}.Sanitize()); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+o.versions+` (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return err
		}
		applied, err := appliedVersions(ctx, tx, o)
		if err != nil {
			return err
		}
		data := migrationData{
			Schema: pgx.Identifier{o.schema}.Sanitize(), Table: o.table,
			schema: o.schema, table: o.tableName,
		}
		for _, m := range sqlmigrate.Pending(ms, migration.id, applied) {
			var sql strings.Builder
			if err := m.sql.Execute(&sql, data); err != nil {
				return fmt.Errorf("migration %d_%s: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, sql.String()); err != nil {
				return fmt.Errorf("migration %d_%s: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+o.versions+" (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return fmt.Errorf("migration %d_%s: %w", m.version, m.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w", o.table, err)
	}
	return nil
}

// migrateSalt keeps the migration lock apart from any lock key's.
const migrateSalt = 0x6d696772617465 // "migrate"

// querier is a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// appliedVersions reads the version table, which must exist. It reads no
// names: a version this library does not know is listed without one.
func appliedVersions(ctx context.Context, q querier, o resolved) (map[int]sqlmigrate.Applied, error) {
	rows, err := q.Query(ctx, "SELECT version, applied_at FROM "+o.versions)
	if err != nil {
		return nil, err
	}
	applied := map[int]sqlmigrate.Applied{}
	var v int
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&v, &at}, func() error {
		applied[v] = sqlmigrate.Applied{At: at}
		return nil
	})
	return applied, err
}

// MigrationStatus reports every migration this library knows, and any
// applied version it does not (from a newer library), in version order,
// for the lease table named by opts. Before the first Migrate every entry is
// unapplied. It only reads.
func MigrationStatus(ctx context.Context, pool *pgxpool.Pool, opts *Options) ([]MigrationState, error) {
	o, err := resolve(pool, opts)
	if err != nil {
		return nil, err
	}
	return statusWith(ctx, pool, o, migrations)
}

func statusWith(ctx context.Context, pool *pgxpool.Pool, o resolved, ms []migration) ([]MigrationState, error) {
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", o.versions).Scan(&exists); err != nil {
		return nil, fmt.Errorf("pgstore: migration status %s: %w", o.table, err)
	}
	var applied map[int]sqlmigrate.Applied
	if exists {
		var err error
		if applied, err = appliedVersions(ctx, pool, o); err != nil {
			return nil, fmt.Errorf("pgstore: migration status %s: %w", o.table, err)
		}
	}
	states := sqlmigrate.Status(ms, migration.id, applied)
	out := make([]MigrationState, len(states))
	for i, st := range states {
		out[i] = MigrationState(st)
	}
	return out, nil
}

// errNoTable says what to do when the lease table, or a table a later
// migration adds beside it, is missing.
var errNoTable = errors.New("the lease table (or one a newer migration adds beside it) does not exist: run pgstore.Migrate (tasklock migrate up) or set Options.Migrate")

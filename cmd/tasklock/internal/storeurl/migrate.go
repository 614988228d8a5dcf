package storeurl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tasklock/tasklock/internal/redact"
)

// Migration is one schema migration of a SQL store, as Migrator reports it.
type Migration struct {
	Version int    // the number the migration's file name starts with
	Name    string // the rest of its name; "" for a version recorded by a newer tasklock
	Applied bool   // recorded as applied in the store
	// AppliedAt is when it was applied, by the database's clock, in UTC;
	// zero when not applied.
	AppliedAt time.Time
}

// String returns "0001_create", or "0002_(unknown)" for a migration a newer
// tasklock applied.
func (m Migration) String() string {
	name := m.Name
	if name == "" {
		name = "(unknown)"
	}
	return fmt.Sprintf("%04d_%s", m.Version, name)
}

// schema is the table of a SQL store, connected, for Migrator and Open.
type schema interface {
	// table names the lock table: "public.tasklock_locks", "tasklock_locks".
	table() string
	status(ctx context.Context) ([]Migration, error)
	migrate(ctx context.Context) error
	close() error
}

// schemaOpener is an opener for a store that keeps a schema.
type schemaOpener interface {
	opener
	// connect connects and checks that the server answers within ctx,
	// without reading or changing the schema. Its errors are classified
	// like open's.
	connect(ctx context.Context) (schema, error)
}

// errNoDatabase is wrapped by schema.status when the database does not
// exist yet (a SQLite file): everything is pending, and migrate creates it.
var errNoDatabase = errors.New("does not exist")

// schemaError marks an error about the store's schema (migrations pending,
// or migrating failed): Open reports it as ErrNotMigrated.
type schemaError struct{ err error }

func (e *schemaError) Error() string { return e.err.Error() }
func (e *schemaError) Unwrap() error { return e.err }

// ensureSchema reads the migration status of s and applies what is
// pending when refusal is empty; otherwise pending migrations are a
// schemaError, which ends with refusal (see storeURL.refusal).
func ensureSchema(ctx context.Context, s schema, refusal string) error {
	states, err := s.status(ctx)
	if err != nil {
		return err
	}
	var pending []string
	for _, m := range states {
		if !m.Applied {
			pending = append(pending, m.String())
		}
	}
	switch {
	case len(pending) == 0:
		return nil
	case refusal != "":
		return &schemaError{fmt.Errorf("table %s lacks migrations %s and %s", s.table(), strings.Join(pending, ", "), refusal)}
	}
	if err := s.migrate(ctx); err != nil {
		return &schemaError{err}
	}
	return nil
}

// refusal says why Open must not apply pending migrations, or is empty
// when it may: migrate, the URL's migrate parameter, is false, or the
// store was opened with OpenExisting.
func (u *storeURL) refusal(migrate bool) string {
	switch {
	case u.existing:
		return "this command changes no schema (only serve, exec, jobs create and migrate up do): run `tasklock migrate up` first"
	case !migrate:
		return "the URL says migrate=false: run `tasklock migrate up` first, or leave migrate=false out"
	}
	return ""
}

// Migrator reads and applies the migrations of a SQL store's table. Create
// it with OpenMigrator; it holds a connection pool until Close.
type Migrator struct {
	u *storeURL
	s schema
}

// OpenMigrator connects to the SQL store rawURL names and checks that it
// answers within ctx, without reading or changing its schema. The URL's
// migrate parameter is accepted and ignored. Errors wrap ErrBadURL,
// ErrUnreachable or, for a store that keeps no schema (mem, redis, etcd, zk,
// redlock), checked without I/O, ErrNoMigrations.
func OpenMigrator(ctx context.Context, rawURL string) (*Migrator, error) {
	o, u, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	so, ok := o.(schemaOpener)
	if !ok {
		return nil, fmt.Errorf("%w: %s:// stores keep no schema", ErrNoMigrations, u.scheme)
	}
	s, err := so.connect(ctx)
	if err != nil {
		return nil, u.classify(err)
	}
	return &Migrator{u: u, s: s}, nil
}

// Table names the store's lock table, schema-qualified for PostgreSQL
// ("public.tasklock_locks").
func (m *Migrator) Table() string { return m.s.table() }

// Status reports every migration the store's package knows, and any that a
// newer tasklock applied, in version order. It only reads: a database that
// does not exist (a SQLite file) is ErrBadURL, as for OpenExisting, since
// the URL names nothing there.
func (m *Migrator) Status(ctx context.Context) ([]Migration, error) {
	states, err := m.s.status(ctx)
	if errors.Is(err, errNoDatabase) {
		return nil, fmt.Errorf("%w %s: %w", ErrBadURL, redact.URL(m.u.raw), m.u.scrub(err))
	}
	if err != nil {
		return nil, m.wrap(err)
	}
	return states, nil
}

// Up applies the pending migrations, in order, and returns those it found
// pending and then applied (empty when the table was up to date). It is
// safe to run from several processes at once: each migration is applied
// once, and a migration another process applied meanwhile is counted as
// applied by this call too.
func (m *Migrator) Up(ctx context.Context) ([]Migration, error) {
	before, err := m.s.status(ctx)
	noDatabase := errors.Is(err, errNoDatabase)
	if err != nil && !noDatabase {
		return nil, m.wrap(err)
	}
	pending := map[int]bool{}
	for _, s := range before {
		if !s.Applied {
			pending[s.Version] = true
		}
	}
	if len(pending) == 0 && !noDatabase {
		return nil, nil
	}
	if err := m.s.migrate(ctx); err != nil {
		return nil, m.wrap(err)
	}
	after, err := m.s.status(ctx)
	if err != nil {
		return nil, m.wrap(err)
	}
	var applied []Migration
	for _, s := range after {
		if (pending[s.Version] || noDatabase) && s.Applied {
			applied = append(applied, s)
		}
	}
	return applied, nil
}

// Close closes the connection pool.
func (m *Migrator) Close() error { return m.s.close() }

// wrap names the store in err and hides its password.
func (m *Migrator) wrap(err error) error {
	return fmt.Errorf("%s: %w", redact.URL(m.u.raw), m.u.scrub(err))
}

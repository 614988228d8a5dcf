package storeurl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/sqlitestore"
)

// sqliteTableRE is sqlitestore's rule for Options.Table, checked here too
// because sqlitestore.Open checks it only together with the file, and a
// bad table name is a bad URL, not an unusable file. sqlitestore checks it
// again.
var sqliteTableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,51}$`)

// sqliteConfig is a checked sqlite:// URL.
type sqliteConfig struct {
	u       *storeURL
	path    string
	store   sqlitestore.Options // Table; never Migrate
	migrate bool
	// existing refuses a file that does not exist (OpenExisting).
	existing bool
}

// parseSQLite checks a sqlite:// URL: everything after sqlite:// up to
// '?' is the path of the database file, percent-decoded.
func parseSQLite(u *storeURL) (opener, error) {
	if u.user != "" || u.hasPassword {
		return nil, u.badf("sqlite:// takes no user or password; write '@' in a path as %%40")
	}
	raw := u.raw[len(u.scheme)+len("://"):]
	raw, _, _ = strings.Cut(raw, "?")
	path, err := url.PathUnescape(raw)
	if err != nil {
		return nil, u.badf("invalid percent-encoding in the path")
	}
	switch {
	case strings.IndexByte(path, 0) >= 0:
		// The C library would open the path up to the NUL: x%00y.db is x.
		return nil, u.badf("the path contains a NUL byte (%%00)")
	case path == "" || strings.HasSuffix(path, "/"):
		return nil, u.badf("missing file name: want sqlite:///abs/path/file.db or sqlite://./relative/file.db")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, u.badf("want the path of a database file, not %q (for an in-process store use mem://)", path)
	}
	c := &sqliteConfig{u: u, path: path}
	q := u.query
	c.store.Table = q.nonEmpty("table")
	c.migrate = q.boolean("migrate", true)
	if c.store.Table != "" {
		switch {
		case !sqliteTableRE.MatchString(c.store.Table):
			return nil, u.badf("query parameter table=%q: want a lowercase SQL identifier ([a-z_][a-z0-9_]*) of at most 52 bytes", c.store.Table)
		case strings.HasPrefix(c.store.Table, "sqlite_"):
			return nil, u.badf("query parameter table=%q: names starting with \"sqlite_\" are reserved by SQLite", c.store.Table)
		}
	}
	return c, nil
}

// checkDir refuses a path whose directory does not exist, and a path that
// is a directory: the URL names a file that cannot be, which no retry
// mends (exit 64, not 69).
func (c *sqliteConfig) checkDir() error {
	dir := filepath.Dir(c.path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c.u.badf("directory %s does not exist", redact.Quote(dir))
	case err == nil && !fi.IsDir():
		return c.u.badf("%s is not a directory", redact.Quote(dir))
	}
	if fi, err := os.Stat(c.path); err == nil && fi.IsDir() {
		return c.u.badf("%s is a directory: want the path of a database file in it, such as %s", redact.Quote(c.path), redact.Quote(filepath.Join(c.path, "tasklock.db")))
	}
	return nil // any other error: sqlitestore.Open reports it
}

// sqliteSchema is a database file and the table it migrates. The file is
// opened (and created) on first use, so that Migrator.Status on a file
// that does not exist creates nothing.
type sqliteSchema struct {
	path string
	opts sqlitestore.Options
	db   *sql.DB
}

// connect implements schemaOpener. A file that exists is opened with
// sqlitestore.Open, which checks that it is a usable SQLite database in
// WAL mode; one that does not is created only by open and migrate.
func (c *sqliteConfig) connect(ctx context.Context) (schema, error) {
	if err := c.checkDir(); err != nil {
		return nil, err
	}
	s := &sqliteSchema{path: c.path, opts: c.store}
	if _, err := os.Stat(c.path); err == nil {
		if err := s.openDB(false); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// open implements opener: the file (created if needed and migrate is
// set), then the schema
// (see ensureSchema), then the store. Closing closes the database.
func (c *sqliteConfig) open(ctx context.Context) (driver.Store, func() error, error) {
	if err := c.checkDir(); err != nil {
		return nil, nil, err
	}
	// With migrate=false, or for OpenExisting, a file that does not exist
	// stays so.
	s := &sqliteSchema{path: c.path, opts: c.store}
	if err := s.openDB(c.migrate && !c.existing); err != nil {
		switch {
		case errors.Is(err, errNoDatabase) && c.existing:
			err = c.u.badf("database file %s does not exist: check the path (serve, exec and migrate up create it; this command only opens one)", redact.Quote(c.path))
		case errors.Is(err, errNoDatabase):
			err = &schemaError{err}
		}
		return nil, nil, err
	}
	if err := ensureSchema(ctx, s, c.u.refusal(c.migrate)); err != nil {
		s.close()
		return nil, nil, err
	}
	// New checks the connection and that nothing is pending.
	store, err := sqlitestore.New(s.db, &c.store)
	if err != nil {
		s.close()
		return nil, nil, err
	}
	return store, s.close, nil
}

// openDB opens the database unless it is open; without create, a file that
// does not exist is an error.
func (s *sqliteSchema) openDB(create bool) error {
	if s.db != nil {
		return nil
	}
	if !create {
		if _, err := os.Stat(s.path); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("database file %s %w: check the path (tasklock migrate up creates it)", redact.Quote(s.path), errNoDatabase)
		}
	}
	db, err := sqlitestore.Open(s.path, &s.opts)
	if err != nil {
		return err
	}
	s.db = db
	return nil
}

func (s *sqliteSchema) table() string {
	if s.opts.Table == "" {
		return sqlitestore.DefaultTable
	}
	return s.opts.Table
}

func (s *sqliteSchema) status(ctx context.Context) ([]Migration, error) {
	if err := s.openDB(false); err != nil {
		return nil, err
	}
	states, err := sqlitestore.MigrationStatus(ctx, s.db, &s.opts)
	if err != nil {
		return nil, err
	}
	return sqlMigrations(states), nil
}

func (s *sqliteSchema) migrate(ctx context.Context) error {
	if err := s.openDB(true); err != nil {
		return err
	}
	return sqlitestore.Migrate(ctx, s.db, &s.opts)
}

func (s *sqliteSchema) close() error {
	if s.db == nil {
		return nil
	}
	return s.db.Close()
}

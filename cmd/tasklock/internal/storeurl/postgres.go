package storeurl

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/pgstore"
	"github.com/tasklock/tasklock/sqlitestore"
)

// pgConfig is a checked postgres:// or postgresql:// URL.
type pgConfig struct {
	u       *storeURL
	pool    *pgxpool.Config // from the URL without tasklock's parameters
	store   pgstore.Options // Mode, Schema, Table; never Migrate
	migrate bool
}

// parsePostgres checks a postgres:// or postgresql:// URL: it takes out
// tasklock's parameters (mode, table, schema, migrate) and hands the rest
// of the URL to pgxpool.ParseConfig, which reads no network (it may read
// $PG* variables and the password file, as libpq does).
func parsePostgres(u *storeURL) (opener, error) {
	q := u.query
	c := &pgConfig{u: u}
	c.store.Mode = pgstore.Mode(q.oneOf("mode", string(pgstore.ModeLease), string(pgstore.ModeConnection)))
	c.store.Table = q.nonEmpty("table")
	c.store.Schema = q.nonEmpty("schema")
	c.migrate = q.boolean("migrate", true)
	// pgx's own parameters that hold passwords, passed on below.
	q.hideValue("password")
	q.hideValue("sslpassword")
	rest := q.rest()
	if q.err != nil {
		return nil, q.done(u)
	}
	if u.hostPart != "" {
		// pgx would look up a malformed host name, and fail as if the
		// server were unreachable. (No host part: the hosts come from
		// the host parameter or $PGHOST.)
		if _, err := u.hosts("5432"); err != nil {
			return nil, err
		}
	}
	// pgx reads these files whole: refuse an endless one (/dev/zero).
	for _, param := range []string{"sslrootcert", "sslcert", "sslkey"} {
		if file := rest.Get(param); file != "" {
			if err := u.checkPEMFile(param, file); err != nil {
				return nil, err
			}
		}
	}
	pu := url.URL{Scheme: "postgres", Host: u.hostPart, RawQuery: rest.Encode()}
	if u.path != "" {
		pu.Path = "/" + u.path
	}
	switch {
	case u.hasPassword:
		pu.User = url.UserPassword(u.user, u.password)
	case u.user != "":
		pu.User = url.User(u.user)
	}
	cfg, err := pgxpool.ParseConfig(pu.String())
	if err != nil {
		// The message repeats the connection string (pgx hides its
		// password); the URL is already in ours.
		msg := err.Error()
		if strings.HasPrefix(msg, "cannot parse `") {
			if i := strings.Index(msg, "`: "); i >= 0 {
				msg = msg[i+3:]
			}
		}
		return nil, u.badf("%s", msg)
	}
	// The password may come from $PGPASSWORD or the password file.
	u.secrets = append(u.secrets, cfg.ConnConfig.Password)
	c.pool = cfg
	return c, nil
}

// pgSchema is a connected pool and the table it migrates.
type pgSchema struct {
	pool *pgxpool.Pool
	opts pgstore.Options
}

// connect implements schemaOpener: it creates the pool, checks the
// options (pgstore.New does no I/O without Migrate) and pings the server.
func (c *pgConfig) connect(ctx context.Context) (schema, error) {
	// No I/O: the pool connects on first use.
	pool, err := pgxpool.NewWithConfig(ctx, c.pool)
	if err != nil {
		return nil, c.u.badf("%v", err)
	}
	if _, err := pgstore.New(pool, &c.store); err != nil {
		pool.Close()
		return nil, c.u.badOption("", err)
	}
	if err := c.ping(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return &pgSchema{pool: pool, opts: c.store}, nil
}

// open implements opener: connect, then the schema (see ensureSchema),
// then the store. Closing the store closes the pool.
func (c *pgConfig) open(ctx context.Context) (driver.Store, func() error, error) {
	sc, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	s := sc.(*pgSchema)
	if err := ensureSchema(ctx, s, c.u.refusal(c.migrate)); err != nil {
		s.close()
		return nil, nil, err
	}
	store, err := pgstore.New(s.pool, &c.store)
	if err != nil { // checked by connect already
		s.close()
		return nil, nil, c.u.badOption("", err)
	}
	return store, s.close, nil
}

// ping checks that the server answers. A run-time parameter that the
// server does not know (or whose value it rejects) came from the URL's
// query: that is a bad URL, not an unreachable store.
func (c *pgConfig) ping(ctx context.Context, pool *pgxpool.Pool) error {
	err := pool.Ping(ctx)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42704" || pe.Code == "22023") { // undefined_object, invalid_parameter_value
		return c.u.badf("the server refuses a query parameter, which it got as a run-time parameter because neither tasklock nor pgx knows it: %s", pe.Message)
	}
	return err
}

func (s *pgSchema) table() string {
	schema, table := s.opts.Schema, s.opts.Table
	if schema == "" {
		schema = pgstore.DefaultSchema
	}
	if table == "" {
		table = pgstore.DefaultTable
	}
	return schema + "." + table
}

func (s *pgSchema) status(ctx context.Context) ([]Migration, error) {
	states, err := pgstore.MigrationStatus(ctx, s.pool, &s.opts)
	if err != nil {
		return nil, err
	}
	return sqlMigrations(states), nil
}

// sqlMigrations converts pgstore's or sqlitestore's migration states,
// which have Migration's fields (AppliedAt zero when not applied), with
// AppliedAt in UTC.
func sqlMigrations[S pgstore.MigrationState | sqlitestore.MigrationState](states []S) []Migration {
	out := make([]Migration, len(states))
	for i, st := range states {
		out[i] = Migration(st)
		if out[i].Applied {
			out[i].AppliedAt = out[i].AppliedAt.UTC()
		}
	}
	return out
}

func (s *pgSchema) migrate(ctx context.Context) error { return pgstore.Migrate(ctx, s.pool, &s.opts) }

func (s *pgSchema) close() error { s.pool.Close(); return nil }

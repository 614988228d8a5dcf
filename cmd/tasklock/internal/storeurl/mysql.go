package storeurl

import (
	"context"
	"database/sql"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/mysqlstore"
)

// mysqlNet is the network name under which the keepalive dialer is
// registered with go-sql-driver/mysql.
const mysqlNet = "tasklock-tcp"

// Keepalive of the MySQL connections: probes after 5 s of silence, and on
// Linux a connection whose sent data stays unacknowledged for 10 s is
// closed, so a dead or partitioned server turns into errors within seconds.
const (
	mysqlKeepAliveIdle   = 5 * time.Second
	mysqlUserTimeout     = 10 * time.Second
	mysqlDefaultPort     = "3306"
	mysqlDriverParamHint = "and go-sql-driver/mysql's DSN parameters such as tls, timeout, readTimeout, writeTimeout, charset, collation"
)

var registerMySQLDialer = sync.OnceFunc(func() {
	mysql.RegisterDialContext(mysqlNet, mysqlstore.KeepAliveDialer(mysqlKeepAliveIdle, mysqlUserTimeout))
})

// mysqlConfig is a checked mysql:// URL.
type mysqlConfig struct {
	u       *storeURL
	cfg     *mysql.Config
	store   mysqlstore.Options // Mode, Table; never Migrate
	migrate bool
}

// parseMySQL checks a mysql:// URL, host:port or tcp(host:port), and
// builds the go-sql-driver/mysql configuration from it: the user, password
// and database from the URL, parseTime=true, and the driver's DSN
// parameters from the query, checked by the driver's own parser.
func parseMySQL(u *storeURL) (opener, error) {
	q := u.query
	c := &mysqlConfig{u: u}
	c.store.Mode = mysqlstore.Mode(q.oneOf("mode", string(mysqlstore.ModeLease), string(mysqlstore.ModeConnection)))
	c.store.Table = q.nonEmpty("table")
	c.migrate = q.boolean("migrate", true)
	if q.err != nil {
		return nil, q.done(u)
	}

	host := u.hostPart
	if inner, ok := strings.CutPrefix(host, "tcp("); ok && strings.HasSuffix(inner, ")") {
		host = strings.TrimSuffix(inner, ")")
	} else if strings.ContainsAny(host, "()") {
		return nil, u.badf("invalid address %q: want host:port or tcp(host:port) (unix sockets are not supported)", u.hostPart)
	}
	addrs, err := u.hostsIn(host, mysqlDefaultPort)
	if err != nil {
		return nil, err
	}
	switch {
	case len(addrs) > 1:
		return nil, u.badf("mysql:// takes one host, got %d", len(addrs))
	case u.path == "":
		return nil, u.badf("missing database name: want mysql://user:pass@host:port/DATABASE")
	case strings.Contains(u.path, "/"):
		return nil, u.badf("invalid database name %q: it must not contain '/'", u.path)
	}

	// The driver parses its own parameters (and checks their values); the
	// user, password and database are set afterwards, so that no character
	// in them can be mistaken for DSN syntax.
	rest := q.rest()
	if q.err != nil {
		return nil, q.done(u)
	}
	cfg, err := mysql.ParseDSN("tcp(" + addrs[0] + ")/?" + rest.Encode())
	if err != nil {
		return nil, u.badf("go-sql-driver/mysql: %v", err)
	}
	// Parameters the driver does not know it would send as system
	// variables (SET name=value); only charset is one it handles itself.
	var unknown []string
	for name := range cfg.Params {
		if name != "charset" {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, u.badf("unknown query parameter %q (mysql:// accepts: migrate, mode, table %s)", unknown[0], mysqlDriverParamHint)
	}
	cfg.User, cfg.Passwd, cfg.DBName = u.user, u.password, u.path
	cfg.ParseTime = true
	cfg.Net = mysqlNet
	c.cfg = cfg
	return c, nil
}

// mysqlSchema is a connected pool and the table it migrates.
type mysqlSchema struct {
	db   *sql.DB
	opts mysqlstore.Options
}

// connect implements schemaOpener: it opens the pool, checks the options
// (mysqlstore.New makes no round trip without Migrate) and pings the
// server.
func (c *mysqlConfig) connect(ctx context.Context) (schema, error) {
	registerMySQLDialer()
	conn, err := mysql.NewConnector(c.cfg)
	if err != nil {
		return nil, c.u.badf("%v", err)
	}
	db := sql.OpenDB(conn)
	if _, err := mysqlstore.New(db, &c.store); err != nil {
		db.Close()
		return nil, c.u.badOption("", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return &mysqlSchema{db: db, opts: c.store}, nil
}

// open implements opener: connect, then the schema (see ensureSchema),
// then the store. Closing closes the store (which ends the connections of
// locks still held in connection mode), then the pool.
func (c *mysqlConfig) open(ctx context.Context) (driver.Store, func() error, error) {
	sc, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	s := sc.(*mysqlSchema)
	if err := ensureSchema(ctx, s, c.u.refusal(c.migrate)); err != nil {
		s.close()
		return nil, nil, err
	}
	store, err := mysqlstore.New(s.db, &c.store)
	if err != nil { // checked by connect already
		s.close()
		return nil, nil, c.u.badOption("", err)
	}
	closeFn := func() error {
		serr := store.Close()
		if err := s.db.Close(); err != nil {
			return err
		}
		return serr
	}
	return store, closeFn, nil
}

func (s *mysqlSchema) table() string {
	if s.opts.Table == "" {
		return mysqlstore.DefaultTable
	}
	return s.opts.Table
}

func (s *mysqlSchema) status(ctx context.Context) ([]Migration, error) {
	states, err := mysqlstore.MigrationStatus(ctx, s.db, &s.opts)
	if err != nil {
		return nil, err
	}
	out := make([]Migration, len(states))
	for i, st := range states {
		out[i] = Migration{Version: st.Version, Name: st.Name, Applied: st.Applied()}
		if st.Applied() {
			out[i].AppliedAt = st.AppliedAt.UTC()
		}
	}
	return out, nil
}

func (s *mysqlSchema) migrate(ctx context.Context) error {
	return mysqlstore.Migrate(ctx, s.db, &s.opts)
}

func (s *mysqlSchema) close() error { return s.db.Close() }

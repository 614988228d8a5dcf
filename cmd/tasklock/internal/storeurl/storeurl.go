// Package storeurl opens a tasklock store from a URL, for the CLI and the
// daemon. Library users never need it: they build the client themselves
// and pass it to the store's constructor.
//
// # Schemes
//
//	mem://                                          in-process memstore
//	redis://[user:pass@]host[:port][/db]            one Redis node
//	rediss://[user:pass@]host[:port][/db]           one Redis node over TLS
//	redis+sentinel://[user:pass@]h1:p1,h2:p2/MASTER[?db=N]
//	                                                a Sentinel-managed master
//	redis+cluster://[user:pass@]h1:p1,h2:p2         a Redis Cluster
//	postgres://[user:pass@]host[:port][,host2...]/db
//	postgresql://...                                PostgreSQL (pgstore), through a pgx pool
//	mysql://[user:pass@]host[:port]/db
//	mysql://[user:pass@]tcp(host:port)/db           MySQL or MariaDB (mysqlstore)
//	sqlite:///abs/path/to/file.db                   a SQLite file (sqlitestore)
//	sqlite://./relative/file.db                     ... relative to the working directory
//	etcd://[user:pass@]h1:p1,h2:p2[/prefix]         an etcd cluster (etcdstore)
//	etcds://[user:pass@]h1:p1,h2:p2[/prefix]        ... over TLS
//	zk://h1:p1,h2:p2[/root]                         a ZooKeeper ensemble (zkstore)
//	redlock://[user:pass@]h1:p1,h2:p2,h3:p3[/db]    independent Redis servers, RedLock (redlock)
//
// A missing port is 6379 (26379 for sentinels), 5432 for PostgreSQL (pgx's
// default), 3306 for MySQL, 2379 for etcd and 2181 for ZooKeeper. The user
// and password are percent-decoded; a
// password may also hold reserved characters unencoded, because the user
// information always ends at the last '@' of the URL (so an '@' anywhere
// after the hosts must be written %40). Everything after sqlite:// up to
// '?' is the file's path, percent-decoded: /abs/x.db is absolute, anything
// else is relative to the working directory.
//
// Query parameters of every Redis scheme: prefix, wait_replicas and
// wait_timeout (redisstore.Options), dial_timeout, read_timeout and
// write_timeout (Go durations) and pool_size. rediss:// also takes
// tls_ca_file (a PEM file of the CAs to trust instead of the system's), and
// redis+sentinel:// db, sentinel_username and sentinel_password.
//
// etcd: the path is the key prefix (etcd://h/app is /app/; default
// /tasklock/), the user and password are etcd's own authentication, and the
// parameters are session_ttl (etcdstore.Options.SessionTTL, whole seconds,
// default 11s: no lock TTL may exceed it) and dial_timeout (how long Open
// waits for the cluster to answer, default 5s). etcds:// also takes
// tls_ca_file, and tls_cert_file with tls_key_file for a client certificate.
//
// ZooKeeper: the path is the root node (zk://h/app/locks; default
// /tasklock), and session_timeout (default 10s) the session timeout asked
// for. Open waits until a server has granted a session, and gives the
// store the timeout the server granted (which no lock TTL may exceed), or
// fails once every server has failed once.
// zk:// takes no user or password: ZooKeeper authentication is not
// supported.
//
// RedLock: one go-redis client per host, an odd number of at least 3, all
// with the URL's user, password and database. Parameters: prefix and
// node_timeout (redlock.Options), dial_timeout, read_timeout and
// write_timeout. Open needs a majority of the nodes to answer PING, as
// every lock call does, and refuses as a bad URL two hosts whose servers
// report the same run_id (localhost and 127.0.0.1 for one server: it would
// carry two votes); a node that is down is not compared.
//
// Query parameters of the SQL schemes, taken out before the rest reaches
// the client library:
//
//	mode=lease|connection   pgstore.Options.Mode, mysqlstore.Options.Mode (not sqlite)
//	table=NAME              the lock table (Options.Table)
//	schema=NAME             postgres only: the table's schema (pgstore.Options.Schema)
//	migrate=true|false      whether Open creates or upgrades the table (default true)
//
// Every other parameter of a postgres URL goes to pgxpool.ParseConfig:
// pgx's own (sslmode, connect_timeout, pool_max_conns, ...) and, for any
// name pgx does not know, a run-time parameter sent to the server
// (application_name, search_path, ...); a name the server does not know
// either is reported as a bad URL when Open connects. A mysql URL becomes a
// go-sql-driver/mysql DSN with parseTime=true, and takes that driver's DSN
// parameters (tls, timeout, readTimeout, writeTimeout, charset, collation,
// ...), but not system variables. Its connections are dialled with TCP
// keepalive (mysqlstore.KeepAliveDialer). Every other parameter is an
// error naming it.
//
// # Migrations
//
// The SQL stores keep their locks in a table that migrations create. Open
// reads the migration status first and, when migrations are pending,
// applies them (migrate=true, the default: the command line is what users
// run first, and the stores' migrations are safe to run from several
// processes at once), or fails with ErrNotMigrated (migrate=false, for
// accounts without the right to create tables; a SQLite file that does not
// exist is then not created either). OpenMigrator reads and applies
// migrations explicitly, for `tasklock migrate`; it never migrates on its
// own and ignores the migrate parameter, and Migrator.Status only reads (on
// a SQLite file that does not exist it fails rather than create it).
// Stores without a schema (mem, redis, etcd, zk, redlock) give
// ErrNoMigrations.
//
// # Errors and secrets
//
// Malformed URLs and unknown schemes give errors wrapping ErrBadURL, and a
// store that cannot be reached (PING, or the scheme's equivalent, fails
// within the caller's context) errors wrapping ErrUnreachable. A URL is
// malformed, and found so without any I/O, when a host is not a DNS name
// or an IP address (postgres://%zz is not looked up), a port is outside
// 1-65535, a sqlite path holds a NUL byte, or a duration parameter exceeds
// 365 days; a sqlite file whose directory does not exist is ErrBadURL too
// (found by Open, which looks), and so are, found by Open when it connects,
// a redis+sentinel:// URL whose sentinels know no master of its name or
// whose addresses are not sentinels, and a redlock:// URL two of whose
// hosts are one server. Every message shows the URL only in its
// redact.URL form, and any text a client library returns goes through
// redact.Text with the passwords (from the URL, a password query parameter,
// or, for PostgreSQL, $PGPASSWORD or the password file), so a password is
// never printed.
//
// # Adding a scheme
//
// Add an entry to the schemes table: a function that checks a parsed URL
// (hosts, path, query parameters) without I/O and returns an opener, which
// connects and verifies that the store answers. A store with a schema also
// implements schemaOpener, which connects without touching the schema and
// returns a schema; its open calls ensureSchema before it builds the store.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
)

// ErrBadURL is wrapped by the errors Open returns for a malformed URL, an
// unknown scheme or an unknown or invalid query parameter. The message says
// what is wrong.
var ErrBadURL = errors.New("bad store URL")

// ErrUnreachable is wrapped by the errors Open returns when the store does
// not answer (connection refused, timeout, TLS failure) or refuses the
// credentials (ErrAuth). The client library's error follows in the chain.
var ErrUnreachable = errors.New("store unreachable")

// ErrAuth is wrapped by the errors Open returns when the store refused the
// URL's credentials: a wrong password or user name, or none where one is
// needed (Redis WRONGPASS or NOAUTH, PostgreSQL 28P01 or 28000, MySQL
// 1045, etcd "authentication failed" or "user name is empty"). It matches
// ErrUnreachable too, as it was reported before: the commands exit 69 for
// both, and say which.
var ErrAuth error = authError{}

// authError is ErrAuth's type.
type authError struct{}

func (authError) Error() string { return "store refused the credentials" }

// Is reports whether target is ErrUnreachable.
func (authError) Is(target error) bool { return target == ErrUnreachable }

// RefusedCredentials reports whether err, from a client library, says the
// server refused the credentials.
func RefusedCredentials(err error) bool {
	var pe *pgconn.PgError
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &pe):
		return pe.Code == "28P01" || pe.Code == "28000" // invalid_password, invalid_authorization_specification
	case errors.As(err, &me):
		return me.Number == 1045 // ER_ACCESS_DENIED_ERROR
	}
	// go-redis's errors (a Sentinel's or a RedLock node's wrapped) and
	// etcd's carry the server's words.
	msg := err.Error()
	for _, s := range []string{"WRONGPASS", "NOAUTH", "etcdserver: authentication failed", "etcdserver: user name is empty"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// ErrNotMigrated is wrapped by the errors Open returns when the store's
// table lacks migrations and the URL says migrate=false, or when applying
// them failed (for example for want of the right to create tables). The
// message names the pending migrations; `tasklock migrate up` applies them.
var ErrNotMigrated = errors.New("store schema not migrated")

// ErrNoMigrations is wrapped by the error OpenMigrator returns for a store
// that keeps no schema (mem://, redis://, ...): there is nothing to migrate.
var ErrNoMigrations = errors.New("store has no migrations")

// maxDuration bounds every duration parameter: a year, tasklock.MaxTTL.
const maxDuration = 365 * 24 * time.Hour

// opener connects to a store described by a URL that has been checked.
type opener interface {
	// open connects and verifies that the store answers within ctx. Its
	// errors are classified by the caller: a plain error means the store is
	// unreachable, one wrapping ErrBadURL is kept as is.
	open(ctx context.Context) (driver.Store, func() error, error)
}

// schemes maps each URL scheme to the function that checks its URLs.
var schemes = map[string]func(u *storeURL) (opener, error){
	"mem":            parseMem,
	"redis":          parseRedis,
	"rediss":         parseRedis,
	"redis+sentinel": parseRedis,
	"redis+cluster":  parseRedis,
	"postgres":       parsePostgres,
	"postgresql":     parsePostgres,
	"mysql":          parseMySQL,
	"sqlite":         parseSQLite,
	"etcd":           parseEtcd,
	"etcds":          parseEtcd,
	"zk":             parseZK,
	"redlock":        parseRedlock,
}

// Schemes returns the supported URL schemes, sorted.
func Schemes() []string {
	names := make([]string, 0, len(schemes))
	for name := range schemes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Open connects to the store rawURL names and checks that it answers
// within ctx. The caller must call closeFn when done with the store, after
// closing every Locker that uses it.
func Open(ctx context.Context, rawURL string) (store driver.Store, closeFn func() error, err error) {
	return openURL(ctx, rawURL, false)
}

// OpenExisting is Open for a store that must exist already: a SQLite file
// that does not exist is an error wrapping ErrBadURL, and is not created,
// and a SQL store's table is neither created nor upgraded (pending
// migrations are ErrNotMigrated), whatever migrate= says. The jobs and
// locks commands look at what serve and exec keep; a mistyped path or
// database would otherwise show an empty store and be left with a new file
// or new tables. Every other scheme opens as with Open.
func OpenExisting(ctx context.Context, rawURL string) (store driver.Store, closeFn func() error, err error) {
	return openURL(ctx, rawURL, true)
}

// openURL is Open, or OpenExisting when existing is set.
func openURL(ctx context.Context, rawURL string, existing bool) (store driver.Store, closeFn func() error, err error) {
	o, u, err := parse(rawURL)
	if err != nil {
		return nil, nil, err
	}
	u.existing = existing
	if c, ok := o.(*sqliteConfig); ok && existing {
		c.existing = true
	}
	store, closeFn, err = o.open(ctx)
	if err != nil {
		return nil, nil, u.classify(err)
	}
	return store, closeFn, nil
}

// classify wraps an error of an opener: ErrBadURL errors are kept, a
// schemaError becomes ErrNotMigrated, refused credentials ErrAuth,
// anything else ErrUnreachable.
func (u *storeURL) classify(err error) error {
	var se *schemaError
	switch {
	case errors.Is(err, ErrBadURL):
		return err
	case errors.As(err, &se):
		return fmt.Errorf("%w: %s: %w", ErrNotMigrated, redact.URL(u.raw), u.scrub(se.err))
	case RefusedCredentials(err):
		return fmt.Errorf("%w: %s: %w", ErrAuth, redact.URL(u.raw), u.scrub(err))
	default:
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, redact.URL(u.raw), u.scrub(err))
	}
}

// parse splits rawURL and lets its scheme check it.
func parse(rawURL string) (opener, *storeURL, error) {
	u, err := split(rawURL)
	if err != nil {
		return nil, nil, err
	}
	o, err := schemes[u.scheme](u)
	if err != nil {
		return nil, nil, err
	}
	if err := u.query.done(u); err != nil {
		return nil, nil, err
	}
	return o, u, nil
}

// storeURL is a URL split into the parts every scheme looks at.
type storeURL struct {
	raw         string
	scheme      string // lower case
	user        string // percent-decoded
	password    string // percent-decoded
	hasPassword bool
	hostPart    string  // between the user information and the path, as written
	path        string  // after the hosts, without the leading '/', percent-decoded
	query       *params // the query parameters
	existing    bool    // opened with OpenExisting: no schema change
	// secrets are passwords a scheme found elsewhere (an environment
	// variable, a password file): scrub hides them too.
	secrets []string
}

// badf returns an error wrapping ErrBadURL that shows the redacted URL and
// what is wrong with it. The password appears nowhere in the message, even
// where the URL repeats it outside the places redact.URL hides.
func (u *storeURL) badf(format string, args ...any) error {
	return u.scrub(badf(u.raw, format, args...))
}

// badOption is badf for a store's New that rejected an option the URL set:
// the store's *driver.OptionError stays in the chain for errors.As, after
// what, when not empty, says which part of the URL set it.
func (u *storeURL) badOption(what string, err error) error {
	if what != "" {
		what += ": "
	}
	return u.scrub(fmt.Errorf("%w %s: %s%w", ErrBadURL, redact.URL(u.raw), what, err))
}

func badf(raw, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrBadURL, redact.URL(raw), fmt.Sprintf(format, args...))
}

// scrub hides the URL's passwords in err's message (see redact.Error):
// the URL's own, those of its password parameters and those a scheme found
// elsewhere; errors.Is and errors.As still see err.
func (u *storeURL) scrub(err error) error {
	secrets := append([]string{u.password}, u.secrets...)
	if u.query != nil {
		secrets = append(secrets, u.query.secrets()...)
	}
	return redact.Error(err, secrets...)
}

// redisAuth are the schemes whose user information is Redis's AUTH.
var redisAuth = map[string]bool{"redis": true, "rediss": true, "redis+sentinel": true, "redis+cluster": true, "redlock": true}

// split parses rawURL into a storeURL. The user information ends at the
// last '@' (as in redact.URL), the hosts at the next '/' or '?', the path at '?'.
func split(raw string) (*storeURL, error) {
	i := strings.Index(raw, "://")
	if i < 0 || !redact.IsScheme(raw[:i]) {
		return nil, badf(raw, "missing scheme, want one of %s followed by ://", strings.Join(Schemes(), ", "))
	}
	u := &storeURL{raw: raw, scheme: strings.ToLower(raw[:i])}
	if _, ok := schemes[u.scheme]; !ok {
		return nil, badf(raw, "unknown scheme %q, want one of %s", raw[:i], strings.Join(Schemes(), ", "))
	}
	rest := raw[i+3:]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		userinfo := rest[:at]
		rest = rest[at+1:]
		user, pass, hasPass := strings.Cut(userinfo, ":")
		var err error
		if u.user, err = url.PathUnescape(user); err != nil {
			return nil, badf(raw, "invalid percent-encoding in the user name")
		}
		if u.password, err = url.PathUnescape(pass); err != nil {
			// The unescape error quotes part of the password: drop it.
			return nil, badf(raw, "invalid percent-encoding in the password")
		}
		u.hasPassword = hasPass
		if user != "" && !hasPass && redisAuth[u.scheme] {
			// go-redis sends no AUTH for a user without a password, while
			// redis-cli reads redis://SECRET@host as a password: refuse
			// it, and print it nowhere.
			return nil, badf(raw[:i+3]+redact.Mask+"@"+rest,
				"a user name without a password authenticates nothing with Redis: write a password alone as %s://:PASSWORD@host, a user and its password as USER:PASSWORD@", u.scheme)
		}
	}
	if j := strings.IndexByte(rest, '#'); j >= 0 {
		return nil, badf(raw, "a fragment (#...) is not allowed; write '#' in a password as %%23")
	}
	rawQuery := ""
	if j := strings.IndexByte(rest, '?'); j >= 0 {
		rest, rawQuery = rest[:j], rest[j+1:]
	}
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		p, err := url.PathUnescape(rest[j+1:])
		if err != nil {
			return nil, badf(raw, "invalid percent-encoding in the path")
		}
		rest, u.path = rest[:j], p
	}
	u.hostPart = rest
	vals, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, badf(raw, "malformed query string")
	}
	u.query = &params{vals: vals}
	return u, nil
}

// hosts splits the host part on commas into "host:port" addresses, adding
// defaultPort where a port is missing.
func (u *storeURL) hosts(defaultPort string) ([]string, error) {
	return u.hostsIn(u.hostPart, defaultPort)
}

// hostsIn is hosts for a host list other than the URL's own host part.
func (u *storeURL) hostsIn(hostPart, defaultPort string) ([]string, error) {
	if hostPart == "" {
		return nil, u.badf("missing host")
	}
	var addrs []string
	for _, h := range strings.Split(hostPart, ",") {
		if h == "" {
			return nil, u.badf("empty host in list %q", hostPart)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			switch {
			case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
				host, port = h[1:len(h)-1], defaultPort
			case !strings.ContainsAny(h, ":[]"):
				host, port = h, defaultPort
			default:
				return nil, u.badf("invalid host %q, want host:port (an IPv6 address in brackets)", h)
			}
		}
		if host == "" {
			return nil, u.badf("missing host name in %q", h)
		}
		if !validHost(host) {
			// Refused here, not left to a DNS lookup that fails as if the
			// store were unreachable.
			return nil, u.badf("invalid host name %s: want a DNS name, an IPv4 address or an IPv6 address in brackets", redact.Quote(host))
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, u.badf("invalid port %q in %q", port, h)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

// validHost reports whether host is a DNS name (letters, digits, '-', '_'
// and '.'), an IPv4 address or an IPv6 address, with a zone after '%'.
func validHost(host string) bool {
	if strings.Contains(host, ":") {
		addr, zone, _ := strings.Cut(host, "%")
		ip := net.ParseIP(addr)
		return ip != nil && ip.To4() == nil && !strings.ContainsAny(zone, "%/[]")
	}
	for _, c := range host {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// params reads query parameters, records which ones a scheme asked for, and
// keeps the first error.
type params struct {
	vals  url.Values
	asked []string
	err   error
	// secretNames are the parameters that hold passwords.
	secretNames []string
}

// str returns the parameter's value and whether it was given.
func (p *params) str(name string) (string, bool) {
	p.asked = append(p.asked, name)
	vs, ok := p.vals[name]
	if !ok {
		return "", false
	}
	if len(vs) > 1 && p.err == nil {
		p.err = fmt.Errorf("query parameter %q is given %d times", name, len(vs))
	}
	return vs[0], true
}

// secretStr is str for a parameter that holds a password: its value never
// appears in a message.
func (p *params) secretStr(name string) (string, bool) {
	p.hideValue(name)
	return p.str(name)
}

// hideValue records that a parameter holds a password, without accepting
// it: a scheme that passes it on to its client library calls rest later.
func (p *params) hideValue(name string) {
	p.secretNames = append(p.secretNames, name)
}

// secrets returns the values of the password parameters.
func (p *params) secrets() []string {
	var out []string
	for _, name := range p.secretNames {
		out = append(out, p.vals[name]...)
	}
	return out
}

// boolean reads true or false (or 1, 0, t, f as strconv.ParseBool does);
// def when the parameter is not given.
func (p *params) boolean(name string, def bool) bool {
	v, ok := p.str(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("query parameter %s=%q: want true or false", name, v)
	}
	return b
}

// oneOf reads a parameter that takes one of the values allowed; "" when it
// is not given.
func (p *params) oneOf(name string, allowed ...string) string {
	v, ok := p.str(name)
	if ok && !slices.Contains(allowed, v) && p.err == nil {
		p.err = fmt.Errorf("query parameter %s=%q: want %s", name, v, strings.Join(allowed, " or "))
	}
	return v
}

// nonEmpty reads a parameter that must have a value when given; "" when it
// is not given.
func (p *params) nonEmpty(name string) string {
	v, ok := p.str(name)
	if ok && v == "" && p.err == nil {
		p.err = fmt.Errorf("query parameter %s is empty", name)
	}
	return v
}

// rest accepts every parameter not asked for so far, for a scheme that
// passes them on to its client library, and returns them.
func (p *params) rest() url.Values {
	out := url.Values{}
	for name, vs := range p.vals {
		if !slices.Contains(p.asked, name) {
			p.str(name) // accepts it, and rejects a second value
			out[name] = vs[:1]
		}
	}
	return out
}

// duration reads a positive Go duration ("500ms", "3s").
func (p *params) duration(name string) time.Duration {
	v, ok := p.str(name)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	switch {
	case p.err != nil:
	case err != nil || d <= 0:
		p.err = fmt.Errorf("query parameter %s=%s: want a positive duration such as 500ms or 3s", name, redact.Quote(v))
	case d > maxDuration:
		p.err = fmt.Errorf("query parameter %s=%v is above the maximum %v (365 days)", name, d, maxDuration)
	}
	return d
}

// nonNegInt reads an integer >= 0.
func (p *params) nonNegInt(name string) int {
	v, ok := p.str(name)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if (err != nil || n < 0) && p.err == nil {
		p.err = fmt.Errorf("query parameter %s=%q: want an integer >= 0", name, v)
	}
	return n
}

// done reports the first error, or the first parameter nobody asked for.
func (p *params) done(u *storeURL) error {
	if p.err != nil {
		return u.badf("%v", p.err)
	}
	var unknown []string
	for name := range p.vals {
		if !slices.Contains(p.asked, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	accepted := "none"
	if len(p.asked) > 0 {
		a := slices.Clone(p.asked)
		sort.Strings(a)
		accepted = strings.Join(slices.Compact(a), ", ")
	}
	return u.badf("unknown query parameter %q (%s:// accepts: %s)", unknown[0], u.scheme, accepted)
}

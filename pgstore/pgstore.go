package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock/driver"
)

// Defaults of Options.
const (
	DefaultSchema = "public"
	DefaultTable  = "tasklock_locks"
)

// Mode says what holds a lock: a lease row alone, or also a connection.
type Mode string

// The modes of a Store.
const (
	// ModeLease keeps each lock as a lease row whose expiry the database's
	// now() decides. Every call is one statement on any pooled connection.
	ModeLease Mode = "lease"
	// ModeConnection also binds each held lock to a connection of its own
	// holding a session advisory lock, so the server frees the lock the
	// moment the holder's connection ends. See the package documentation.
	ModeConnection Mode = "connection"
)

// maxIdent is the longest identifier PostgreSQL keeps (NAMEDATALEN - 1).
const maxIdent = 63

// versionsSuffix names the version table: <Table>_migrations.
const versionsSuffix = "_migrations"

// Options configures a Store. A nil *Options means all defaults; zero fields
// take their defaults. New never writes into it. Every Store, CLI and
// dashboard that works on the same locks must use the same Schema, Table and
// Channel.
type Options struct {
	// Schema holds the lease table. It must be a lowercase SQL identifier
	// ([a-z_][a-z0-9_]*). Default: DefaultSchema.
	Schema string
	// Table is the lease table's name, a lowercase SQL identifier of at
	// most 52 bytes (its version table is Table+"_migrations"). Default:
	// DefaultTable.
	Table string
	// Migrate makes New run Migrate (creating or upgrading the table)
	// before it returns. Without it the table must exist already.
	Migrate bool
	// Mode is ModeLease (the default when empty) or ModeConnection. Stores
	// of both modes may share a table safely: each respects the other's
	// leases; only a connection-mode Store takes over the key of a
	// connection-mode holder whose connection ended before its lease.
	Mode Mode
	// Channel is the LISTEN/NOTIFY channel releases are announced on: at
	// most 63 bytes of UTF-8. Default: derived from Schema and Table,
	// "tasklock.<schema>.<table>" (hashed down to 63 bytes when longer).
	Channel string
}

// resolved are validated options with everything derived from them.
type resolved struct {
	schema, tableName string
	table             string // quoted and schema-qualified
	versions          string // quoted and schema-qualified version table
	mode              Mode
	channel           string
	migrate           bool
	seed              int64 // advisory-lock hash seed: keeps tables and applications apart
}

// resolve validates opts and fills in the defaults, in a copy.
func resolve(pool *pgxpool.Pool, opts *Options) (resolved, error) {
	if pool == nil {
		return resolved{}, badOption("pool", "", "nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := checkIdent("Options.Schema", o.Schema, maxIdent); err != nil {
		return resolved{}, err
	}
	if err := checkIdent("Options.Table", o.Table, maxIdent-len(versionsSuffix)); err != nil {
		return resolved{}, err
	}
	switch o.Mode {
	case "":
		o.Mode = ModeLease
	case ModeLease, ModeConnection:
	default:
		return resolved{}, badOption("Options.Mode", string(o.Mode), "want %q or %q", ModeLease, ModeConnection)
	}
	if o.Channel == "" {
		o.Channel = defaultChannel(o.Schema, o.Table)
	}
	switch {
	case len(o.Channel) > maxIdent:
		return resolved{}, badOption("Options.Channel", o.Channel, "%d bytes long, the maximum is %d", len(o.Channel), maxIdent)
	case !utf8.ValidString(o.Channel):
		return resolved{}, badOption("Options.Channel", o.Channel, "not valid UTF-8")
	}
	for _, c := range o.Channel {
		if c == 0 {
			return resolved{}, badOption("Options.Channel", o.Channel, "contains NUL")
		}
	}
	h := fnv.New64a()
	h.Write([]byte(o.Schema + "." + o.Table))
	return resolved{
		schema:    o.Schema,
		tableName: o.Table,
		table:     pgx.Identifier{o.Schema, o.Table}.Sanitize(),
		versions:  pgx.Identifier{o.Schema, o.Table + versionsSuffix}.Sanitize(),
		mode:      o.Mode,
		channel:   o.Channel,
		migrate:   o.Migrate,
		seed:      int64(h.Sum64()),
	}, nil
}

// badOption returns the error for an invalid argument or option: a
// *driver.OptionError (tasklock.OptionError) naming field, with the
// offending value when value is not empty.
func badOption(field, value, format string, args ...any) error {
	return &driver.OptionError{Pkg: "pgstore", Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// checkIdent accepts lowercase identifiers that need no quoting, so that the
// names in psql and in the CLI are the names the store uses.
func checkIdent(field, s string, max int) error {
	if len(s) > max {
		return badOption(field, s, "%d bytes long, the maximum is %d", len(s), max)
	}
	for i, c := range s {
		ok := c == '_' || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return badOption(field, s, "want a lowercase SQL identifier ([a-z_][a-z0-9_]*)")
		}
	}
	return nil
}

// defaultChannel derives the channel from the table's name.
func defaultChannel(schema, table string) string {
	ch := "tasklock." + schema + "." + table
	if len(ch) <= maxIdent {
		return ch
	}
	h := fnv.New32a()
	h.Write([]byte(ch))
	return fmt.Sprintf("%s.%08x", ch[:maxIdent-9], h.Sum32())
}

// Store keeps tasklock leases in a PostgreSQL table through the caller's
// pgx pool. It implements driver.Store, driver.Batcher, driver.Notifier,
// driver.Lister, driver.ForceReleaser, driver.Kinder and
// driver.FairQueuer, and is safe for concurrent use. Create it with New.
type Store struct {
	pool    *pgxpool.Pool
	o       resolved
	sql     statements
	channel string // quoted for LISTEN
	conns   *registry
	wake    wakeups // wakes the Tickets of fair queues
	// lastHeld is whether the Store's last lease-mode Acquire found its
	// key held: the next one then goes straight to the statement that
	// also answers a refusal (see Acquire).
	lastHeld atomic.Bool
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Notifier      = (*Store)(nil)
	_ driver.Lister        = (*Store)(nil)
	_ driver.ForceReleaser = (*Store)(nil)
)

// New returns a Store that keeps its leases in the table named by opts, through
// pool. It validates opts and returns a *driver.OptionError naming the
// offending field. With Options.Migrate it runs Migrate first (bounded by a
// minute); otherwise it does not touch the database. The caller keeps ownership
// of pool: the Store never closes it. In connection mode each held lock takes a
// connection out of the pool (pgxpool.Conn.Hijack) while it is held, so held
// locks do not count against the pool's MaxConns but do against the server's
// max_connections; released ones are kept (at most 4, for at most 30 s) for
// later grants.
func New(pool *pgxpool.Pool, opts *Options) (*Store, error) {
	o, err := resolve(pool, opts)
	if err != nil {
		return nil, err
	}
	if o.migrate {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := migrateWith(ctx, pool, o, migrations); err != nil {
			return nil, err
		}
	}
	s := &Store{pool: pool, o: o, sql: buildStatements(tablesOf(o)), channel: pgx.Identifier{o.channel}.Sanitize()}
	s.wake.s = s
	if o.mode == ModeConnection {
		s.conns = newRegistry()
	}
	return s, nil
}

// Mode returns the Store's mode.
func (s *Store) Mode() Mode { return s.o.mode }

// Table returns the quoted, schema-qualified name of the lease table.
func (s *Store) Table() string { return s.o.table }

// Channel returns the LISTEN/NOTIFY channel releases are announced on.
func (s *Store) Channel() string { return s.o.channel }

// micros is d in whole microseconds, rounded up: the unit the statements
// take durations in.
func micros(d time.Duration) int64 { return driver.Units(d, time.Microsecond) }

// idleTimeout is the idle_session_timeout setting for a lease of d: d in
// whole milliseconds, rounded up. The setting cannot exceed 2^31-1 ms
// (about 24.8 days); a longer lease turns it off rather than cut the
// lease short, and then only the holder's renewals (or its connection
// ending) end the session.
func idleTimeout(d time.Duration) string {
	ms := driver.Units(d, time.Millisecond)
	if ms > math.MaxInt32 {
		ms = 0
	}
	return strconv.FormatInt(ms, 10)
}

// expiredHeldTTL is the TTL reported for a key whose lease has expired but
// that is not free yet: in connection mode, the server is ending the
// holder's session (idle_session_timeout fires just after the expiry); in
// lease mode, the holder's row changed after the statement's snapshot.
// Waiters then try again this soon rather than back off.
const expiredHeldTTL = 10 * time.Millisecond

// heldError builds the *driver.HeldError of an acquire that found the key
// held, from the holder's row when there is one.
func heldError(owner *string, ttlMicros *int64) *driver.HeldError {
	he := &driver.HeldError{}
	if owner != nil {
		he.Owner = *owner
	}
	switch {
	case ttlMicros == nil:
	case *ttlMicros > 0:
		he.TTL = time.Duration(*ttlMicros) * time.Microsecond
	default:
		he.TTL = expiredHeldTTL
	}
	return he
}

// wrap adds the operation and, when the table is missing, what to do.
func (s *Store) wrap(op string, key string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return fmt.Errorf("pgstore: %s %q: %s %w: %w", op, key, s.o.table, errNoTable, err)
	}
	if key == "" {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return fmt.Errorf("pgstore: %s %q: %w", op, key, err)
}

// Acquire implements driver.Store in one statement (a read-write lock's
// or a semaphore's: one pipeline of two): see the package documentation
// for what each mode does. In lease mode a grant is one statement, and so
// is a refusal that follows one; a refusal that follows a grant is two.
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	switch {
	case p.Mode != driver.ModeMutex:
		return s.acquireKind(ctx, p)
	case s.conns != nil:
		return s.acquireConn(ctx, p, s.sql.acquireConn, s.acquireConnArgs(p))
	}
	// On a connection of its own rather than with Pool.QueryRow: pgxpool
	// keeps the last rows of each connection (with their arguments) for
	// reuse, which would keep every held lock's key and token alive.
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return driver.Grant{}, s.wrap("acquire", p.Key, err)
	}
	defer c.Release()
	ttl := micros(p.TTL)
	// The grant alone first, unless the last Acquire was refused (a
	// waiter polling): it costs the server less than acquire, which also
	// answers a refusal (see grant in buildStatements). When it finds the
	// key held it changes nothing, and acquire, run next, sets the
	// waiters flag and names the holder, or takes the key if its lease
	// ended in between.
	if !s.lastHeld.Load() {
		var fence int64
		err := c.Conn().QueryRow(ctx, s.sql.grant, p.Key, p.Token, p.Owner, ttl).Scan(&fence)
		switch {
		case err == nil:
			return driver.Grant{Fence: uint64(fence)}, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return driver.Grant{}, s.wrap("acquire", p.Key, err)
		}
	}
	var r acquireRow
	err = c.Conn().QueryRow(ctx, s.sql.acquire, p.Key, p.Token, p.Owner, ttl).Scan(r.dest()...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// An upsert always returns its row; kept for safety.
		return driver.Grant{}, &driver.HeldError{}
	case err != nil:
		return driver.Grant{}, s.wrap("acquire", p.Key, err)
	}
	s.lastHeld.Store(r.fence == nil)
	return r.result()
}

// acquireRow is the reply of a lease-mode acquire (see acquireReply in
// statements.go), for one item.
type acquireRow struct {
	fence, ttl *int64
	owner      *string
}

// dest returns the scan destinations of the reply's columns.
func (r *acquireRow) dest() []any { return []any{&r.fence, &r.owner, &r.ttl} }

// result is the grant, or the *driver.HeldError naming the holder.
func (r *acquireRow) result() (driver.Grant, error) {
	if r.fence == nil {
		return driver.Grant{}, heldError(r.owner, r.ttl)
	}
	return driver.Grant{Fence: uint64(*r.fence)}, nil
}

// Renew implements driver.Store. In lease mode the whole batch is one
// UPDATE over unnest()ed arrays, locking its rows in key order (a batch
// that mixes mutexes and other modes: one statement of two UPDATEs); in
// connection mode each mutex's own connection runs its renewal (a ping
// that also extends the row), at most maxPings at a time, and the other
// modes' holds are one UPDATE.
//
// The statements run on a connection of their own: pgxpool's Query
// would keep the rows, and with them the batch's arrays, for reuse (see
// Acquire). And in the simple protocol, whose query text is dropped once
// sent: the extended protocol's parameter buffers of a connection keep the
// last batch it encoded (all its keys and tokens, ~60 kB for 1,000 leases)
// until that connection's next query, which could be one renewal cycle
// away on each of the pool's connections. Each statement is still one
// round trip.
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	if len(ps) == 0 {
		return []error{}, nil
	}
	var (
		res []error
		err error
	)
	mutexes := allMutexes(len(ps), func(i int) driver.Mode { return ps[i].Mode })
	switch {
	case mutexes && s.conns != nil:
		return s.renewConns(ctx, ps)
	case mutexes:
		res, err = s.renewWith(ctx, s.sql.renew, ps, false)
	case s.conns == nil:
		res, err = s.renewWith(ctx, s.sql.renewMixed, ps, true)
	default:
		res, err = s.renewConnsAndKinds(ctx, ps)
	}
	if err != nil {
		return nil, s.wrap("renew", "", err)
	}
	return res, nil
}

// renewConnsAndKinds is a connection-mode Renew of a batch with holds of
// other modes than mutexes: one UPDATE for those, and a ping on each
// mutex's connection.
func (s *Store) renewConnsAndKinds(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	var mutexes, kinds []int
	for i := range ps {
		if ps[i].Mode == driver.ModeMutex {
			mutexes = append(mutexes, i)
		} else {
			kinds = append(kinds, i)
		}
	}
	kres, err := s.renewWith(ctx, s.sql.renewKinds, pick(ps, kinds), true)
	if err != nil {
		return nil, err
	}
	mres, err := s.renewConns(ctx, pick(ps, mutexes))
	if err != nil {
		return nil, err
	}
	res := make([]error, len(ps))
	for j, i := range kinds {
		res[i] = kres[j]
	}
	for j, i := range mutexes {
		res[i] = mres[j]
	}
	return res, nil
}

// pick returns the items at of ps.
func pick(ps []driver.RenewParams, at []int) []driver.RenewParams {
	out := make([]driver.RenewParams, len(at))
	for j, i := range at {
		out[j] = ps[i]
	}
	return out
}

// Release implements driver.Store: one token-checked UPDATE that ends the
// lease (token NULL, expires_at now(), or now()+KeepFor) and, for a plain
// release of a key an acquire found held meanwhile, NOTIFYs the channel in
// the same statement. In connection mode it runs on the lock's connection,
// also unlocks the advisory lock, and then parks that connection.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	switch {
	case p.Mode != driver.ModeMutex:
		return s.releaseKind(ctx, p)
	case s.conns != nil:
		return s.releaseConn(ctx, p)
	}
	var (
		tag pgconn.CommandTag
		err error
	)
	if p.KeepFor <= 0 {
		tag, err = s.pool.Exec(ctx, s.sql.releaseNow, p.Key, p.Token, s.o.channel)
	} else {
		tag, err = s.pool.Exec(ctx, s.sql.release, p.Key, p.Token, micros(p.KeepFor), s.o.channel)
	}
	if err != nil {
		return s.wrap("release", p.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/driver"
)

// DefaultTable is the lock table's name when Options.Table is empty.
const DefaultTable = "tasklock_locks"

// Limits of what the lock table can hold.
const (
	MaxKeyLength   = 512 // bytes: lock_key VARBINARY(512)
	MaxTokenLength = 128 // bytes: token VARBINARY(128)
	MaxOwnerLength = 256 // characters: owner VARCHAR(256)
)

// maxTableLength leaves room for the migration table's suffix within
// MySQL's 64-character identifiers.
const maxTableLength = 64 - len(migrationsSuffix)

// ErrClosed is returned by Acquire on a Store after Close.
var ErrClosed = errors.New("mysqlstore: store closed")

// Mode says how a Store holds a lock; see the package documentation.
type Mode string

const (
	// ModeLease keeps a lease row per key whose expiry the database's
	// clock decides. It is the default.
	ModeLease Mode = "lease"
	// ModeConnection holds each lock with GET_LOCK on a dedicated
	// connection, so the server frees it when the holder's session ends.
	ModeConnection Mode = "connection"
)

// Options configures a Store. A nil *Options means all defaults; zero fields
// take their defaults. New never writes into it. The fields map one-to-one
// to the CLI's flags.
type Options struct {
	// Table is the lock table: an unquoted identifier of letters, digits
	// and '_', at most 53 bytes (the migration table is Table+"_migrations").
	// Default: DefaultTable.
	Table string
	// Migrate makes New apply pending migrations (see Migrate) before it
	// returns. Default: false; run Migrate, or `tasklock migrate up`, once
	// per deployment instead.
	Migrate bool
	// Mode is ModeLease ("lease") or ModeConnection ("connection").
	// Default: ModeLease. Use one mode per table.
	Mode Mode
}

// config is the validated form of Options.
type config struct {
	table string
	mode  Mode
}

func resolve(db *sql.DB, opts *Options) (config, error) {
	c := config{table: DefaultTable, mode: ModeLease}
	if db == nil {
		return c, badOption("db", "", "nil")
	}
	if opts == nil {
		return c, nil
	}
	if opts.Table != "" {
		if err := validateTable(opts.Table); err != nil {
			return c, err
		}
		c.table = opts.Table
	}
	switch opts.Mode {
	case "":
	case ModeLease, ModeConnection:
		c.mode = opts.Mode
	default:
		return c, badOption("Options.Mode", string(opts.Mode), "want %q or %q", ModeLease, ModeConnection)
	}
	return c, nil
}

// badOption returns the error for an invalid argument or option: a
// *driver.OptionError (tasklock.OptionError) naming field, with the
// offending value when value is not empty.
func badOption(field, value, format string, args ...any) error {
	return &driver.OptionError{Pkg: "mysqlstore", Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// validateTable accepts the identifiers the store can embed in SQL without
// quoting problems: [A-Za-z0-9_]+, not all digits, at most maxTableLength.
func validateTable(name string) error {
	if len(name) > maxTableLength {
		return badOption("Options.Table", name, "%d bytes long, the maximum is %d", len(name), maxTableLength)
	}
	digits := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
			digits = false
		default:
			return badOption("Options.Table", name, "only letters, digits and '_' are allowed")
		}
	}
	if digits {
		return badOption("Options.Table", name, "must not be all digits")
	}
	return nil
}

// Store keeps tasklock leases in a MySQL or MariaDB table through the
// caller's *sql.DB. It implements driver.Store, driver.Lister,
// driver.ForceReleaser, driver.Batcher, driver.Kinder, driver.FairQueuer
// and ledger.Ledger, and is safe for concurrent use. Create it with New.
type Store struct {
	db    *sql.DB
	table string // validated, unquoted
	qt    string // "`table`"
	mode  Mode
	// The tables of read-write locks and semaphores and of the fair queue,
	// quoted: "`table_kinds`", "`table_holds`", "`table_queue`" (see
	// migration 005_kinds).
	qKinds, qHolds, qQueue string

	// dialect is what the server's SQL allows beyond the common subset,
	// learnt on first use (see returning).
	dialect atomic.Int32
	// lastHeld is whether the Store's last lease-mode Acquire found its
	// key held: the next then asks with RETURNING on MariaDB (see
	// leaseAcquire).
	lastHeld atomic.Bool
	// start is the SQL expression of the server's start time, checked on
	// first use in connection mode (see startSQL).
	start atomic.Pointer[string]

	// Connection mode: the connection holding each lock, by token, and the
	// timer that closes those whose lease ended unreleased (see expire).
	mu    sync.Mutex
	held  map[string]*heldConn
	spare []*spareConn // kept for the next holds, oldest first (see holdConn)
	// spareIdle is how long a connection is kept: spareIdle, the constant,
	// but for tests.
	spareIdle time.Duration
	timer     *time.Timer
	timerAt   time.Time // when timer fires; zero when it is not armed
	closed    bool
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Lister        = (*Store)(nil)
	_ driver.ForceReleaser = (*Store)(nil)
)

// New returns a Store that keeps its locks in db, which must be a
// go-sql-driver/mysql pool on MySQL 8 or MariaDB 10.6 or later, with a default
// database. New validates opts and returns a *driver.OptionError naming the
// offending field. With Options.Migrate it applies pending migrations first
// (bounded by one minute); otherwise it makes no round trip.
//
// The caller keeps ownership of db: the Store never closes it. DSN settings
// such as parseTime, clientFoundRows, interpolateParams and multiStatements
// make no difference to the Store. In connection mode each held lock keeps
// one of db's connections checked out, and the Store keeps up to 16 more
// (at most half of MaxOpenConns) for half a second after their locks'
// release, so db.SetMaxOpenConns must leave room for every lock held at
// once plus the connections other calls need.
func New(db *sql.DB, opts *Options) (*Store, error) {
	c, err := resolve(db, opts)
	if err != nil {
		return nil, err
	}
	if opts != nil && opts.Migrate {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := Migrate(ctx, db, opts); err != nil {
			return nil, err
		}
	}
	s := &Store{db: db, table: c.table, qt: "`" + c.table + "`", mode: c.mode,
		qKinds: "`" + c.table + "_kinds`", qHolds: "`" + c.table + "_holds`", qQueue: "`" + c.table + "_queue`"}
	if c.mode == ModeConnection {
		s.held = make(map[string]*heldConn)
		s.spareIdle = spareIdle
	}
	return s, nil
}

// Mode returns the store's mode.
func (s *Store) Mode() Mode { return s.mode }

// Table returns the name of the store's lock table.
func (s *Store) Table() string { return s.table }

// Acquire implements driver.Store. See the package documentation for the
// statements and round trips of each mode.
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if err := checkAcquire(p); err != nil {
		return driver.Grant{}, err
	}
	switch {
	case p.Mode != driver.ModeMutex:
		return s.kindAcquire(ctx, p)
	case s.mode == ModeConnection:
		return s.connAcquire(ctx, p)
	}
	return s.leaseAcquire(ctx, p)
}

// Renew implements driver.Store.
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	if len(ps) == 0 {
		return []error{}, nil
	}
	for _, p := range ps {
		if p.TTL <= 0 {
			return nil, fmt.Errorf("mysqlstore: renew %q: TTL is %v, must be positive", p.Key, p.TTL)
		}
	}
	if s.mode == ModeConnection {
		return s.connRenew(ctx, ps)
	}
	return s.leaseRenew(ctx, ps)
}

// Release implements driver.Store.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	switch {
	case p.Mode != driver.ModeMutex:
		return s.kindRelease(ctx, p)
	case s.mode == ModeConnection:
		return s.connRelease(ctx, p)
	}
	return s.leaseRelease(ctx, p)
}

// ForceRelease implements driver.ForceReleaser: it ends the lock on key
// whoever holds it: in lease mode the mutex's lease and every entry of the
// read-write lock or semaphore of that name. The fence counters stay, so
// the next grant's fence is still higher. It returns driver.ErrNotHeld
// when nothing of key is held. In connection mode it kills the holder's
// connection (KILL CONNECTION, which needs the same user or the
// CONNECTION ADMIN privilege).
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	if s.mode == ModeConnection {
		return s.connForceRelease(ctx, key)
	}
	return s.leaseForceRelease(ctx, key)
}

// Leases implements driver.Lister: the live locks whose key starts with
// prefix, sorted by key, in one SELECT; in lease mode each holder of a
// read-write lock or semaphore, and each writer waiting for one, too. In
// connection mode it asks the
// server, row by row, whether each key's lock is in use (IS_USED_LOCK), and
// a lock's TTL is 0 (it lasts as long as its connection); a key kept after
// a server restart (see "Server restarts" in the package documentation) is
// listed with the time it stays unavailable. It is meant for the CLI and
// the dashboard.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	if s.mode == ModeConnection {
		return s.connLeases(ctx, prefix)
	}
	return s.leaseLeases(ctx, prefix)
}

// queryLeases runs q, a SELECT of lock_key, owner, fence, the µs left of
// the row's lease, whether the key's GET_LOCK is in use (connection mode;
// FALSE in lease mode), and the mode, limit and state of an entry of a
// read-write lock or semaphore (0, 0, 0 for a mutex). It lists each row
// whose lock is in use, with TTL 0 (it lasts as long as its session), and
// each other row whose lease is still running, with the time left.
func (s *Store) queryLeases(ctx context.Context, q string) ([]driver.Lease, error) {
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, s.wrap("list leases", err)
	}
	defer rows.Close()
	var out []driver.Lease
	for rows.Next() {
		var key []byte
		var l driver.Lease
		var us int64
		var used bool
		var mode uint8
		var state int
		if err := rows.Scan(&key, &l.Owner, &l.Fence, &us, &used, &mode, &l.Limit, &state); err != nil {
			return nil, s.wrap("list leases", err)
		}
		if !used && us <= 0 {
			continue
		}
		l.Key = string(key)
		l.Mode = driver.Mode(mode)
		l.Waiting = state == stateWaiting
		if !used {
			l.TTL = fromMicros(us)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("list leases", err)
	}
	return out, nil
}

func checkAcquire(p driver.AcquireParams) error {
	switch {
	case p.Key == "":
		return errors.New("mysqlstore: acquire: empty key")
	case len(p.Key) > MaxKeyLength:
		return fmt.Errorf("mysqlstore: acquire: key is %d bytes long, the maximum is %d", len(p.Key), MaxKeyLength)
	case p.Token == "" || len(p.Token) > MaxTokenLength:
		return fmt.Errorf("mysqlstore: acquire %q: token must be 1 to %d bytes long", p.Key, MaxTokenLength)
	case !utf8.ValidString(p.Owner):
		return fmt.Errorf("mysqlstore: acquire %q: owner is not valid UTF-8", p.Key)
	case utf8.RuneCountInString(p.Owner) > MaxOwnerLength:
		return fmt.Errorf("mysqlstore: acquire %q: owner is longer than %d characters", p.Key, MaxOwnerLength)
	case p.TTL <= 0:
		return fmt.Errorf("mysqlstore: acquire %q: TTL is %v, must be positive", p.Key, p.TTL)
	}
	return nil
}

// wrap adds the operation to an error from the database, and a hint when
// the lock table does not exist.
func (s *Store) wrap(op string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erNoSuchTable {
		return fmt.Errorf("mysqlstore: %s: table %s is missing; run mysqlstore.Migrate or set Options.Migrate: %w", op, s.qt, err)
	}
	return fmt.Errorf("mysqlstore: %s: %w", op, err)
}

// MySQL error numbers the store looks at.
const (
	erNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
	erNoSuchThread = 1094 // ER_NO_SUCH_THREAD (KILL of a gone connection)
)

// SQL building. Statements go to the server as text without placeholders:
// every key, token and owner is written as a hexadecimal literal (X'…'),
// which cannot break out of the literal whatever its bytes, and durations as
// integers. A statement without arguments is one COM_QUERY, one round trip,
// whatever the DSN's interpolateParams says; with placeholders and server
// side prepared statements it would be three packets and two round trips.

// appendHex appends s as the binary literal X'…'.
func appendHex(b []byte, s string) []byte {
	b = append(b, "X'"...)
	b = hex.AppendEncode(b, []byte(s))
	return append(b, '\'')
}

// appendText appends s as a utf8mb4 string literal: _utf8mb4 X'…'.
func appendText(b []byte, s string) []byte {
	b = append(b, "_utf8mb4 "...)
	return appendHex(b, s)
}

// appendExpiry appends "UTC_TIMESTAMP(6) + INTERVAL n MICROSECOND" for d.
func appendExpiry(b []byte, d time.Duration) []byte {
	return appendExpiryUS(b, micros(d))
}

// appendExpiryUS appends "UTC_TIMESTAMP(6) + INTERVAL us MICROSECOND".
func appendExpiryUS(b []byte, us int64) []byte {
	b = append(b, "UTC_TIMESTAMP(6) + INTERVAL "...)
	b = strconv.AppendInt(b, us, 10)
	return append(b, " MICROSECOND"...)
}

// appendExpiresBy appends the value a multi-row UPDATE assigns to the
// expires_at of the table aliased alias ("" or "m." and so on): expr(b, i)
// is the value for the row whose column col is vals[i]. When every row's
// is the same it appends that value alone, otherwise "CASE alias.col WHEN
// vals[0] THEN expr(0) … ELSE alias.expires_at END".
func appendExpiresBy(b []byte, alias, col string, vals []string, expr func(b []byte, i int) []byte) []byte {
	first := expr(nil, 0)
	var scratch []byte
	same := true
	for i := 1; i < len(vals) && same; i++ {
		scratch = expr(scratch[:0], i)
		same = string(scratch) == string(first)
	}
	if same {
		return append(b, first...)
	}
	b = append(b, "CASE "...)
	b = append(b, alias...)
	b = append(b, col...)
	for i, v := range vals {
		b = append(b, " WHEN "...)
		b = appendHex(b, v)
		b = append(b, " THEN "...)
		b = expr(b, i)
	}
	b = append(b, " ELSE "...)
	b = append(b, alias...)
	return append(b, "expires_at END"...)
}

// acquireExpired is true of a row whose lease has ended: an acquire, in
// either mode, takes it over.
const acquireExpired = "expires_at <= UTC_TIMESTAMP(6)"

// appendAcquireInsert appends the start of either mode's acquire
// statement: "INSERT INTO t (lock_key, token, owner, fence, acquired_at,
// expires_at) ". The rows follow (see appendAcquireRow).
func (s *Store) appendAcquireInsert(b []byte) []byte {
	b = append(b, "INSERT INTO "...)
	b = append(b, s.qt...)
	return append(b, " (lock_key, token, owner, fence, acquired_at, expires_at) "...)
}

// appendInsertValues appends appendAcquireInsert's text and "VALUES
// (row 0), (row 1), …" for n rows, row(b, i) appending the values of row
// i.
func (s *Store) appendInsertValues(b []byte, n int, row func(b []byte, i int) []byte) []byte {
	b = s.appendAcquireInsert(b)
	b = append(b, "VALUES "...)
	for i := range n {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(row(append(b, '('), i), ')')
	}
	return b
}

// appendAcquireRow appends p's row of an acquire statement up to its
// expires_at: "key, token, owner, LAST_INSERT_ID(1), UTC_TIMESTAMP(6), ".
func appendAcquireRow(b []byte, p driver.AcquireParams) []byte {
	b = appendHex(b, p.Key)
	b = append(b, ", "...)
	b = appendHex(b, p.Token)
	b = append(b, ", "...)
	b = appendText(b, p.Owner)
	return append(b, ", LAST_INSERT_ID(1), UTC_TIMESTAMP(6), "...)
}

// appendAcquireTakeover appends the ON DUPLICATE KEY UPDATE assignments
// that follow fence's in either mode's acquire statement: an expired row
// gets the token and owner of the row the statement tried to insert (the
// SQL expressions token and owner), is acquired now and expires at expiry
// (an SQL expression); a live row keeps its values. expires_at is assigned
// last, as the conditions before it read the old value (see leaseAcquire).
func appendAcquireTakeover(b []byte, token, owner, expiry []byte) []byte {
	b = append(b, ", token = IF("+acquireExpired+", "...)
	b = append(b, token...)
	b = append(b, ", token), owner = IF("+acquireExpired+", "...)
	b = append(b, owner...)
	b = append(b, ", owner), acquired_at = IF("+acquireExpired+", UTC_TIMESTAMP(6), acquired_at), expires_at = IF("+acquireExpired+", "...)
	b = append(b, expiry...)
	return append(b, ", expires_at)"...)
}

// appendReleaseUpdate appends the start of either mode's release
// statement, "UPDATE t SET token = <empty>, expires_at = …", for the
// leases of keys: it clears the token, so that the released token can
// renew or release nothing more, and ends each row's lease now or, for
// MinHold, keepFor[i] from now.
func (s *Store) appendReleaseUpdate(b []byte, keys []string, keepFor []time.Duration) []byte {
	b = append(b, "UPDATE "...)
	b = append(b, s.qt...)
	b = append(b, " SET token = '', expires_at = "...)
	return appendExpiresBy(b, "", "lock_key", keys, func(b []byte, i int) []byte { return appendReleaseExpiry(b, keepFor[i]) })
}

// appendReleaseExpiry appends the expires_at a release leaves: now, or
// now + keep for a MinHold still to run.
func appendReleaseExpiry(b []byte, keep time.Duration) []byte {
	if keep > 0 {
		return appendExpiry(b, keep)
	}
	return append(b, "UTC_TIMESTAMP(6)"...)
}

// micros converts d to whole microseconds, rounding up so that the database
// never keeps a lease shorter than asked.
func micros(d time.Duration) int64 { return driver.Units(d, time.Microsecond) }

// fromMicros converts a TIMESTAMPDIFF in microseconds to a duration.
func fromMicros(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration(us) * time.Microsecond
}

// appendPrefixFilter appends " AND lock_key >= X'p' AND LEFT(lock_key, n) =
// X'p'" for a non-empty prefix: a range the primary key can serve, and the
// exact byte-wise test.
func appendPrefixFilter(b []byte, prefix string) []byte {
	if prefix == "" {
		return b
	}
	b = append(b, " AND lock_key >= "...)
	b = appendHex(b, prefix)
	b = append(b, " AND LEFT(lock_key, "...)
	b = strconv.AppendInt(b, int64(len(prefix)), 10)
	b = append(b, ") = "...)
	return appendHex(b, prefix)
}

// isConnErr reports whether err means the connection is broken or was
// closed, so that its session, and any GET_LOCK it held, is gone or going.
func isConnErr(err error) bool {
	var ne net.Error
	return errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, mysql.ErrInvalidConn) ||
		isBadConn(err) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &ne) ||
		strings.Contains(err.Error(), "broken pipe") ||
		strings.Contains(err.Error(), "connection reset")
}

package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/tasklock/tasklock/driver"
)

// DefaultTable is the lock table when Options.Table is empty.
const DefaultTable = "tasklock_locks"

// DefaultBusyTimeout is the busy_timeout Open sets when
// Options.BusyTimeout is zero.
const DefaultBusyTimeout = 5 * time.Second

// checkTimeout bounds the checks and migrations New runs.
const checkTimeout = 30 * time.Second

// ErrBusy is wrapped by the errors a Store returns when SQLite stayed busy
// (another connection held the write lock) for longer than the connection's
// busy_timeout, or reported the database locked. Nothing was changed; the
// error is transient and the Locker retries it.
var ErrBusy = errors.New("sqlitestore: database busy")

// ErrNotMigrated is wrapped by the error New returns when Options.Migrate is
// off and the database lacks migrations this package needs: run Migrate
// (`tasklock migrate up`) or set Options.Migrate.
var ErrNotMigrated = errors.New("sqlitestore: schema not migrated")

// Options configures a Store, Open, Migrate and MigrationStatus. A nil
// *Options means all defaults; zero fields take their defaults. Nothing in
// this package writes into it.
type Options struct {
	// Table is the lock table; its applied migrations are kept in
	// Table+"_migrations". It must be a lowercase SQL identifier
	// ([a-z_][a-z0-9_]*) of at most 52 bytes — pgstore's rule, so a
	// configuration moves between stores — not starting with "sqlite_"
	// (reserved by SQLite). Default: DefaultTable.
	Table string

	// Migrate makes New apply pending migrations before it returns. When
	// off, New fails with ErrNotMigrated if any is pending.
	Migrate bool

	// BusyTimeout is how long a connection opened by Open waits for
	// another connection's write lock before giving up with ErrBusy
	// (PRAGMA busy_timeout, in whole milliseconds). Only Open uses it.
	// Default: DefaultBusyTimeout.
	BusyTimeout time.Duration

	// SyncFull makes Open set synchronous=FULL instead of NORMAL: every
	// commit is fsynced, so grants and fences also survive power loss and
	// OS crashes, at the cost of one fsync per acquire, renewal and
	// release. Only Open uses it. See "Durability" in the package
	// documentation.
	SyncFull bool
}

// config is a validated Options.
type config struct {
	table    string // as given, unquoted
	quoted   string // "table"
	versions string // "table_migrations"
	migrate  bool
	busy     time.Duration
	syncFull bool
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,51}$`)

// badOption returns the error for an invalid argument or option: a
// *driver.OptionError (tasklock.OptionError) naming field, with the
// offending value when value is not empty.
func badOption(field, value, format string, args ...any) error {
	return &driver.OptionError{Pkg: "sqlitestore", Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// resolve validates opts and fills in defaults, without writing to opts.
func resolve(opts *Options) (config, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	c := config{table: DefaultTable, migrate: o.Migrate, busy: DefaultBusyTimeout, syncFull: o.SyncFull}
	if o.Table != "" {
		switch {
		case !identRE.MatchString(o.Table):
			return c, badOption("Options.Table", o.Table, "want a lowercase SQL identifier ([a-z_][a-z0-9_]*) of at most 52 bytes")
		case strings.HasPrefix(o.Table, "sqlite_"):
			return c, badOption("Options.Table", o.Table, "names starting with \"sqlite_\" are reserved by SQLite")
		}
		c.table = o.Table
	}
	switch {
	case o.BusyTimeout < 0:
		return c, badOption("Options.BusyTimeout", "", "%v is negative", o.BusyTimeout)
	case o.BusyTimeout > 0 && o.BusyTimeout < time.Millisecond:
		return c, badOption("Options.BusyTimeout", "", "%v is below the minimum 1ms (SQLite counts whole milliseconds)", o.BusyTimeout)
	case o.BusyTimeout > 0:
		c.busy = o.BusyTimeout
	}
	c.quoted = `"` + c.table + `"`
	c.versions = `"` + c.table + `_migrations"`
	return c, nil
}

// nowUS is SQLite's clock, the host's wall clock, as integer unix
// microseconds. SQLite reads the clock in whole milliseconds
// (unixepoch('subsec') has three decimals), so rounding the milliseconds
// recovers the exact reading; the value is the same for every use within
// one sqlite3_step, so one statement sees one instant.
const nowUS = "(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)"

// Store keeps leases in a SQLite database. It implements driver.Store,
// driver.Lister, driver.ForceReleaser, driver.Batcher, driver.Kinder
// (read-write locks and semaphores) and driver.FairQueuer (not
// driver.Notifier: waiters poll), and is safe for concurrent use. Create it
// with New.
type Store struct {
	db    *sql.DB
	table string // quoted

	acquireSQL, holderSQL, renewSQL, releaseSQL, forceSQL, leasesSQL string

	// st are the statements above, prepared once on db: each connection
	// keeps them compiled (see "Statements per operation").
	// Closed when the Store is garbage collected (the caller keeps the
	// *sql.DB, and may drop the Store), or with the *sql.DB.
	st *prepared

	ledger *ledgerSQL // the tick ledger's statements (ledger.go)
	kinds  *kindsSQL  // read-write locks, semaphores, fair queues (kinds.go, fair.go)

	// wake wakes the fair Tickets waiting in this Store when it releases
	// their key (fair.go).
	wake wakeups

	// wturn is the Store's write turn, a semaphore held by each of its
	// statements that write leases (see write).
	wturn chan struct{}
}

// prepared are a Store's prepared statements.
type prepared struct {
	acquire, holder, renew, release, force, leases *sql.Stmt

	mu      sync.Mutex
	batches map[batchShape]*sql.Stmt // the batches' statements, prepared on first use
}

// batchShape names one of the batches' multi-row statements: what it does
// and its rows.
type batchShape struct {
	release bool // false: acquire
	rows    int
}

// close closes every statement (nil ones are skipped).
func (p *prepared) close() {
	for _, st := range []*sql.Stmt{p.acquire, p.holder, p.renew, p.release, p.force, p.leases} {
		if st != nil {
			_ = st.Close()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.batches {
		_ = st.Close()
	}
	p.batches = nil
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Lister        = (*Store)(nil)
	_ driver.ForceReleaser = (*Store)(nil)
)

// New returns a Store that keeps its leases in db, a database opened with
// the "sqlite" driver of modernc.org/sqlite — best with Open, which sets
// the pragmas every connection needs. The caller keeps ownership of db: the
// Store never closes it.
//
// New validates opts (a *driver.OptionError names the offending field) and then
// checks the database on one connection, within 30 seconds: that it can be
// opened and read, that busy_timeout is set (without it, concurrent writers
// fail at once instead of waiting their turn), and that the schema is migrated
// — with Options.Migrate it applies pending migrations first, otherwise it
// fails with an error wrapping ErrNotMigrated.
func New(db *sql.DB, opts *Options) (*Store, error) {
	if db == nil {
		return nil, badOption("db", "", "nil")
	}
	c, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := checkConn(ctx, db); err != nil {
		return nil, err
	}
	if c.migrate {
		if err := migrate(ctx, db, c); err != nil {
			return nil, err
		}
	} else {
		states, err := status(ctx, db, c)
		if err != nil {
			return nil, err
		}
		var missing []string
		for _, s := range states {
			if !s.Applied {
				missing = append(missing, fmt.Sprintf("%04d_%s", s.Version, s.Name))
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: table %s lacks migrations %s: run Migrate (tasklock migrate up) or set Options.Migrate",
				ErrNotMigrated, c.table, strings.Join(missing, ", "))
		}
	}
	s := newStore(db, c)
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// prepare prepares the Store's statements on db and arranges for them to
// be closed when the Store is collected.
func (s *Store) prepare(ctx context.Context) error {
	p := &prepared{}
	for _, x := range []struct {
		st **sql.Stmt
		q  string
	}{
		{&p.acquire, s.acquireSQL}, {&p.holder, s.holderSQL}, {&p.renew, s.renewSQL},
		{&p.release, s.releaseSQL}, {&p.force, s.forceSQL}, {&p.leases, s.leasesSQL},
	} {
		st, err := s.db.PrepareContext(stmtCtx(ctx), x.q)
		if err != nil {
			p.close()
			return wrap(ctx, "prepare", "statements", err)
		}
		*x.st = st
	}
	s.st = p
	runtime.AddCleanup(s, func(p *prepared) { p.close() }, p)
	return nil
}

// checkConn checks that db can be opened and read, and that busy_timeout
// is set on (one of) its connections.
func checkConn(ctx context.Context, db *sql.DB) error {
	var busy int64
	if err := db.QueryRowContext(stmtCtx(ctx), "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return openError("check database", "", err)
	}
	if busy <= 0 {
		return errors.New("sqlitestore: busy_timeout is 0 on the database's connections, so concurrent writers would fail at once: open it with sqlitestore.Open or add _pragma=busy_timeout(5000) to the DSN")
	}
	return nil
}

func newStore(db *sql.DB, c config) *Store {
	t := c.quoted
	k := newKindsSQL(c, t)
	return &Store{
		db:         db,
		table:      t,
		ledger:     newLedgerSQL(c),
		kinds:      k,
		wturn:      make(chan struct{}, 1),
		acquireSQL: acquireSQL(t, 1, fenceColumn),
		holderSQL:  `SELECT owner, expires_at - ` + nowUS + ` FROM ` + t + ` WHERE "key" = ?1`,
		// One statement renews the whole batch: ?1 is a JSON array of
		// {"k": key, "t": token, "d": ttl in µs}; every row looked up by
		// primary key. It returns the (key, token) of every lease renewed.
		renewSQL: `UPDATE ` + t + ` SET expires_at = ` + nowUS + ` + (r.value ->> '$.d')
FROM json_each(?1) AS r
WHERE ` + t + `."key" = (r.value ->> '$.k') AND ` + t + `.token = (r.value ->> '$.t')
  AND ` + t + `.expires_at > ` + nowUS + `
RETURNING "key", token`,
		releaseSQL: releaseOneSQL(t),
		forceSQL: `UPDATE ` + t + ` SET token = '', expires_at = ` + nowUS + `
WHERE "key" = ?1 AND expires_at > ` + nowUS,
		// The live mutexes, then the live entries of read-write locks and
		// semaphores, as (key, owner, fence, µs left, mode, lim, waiting).
		leasesSQL: `SELECT "key", owner, fence, expires_at - ` + nowUS + `, 0, 0, 0 FROM ` + t + `
WHERE expires_at > ` + nowUS + ` AND "key" >= ?1 AND substr("key", 1, length(?1)) = ?1
UNION ALL
SELECT "key", owner, fence, expires_at - ` + nowUS + `, mode, lim, state = 1 FROM ` + k.entries + `
WHERE expires_at > ` + nowUS + ` AND "key" >= ?1 AND substr("key", 1, length(?1)) = ?1
ORDER BY 1, 5`,
	}
}

// acquireSQL is the acquire statement, for n keys: one INSERT … ON
// CONFLICT DO UPDATE whose ith row (from 0) takes the parameters
// ?(4i+1) key, ?(4i+2) token, ?(4i+3) owner and ?(4i+4) TTL in µs
// (acquireArgs). It grants each free or expired key, bumping the fence
// kept in its row, and changes nothing for a held one; it returns ret, the
// columns of each grant: "key", token, fence for a batch (scanGrant), the
// fence alone for a single call, which knows its key and token (fewer
// columns for the driver to copy out). excluded.acquired_at is the
// statement's now, the same for every row. Rows are inserted in order, so
// a key named twice goes to its first row, whose fresh lease the later one
// finds live.
func acquireSQL(t string, n int, ret string) string {
	var b strings.Builder
	b.Grow(400 + n*(2*len(nowUS)+40))
	b.WriteString(`INSERT INTO ` + t + ` AS l ("key", token, owner, fence, acquired_at, expires_at)
VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(",\n  ")
		}
		p := 4 * i
		fmt.Fprintf(&b, "(?%d, ?%d, ?%d, 1, %s, %s + ?%d)", p+1, p+2, p+3, nowUS, nowUS, p+4)
	}
	b.WriteString(`
ON CONFLICT ("key") DO UPDATE SET
  token = excluded.token, owner = excluded.owner, fence = l.fence + 1,
  acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
WHERE l.expires_at <= excluded.acquired_at
RETURNING ` + ret)
	return b.String()
}

// The RETURNING columns of acquireSQL: a batch's, and a single call's.
const (
	grantColumns = `"key", token, fence`
	fenceColumn  = `fence`
)

// acquireArgs appends p's parameters of acquireSQL.
func acquireArgs(args []any, p driver.AcquireParams) []any {
	return append(args, p.Key, p.Token, p.Owner, micros(p.TTL))
}

// releaseSQL is the release statement of a batch of n leases, whose ith
// (from 0) takes the parameters ?(3i+1) key, ?(3i+2) token and ?(3i+3)
// KeepFor in µs (releaseArgs): one UPDATE … FROM (VALUES …), each row
// found by primary key, returning the key of each lease released.
// releaseOneSQL is the single call's. Both update the row of each lease
// that the token holds (a live lease): the lease ends now plus KeepFor
// (MinHold); the row stays (it keeps the fence), and the token is cleared
// so that nothing can renew or release it again.
func releaseSQL(t string, n int) string {
	var b strings.Builder
	b.Grow(500 + n*24)
	b.WriteString(`WITH r(k, t, d) AS (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		p := 3 * i
		fmt.Fprintf(&b, "(?%d, ?%d, ?%d)", p+1, p+2, p+3)
	}
	b.WriteString(`)
UPDATE ` + t + ` SET ` + releaseSet("r.d") + `
FROM r WHERE ` + releaseWhere(t, "r.k", "r.t") + `
RETURNING "key"`)
	return b.String()
}

// releaseOneSQL is the release statement of one lease, with releaseSQL's
// parameters ?1 key, ?2 token and ?3 KeepFor: a plain UPDATE (cheaper for
// SQLite than a join on a one-row VALUES) without RETURNING, run with
// Exec: it changed one row if the lease was released, none otherwise (the
// key is the primary key).
func releaseOneSQL(t string) string {
	return `UPDATE ` + t + ` SET ` + releaseSet("?3") + `
WHERE ` + releaseWhere(t, "?1", "?2")
}

// releaseSet is the release statements' SET list, the lease ending keep
// µs from now.
func releaseSet(keep string) string { return `token = '', expires_at = ` + nowUS + ` + ` + keep }

// releaseWhere is the release statements' condition: the row of key, held
// by token, live.
func releaseWhere(t, key, token string) string {
	return t + `."key" = ` + key + ` AND ` + t + `.token = ` + token + ` AND ` + t + `.expires_at > ` + nowUS
}

// releaseArgs appends p's parameters of releaseSQL.
func releaseArgs(args []any, p driver.ReleaseParams) []any {
	return append(args, p.Key, p.Token, max(micros(p.KeepFor), 0))
}

// Acquire implements driver.Store with one INSERT … ON CONFLICT DO UPDATE
// … RETURNING statement, plus one SELECT for the holder's owner and
// remaining TTL only when the key is held. A read-write lock's or a
// semaphore's (driver.Kinder) is one transaction of a few statements:
// see "Read-write locks and semaphores" in the package documentation.
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if err := checkAcquire(p); err != nil {
		return driver.Grant{}, err
	}
	if p.Mode != driver.ModeMutex {
		return s.acquireKind(ctx, p)
	}
	var g driver.Grant
	granted := false
	err := s.write(ctx, func(ctx context.Context) error {
		return readRows(s.st.acquire.QueryContext(ctx, acquireArgs(make([]any, 0, 4), p)...))(func(rows *sql.Rows) error {
			var err error
			g, err = scanFence(rows)
			granted = true
			return err
		})
	})
	if err != nil {
		return driver.Grant{}, wrap(ctx, "acquire", p.Key, err)
	}
	if granted {
		return g, nil
	}
	return driver.Grant{}, s.heldBy(ctx, p.Key)
}

// write runs fn, one or more statements that write leases, in the Store's
// write turn, or returns ctx's error if ctx ends first. fn gets
// stmtCtx(ctx), which ctx's end does not interrupt: see stmtCtx. SQLite lets one
// connection write at a time, and one that finds another writing waits in
// SQLite's busy handler, which sleeps between tries (1, 2, 5, 10 … ms):
// with only a few writers, all of them can be asleep while the write lock
// is free. The Store's own writers therefore take turns here instead,
// each woken the moment the one before it is done, in the order they
// came; only writers of other processes (and other Stores) meet the busy
// handler.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.wturn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.wturn }()
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(stmtCtx(ctx))
}

// stmtCtx returns the context every statement of this package runs on:
// ctx's values, but not its end. modernc.org/sqlite interrupts a statement
// whose context ends, and when the end comes after the statement's first
// step has returned a row (an INSERT or UPDATE … RETURNING, which then
// holds SQLite's write lock until it is finalized), it returns ctx's error
// and drops the live statement without finalizing it. The connection then
// keeps the write lock for good — database/sql closes it, but SQLite keeps
// a connection with an unfinalized statement open — and every other writer
// on the file waits in the busy handler until it gives up with ErrBusy, for
// as long as the process lives. So a Store honours ctx before each
// statement (and between the statements of a batch), never during one; a
// statement waits for the write lock at most busy_timeout, and otherwise
// runs for microseconds.
func stmtCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// checkAcquire returns the error Acquire gives for p without running
// anything, or nil.
func checkAcquire(p driver.AcquireParams) error {
	switch {
	case !utf8.ValidString(p.Key):
		return fmt.Errorf("sqlitestore: acquire %q: key is not valid UTF-8", p.Key)
	case p.Token == "":
		return fmt.Errorf("sqlitestore: acquire %q: empty token", p.Key)
	case p.TTL < time.Microsecond:
		return fmt.Errorf("sqlitestore: acquire %q: TTL is %v, must be at least 1µs", p.Key, p.TTL)
	case p.Mode > driver.ModePermit:
		return fmt.Errorf("sqlitestore: acquire %q: %w: mode %v", p.Key, driver.ErrUnsupported, p.Mode)
	case p.Mode == driver.ModePermit && p.Limit < 1:
		return fmt.Errorf("sqlitestore: acquire %q: Limit is %d, must be at least 1 for a permit", p.Key, p.Limit)
	case p.Mode != driver.ModePermit && p.Limit != 0:
		return fmt.Errorf("sqlitestore: acquire %q: Limit is %d, must be 0 for a %v hold", p.Key, p.Limit, p.Mode)
	}
	return nil
}

// scanFence reads the row of the single call's acquire statement.
func scanFence(rows *sql.Rows) (driver.Grant, error) {
	var fence int64
	err := rows.Scan(&fence)
	return driver.Grant{Fence: uint64(fence)}, err
}

// scanGrant reads a row of a batch's acquire statement (grantColumns).
func scanGrant(rows *sql.Rows) (key, token string, g driver.Grant, err error) {
	var fence int64
	err = rows.Scan(&key, &token, &fence)
	return key, token, driver.Grant{Fence: uint64(fence)}, err
}

// heldBy returns the *driver.HeldError for key, which the acquire
// statement just found held, with the holder's owner and remaining TTL.
// Who holds it is only informative: if this read fails the key is still
// known to be held, and the error says nothing more.
func (s *Store) heldBy(ctx context.Context, key string) *driver.HeldError {
	var (
		owner string
		rest  int64
	)
	if err := s.st.holder.QueryRowContext(stmtCtx(ctx), key).Scan(&owner, &rest); err != nil {
		return &driver.HeldError{}
	}
	return &driver.HeldError{Owner: owner, TTL: max(time.Duration(rest)*time.Microsecond, 0)}
}

// renewEntry is one lease in the JSON array a renew statement reads: M,
// the mode, only for read-write locks and semaphores.
type renewEntry struct {
	K string `json:"k"`
	T string `json:"t"`
	M int    `json:"m,omitempty"`
	D int64  `json:"d"`
}

// Renew implements driver.Store with one UPDATE … FROM json_each(…)
// RETURNING statement for the whole batch, however large. A batch that
// mixes mutexes with holds of read-write locks and semaphores is two such
// statements, one per table, in one transaction.
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	res := make([]error, len(ps))
	var mutexes, kinds []renewEntry
	for i, p := range ps {
		switch {
		case p.TTL < time.Microsecond:
			return nil, fmt.Errorf("sqlitestore: renew %q: TTL is %v, must be at least 1µs", p.Key, p.TTL)
		case p.Mode > driver.ModePermit:
			res[i] = fmt.Errorf("sqlitestore: renew %q: %w: mode %v", p.Key, driver.ErrUnsupported, p.Mode)
		case p.Token == "" || !utf8.ValidString(p.Key):
			res[i] = driver.ErrNotHeld // no grant has such a token or key
		case p.Mode == driver.ModeMutex:
			mutexes = append(mutexes, renewEntry{K: p.Key, T: p.Token, D: micros(p.TTL)})
		default:
			kinds = append(kinds, renewEntry{K: p.Key, T: p.Token, M: int(p.Mode), D: micros(p.TTL)})
		}
	}
	if len(mutexes)+len(kinds) == 0 {
		return res, nil
	}
	marg, err := jsonArg(mutexes)
	if err != nil {
		return nil, err
	}
	karg, err := jsonArg(kinds)
	if err != nil {
		return nil, err
	}
	renewed := make(map[string]string, len(mutexes)) // mutex key → token
	renewMutexes := func(ctx context.Context, q *sql.Stmt) error {
		return s.query(ctx, q, []any{marg}, func(rows *sql.Rows) error {
			var k, t string
			if err := rows.Scan(&k, &t); err != nil {
				return err
			}
			renewed[k] = t
			return nil
		})
	}
	entries := make(map[entryKey]bool, len(kinds))
	switch {
	case len(kinds) == 0:
		err = s.write(ctx, func(ctx context.Context) error { return renewMutexes(ctx, s.st.renew) })
	case len(mutexes) == 0:
		err = s.write(ctx, func(ctx context.Context) error { return s.renewKinds(ctx, s.db, karg, entries) })
	default:
		err = s.inTx(ctx, func(sctx context.Context, tx *sql.Tx) error {
			if err := renewMutexes(sctx, tx.StmtContext(sctx, s.st.renew)); err != nil {
				return err
			}
			return s.renewKinds(sctx, tx, karg, entries)
		})
	}
	if err != nil {
		return nil, wrap(ctx, "renew", fmt.Sprintf("%d leases", len(mutexes)+len(kinds)), err)
	}
	for i, p := range ps {
		if res[i] != nil {
			continue
		}
		if p.Mode == driver.ModeMutex {
			if t, ok := renewed[p.Key]; !ok || t != p.Token {
				res[i] = driver.ErrNotHeld
			}
		} else if !entries[entryKey{p.Key, p.Token, p.Mode}] {
			res[i] = driver.ErrNotHeld
		}
	}
	return res, nil
}

// jsonArg is es as the JSON array a renew statement reads ("" when empty).
func jsonArg(es []renewEntry) (string, error) {
	if len(es) == 0 {
		return "", nil
	}
	b, err := json.Marshal(es)
	if err != nil {
		return "", fmt.Errorf("sqlitestore: renew: %w", err)
	}
	return string(b), nil
}

// Release implements driver.Store with one token-checked UPDATE: the lease
// ends now, or p.KeepFor from now (MinHold). The row and its fence stay.
// A read-write lock's or semaphore's entry is deleted (or, with KeepFor,
// kept until then) by one statement too.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	if p.Token == "" || p.Mode > driver.ModePermit {
		return driver.ErrNotHeld
	}
	if p.Mode != driver.ModeMutex {
		return s.releaseKind(ctx, p)
	}
	var released bool
	err := s.write(ctx, func(ctx context.Context) error {
		var err error
		released, err = releaseOne(ctx, s.st.release, p)
		return err
	})
	switch {
	case err != nil:
		return wrap(ctx, "release", p.Key, err)
	case !released:
		return driver.ErrNotHeld
	}
	if p.KeepFor <= 0 {
		s.wake.wake(p.Key)
	}
	return nil
}

// releaseOne runs the single call's release statement, st (Store.st.release
// or its transaction's copy), for p, and reports whether it released it.
func releaseOne(ctx context.Context, st *sql.Stmt, p driver.ReleaseParams) (bool, error) {
	r, err := st.ExecContext(ctx, releaseArgs(make([]any, 0, 3), p)...)
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n == 1, err
}

// ForceRelease implements driver.ForceReleaser with one transaction of
// two statements: an UPDATE that ends key's mutex lease now, whoever holds
// it, and a DELETE of every entry of the read-write lock or semaphore of
// that name, waiting writers' claims included. The holders learn of it at
// their next renewal. It returns driver.ErrNotHeld when neither had a live
// lease.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	var mutex, entries int64
	err := s.inTx(ctx, func(sctx context.Context, tx *sql.Tx) error {
		r, err := tx.StmtContext(sctx, s.st.force).ExecContext(sctx, key)
		if err != nil {
			return err
		}
		if mutex, err = r.RowsAffected(); err != nil {
			return err
		}
		return readRows(tx.QueryContext(sctx, s.kinds.force, key))(func(rows *sql.Rows) error {
			var live bool
			if err := rows.Scan(&live); err != nil {
				return err
			}
			if live {
				entries++
			}
			return nil
		})
	})
	switch {
	case err != nil:
		return wrap(ctx, "force release", key, err)
	case mutex+entries == 0:
		return driver.ErrNotHeld
	}
	if mutex > 0 {
		s.wake.wake(key)
	}
	return nil
}

// Leases implements driver.Lister with one SELECT: the live leases whose
// key starts with prefix, sorted by key, mutexes first: a lease per
// mutex, and one per entry of a read-write lock or semaphore (a writer's
// waiting claim with Waiting set). A lease released with MinHold is listed
// until it ends.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "list leases", prefix, err)
	}
	var out []driver.Lease
	err := s.query(stmtCtx(ctx), s.st.leases, []any{prefix}, func(rows *sql.Rows) error {
		var (
			l     driver.Lease
			fence int64
			rest  int64
			mode  int
		)
		if err := rows.Scan(&l.Key, &l.Owner, &fence, &rest, &mode, &l.Limit, &l.Waiting); err != nil {
			return err
		}
		l.Fence, l.TTL, l.Mode = uint64(fence), time.Duration(rest)*time.Microsecond, driver.Mode(mode)
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, "list leases", prefix, err)
	}
	return out, nil
}

// query runs one statement and calls row for each result row. It reads the
// rows to the end, so a writing statement with RETURNING has finished (and,
// outside a transaction, committed) when query returns nil.
func (s *Store) query(ctx context.Context, q *sql.Stmt, args []any, row func(*sql.Rows) error) error {
	return readRows(q.QueryContext(ctx, args...))(row)
}

// readRows returns a function that calls row for each of rows and reads
// them to the end, or returns err, the error that came with rows.
func readRows(rows *sql.Rows, err error) func(row func(*sql.Rows) error) error {
	return func(row func(*sql.Rows) error) error {
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := row(rows); err != nil {
				rows.Close()
				return err
			}
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return err
		}
		return rows.Close()
	}
}

// micros is d in whole microseconds, rounded up: a lease at the store is
// never shorter than asked.
func micros(d time.Duration) int64 { return driver.Units(d, time.Microsecond) }

// isBusy reports whether err is SQLite's "busy" or "locked".
func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// wrap adds the operation, ErrBusy when SQLite was busy, and ctx's error
// when it ended (SQLite reports an interrupted statement in its own words).
func wrap(ctx context.Context, op, what string, err error) error {
	switch {
	case isBusy(err):
		return fmt.Errorf("sqlitestore: %s %q: %w: %w", op, what, ErrBusy, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("sqlitestore: %s %q: %w: %w", op, what, ctx.Err(), err)
	}
	return fmt.Errorf("sqlitestore: %s %q: %w", op, what, err)
}

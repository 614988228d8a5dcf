package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// dbPath returns the path of a database file in a fresh temp dir.
func dbPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "tasklock.db")
}

// openT opens path with Open and closes it at cleanup.
func openT(t testing.TB, path string, opts *Options) *sql.DB {
	t.Helper()
	db, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newStoreT returns a migrated Store over db.
func newStoreT(t testing.TB, db *sql.DB) *Store {
	t.Helper()
	s, err := New(db, &Options{Migrate: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, s *Store, key, token string, ttl time.Duration) uint64 {
	t.Helper()
	g, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: token, Owner: "owner-" + token, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", key, token, err)
	}
	return g.Fence
}

// rowState is one row of the lock table as stored.
type rowState struct {
	found                 bool
	token, owner          string
	fence                 int64
	acquiredAt, expiresAt int64 // unix µs
	nowUS                 int64 // SQLite's now when read
	expiresInUS           int64 // expiresAt - nowUS
	durationUS            int64 // expiresAt - acquiredAt
}

// readRow reads key's row.
func readRow(t testing.TB, db *sql.DB, table, key string) rowState {
	t.Helper()
	var r rowState
	err := db.QueryRowContext(ctxT(t), `SELECT token, owner, fence, acquired_at, expires_at, `+nowUS+` FROM "`+table+`" WHERE "key" = ?1`, key).
		Scan(&r.token, &r.owner, &r.fence, &r.acquiredAt, &r.expiresAt, &r.nowUS)
	if errors.Is(err, sql.ErrNoRows) {
		return r
	}
	if err != nil {
		t.Fatal(err)
	}
	r.found = true
	r.expiresInUS = r.expiresAt - r.nowUS
	r.durationUS = r.expiresAt - r.acquiredAt
	return r
}

// TestConformance runs the shared suite, a fresh database file per test,
// on pools that fail it when a statement could be interrupted
// (openWatched).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStoreT(t, openWatched(t))
	})
}

func TestNewOptions(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	var oe *driver.OptionError
	if _, err := New(nil, nil); !errors.As(err, &oe) || oe.Field != "db" {
		t.Fatalf("New(nil db) = %v, want a *driver.OptionError naming db", err)
	}
	for _, table := range []string{"1abc", "a-b", `a"b`, "a b", "sqlite_locks", "Locks", strings.Repeat("x", 53), "ä"} {
		_, err := New(db, &Options{Table: table, Migrate: true})
		if !errors.As(err, &oe) || oe.Field != "Options.Table" || !strings.HasPrefix(err.Error(), "sqlitestore: invalid Options.Table") {
			t.Errorf("New(Table %q) = %v, want a *driver.OptionError naming Options.Table", table, err)
		}
	}
	for _, bt := range []time.Duration{-time.Second, time.Microsecond} {
		_, err := Open(dbPath(t), &Options{BusyTimeout: bt})
		if !errors.As(err, &oe) || oe.Field != "Options.BusyTimeout" || !strings.HasPrefix(err.Error(), "sqlitestore: invalid Options.BusyTimeout") {
			t.Errorf("Open(BusyTimeout %v) = %v, want a *driver.OptionError naming Options.BusyTimeout", bt, err)
		}
	}
	// Defaults are never written back.
	opts := &Options{Migrate: true}
	if _, err := New(db, opts); err != nil {
		t.Fatal(err)
	}
	if *opts != (Options{Migrate: true}) {
		t.Fatalf("New wrote into the caller's options: %+v", *opts)
	}
	// A custom table holds its own leases and fences.
	custom, err := New(db, &Options{Table: "my_locks_2", Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	deflt := newStoreT(t, db)
	mustAcquire(t, custom, "k", "a", time.Minute)
	if f := mustAcquire(t, deflt, "k", "b", time.Minute); f != 1 {
		t.Fatalf("default table fence = %d, want 1: the tables are not separate", f)
	}
	if !readRow(t, db, "my_locks_2", "k").found {
		t.Fatal("no row in the custom table")
	}
}

func TestMigrations(t *testing.T) {
	path := dbPath(t)
	db := openT(t, path, nil)
	ctx := ctxT(t)
	st, err := MigrationStatus(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) == 0 || st[0].Version != 1 || st[0].Name != "create_locks" || st[0].Applied {
		t.Fatalf("status of a fresh database = %+v", st)
	}
	_, err = New(db, nil)
	if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), "0001_create_locks") {
		t.Fatalf("New without Migrate on a fresh database = %v, want ErrNotMigrated naming the migration", err)
	}

	// Several processes' worth of pools migrate the same file at once:
	// each migration is applied exactly once.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		other := openT(t, path, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Migrate(ctx, other, nil)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM tasklock_locks_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(migrations) {
		t.Fatalf("%d version rows, want %d", n, len(migrations))
	}
	st, err = MigrationStatus(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		if !m.Applied || time.Since(m.AppliedAt).Abs() > time.Minute {
			t.Fatalf("after Migrate: %+v", m)
		}
	}
	if err := Migrate(ctx, db, nil); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if _, err := New(db, nil); err != nil {
		t.Fatalf("New on a migrated database: %v", err)
	}
	// A version this build does not know (applied by a newer one) is
	// listed without a name and does not stop New.
	if _, err := db.ExecContext(ctx, `INSERT INTO tasklock_locks_migrations VALUES (99, 'from_the_future', 0)`); err != nil {
		t.Fatal(err)
	}
	st, err = MigrationStatus(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if last := st[len(st)-1]; last.Version != 99 || last.Name != "" || !last.Applied {
		t.Fatalf("status of an unknown applied version = %+v", last)
	}
	if _, err := New(db, nil); err != nil {
		t.Fatalf("New with a newer version applied: %v", err)
	}
	// Another table is migrated on its own.
	if st, err := MigrationStatus(ctx, db, &Options{Table: "other"}); err != nil || st[0].Applied {
		t.Fatalf("status of another table = %+v, %v", st, err)
	}
}

func TestLoadMigrations(t *testing.T) {
	good := fstest.MapFS{
		"m/0002_b.up.sql": {Data: []byte(`CREATE INDEX {{.Ident "_x"}} ON {{.Table}} (owner)`)},
		"m/0001_a.up.sql": {Data: []byte(`SELECT 1`)},
		"m/README":        {Data: []byte(`ignored`)},
	}
	ms, err := loadMigrations(good, "m")
	if err != nil || len(ms) != 2 || ms[0].version != 1 || ms[1].name != "b" {
		t.Fatalf("loadMigrations = %+v, %v", ms, err)
	}
	c, _ := resolve(&Options{Table: "t"})
	if q, err := ms[1].render(c); err != nil || q != `CREATE INDEX "t_x" ON "t" (owner)` {
		t.Fatalf("render = %q, %v", q, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"bad name":  {"m/x_a.up.sql": {}},
		"no name":   {"m/0001_.up.sql": {}},
		"duplicate": {"m/0001_a.up.sql": {}, "m/0001_b.up.sql": {}},
		"template":  {"m/0001_a.up.sql": {Data: []byte(`{{.Table`)}},
	} {
		if _, err := loadMigrations(fsys, "m"); err == nil {
			t.Errorf("%s: loadMigrations succeeded", name)
		}
	}
}

// TestFenceSurvivesReopen: rows are never deleted, so fences keep
// increasing across releases, force releases, expiry and a reopened file.
func TestFenceSurvivesReopen(t *testing.T) {
	path := dbPath(t)
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newStoreT(t, db)
	ctx := ctxT(t)
	var last uint64
	for i := range 3 {
		tok := fmt.Sprint("t", i)
		f := mustAcquire(t, s, "durable", tok, time.Minute)
		if f <= last {
			t.Fatalf("fence %d after %d", f, last)
		}
		last = f
		if i == 1 {
			err = s.ForceRelease(ctx, "durable")
		} else {
			err = s.Release(ctx, driver.ReleaseParams{Key: "durable", Token: tok})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if r := readRow(t, db, DefaultTable, "durable"); !r.found || r.token != "" || r.expiresInUS > 0 {
		t.Fatalf("released row = %+v, want kept, token cleared, expired", r)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newStoreT(t, openT(t, path, nil))
	if f := mustAcquire(t, s2, "durable", "after-reopen", time.Minute); f != last+1 {
		t.Fatalf("fence after reopening = %d, want %d", f, last+1)
	}
}

// TestStoreSemantics checks the store's answers directly, without a
// Locker.
func TestStoreSemantics(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	s := newStoreT(t, db)
	ctx := ctxT(t)

	f1 := mustAcquire(t, s, "k", "tok1", 10*time.Second)
	_, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: "tok2", Owner: "o2", TTL: time.Second})
	var he *driver.HeldError
	if !errors.As(err, &he) || !errors.Is(err, driver.ErrHeld) || he.Owner != "owner-tok1" || he.TTL <= 9*time.Second || he.TTL > 10*time.Second {
		t.Fatalf("Acquire of a held key = %v (%+v), want HeldError{owner-tok1, ~10s}", err, he)
	}
	r := readRow(t, db, DefaultTable, "k")
	if r.durationUS != 10_000_000 || r.fence != int64(f1) {
		t.Fatalf("row = %+v, want a 10s lease from acquired_at with fence %d", r, f1)
	}

	short := mustAcquire(t, s, "short", "tokS", 20*time.Millisecond)
	waitExpired(t, db, "short")
	res, err := s.Renew(ctx, []driver.RenewParams{
		{Key: "k", Token: "tok1", TTL: 20 * time.Second},
		{Key: "k", Token: "wrong", TTL: time.Second},
		{Key: "missing", Token: "tok1", TTL: time.Second},
		{Key: "short", Token: "tokS", TTL: time.Second}, // expired: not resurrected
		{Key: "k", Token: "", TTL: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, driver.ErrNotHeld, driver.ErrNotHeld, driver.ErrNotHeld, driver.ErrNotHeld}
	for i := range want {
		if !errors.Is(res[i], want[i]) || (want[i] == nil) != (res[i] == nil) {
			t.Fatalf("Renew result %d = %v, want %v", i, res[i], want[i])
		}
	}
	if r := readRow(t, db, DefaultTable, "k"); r.expiresInUS <= 19_000_000 {
		t.Fatalf("renewed lease ends in %dµs, want ~20s", r.expiresInUS)
	}
	if f := mustAcquire(t, s, "short", "tokS2", time.Second); f != short+1 {
		t.Fatalf("fence after expiry = %d, want %d", f, short+1)
	}

	// Release is token-checked; MinHold keeps the lease, listed, but no
	// longer renewable or releasable.
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "wrong"}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release with another token = %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "tok1", KeepFor: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	leases, err := s.Leases(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 || leases[0].Key != "k" || leases[0].Owner != "owner-tok1" || leases[0].Fence != f1 ||
		leases[0].TTL <= 4*time.Second || leases[0].TTL > 5*time.Second {
		t.Fatalf("Leases after a MinHold release = %+v", leases)
	}
	for _, tok := range []string{"tok1", ""} {
		if res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Minute}}); err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
			t.Fatalf("Renew(token %q) after a MinHold release = %v, %v; want ErrNotHeld", tok, res, err)
		}
		if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Release(token %q) again = %v, want ErrNotHeld", tok, err)
		}
	}
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: "tok3", TTL: time.Second}); !errors.As(err, &he) {
		t.Fatalf("Acquire during MinHold = %v, want HeldError", err)
	}
	if err := s.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceRelease(ctx, "k"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free key = %v, want ErrNotHeld", err)
	}

	// Leases filters by prefix exactly (case-sensitive, no LIKE wildcards).
	for _, k := range []string{"job:a", "job:b", "JOB:c", "jobx", "job%"} {
		mustAcquire(t, s, k, "t-"+k, time.Minute)
	}
	leases, err = s.Leases(ctx, "job:")
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 2 || leases[0].Key != "job:a" || leases[1].Key != "job:b" {
		t.Fatalf("Leases(\"job:\") = %+v", leases)
	}
	if all, err := s.Leases(ctx, ""); err != nil || len(all) != 6 { // + "short"
		t.Fatalf("Leases(\"\") = %d leases, %v; want 6", len(all), err)
	}
}

// waitExpired polls until key's lease has ended by SQLite's clock.
func waitExpired(t testing.TB, db *sql.DB, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for readRow(t, db, DefaultTable, key).expiresInUS > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("lease %q did not expire", key)
		}
		time.Sleep(time.Millisecond) // poll interval
	}
}

// skewClock is the system clock shifted by d: a client whose wall clock is
// wrong. It keeps the monotonic reading, as a real skewed host would.
type skewClock struct{ d time.Duration }

func (c skewClock) Now() time.Time { return time.Now().Add(c.d) }
func (c skewClock) NewTimer(d time.Duration) tasklock.Timer {
	return tasklock.SystemClock{}.NewTimer(d)
}

// TestClientClockSkew: a Locker whose clock is minutes off grants leases
// that expire by SQLite's clock, exactly as a correct one's do.
func TestClientClockSkew(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	s := newStoreT(t, db)
	b, err := tasklock.New(s, &tasklock.Config{Owner: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const ttl = 600 * time.Millisecond
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			a, err := tasklock.New(s, &tasklock.Config{Owner: "skewed", Clock: skewClock{skew}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			key := "skew" + fmt.Sprint(skew)
			start := time.Now()
			l, err := a.TryObtain(ctxT(t), key, &tasklock.ObtainOptions{TTL: ttl, NoRenew: true})
			if err != nil {
				t.Fatal(err)
			}
			r := readRow(t, db, DefaultTable, key)
			if off := time.Duration(r.acquiredAt-time.Now().UnixMicro()) * time.Microsecond; off.Abs() > 2*time.Second {
				t.Fatalf("acquired_at is %v off the host clock: the client's clock leaked into the store", off)
			}
			if r.durationUS != ttl.Microseconds() {
				t.Fatalf("lease length at the store = %dµs, want %v", r.durationUS, ttl)
			}
			_, err = b.TryObtain(ctxT(t), key, nil)
			var ne *tasklock.NotObtainedError
			if !errors.As(err, &ne) || ne.Owner != "skewed" || ne.TTL <= 0 || ne.TTL > ttl {
				t.Fatalf("TryObtain by another = %v, want held by skewed for (0, %v]", err, ttl)
			}
			l2, err := b.Obtain(ctxT(t), key, nil)
			if err != nil {
				t.Fatal(err)
			}
			el := time.Since(start)
			select {
			case <-l.Done():
			default:
				t.Fatal("the skewed holder's Done is open after another obtained the key")
			}
			if el < ttl-5*time.Millisecond || el > ttl+500*time.Millisecond {
				t.Fatalf("another obtained the key %v after the skewed holder, want about the TTL %v", el, ttl)
			}
			t.Logf("skew %v: lease ended after %v (TTL %v)", skew, el, ttl)
			_ = l2.Release(ctxT(t))
		})
	}
}

// TestOpenErrors: paths that cannot hold a database fail in Open (or New)
// with a message saying why.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, path, want string
	}{
		{"empty", "", "invalid path: empty"},
		{"memory", ":memory:", "database file"},
		{"uri", "file:x.db", "database file"},
		{"missing dir", filepath.Join(dir, "missing", "x.db"), "does not exist"},
	}
	notDB := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("this is not a database ", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct{ name, path, want string }{"not a database", notDB, "not a SQLite database"})
	fileAsDir := filepath.Join(dir, "plainfile")
	if err := os.WriteFile(fileAsDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct{ name, path, want string }{"dir is a file", filepath.Join(fileAsDir, "x.db"), "not a directory"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db, err := Open(c.path, nil)
			if err == nil {
				db.Close()
				t.Fatalf("Open(%q) succeeded", c.path)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open(%q) = %v, want it to say %q", c.path, err, c.want)
			}
			t.Logf("%v", err)
		})
	}

	t.Run("read-only dir", func(t *testing.T) {
		ro := t.TempDir()
		existing := filepath.Join(ro, "existing.db")
		db := openT(t, existing, nil)
		newStoreT(t, db)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		makeReadOnly(t, ro)
		for _, p := range []string{filepath.Join(ro, "new.db"), existing} {
			db, err := Open(p, nil)
			if err == nil {
				db.Close()
				t.Fatalf("Open(%q) in a read-only directory succeeded", p)
			}
			if !strings.Contains(err.Error(), "writable") {
				t.Fatalf("Open(%q) = %v, want it to say the directory must be writable", p, err)
			}
			t.Logf("%v", err)
		}
	})

	t.Run("New", func(t *testing.T) {
		// A *sql.DB the caller opened itself: New finds the problems.
		bad, err := sql.Open("sqlite", filepath.Join(dir, "missing", "x.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Close()
		if _, err := New(bad, &Options{Migrate: true}); err == nil || !strings.Contains(err.Error(), "writable") {
			t.Fatalf("New on a database in a missing directory = %v", err)
		}
		plain, err := sql.Open("sqlite", filepath.Join(dir, "plain.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		if _, err := New(plain, &Options{Migrate: true}); err == nil || !strings.Contains(err.Error(), "busy_timeout") {
			t.Fatalf("New on a database without busy_timeout = %v", err)
		}
	})
}

// TestBusyIsTransient: when another connection holds the write lock past
// busy_timeout, calls fail with ErrBusy (not "held" or "not held"), and
// Obtain with a deadline rides it out.
func TestBusyIsTransient(t *testing.T) {
	path := dbPath(t)
	s := newStoreT(t, openT(t, path, &Options{BusyTimeout: 20 * time.Millisecond}))
	ctx := ctxT(t)
	mustAcquire(t, s, "held", "tok", time.Minute)

	blocker := openT(t, path, nil)
	conn, err := blocker.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	committed := false
	commit := func() {
		if !committed {
			committed = true
			if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
				t.Error(err)
			}
		}
	}
	defer commit()

	_, err = s.Acquire(ctx, driver.AcquireParams{Key: "free", Token: "a", TTL: time.Second})
	var he *driver.HeldError
	if !errors.Is(err, ErrBusy) || errors.As(err, &he) || errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Acquire while another connection writes = %v, want ErrBusy only", err)
	}
	if _, err := s.Renew(ctx, []driver.RenewParams{{Key: "held", Token: "tok", TTL: time.Minute}}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Renew while another connection writes = %v, want a call error wrapping ErrBusy", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "held", Token: "tok"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Release while another connection writes = %v, want ErrBusy", err)
	}

	// Obtain retries until the writer is done.
	busy := make(chan struct{})
	var once sync.Once
	lk, err := tasklock.New(&busyWatch{Store: s, busy: func() { once.Do(func() { close(busy) }) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	got := make(chan error, 1)
	go func() {
		l, err := lk.Obtain(ctx, "free", &tasklock.ObtainOptions{TTL: time.Second})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	select {
	case <-busy:
	case <-time.After(10 * time.Second):
		t.Fatal("Obtain never met the busy database")
	}
	commit()
	if err := <-got; err != nil {
		t.Fatalf("Obtain after the writer finished: %v", err)
	}
}

// busyWatch passes calls to a real Store and reports when Acquire met a
// busy database.
type busyWatch struct {
	*Store
	busy func()
}

func (w *busyWatch) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	g, err := w.Store.Acquire(ctx, p)
	if errors.Is(err, ErrBusy) {
		w.busy()
	}
	return g, err
}

// TestOpenPragmas: every connection of the pool Open returns has the
// pragmas, and transactions begin IMMEDIATE.
func TestOpenPragmas(t *testing.T) {
	ctx := ctxT(t)
	for _, c := range []struct {
		opts       *Options
		busy, sync int
	}{
		{nil, 5000, 1},
		{&Options{BusyTimeout: 1234 * time.Millisecond, SyncFull: true}, 1234, 2},
	} {
		path := dbPath(t)
		db := openT(t, path, c.opts)
		conns := make([]*sql.Conn, 3) // held at once: three distinct connections
		for i := range conns {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conns[i] = conn
		}
		for i, conn := range conns {
			var mode string
			var busy, sync, fk int
			for q, dst := range map[string]any{"journal_mode": &mode, "busy_timeout": &busy, "synchronous": &sync, "foreign_keys": &fk} {
				if err := conn.QueryRowContext(ctx, "PRAGMA "+q).Scan(dst); err != nil {
					t.Fatal(err)
				}
			}
			if mode != "wal" || busy != c.busy || sync != c.sync || fk != 1 {
				t.Fatalf("connection %d: journal_mode=%s busy_timeout=%d synchronous=%d foreign_keys=%d, want wal %d %d 1",
					i, mode, busy, sync, fk, c.busy, c.sync)
			}
		}

		// A transaction that has not written yet already holds the write
		// lock: another writer is kept out.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		other := openT(t, path, &Options{BusyTimeout: 10 * time.Millisecond})
		_, err = other.ExecContext(ctx, "CREATE TABLE probe (x)")
		if !isBusy(err) {
			t.Fatalf("a write while another connection is in a fresh transaction = %v, want SQLITE_BUSY (_txlock=immediate)", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenOddPath: characters that mean something in a URI are taken as
// part of the file name.
func TestOpenOddPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "odd ?name#%20&x=1.db")
	newStoreT(t, openT(t, path, nil))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database is not at %q: %v", path, err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), filepath.Base(path)) {
			t.Fatalf("stray file %q beside %q", e.Name(), filepath.Base(path))
		}
	}
}

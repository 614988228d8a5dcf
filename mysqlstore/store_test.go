package mysqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

func TestNew(t *testing.T) {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/x")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	opts := &Options{}
	s, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if *opts != (Options{}) {
		t.Errorf("New wrote into the caller's options: %+v", *opts)
	}
	if s.Table() != DefaultTable || s.Mode() != ModeLease {
		t.Errorf("defaults: table %q mode %q", s.Table(), s.Mode())
	}
	if s, err := New(db, nil); err != nil || s.Mode() != ModeLease {
		t.Errorf("New(nil options): %v", err)
	}
	if s, err := New(db, &Options{Table: "Locks_2", Mode: ModeConnection}); err != nil || s.Table() != "Locks_2" || s.Mode() != ModeConnection {
		t.Errorf("New(Locks_2, connection): %v", err)
	}
	for _, tc := range []struct {
		db   *sql.DB
		opts *Options
		want string
	}{
		{nil, nil, "db"},
		{db, &Options{Table: "a-b"}, "Options.Table"},
		{db, &Options{Table: "a`b"}, "Options.Table"},
		{db, &Options{Table: "db.t"}, "Options.Table"},
		{db, &Options{Table: "123"}, "Options.Table"},
		{db, &Options{Table: strings.Repeat("t", 54)}, "Options.Table"},
		{db, &Options{Mode: "session"}, "Options.Mode"},
		{db, &Options{Mode: "Lease"}, "Options.Mode"},
	} {
		_, err := New(tc.db, tc.opts)
		var oe *driver.OptionError
		if !errors.As(err, &oe) || oe.Field != tc.want || !strings.HasPrefix(err.Error(), "mysqlstore: invalid "+tc.want) {
			t.Errorf("New(%+v): %v, want a *driver.OptionError naming %s", tc.opts, err, tc.want)
		}
	}
	if _, err := New(db, &Options{Table: strings.Repeat("t", 53)}); err != nil {
		t.Errorf("53-byte table name: %v", err)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	db := openDB(t, dsn)
	ctx := ctxT(t)
	opts := &Options{Table: "my_locks"}

	st, err := MigrationStatus(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) == 0 || st[0].Version != 1 || st[0].Applied() {
		t.Fatalf("status before: %+v", st)
	}
	// Without the table, operations say what to do.
	s := mustNew(t, db, opts)
	_, err = s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "me", TTL: time.Second})
	if err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("Acquire before Migrate: %v, want a hint to migrate", err)
	}

	// Four processes migrating at once take turns.
	before := time.Now().UTC()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Migrate(ctx, db, opts)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	st, err = MigrationStatus(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		if !m.Applied() || m.AppliedAt.Before(before.Add(-time.Minute)) || m.AppliedAt.Location() != time.UTC {
			t.Errorf("after Migrate: %+v", m)
		}
	}
	t.Logf("status: %+v", st)
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM my_locks_migrations").Scan(&n); err != nil || n != len(st) {
		t.Fatalf("%d rows in my_locks_migrations, %v; want %d", n, err, len(st))
	}
	if err := Migrate(ctx, db, opts); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	mustAcquire(t, s, "k", token(), "me", time.Second)

	// A migration recorded by a newer version shows up too.
	if _, err := db.ExecContext(ctx, "INSERT INTO my_locks_migrations VALUES (999, 'future', UTC_TIMESTAMP(6))"); err != nil {
		t.Fatal(err)
	}
	st, _ = MigrationStatus(ctx, db, opts)
	if last := st[len(st)-1]; last.Version != 999 || last.Name != "future" || !last.Applied() {
		t.Fatalf("status with a newer migration: %+v", st)
	}

	// New with Migrate on another table; the default table is untouched.
	mustNew(t, db, &Options{Table: "other", Migrate: true})
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM other").Scan(&n); err != nil {
		t.Fatalf("New(Migrate) did not create its table: %v", err)
	}
	if st, _ := MigrationStatus(ctx, db, nil); st[0].Applied() {
		t.Fatalf("the default table's migrations are applied: %+v", st)
	}
}

// oddDSN are DSN settings that change how go-sql-driver and the session
// behave, none of which may change what the store does: affected rows as
// found rows, client-side interpolation, multi-statements, no time parsing,
// and an ANSI sql_mode without backslash escapes.
const oddDSN = "clientFoundRows=true&interpolateParams=true&multiStatements=true&parseTime=false" +
	"&sql_mode=%27ANSI,NO_BACKSLASH_ESCAPES,STRICT_ALL_TABLES%27"

func TestStore(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		for _, dsnName := range []string{"default", "odd"} {
			t.Run(string(mode)+"/"+dsnName+"DSN", func(t *testing.T) {
				t.Parallel()
				for _, tc := range []struct {
					name string
					fn   func(t *testing.T, s *Store, db *sql.DB)
				}{
					{"FenceIncreases", testFenceIncreases},
					{"Held", testHeld},
					{"ReleaseWrongToken", testReleaseWrongToken},
					{"RenewMixed", testRenewMixed},
					{"KeepFor", testKeepFor},
					{"Keys", testKeys},
					{"Leases", testLeases},
					{"ForceRelease", testForceRelease},
				} {
					t.Run(tc.name, func(t *testing.T) {
						dsn := testserver.SharedMariaDB(t).CreateDB(t)
						if dsnName == "odd" {
							dsn = strings.Replace(dsn, "parseTime=true", oddDSN, 1)
						}
						db := openDB(t, dsn)
						if dsnName == "odd" {
							var sqlMode string
							if err := db.QueryRow("SELECT @@SESSION.sql_mode").Scan(&sqlMode); err != nil || !strings.Contains(sqlMode, "ANSI_QUOTES") {
								t.Fatalf("sql_mode %q, %v: the odd DSN did not apply", sqlMode, err)
							}
						}
						s := mustNew(t, db, &Options{Mode: mode, Migrate: true})
						tc.fn(t, s, db)
					})
				}
			})
		}
	}
}

func testFenceIncreases(t *testing.T, s *Store, db *sql.DB) {
	ctx := ctxT(t)
	var last uint64
	for i := range 10 {
		tok := token()
		f := mustAcquire(t, s, "job", tok, "me", time.Minute)
		if f != last+1 {
			t.Fatalf("cycle %d: fence %d after %d", i, f, last)
		}
		last = f
		if err := s.Release(ctx, driver.ReleaseParams{Key: "job", Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	// A lease left to expire (or, in connection mode, to its deadline)
	// never gives its fence away again either.
	f := mustAcquire(t, s, "job", token(), "me", 50*time.Millisecond)
	if f != last+1 {
		t.Fatalf("fence %d after %d", f, last)
	}
	var g uint64
	waitFor(t, 5*time.Second, "the expired lease is granted again", func() bool {
		gr, err := s.Acquire(ctx, driver.AcquireParams{Key: "job", Token: token(), Owner: "next", TTL: time.Minute})
		g = gr.Fence
		return err == nil
	})
	if g != f+1 {
		t.Fatalf("fence after expiry %d, want %d", g, f+1)
	}
}

func testHeld(t *testing.T, s *Store, db *sql.DB) {
	ctx := ctxT(t)
	holder := token()
	mustAcquire(t, s, "k", holder, "host-a:42 ü", 5*time.Second)
	_, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "host-b:7", TTL: time.Second})
	var held *driver.HeldError
	if !errors.As(err, &held) || !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire of a held key: %v, want *HeldError", err)
	}
	if held.Owner != "host-a:42 ü" {
		t.Errorf("Owner %q", held.Owner)
	}
	switch s.mode {
	case ModeLease:
		if held.TTL <= 4*time.Second || held.TTL > 5*time.Second {
			t.Errorf("TTL %v, want about 5s", held.TTL)
		}
		// Idempotent: the same token again gets the same grant.
		if f1, f2 := mustAcquire(t, s, "k", holder, "x", time.Second), mustAcquire(t, s, "k", holder, "x", time.Second); f1 != f2 || f1 != 1 {
			t.Errorf("same-token retries: fences %d and %d, want 1", f1, f2)
		}
	case ModeConnection:
		if held.TTL != 0 {
			t.Errorf("TTL %v, want 0 (unknown)", held.TTL)
		}
	}
	var tok []byte
	if err := db.QueryRowContext(ctx, "SELECT token FROM tasklock_locks WHERE lock_key = 'k'").Scan(&tok); err != nil || string(tok) != holder {
		t.Fatalf("row token %q, %v: the failed attempt changed the lease", tok, err)
	}
}

func testReleaseWrongToken(t *testing.T, s *Store, db *sql.DB) {
	ctx := ctxT(t)
	holder := token()
	mustAcquire(t, s, "k", holder, "a", 5*time.Second)
	for _, tok := range []string{token(), holder[:8], holder + "0", ""} {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Release by token %q: %v, want ErrNotHeld", tok, err)
		}
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "missing", Token: holder}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a missing key: %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: holder}); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: holder}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	// Released means free at once, for anyone.
	mustAcquire(t, s, "k", token(), "b", time.Second)
}

func testRenewMixed(t *testing.T, s *Store, db *sql.DB) {
	ctx := ctxT(t)
	mine, theirs := token(), token()
	mine2 := token()
	mustAcquire(t, s, "a", mine, "me", time.Second)
	mustAcquire(t, s, "b", theirs, "them", time.Second)
	mustAcquire(t, s, "c", mine2, "me", time.Second)
	ps := []driver.RenewParams{
		{Key: "a", Token: mine, TTL: time.Minute},
		{Key: "b", Token: mine, TTL: time.Minute},       // someone else's
		{Key: "missing", Token: mine, TTL: time.Minute}, // nobody's
		{Key: "c", Token: mine2, TTL: 2 * time.Minute},
		{Key: "a", Token: mine, TTL: time.Minute}, // twice in one batch
	}
	res, err := s.Renew(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, true, true}
	for i, ok := range want {
		if (res[i] == nil) != ok || (!ok && !errors.Is(res[i], driver.ErrNotHeld)) {
			t.Errorf("lease %d (%s): %v, want renewed=%v", i, ps[i].Key, res[i], ok)
		}
	}
	if s.mode == ModeLease {
		for k, min := range map[string]int{"a": 50, "c": 110} {
			var left int
			if err := db.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), expires_at) FROM tasklock_locks WHERE lock_key = ?", k).Scan(&left); err != nil || left < min {
				t.Errorf("%s: %ds left, %v; want at least %d", k, left, err, min)
			}
		}
		var left int
		if err := db.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), expires_at) FROM tasklock_locks WHERE lock_key = 'b'").Scan(&left); err != nil || left > 1 {
			t.Errorf("b: %ds left, %v: the foreign lease was extended", left, err)
		}
	}
	if res, err := s.Renew(ctx, nil); err != nil || len(res) != 0 {
		t.Errorf("Renew(nil): %v, %v", res, err)
	}
	if _, err := s.Renew(ctx, []driver.RenewParams{{Key: "a", Token: mine}}); err == nil {
		t.Error("Renew with a zero TTL: no error")
	}
}

func testKeepFor(t *testing.T, s *Store, db *sql.DB) {
	ctx := ctxT(t)
	tok := token()
	mustAcquire(t, s, "k", tok, "keeper", time.Minute)
	start := time.Now()
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok, KeepFor: 400 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "x", TTL: time.Second})
	var held *driver.HeldError
	if !errors.As(err, &held) || held.Owner != "keeper" || held.TTL <= 0 || held.TTL > 400*time.Millisecond {
		t.Fatalf("Acquire during KeepFor: %v (%+v), want held by keeper for at most 400ms", err, held)
	}
	// The released token can do nothing more.
	if res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Minute}}); err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew after a KeepFor release: %v %v", res, err)
	}
	waitFor(t, 5*time.Second, "acquire after KeepFor", func() bool {
		_, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "x", TTL: time.Second})
		return err == nil
	})
	if el := time.Since(start); el < 350*time.Millisecond {
		t.Fatalf("acquired %v after release, before KeepFor 400ms", el)
	}
}

func testKeys(t *testing.T, s *Store, db *sql.DB) {
	ctx := ctxT(t)
	long := strings.Repeat("ü", MaxKeyLength/2) // 512 bytes
	keys := []string{"a", "A", "a ", "á", "a%", "a_", `a\`, "a'b", long, long[:MaxKeyLength-2] + "x"}
	toks := map[string]string{}
	for _, k := range keys {
		toks[k] = token()
		if f := mustAcquire(t, s, k, toks[k], "me", time.Minute); f != 1 {
			t.Errorf("key %q: fence %d, want 1: it shares a row with another key", k, f)
		}
	}
	for _, k := range keys {
		if res, err := s.Renew(ctx, []driver.RenewParams{{Key: k, Token: toks[k], TTL: time.Minute}}); err != nil || res[0] != nil {
			t.Errorf("Renew(%q): %v %v", k, res, err)
		}
		if err := s.Release(ctx, driver.ReleaseParams{Key: k, Token: toks[k]}); err != nil {
			t.Errorf("Release(%q): %v", k, err)
		}
	}
	_, err := s.Acquire(ctx, driver.AcquireParams{Key: long + "x", Token: token(), Owner: "me", TTL: time.Second})
	if err == nil || errors.Is(err, driver.ErrHeld) {
		t.Errorf("Acquire of a 513-byte key: %v, want an error", err)
	}
	if s.mode == ModeConnection {
		// Every lock name is 64 characters, and the server agrees with the
		// name the store computes for the row's key.
		tok := token()
		mustAcquire(t, s, long, tok, "me", time.Minute)
		var name string
		var holder sql.NullInt64
		q := "SELECT " + string(s.lockName([]byte("lock_key"))) + " FROM tasklock_locks WHERE lock_key = " + string(appendHex(nil, long))
		if err := db.QueryRowContext(ctx, q).Scan(&name); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&holder); err != nil || !holder.Valid || len(name) != 64 {
			t.Fatalf("lock name %q (%d chars) held by %v, %v", name, len(name), holder, err)
		}
		_ = s.Release(ctx, driver.ReleaseParams{Key: long, Token: tok})
	}
}

func testLeases(t *testing.T, s *Store, db *sql.DB) {
	ctx := ctxT(t)
	type want struct {
		owner string
		fence uint64
	}
	wants := map[string]want{}
	for i, key := range []string{"report:daily", "report:weekly", "clean%up", "clean_up", "x"} {
		owner := fmt.Sprintf("host-%d:%d", i, 100+i)
		wants[key] = want{owner, mustAcquire(t, s, key, token(), owner, time.Minute)}
	}
	tok := token()
	mustAcquire(t, s, "gone", tok, "x", time.Minute)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "gone", Token: tok}); err != nil {
		t.Fatal(err)
	}
	tok = token()
	mustAcquire(t, s, "kept", tok, "keeper", time.Minute)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "kept", Token: tok, KeepFor: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wants["kept"] = want{"keeper", 1}

	all, err := s.Leases(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(wants) {
		t.Fatalf("Leases listed %+v, want %d", all, len(wants))
	}
	for i, l := range all {
		w, ok := wants[l.Key]
		if !ok || l.Owner != w.owner || l.Fence != w.fence {
			t.Errorf("lease %+v, want %+v", l, w)
		}
		switch {
		case l.Key == "kept" && (l.TTL < 50*time.Second || l.TTL > time.Minute):
			t.Errorf("MinHold lease %+v, want TTL about 1m", l)
		case l.Key != "kept" && s.mode == ModeLease && (l.TTL < 50*time.Second || l.TTL > time.Minute):
			t.Errorf("lease %+v, want TTL about 1m", l)
		case l.Key != "kept" && s.mode == ModeConnection && l.TTL != 0:
			t.Errorf("lease %+v, want TTL 0 (as long as the connection)", l)
		}
		if i > 0 && all[i-1].Key >= l.Key {
			t.Errorf("not sorted: %q before %q", all[i-1].Key, l.Key)
		}
	}
	for prefix, n := range map[string]int{"report:": 2, "clean%": 1, "clean_": 1, "clean": 2, "%": 0, "_": 0, "zzz": 0} {
		got, err := s.Leases(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Errorf("Leases(%q) listed %+v, want %d", prefix, got, n)
		}
	}
}

func testForceRelease(t *testing.T, s *Store, db *sql.DB) {
	ctx := ctxT(t)
	tok := token()
	f := mustAcquire(t, s, "k", tok, "me", time.Minute)
	if err := s.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: tok, TTL: time.Minute}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew after ForceRelease: %v %v, want ErrNotHeld", res, err)
	}
	var g uint64
	waitFor(t, 5*time.Second, "acquire after ForceRelease", func() bool {
		gr, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "next", TTL: time.Minute})
		g = gr.Fence
		return err == nil
	})
	if g != f+1 {
		t.Fatalf("fence after ForceRelease %d, want %d", g, f+1)
	}
	if err := s.ForceRelease(ctx, "missing"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free key: %v, want ErrNotHeld", err)
	}
	// A MinHold lease left by a release is ended too.
	tok = token()
	waitFor(t, 5*time.Second, "acquire", func() bool {
		_, err := s.Acquire(ctx, driver.AcquireParams{Key: "m", Token: tok, Owner: "me", TTL: time.Minute})
		return err == nil
	})
	if err := s.Release(ctx, driver.ReleaseParams{Key: "m", Token: tok, KeepFor: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceRelease(ctx, "m"); err != nil {
		t.Fatalf("ForceRelease of a MinHold lease: %v", err)
	}
	mustAcquire(t, s, "m", token(), "me", time.Minute)
}

// skewedClock is the system clock off by a fixed amount, as a client whose
// wall clock is wrong.
type skewedClock struct {
	tasklock.SystemClock
	off time.Duration
}

func (c skewedClock) Now() time.Time { return time.Now().Add(c.off) }

// TestClientClockSkew shows that expiry follows the database's clock:
// lockers whose clocks are ten minutes fast or slow see a 300ms lease last
// 300ms.
func TestClientClockSkew(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		for _, off := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
			t.Run(fmt.Sprintf("%s/%v", mode, off), func(t *testing.T) {
				s, _, _ := newStore(t, mode)
				newLocker := func(owner string, off time.Duration) *tasklock.Locker {
					lk, err := tasklock.New(s, &tasklock.Config{Owner: owner, Clock: skewedClock{off: off}})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = lk.Close() })
					return lk
				}
				a, b := newLocker("a", off), newLocker("b", -off)
				ctx := ctxT(t)
				ttl := 300 * time.Millisecond
				start := time.Now()
				l, err := a.TryObtain(ctx, "skew", &tasklock.ObtainOptions{TTL: ttl, NoRenew: true})
				if err != nil {
					t.Fatal(err)
				}
				_, err = b.TryObtain(ctx, "skew", nil)
				var ne *tasklock.NotObtainedError
				if !errors.As(err, &ne) {
					t.Fatalf("TryObtain while held: %v", err)
				}
				if mode == ModeLease && (ne.TTL <= 0 || ne.TTL > ttl) {
					t.Fatalf("holder TTL %v seen by a skewed client, want within (0, %v]", ne.TTL, ttl)
				}
				l2, err := b.Obtain(ctx, "skew", nil)
				if err != nil {
					t.Fatal(err)
				}
				el := time.Since(start)
				t.Logf("obtained by the other client %v after the first", el)
				if el < ttl-20*time.Millisecond || el > ttl+time.Second {
					t.Fatalf("obtained %v after a %v lease, want about %v", el, ttl, ttl)
				}
				select {
				case <-l.Done():
				default:
					t.Fatal("the first holder's Done is open while another holds the lock")
				}
				if l2.Fence() <= l.Fence() {
					t.Fatalf("fence %d after %d", l2.Fence(), l.Fence())
				}
				_ = l2.Release(ctx)
			})
		}
	}
}

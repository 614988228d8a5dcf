package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// skewedClock is a client clock off by a fixed amount. The store must not
// care: every expiry is decided by the database's now().
type skewedClock struct {
	tasklock.SystemClock
	by time.Duration
}

func (c skewedClock) Now() time.Time { return time.Now().Add(c.by) }

func TestClockSkew(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := newPool(t, newDB(t), nil)
			s := newStore(t, pool, &Options{Mode: mode})
			ahead := newLocker(t, s, "ahead", &tasklock.Config{Clock: skewedClock{by: 10 * time.Minute}})
			behind := newLocker(t, s, "behind", &tasklock.Config{Clock: skewedClock{by: -10 * time.Minute}})
			const ttl = 300 * time.Millisecond
			start := time.Now()
			l1, err := ahead.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl, NoRenew: true})
			if err != nil {
				t.Fatal(err)
			}
			if r := readRow(t, s, "job"); r.expires <= 0 || r.expires > ttl {
				t.Fatalf("the database says the lease ends in %v, want within the TTL %v", r.expires, ttl)
			}
			_, err = behind.TryObtain(ctxT(t), "job", nil)
			var ne *tasklock.NotObtainedError
			if !errors.As(err, &ne) || ne.TTL <= 0 || ne.TTL > ttl {
				t.Fatalf("TryObtain of the held key: %v, want held for at most %v", err, ttl)
			}
			l2, err := behind.Obtain(ctxT(t), "job", nil)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			t.Logf("%s: clocks 20 minutes apart; the other obtained %v after a %v lease", mode, took.Round(time.Millisecond), ttl)
			if took < ttl-50*time.Millisecond || took > ttl+time.Second {
				t.Fatalf("obtained %v after a %v lease: expiry did not follow the database's clock", took, ttl)
			}
			if l2.Fence() <= l1.Fence() {
				t.Fatalf("fence %d after %d", l2.Fence(), l1.Fence())
			}
			_ = l2.Release(ctxT(t))
		})
	}
}

// countTracer counts the statements a pool's connections run.
type countTracer struct {
	mu      sync.Mutex
	sqls    []string
	batches int
}

func (c *countTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	c.sqls = append(c.sqls, d.SQL)
	c.mu.Unlock()
	return ctx
}

func (c *countTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a pgx.Batch: its statements go in one round trip.
func (c *countTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	c.batches++
	c.mu.Unlock()
	return ctx
}

// TraceBatchQuery counts each statement of a pgx.Batch as a statement.
func (c *countTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.mu.Lock()
	c.sqls = append(c.sqls, d.SQL)
	c.mu.Unlock()
}

func (c *countTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *countTracer) reset() {
	c.mu.Lock()
	c.sqls, c.batches = nil, 0
	c.mu.Unlock()
}

// batchCount returns how many pgx.Batches were sent.
func (c *countTracer) batchCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches
}

// count returns how many statements ran, and how many of them were sql.
func (c *countTracer) count(sql string) (all, matching int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sqls {
		if s == sql {
			matching++
		}
	}
	return len(c.sqls), matching
}

func tracedPool(t *testing.T, url string) (*pgxpool.Pool, *countTracer) {
	tr := &countTracer{}
	return newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }), tr
}

// TestRenewOneStatement: renewing 1,000 leases is one statement, and a
// Locker keeping 1,000 locks renews them in one statement per cycle.
func TestRenewOneStatement(t *testing.T) {
	t.Parallel()
	pool, tr := tracedPool(t, newDB(t))
	s := newStore(t, pool, nil)
	ctx := ctxT(t)
	const n = 1000
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table()+` (key, token, owner, fence, acquired_at, expires_at)
		SELECT 'job-' || i, 'tok-' || i, 'me', 1, now(), now() + interval '10 seconds' FROM generate_series(0, $1 - 1) i`, n); err != nil {
		t.Fatal(err)
	}
	ps := make([]driver.RenewParams, n)
	for i := range ps {
		ps[i] = driver.RenewParams{Key: fmt.Sprintf("job-%d", i), Token: fmt.Sprintf("tok-%d", i), TTL: time.Minute}
	}
	ps[n/2].Token = "someone else's"
	tr.reset()
	start := time.Now()
	res, err := s.Renew(ctx, ps)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if (i == n/2) != errors.Is(e, driver.ErrNotHeld) || (i != n/2 && e != nil) {
			t.Errorf("lease %d: %v", i, e)
		}
	}
	all, renews := tr.count(s.sql.renew)
	t.Logf("Renew of %d leases: %d statement(s) in %v", n, all, took)
	if all != 1 || renews != 1 {
		t.Fatalf("Renew of %d leases ran %d statements (%d renewals), want 1", n, all, renews)
	}
	if r := readRow(t, s, "job-999"); r.expires < 50*time.Second {
		t.Fatalf("job-999 expires in %v after a renewal for 1m", r.expires)
	}

	// Through a Locker: 1,000 locks obtained together are renewed together.
	ev := newEventLog()
	lk := newLocker(t, s, "many", &tasklock.Config{OnEvent: ev.on})
	const ttl = 6 * time.Second // renewal 2s after obtaining, batching window 1s
	// From 50 goroutines, whose obtains the Locker sends together, so
	// that a busy machine still obtains them within one batching window
	// (one at a time they took up to 1.8s there).
	start = time.Now()
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Go(func() {
			for i := g; i < n; i += 50 {
				if _, err := lk.TryObtain(ctx, fmt.Sprintf("lk-%d", i), &tasklock.ObtainOptions{TTL: ttl}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	obtained := time.Since(start)
	tr.reset()
	waitFor(t, 2*ttl, "1000 renewals", func() bool { return ev.count(tasklock.EventRenewed) >= n })
	all, renews = tr.count(s.sql.renew)
	t.Logf("Locker: %d locks obtained in %v; their first renewal cycle ran %d renew statement(s), %d statements in all",
		n, obtained.Round(time.Millisecond), renews, all)
	if obtained < ttl/6 && renews != 1 {
		t.Errorf("%d renew statements for %d leases obtained within one batching window, want 1", renews, n)
	}
	if renews > n/500 {
		t.Errorf("%d renew statements for %d leases, want at most one per 500", renews, n)
	}
}

// TestConnectionRenewPings: in connection mode a renewal is one statement
// on each lease's own connection, run in parallel.
func TestConnectionRenewPings(t *testing.T) {
	t.Parallel()
	pool, tr := tracedPool(t, newDB(t))
	s := newStore(t, pool, &Options{Mode: ModeConnection})
	ctx := ctxT(t)
	const n = 40
	ps := make([]driver.RenewParams, n)
	for i := range ps {
		ps[i] = driver.RenewParams{Key: fmt.Sprintf("job-%d", i), Token: token(), TTL: time.Minute}
		mustAcquire(t, s, ps[i].Key, ps[i].Token, "me", time.Minute)
	}
	var pids sync.Map
	for _, p := range ps {
		pids.Store(*readRow(t, s, p.Key).pid, true)
	}
	distinct := 0
	pids.Range(func(any, any) bool { distinct++; return true })
	if distinct != n {
		t.Fatalf("%d leases held by %d sessions, want one each", n, distinct)
	}
	tr.reset()
	start := time.Now()
	res, err := s.Renew(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if e != nil {
			t.Errorf("lease %d: %v", i, e)
		}
	}
	_, renews := tr.count(s.sql.renewConn)
	t.Logf("connection mode: Renew of %d leases: %d pings in %v", n, renews, time.Since(start))
	if renews != n {
		t.Fatalf("%d pings for %d leases", renews, n)
	}
	for _, p := range ps {
		if err := s.Release(ctx, driver.ReleaseParams{Key: p.Key, Token: p.Token}); err != nil {
			t.Fatal(err)
		}
	}
	if s.conns.len() != 0 {
		t.Fatalf("%d connections still registered after every release", s.conns.len())
	}
}

// TestHandoff measures release → next holder through LISTEN/NOTIFY with a
// waiter blocked in Obtain on another Locker.
func TestHandoff(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := newPool(t, newDB(t), nil)
			s := newStore(t, pool, &Options{Mode: mode})
			ev := newEventLog()
			holder := newLocker(t, s, "holder", nil)
			waiter := newLocker(t, s, "waiter", &tasklock.Config{OnEvent: ev.on})
			const rounds = 12
			var ds []time.Duration
			for range rounds {
				l, err := holder.Obtain(ctxT(t), "job", nil)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan time.Time, 1)
				var wl *tasklock.Lock
				before := ev.count(tasklock.EventNotObtained)
				go func() {
					var err error
					wl, err = waiter.Obtain(ctxT(t), "job", nil)
					if err != nil {
						t.Error(err)
					}
					got <- time.Now()
				}()
				// Six failed attempts: the waiter's next poll is 80ms or
				// more away, so only the notification can wake it sooner.
				waitFor(t, 5*time.Second, "the waiter's attempts", func() bool {
					return ev.count(tasklock.EventNotObtained) >= before+6
				})
				released := time.Now()
				if err := l.Release(ctxT(t)); err != nil {
					t.Fatal(err)
				}
				at := <-got
				if wl == nil {
					t.FailNow()
				}
				ds = append(ds, at.Sub(released))
				if err := wl.Release(ctxT(t)); err != nil {
					t.Fatal(err)
				}
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			t.Logf("%s: handoff release → next holder over %d rounds: p50 %v, max %v", mode, rounds, ds[rounds/2], ds[rounds-1])
			if ds[rounds/2] > 50*time.Millisecond {
				t.Errorf("handoff p50 %v, want ≤ 50ms", ds[rounds/2])
			}
		})
	}
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	ctx := ctxT(t)
	opts := &Options{Table: "mig_locks"}

	st, err := MigrationStatus(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != len(migrations) || st[0] != (MigrationState{Version: 1, Name: "create"}) {
		t.Fatalf("status before Migrate: %+v", st)
	}
	for i, m := range migrations {
		if st[i] != (MigrationState{Version: m.version, Name: m.name}) {
			t.Fatalf("status before Migrate: %+v", st)
		}
	}
	if err := Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, pool, opts); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	st, err = MigrationStatus(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != len(migrations) || st[0].Name != "create" {
		t.Fatalf("status after Migrate: %+v", st)
	}
	for _, s := range st {
		if !s.Applied || s.AppliedAt.IsZero() || s.Name == "" {
			t.Fatalf("status after Migrate: %+v", st)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "public"."mig_locks_migrations"`).Scan(&n); err != nil || n != len(migrations) {
		t.Fatalf("version rows: %d, %v", n, err)
	}

	// Replicas starting together: each migration is applied once.
	copts := &Options{Schema: "concurrent", Table: "locks"}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Migrate(ctx, pool, copts); err != nil {
				t.Error(err)
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() == 0 {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM "concurrent"."locks_migrations"`).Scan(&n); err != nil || n != len(migrations) {
			t.Fatalf("version rows after concurrent Migrate: %d, %v", n, err)
		}
	}

	// Numbered steps apply in order; a failing step rolls everything back.
	body, err := migrationFiles.ReadFile("migrations/0001_create.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{
		"m/0002_expires_index.up.sql": {Data: []byte(`CREATE INDEX {{.Ident "_expires_idx"}} ON {{.Table}} (expires_at);`)},
		"m/0001_create.up.sql":        {Data: body},
		"m/README":                    {Data: []byte("not a migration")},
	}
	ms, err := loadMigrations(fsys, "m")
	if err != nil || len(ms) != 2 || ms[0].version != 1 || ms[1].version != 2 || ms[1].name != "expires_index" {
		t.Fatalf("loadMigrations: %+v, %v", ms, err)
	}
	o, err := resolve(pool, &Options{Table: "two_steps"})
	if err != nil {
		t.Fatal(err)
	}
	// Only the first step, as an older library would.
	if err := migrateWith(ctx, pool, o, ms[:1]); err != nil {
		t.Fatal(err)
	}
	if st, err := statusWith(ctx, pool, o, ms); err != nil || len(st) != 2 || !st[0].Applied || st[1].Applied {
		t.Fatalf("status after step 1: %+v, %v", st, err)
	}
	if err := migrateWith(ctx, pool, o, ms); err != nil {
		t.Fatal(err)
	}
	var idx *string
	if err := pool.QueryRow(ctx, `SELECT to_regclass('public.two_steps_expires_idx')::text`).Scan(&idx); err != nil || idx == nil {
		t.Fatalf("index of step 2: %v, %v", idx, err)
	}
	// A library that knows only step 1 reports step 2 as applied but unknown.
	if st, err := statusWith(ctx, pool, o, ms[:1]); err != nil || len(st) != 2 || st[1].Name != "" || !st[1].Applied {
		t.Fatalf("status with an unknown applied version: %+v, %v", st, err)
	}

	bad, err := loadMigrations(fstest.MapFS{
		"m/0001_create.up.sql": {Data: body},
		"m/0002_broken.up.sql": {Data: []byte(`CREATE TABLE {{.Table}}_x (; `)},
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	o, _ = resolve(pool, &Options{Table: "rolled_back"})
	if err := migrateWith(ctx, pool, o, bad); err == nil {
		t.Fatal("a broken migration succeeded")
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('public.rolled_back') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("step 1 of a failed migration was kept: %v, %v", exists, err)
	}

	for name, files := range map[string]fstest.MapFS{
		"unnumbered": {"m/create.up.sql": {Data: body}},
		"duplicate":  {"m/0001_a.up.sql": {Data: body}, "m/1_b.up.sql": {Data: body}},
		"template":   {"m/0001_a.up.sql": {Data: []byte("{{.Nope")}},
	} {
		if _, err := loadMigrations(files, "m"); err == nil {
			t.Errorf("%s migrations loaded", name)
		}
	}
	if err := Migrate(ctx, pool, &Options{Table: "Bad"}); err == nil {
		t.Error("Migrate with an invalid table name succeeded")
	}
}

// TestRenewAwkwardKeys renews, in one batch, keys whose text needs quoting
// in an array literal or a string literal (the renewal runs in the simple
// protocol, so pgx writes the arrays into the query text).
func TestRenewAwkwardKeys(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, newDB(t), nil), nil)
	ctx := ctxT(t)
	keys := []string{`a "quoted" key`, `back\slash`, `{braces},comma`, `it's`, "NULL", "", " spaced ", "ünïcode ✓", `$1::text`, "semi;colon -- comment"}
	ps := make([]driver.RenewParams, len(keys))
	for i, k := range keys {
		tok := token()
		mustAcquire(t, s, k, tok, "me", time.Second)
		ps[i] = driver.RenewParams{Key: k, Token: tok, TTL: time.Minute}
	}
	res, err := s.Renew(ctx, append(ps, driver.RenewParams{Key: keys[0], Token: "not-mine", TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range res[:len(keys)] {
		if err != nil {
			t.Errorf("renew %q: %v", keys[i], err)
		} else if r := readRow(t, s, keys[i]); r.expires < 50*time.Second {
			t.Errorf("renew %q: lease ends in %v", keys[i], r.expires)
		}
	}
	if !errors.Is(res[len(keys)], driver.ErrNotHeld) {
		t.Errorf("renew with another token: %v", res[len(keys)])
	}
}

// replyColumns runs sql, as a Store ran it, with args and returns the
// number of columns of its reply (none for a statement that returns no
// rows).
func replyColumns(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	rows, err := pool.Query(ctxT(t), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	n := len(rows.FieldDescriptions())
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLeaseGrantLean: in lease mode a grant on a free key and its release
// are one statement each, and lean ones: the grant replies with the fence
// alone and the release with no rows (each reply column and each result
// set costs the server at every execution). A refusal still sets the
// waiters flag and names the holder (two statements after a grant, one
// after a refusal), and the holder's release then NOTIFYs.
func TestLeaseGrantLean(t *testing.T) {
	t.Parallel()
	pool, tr := tracedPool(t, newDB(t))
	s := newStore(t, pool, nil)
	ctx := ctxT(t)
	woken := make(chan string, 10)
	stop, err := s.Subscribe(ctx, func(k string) { woken <- k })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	holder := driver.AcquireParams{Key: "job", Token: token(), Owner: "holder", TTL: time.Minute}
	tr.reset()
	g, err := s.Acquire(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	sqls := slices.Clone(tr.sqls)
	tr.mu.Unlock()
	if len(sqls) != 1 {
		t.Fatalf("a grant on a free key ran %d statements, want 1", len(sqls))
	}
	grant := sqls[0]
	if again, err := s.Acquire(ctx, holder); err != nil || again.Fence != g.Fence {
		t.Fatalf("a retry by the holder's token: %+v, %v; want fence %d", again, err, g.Fence)
	}

	// Refused after a grant: two statements; the flag is set, the holder named.
	tr.reset()
	_, err = s.Acquire(ctx, driver.AcquireParams{Key: "job", Token: token(), Owner: "waiter", TTL: time.Minute})
	var he *driver.HeldError
	if !errors.As(err, &he) || he.Owner != "holder" || he.TTL <= 0 || he.TTL > time.Minute {
		t.Fatalf("Acquire of the held key: %v, want held by holder for at most 1m", err)
	}
	if all, _ := tr.count(""); all != 2 {
		t.Errorf("a refusal after a grant ran %d statements, want 2", all)
	}
	if !readWaiters(t, s, "job") {
		t.Fatal("a refused Acquire did not set the waiters flag")
	}
	// Refused after a refusal: one statement.
	tr.reset()
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "job", Token: token(), Owner: "waiter", TTL: time.Minute}); !errors.As(err, &he) {
		t.Fatalf("Acquire of the held key: %v, want held", err)
	}
	if all, _ := tr.count(""); all != 1 {
		t.Errorf("a refusal after a refusal ran %d statements, want 1", all)
	}

	tr.reset()
	if err := s.Release(ctx, driver.ReleaseParams{Key: "job", Token: holder.Token}); err != nil {
		t.Fatal(err)
	}
	if k := nextNotified(t, woken); k != "job" {
		t.Fatalf("announced %q, want job", k)
	}
	tr.mu.Lock()
	release := tr.sqls[0]
	tr.mu.Unlock()
	if err := s.Release(ctx, driver.ReleaseParams{Key: "job", Token: holder.Token}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second release: %v, want driver.ErrNotHeld", err)
	}

	// A grant after a refusal takes the full statement; the next one on a
	// free key is lean again.
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "other", Token: token(), Owner: "me", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	tr.reset()
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "third", Token: token(), Owner: "me", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if all, _ := tr.count(grant); all != 1 {
		t.Errorf("a grant after a grant ran %d statements, want the lean one alone", all)
	}

	// The replies, with the statements' own arguments.
	tok := token()
	if n := replyColumns(t, pool, grant, "lean", tok, "me", int64(60_000_000)); n != 1 {
		t.Errorf("the grant's reply has %d columns, want 1 (the fence)", n)
	}
	if n := replyColumns(t, pool, release, "lean", tok, s.Channel()); n != 0 {
		t.Errorf("the release's reply has %d columns, want none", n)
	}
	if readRow(t, s, "lean").expires > 0 {
		t.Error("the lean grant's lease was not released")
	}
}

// TestMigrateFenceUnchecked: 0010 drops the lease table's CHECK (fence >
// 0) from a table an older library migrated (here with the longest table
// name, whose constraint name PostgreSQL truncates); a Store works on the
// table before and after, and its fences go on from where they were, a
// lease held across the migration kept.
func TestMigrateFenceUnchecked(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	ctx := ctxT(t)
	table := strings.Repeat("f", 52)
	migrateTo(t, pool, table, 9)
	checks := func() int {
		t.Helper()
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'`,
			pgx.Identifier{DefaultSchema, table}.Sanitize()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := checks(); n != 1 {
		t.Fatalf("%d CHECK constraints before 0010, want 1", n)
	}
	s, err := New(pool, &Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tok := token()
	f1 := mustAcquire(t, s, "job", tok, "me", time.Minute)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "job", Token: tok}); err != nil {
		t.Fatal(err)
	}
	tok = token()
	f2 := mustAcquire(t, s, "job", tok, "me", time.Minute)
	if f2 != f1+1 {
		t.Fatalf("fences %d then %d on the table before 0010", f1, f2)
	}
	if err := Migrate(ctx, pool, &Options{Table: table}); err != nil {
		t.Fatal(err)
	}
	if n := checks(); n != 0 {
		t.Fatalf("%d CHECK constraints after 0010, want 0", n)
	}
	res, err := s.Renew(ctx, []driver.RenewParams{{Key: "job", Token: tok, TTL: time.Minute}})
	if err != nil || res[0] != nil {
		t.Fatalf("the lease held across the migration: %v %v", res, err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "job", Token: tok}); err != nil {
		t.Fatal(err)
	}
	if f3 := mustAcquire(t, s, "job", token(), "me", time.Minute); f3 != f2+1 {
		t.Fatalf("fence %d after 0010, want %d", f3, f2+1)
	}
	if f := mustAcquire(t, s, "new", token(), "me", time.Minute); f != 1 {
		t.Fatalf("a new key's fence after 0010: %d, want 1", f)
	}
}

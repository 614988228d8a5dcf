package storeurl

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/mysqlstore"
	"github.com/tasklock/tasklock/pgstore"
	"github.com/tasklock/tasklock/sqlitestore"
)

// openMigrator opens rawURL's Migrator with a deadline and closes it at
// cleanup.
func openMigrator(t *testing.T, rawURL string) *Migrator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := OpenMigrator(ctx, rawURL)
	if err != nil {
		t.Fatalf("OpenMigrator(%s): %v", redact.URL(rawURL), err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Migrator.Close: %v", err)
		}
	})
	return m
}

// checkMigrations checks Migrator on a fresh database at rawURL: all
// pending, Up applies them all, then nothing is pending and Up applies
// nothing.
func checkMigrations(t *testing.T, rawURL, wantTable string) {
	t.Helper()
	ctx := context.Background()
	m := openMigrator(t, rawURL)
	if m.Table() != wantTable {
		t.Errorf("Table() = %q, want %q", m.Table(), wantTable)
	}
	before, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) == 0 || before[0].Version != 1 || before[0].Name == "" {
		t.Fatalf("status before Up: %+v", before)
	}
	for _, s := range before {
		if s.Applied || !s.AppliedAt.IsZero() {
			t.Errorf("fresh database: %v applied (%v)", s, s.AppliedAt)
		}
	}
	start := time.Now()
	applied, err := m.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(before) {
		t.Errorf("Up applied %v, want %d migrations", applied, len(before))
	}
	after, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range after {
		if !s.Applied || s.AppliedAt.Location() != time.UTC || s.AppliedAt.Before(start.Add(-time.Minute)) || s.AppliedAt.After(time.Now().Add(time.Minute)) {
			t.Errorf("after Up: %v applied %v at %v", s, s.Applied, s.AppliedAt)
		}
	}
	if again, err := m.Up(ctx); err != nil || len(again) != 0 {
		t.Errorf("second Up = %v, %v; want nothing applied", again, err)
	}
}

// wantNotMigrated opens rawURL, whose table is not migrated, and expects
// ErrNotMigrated naming the pending migration.
func wantNotMigrated(t *testing.T, rawURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := Open(ctx, rawURL)
	if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), "0001_") || !strings.Contains(err.Error(), "tasklock migrate up") {
		t.Fatalf("Open(%s) = %v, want ErrNotMigrated naming 0001_ and `tasklock migrate up`", redact.URL(rawURL), err)
	}
	t.Logf("%v", err)
}

func TestOpenPostgres(t *testing.T) {
	srv := testserver.StartPostgres(t)
	dbURL := srv.CreateDB(t)

	// migrate=false on a fresh database: nothing is created.
	wantNotMigrated(t, dbURL+"&migrate=false")
	checkMigrations(t, dbURL+"&migrate=false", "public.tasklock_locks")
	checkStore(t, open(t, dbURL+"&migrate=false"))

	// By default Open creates what is missing.
	checkStore(t, open(t, dbURL+"&schema=jobs&table=job_locks&mode=connection"))
	st, err := openMigrator(t, dbURL+"&schema=jobs&table=job_locks").Status(context.Background())
	if err != nil || len(st) == 0 || !st[0].Applied {
		t.Errorf("jobs.job_locks after Open: %+v, %v", st, err)
	}
	s := open(t, strings.Replace(dbURL, "postgres://", "postgresql://", 1)+"&mode=connection")
	if ps, ok := s.(*pgstore.Store); !ok || ps.Mode() != pgstore.ModeConnection {
		t.Fatalf("Open returned %T in mode %v", s, ps.Mode())
	}
	checkStore(t, s)
}

func TestOpenPostgresServerParams(t *testing.T) {
	srv := testserver.StartPostgres(t)
	dbURL := srv.CreateDB(t)
	// A run-time parameter the server knows is set on the session.
	checkStore(t, open(t, dbURL+"&application_name=tasklock-test&search_path=public"))

	// One it does not know is a bad URL, reported when Open connects.
	for _, tt := range []struct{ param, want string }{
		{"tabel=locks", `unrecognized configuration parameter "tabel"`},
		{"statement_timeout=soon", "statement_timeout"},
	} {
		u := strings.Replace(dbURL, "postgres://postgres@", "postgres://postgres:"+secret+"@", 1) + "&" + tt.param
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := Open(ctx, u)
		cancel()
		if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%s) = %v, want ErrBadURL containing %q", redact.URL(u), err, tt.want)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q contains the password", err)
		}
		t.Logf("%v", err)
	}
}

func TestOpenPostgresInvalidOptions(t *testing.T) {
	// pgstore.New checks the table's name before any I/O: nothing
	// listens at this address.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, u := range []string{
		"postgres://u:" + secret + "@127.0.0.1:1/db?table=Bad-Name",
		"postgres://u:" + secret + "@127.0.0.1:1/db?schema=" + strings.Repeat("s", 70),
	} {
		_, _, err := Open(ctx, u)
		if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "Options.") || strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%s) = %v, want ErrBadURL naming the option", redact.URL(u), err)
		}
		var oe *driver.OptionError
		if !errors.As(err, &oe) || !strings.HasPrefix(oe.Field, "Options.") {
			t.Errorf("Open(%s) = %v, want pgstore's *driver.OptionError in the chain", redact.URL(u), err)
		}
		_, err = OpenMigrator(ctx, u)
		if !errors.Is(err, ErrBadURL) {
			t.Errorf("OpenMigrator(%s) = %v, want ErrBadURL", redact.URL(u), err)
		}
	}
}

// acquireParams asks for key as owner "storeurl-test" with token.
func acquireParams(key, token string, ttl time.Duration) driver.AcquireParams {
	return driver.AcquireParams{Key: key, Token: token, Owner: "storeurl-test", TTL: ttl}
}

func TestOpenSQLUnreachable(t *testing.T) {
	addr := testserver.ClosedAddr(t)
	for _, u := range []string{
		"postgres://u:" + secret + "@" + addr + "/db",
		"postgres://u@" + addr + "/db?password=" + secret,
		"mysql://u:" + secret + "@tcp(" + addr + ")/db",
		"mysql://u:" + secret + "@" + addr + "/db?mode=connection",
	} {
		for _, op := range []string{"Open", "OpenMigrator"} {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var err error
			if op == "Open" {
				_, _, err = Open(ctx, u)
			} else {
				_, err = OpenMigrator(ctx, u)
			}
			cancel()
			if !errors.Is(err, ErrUnreachable) {
				t.Fatalf("%s(%s) = %v, want ErrUnreachable", op, redact.URL(u), err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q contains the password", err)
			}
			if !strings.Contains(err.Error(), redact.URL(u)) {
				t.Errorf("error %q does not name the URL", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s(%s) took %v", op, redact.URL(u), d)
			}
		}
		t.Logf("%s: OK", redact.URL(u))
	}
}

// mysqlDB creates a fresh database on the shared MariaDB server and returns
// the server's address, the database's name and a root connection to it.
func mysqlDB(t *testing.T) (addr, dbName string, root *sql.DB) {
	t.Helper()
	srv := testserver.SharedMariaDB(t)
	dsn := srv.CreateDB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	root, err = sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return srv.Addr(), cfg.DBName, root
}

func TestOpenMySQL(t *testing.T) {
	addr, db, _ := mysqlDB(t)
	tcpForm := "mysql://root@tcp(" + addr + ")/" + db
	hostForm := "mysql://root@" + addr + "/" + db

	wantNotMigrated(t, hostForm+"?migrate=false")
	checkMigrations(t, tcpForm+"?migrate=false", "tasklock_locks")
	for _, u := range []string{
		tcpForm, hostForm + "?mode=lease", tcpForm + "?mode=connection", hostForm + "?mode=connection&timeout=5s",
		hostForm + "?table=other_locks&charset=utf8mb4",
	} {
		s := open(t, u)
		if ms, ok := s.(*mysqlstore.Store); !ok || strings.Contains(u, "connection") != (ms.Mode() == mysqlstore.ModeConnection) {
			t.Errorf("Open(%s) returned %T", u, s)
		}
		checkStore(t, s)
	}
}

func TestOpenMySQLConnectionModeCloseFrees(t *testing.T) {
	addr, db, root := mysqlDB(t)
	u := "mysql://root@" + addr + "/" + db + "?mode=connection"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A grant in a server's first two seconds counts as made before a
	// restart (mysqlstore's "Server restarts": Uptime has whole seconds),
	// and its key would then be kept for its TTL: let the shared server,
	// perhaps started by the test before, be older than that.
	clitest.WaitFor(t, 5*time.Second, func() bool {
		var name string
		var up int
		err := root.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&name, &up)
		return err == nil && up >= 3
	}, "the server to be up for 3 s")
	s, closeFn, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	// A lock left held: closing frees it (mysqlstore.Store.Close ends its
	// connection) before the TTL.
	if _, err := s.Acquire(ctx, acquireParams("held", "t1", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, u)
	clitest.WaitFor(t, 5*time.Second, func() bool {
		_, err := s2.Acquire(ctx, acquireParams("held", "t2", time.Minute))
		return err == nil
	}, "the lock to be free after closing its store")
}

func TestOpenMySQLPassword(t *testing.T) {
	addr, db, root := mysqlDB(t)
	ctx := context.Background()
	for _, q := range []string{
		"CREATE USER 'tl_app'@'127.0.0.1' IDENTIFIED BY 'p@ss:" + secret + "'",
		"GRANT ALL ON `" + db + "`.* TO 'tl_app'@'127.0.0.1'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	checkStore(t, open(t, "mysql://tl_app:p%40ss%3A"+secret+"@tcp("+addr+")/"+db))
	checkStore(t, open(t, "mysql://tl_app:p@ss:"+secret+"@"+addr+"/"+db+"?mode=connection"))
	for _, u := range []string{
		"mysql://tl_app:wrong-" + secret + "@tcp(" + addr + ")/" + db,
		"mysql://tl_app@" + addr + "/" + db,
		"mysql://tl_app:p@ss:" + secret + "@" + addr + "/no_such_db",
	} {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _, err := Open(ctx, u)
		cancel()
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("Open(%s) = %v, want ErrUnreachable", redact.URL(u), err)
		}
		// A wrong or missing password is refused credentials; a database
		// the user may not use is not.
		if auth := !strings.Contains(u, "no_such_db"); errors.Is(err, ErrAuth) != auth {
			t.Errorf("Open(%s) = %v: ErrAuth %v, want %v", redact.URL(u), err, !auth, auth)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q contains the password", err)
		}
		t.Logf("%v", err)
	}
}

func TestOpenSQLite(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()

	// Neither Open with migrate=false nor Migrator.Status creates a file
	// that does not exist; Migrator.Up does.
	created := filepath.Join(dir, "created.db")
	_, _, err := Open(ctx, "sqlite://"+created+"?migrate=false")
	if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), "does not exist: check the path (tasklock migrate up creates it)") {
		t.Errorf("Open(missing file, migrate=false) = %v, want ErrNotMigrated", err)
	}
	m := openMigrator(t, "sqlite://"+created)
	if _, err := m.Status(ctx); !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Status of a missing file = %v", err)
	}
	if _, err := os.Stat(created); !os.IsNotExist(err) {
		t.Fatalf("%s created: %v", created, err)
	}
	if applied, err := m.Up(ctx); err != nil || len(applied) == 0 {
		t.Fatalf("Up on a missing file = %v, %v", applied, err)
	}
	checkStore(t, open(t, "sqlite://"+created+"?migrate=false"))
	_, _, err = Open(ctx, "sqlite:///nonexistent-dir-tasklock/x.db")
	// A bad URL, not an unreachable store: no retry mends it.
	if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), `directory "/nonexistent-dir-tasklock" does not exist`) {
		t.Errorf("Open(missing directory) = %v, want ErrBadURL", err)
	}

	// An empty file is an empty database.
	abs := "sqlite://" + filepath.Join(dir, "locks.db")
	if err := os.WriteFile(filepath.Join(dir, "locks.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantNotMigrated(t, abs+"?migrate=false")
	checkMigrations(t, abs+"?migrate=false", "tasklock_locks")
	s := open(t, abs)
	if _, ok := s.(*sqlitestore.Store); !ok {
		t.Fatalf("Open returned %T", s)
	}
	checkStore(t, s)
	checkStore(t, open(t, abs+"?table=other_locks"))

	// A relative path is relative to the working directory; the file is
	// created with its table.
	t.Chdir(dir)
	checkStore(t, open(t, "sqlite://./rel.db"))
	checkStore(t, open(t, "sqlite://rel2.db?table=t2"))
	for _, name := range []string{"rel.db", "rel2.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s not created: %v", name, err)
		}
	}

	// Not a database: unusable, not a bad URL.
	notDB := filepath.Join(dir, "not.db")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("not a database\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = Open(ctx, "sqlite://"+notDB)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "not a SQLite database") {
		t.Errorf("Open(not a database) = %v", err)
	}
}

func TestOpenMigratorNoSchema(t *testing.T) {
	addr := testserver.ClosedAddr(t)
	for _, u := range []string{"mem://", "redis://" + addr, "redis+cluster://u:" + secret + "@" + addr} {
		start := time.Now()
		_, err := OpenMigrator(context.Background(), u)
		if !errors.Is(err, ErrNoMigrations) || strings.Contains(err.Error(), secret) {
			t.Errorf("OpenMigrator(%s) = %v, want ErrNoMigrations", redact.URL(u), err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("OpenMigrator(%s) took %v: it should not connect", redact.URL(u), d)
		}
	}
	if _, err := OpenMigrator(context.Background(), "redis://h:1?bogus=1"); !errors.Is(err, ErrBadURL) {
		t.Errorf("OpenMigrator(bad redis URL) = %v, want ErrBadURL", err)
	}
}

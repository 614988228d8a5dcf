package testserver

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func pgConnect(t *testing.T, url string) *pgconn.PgConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func pgExec(c *pgconn.PgConn, timeout time.Duration, sql string) ([]*pgconn.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Exec(ctx, sql).ReadAll()
}

func pgValue(t *testing.T, c *pgconn.PgConn, sql string) string {
	t.Helper()
	rs, err := pgExec(c, 10*time.Second, sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if len(rs) != 1 || len(rs[0].Rows) != 1 {
		t.Fatalf("%s: %d results", sql, len(rs))
	}
	return string(rs[0].Rows[0][0])
}

// TestPostgres covers the shared and the private servers. It stops the
// shared server at the end: this package's TestMain is not testserver.Main,
// and its leak check runs after every test.
func TestPostgres(t *testing.T) {
	t.Cleanup(stopShared)
	t.Run("Shared", testPostgresShared)
	t.Run("Private", testPostgresPrivate)
	t.Run("ChildrenKilled", testPostgresChildrenKilled)
}

func testPostgresShared(t *testing.T) {
	start := time.Now()
	p := StartPostgres(t)
	t.Logf("shared server (initdb + start) ready in %v", time.Since(start))
	if q := StartPostgres(t); q != p {
		t.Fatal("StartPostgres returned a second server")
	}
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q", p.Addr())
	}
	start = time.Now()
	u1 := p.CreateDB(t)
	t.Logf("CreateDB took %v", time.Since(start))
	u2 := p.CreateDB(t)
	if u1 == u2 {
		t.Fatalf("CreateDB returned %s twice", u1)
	}
	want := fmt.Sprintf("postgres://postgres@%s/", p.Addr())
	if !strings.HasPrefix(u1, want) || !strings.HasSuffix(u1, "?sslmode=disable") {
		t.Fatalf("CreateDB URL %q, want %s<db>?sslmode=disable", u1, want)
	}
	c1, c2 := pgConnect(t, u1), pgConnect(t, u2)
	if _, err := pgExec(c1, 10*time.Second, "CREATE TABLE only_here (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgExec(c2, 10*time.Second, "SELECT * FROM only_here"); err == nil {
		t.Fatal("a table of one test's database is visible in another's")
	}
	if got := pgValue(t, c1, "SELECT current_user"); got != PostgresUser {
		t.Fatalf("current_user %q", got)
	}
	if got := pgValue(t, c1, "SHOW fsync"); got != "off" {
		t.Fatalf("fsync = %q, want off", got)
	}

	// Fault injection on the shared server fails the test instead.
	for name, fn := range map[string]func(testing.TB){"Restart": p.Restart, "Kill": p.Kill, "Stop": p.Stop, "Cont": p.Cont} {
		ft := &pgFatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn(ft)
		}()
		<-done
		if !strings.Contains(ft.msg, "shared PostgreSQL server") {
			t.Errorf("%s on the shared server: %q, want a failure", name, ft.msg)
		}
	}
	if got := pgValue(t, c1, "SELECT 1"); got != "1" {
		t.Fatalf("shared server after the refused faults: %q", got)
	}
}

func testPostgresPrivate(t *testing.T) {
	start := time.Now()
	p := StartPostgresPrivate(t)
	t.Logf("private server (template copy + start) ready in %v", time.Since(start))
	if p == StartPostgres(t) {
		t.Fatal("the private server is the shared one")
	}
	url := p.CreateDB(t)
	c := pgConnect(t, url)
	if _, err := pgExec(c, 10*time.Second, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	addr, pid := p.Addr(), p.Pid()

	start = time.Now()
	p.Restart(t)
	t.Logf("restart took %v", time.Since(start))
	if p.Addr() != addr || p.Pid() == pid {
		t.Fatalf("after Restart: addr %s (was %s), pid %d (was %d)", p.Addr(), addr, p.Pid(), pid)
	}
	if _, err := pgExec(c, 5*time.Second, "SELECT 1"); err == nil {
		t.Fatal("a connection from before the restart still works")
	}
	c = pgConnect(t, url)
	if got := pgValue(t, c, "SELECT x FROM kept"); got != "42" {
		t.Fatalf("committed row after restart: %q", got)
	}

	p.Stop(t)
	if _, err := pgExec(c, 300*time.Millisecond, "SELECT 1"); err == nil {
		t.Fatal("a stopped server answered")
	}
	p.Cont(t)
	// The timed-out query broke that connection; a new one works.
	c = pgConnect(t, url)
	if got := pgValue(t, c, "SELECT 1"); got != "1" {
		t.Fatalf("after Cont: %q", got)
	}

	p.Kill(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if k, err := pgconn.Connect(ctx, url); err == nil {
		k.Close(ctx)
		t.Fatal("connected to a killed server")
	}
	p.Restart(t) // from a killed server
	c = pgConnect(t, url)
	if got := pgValue(t, c, "SELECT count(*) FROM kept"); got != "1" {
		t.Fatalf("after Kill+Restart: %q", got)
	}
}

func testPostgresChildrenKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("children are found through /proc")
	}
	p := StartPostgresPrivate(t)
	c := pgConnect(t, p.CreateDB(t))
	backend := pgValue(t, c, "SELECT pg_backend_pid()")
	kids := childPids(p.Pid())
	if len(kids) < 3 {
		t.Fatalf("postmaster %d has %d children, want the background processes and a backend", p.Pid(), len(kids))
	}
	if !strings.Contains(fmt.Sprint(kids), backend) {
		t.Fatalf("backend %s not among the postmaster's children %v", backend, kids)
	}
	p.Kill(t)
	if err := waitGone(kids, time.Second); err != nil {
		t.Fatal(err)
	}
}

// pgFatalTB records a fatal failure instead of failing the real test.
type pgFatalTB struct {
	testing.TB
	msg string
}

func (f *pgFatalTB) Helper() {}
func (f *pgFatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *pgFatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

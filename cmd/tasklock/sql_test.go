//go:build unix

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/internal/testserver"
)

// pgURL returns the URL of a fresh database on the shared PostgreSQL
// server: postgres://postgres@127.0.0.1:PORT/DB?sslmode=disable.
func pgURL(t *testing.T) string {
	t.Helper()
	return testserver.StartPostgres(t).CreateDB(t)
}

// mysqlDB creates a fresh database on the shared MariaDB server and returns
// the server's address and the database's name.
func mysqlDB(t *testing.T) (addr, db string) {
	t.Helper()
	srv := testserver.SharedMariaDB(t)
	cfg, err := mysql.ParseDSN(srv.CreateDB(t))
	if err != nil {
		t.Fatal(err)
	}
	return srv.Addr(), cfg.DBName
}

// fenceRE finds the fence a COMMAND printed.
var fenceRE = regexp.MustCompile(`fence=(\d+)`)

func fenceOf(t *testing.T, out string) uint64 {
	t.Helper()
	m := fenceRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no fence in %q", out)
	}
	f, _ := strconv.ParseUint(m[1], 10, 64)
	return f
}

// checkExclusion runs a holder through holderURL and, while it holds key,
// a contender through otherURL, which must exit 75 naming the holder. Once
// the holder is done, a run through otherURL gets the lock with a higher
// fence, and prints nothing of its own.
func checkExclusion(t *testing.T, holderURL, otherURL, key string) {
	t.Helper()
	stop := filepath.Join(t.TempDir(), "stop")
	owner := "holder-" + key
	holder := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", holderURL, "--key", key, "--owner", owner, "--ttl", "30s",
		"--", "sh", "-c", waitingChild+`; echo "fence=$TASKLOCK_FENCE"`)
	holder.WaitOutput("started", 20*time.Second)

	code, out, errOut := tl.Run(t, nil, "exec", "--store", otherURL, "--key", key, "--", "echo", "must-not-run")
	if code != exitTempFail {
		t.Fatalf("contender: exit %d, want %d\nstderr:\n%s", code, exitTempFail, errOut)
	}
	if out != "" || !strings.Contains(errOut, "held by "+owner) {
		t.Errorf("contender: stdout %q, stderr %q; want the holder %s named", out, errOut, owner)
	}

	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := holder.Wait(20 * time.Second); code != 0 {
		t.Fatalf("holder exit %d\nstderr:\n%s", code, holder.Stderr())
	}
	code, out, errOut = tl.Run(t, nil, "exec", "--store", otherURL, "--key", key, "--", "sh", "-c", `echo "fence=$TASKLOCK_FENCE"`)
	if code != 0 {
		t.Fatalf("after the holder: exit %d\nstderr:\n%s", code, errOut)
	}
	if errOut != "" {
		t.Errorf("after the holder: stderr %q, want nothing without --verbose", errOut)
	}
	if f1, f2 := fenceOf(t, holder.Stdout()), fenceOf(t, out); f1 == 0 || f2 <= f1 {
		t.Errorf("fences %d then %d, want positive and increasing", f1, f2)
	}
}

func TestExecPostgres(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	// The first exec creates the table (migrate=true by default).
	t.Run("lease", func(t *testing.T) {
		checkExclusion(t, url, url+"&mode=lease", "pg-lease")
	})
	t.Run("connection", func(t *testing.T) {
		u := strings.Replace(url, "postgres://", "postgresql://", 1) + "&mode=connection"
		checkExclusion(t, u, u, "pg-conn")
	})
}

func TestExecMySQL(t *testing.T) {
	t.Parallel()
	addr, db := mysqlDB(t)
	tcpForm := "mysql://root@tcp(" + addr + ")/" + db
	hostForm := "mysql://root@" + addr + "/" + db
	t.Run("lease", func(t *testing.T) {
		checkExclusion(t, tcpForm, hostForm+"?mode=lease", "my-lease")
	})
	t.Run("connection", func(t *testing.T) {
		checkExclusion(t, hostForm+"?mode=connection", tcpForm+"?mode=connection", "my-conn")
	})
}

func TestExecSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "locks.db")
	checkExclusion(t, "sqlite://"+path, "sqlite://"+path, "sq")

	// A relative path is relative to the working directory; exec creates
	// the file and its table.
	p := tl.StartIn(t, dir, nil, "exec", "--store", "sqlite://./rel.db?table=rel_locks", "--key", "rel", "--", "echo", "ran")
	if code := p.Wait(20 * time.Second); code != 0 || p.Stdout() != "ran\n" {
		t.Fatalf("relative path: exit %d, stdout %q\nstderr:\n%s", code, p.Stdout(), p.Stderr())
	}
	if _, err := os.Stat(filepath.Join(dir, "rel.db")); err != nil {
		t.Errorf("relative path: %v", err)
	}
}

// migrateJSON is tasklock migrate's JSON output.
type migrateJSON struct {
	Store      string `json:"store"`
	HasSchema  bool   `json:"has_schema"`
	Table      string `json:"table"`
	Migrations []struct {
		Version   int        `json:"version"`
		Name      string     `json:"name"`
		Applied   bool       `json:"applied"`
		AppliedAt *time.Time `json:"applied_at"`
	} `json:"migrations"`
	Applied *[]struct {
		Version int    `json:"version"`
		Name    string `json:"name"`
	} `json:"applied"`
}

func runMigrateJSON(t *testing.T, args ...string) migrateJSON {
	t.Helper()
	code, out, errOut := tl.Run(t, nil, append(append([]string{"migrate"}, args...), "--json")...)
	if code != 0 {
		t.Fatalf("migrate %q: exit %d\nstderr:\n%s", args, code, errOut)
	}
	var r migrateJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("migrate %q --json: %v\n%s", args, err, out)
	}
	return r
}

// checkMigrate runs migrate status, up and status again on a store whose
// table does not exist yet, then exec with ?migrate=false.
func checkMigrate(t *testing.T, url, table, sep string) {
	t.Helper()
	start := time.Now().Add(-time.Minute)

	// status only reads: before up, everything is pending.
	code, out, errOut := tl.Run(t, nil, "migrate", "status", "--store", url)
	if code != 0 {
		t.Fatalf("status: exit %d\nstderr:\n%s", code, errOut)
	}
	if !regexp.MustCompile(`(?m)^VERSION +NAME +APPLIED +APPLIED_AT\n1 +\w+ +no +-$`).MatchString(out) || !strings.Contains(out, "pending: run 'tasklock migrate up'") {
		t.Errorf("status before up:\n%s", out)
	}
	if !strings.Contains(out, table) {
		t.Errorf("status does not name the table %s:\n%s", table, out)
	}
	r := runMigrateJSON(t, "status", "--store", url)
	if !r.HasSchema || r.Table != table || len(r.Migrations) == 0 || r.Migrations[0].Applied || r.Migrations[0].AppliedAt != nil || r.Applied != nil {
		t.Errorf("status --json before up: %+v", r)
	}
	// exec with ?migrate=false refuses the missing table, and creates
	// nothing.
	code, _, errOut = tl.Run(t, nil, "exec", "--store", url+sep+"migrate=false", "--key", "k", "--", "echo", "must-not-run")
	if code != exitUnavailable || !strings.Contains(errOut, "not migrated") || !strings.Contains(errOut, "tasklock migrate up") {
		t.Errorf("exec ?migrate=false before up: exit %d, stderr %q; want %d saying to run tasklock migrate up", code, errOut, exitUnavailable)
	}

	// up applies, and says what.
	code, out, errOut = tl.Run(t, nil, "migrate", "up", "--store", url)
	if code != 0 || !regexp.MustCompile(`^applied 0001_\w+ to `+regexp.QuoteMeta(table)+` \(`).MatchString(out) {
		t.Fatalf("up: exit %d, stdout %q\nstderr:\n%s", code, out, errOut)
	}
	code, out, _ = tl.Run(t, nil, "migrate", "--store", url, "status")
	if code != 0 || !regexp.MustCompile(`(?m)^1 +\w+ +yes +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(out) || strings.Contains(out, "pending") {
		t.Errorf("status after up: exit %d\n%s", code, out)
	}
	r = runMigrateJSON(t, "status", "--store", url)
	if len(r.Migrations) == 0 || !r.Migrations[0].Applied || r.Migrations[0].AppliedAt == nil ||
		r.Migrations[0].AppliedAt.Before(start) || r.Migrations[0].AppliedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("status --json after up: %+v", r)
	}
	// up again applies nothing.
	code, out, _ = tl.Run(t, nil, "migrate", "up", "--store", url)
	if code != 0 || !strings.Contains(out, "up to date: nothing to apply") {
		t.Errorf("second up: exit %d, stdout %q", code, out)
	}
	if r := runMigrateJSON(t, "up", "--store", url); r.Applied == nil || len(*r.Applied) != 0 || !r.Migrations[0].Applied {
		t.Errorf("up --json when up to date: %+v", r)
	}

	// exec with ?migrate=false now works.
	code, out, errOut = tl.Run(t, nil, "exec", "--store", url+sep+"migrate=false", "--key", "k", "--", "echo", "ran")
	if code != 0 || out != "ran\n" {
		t.Errorf("exec ?migrate=false after up: exit %d, stdout %q\nstderr:\n%s", code, out, errOut)
	}
}

func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	checkMigrate(t, pgURL(t)+"&schema=jobs&table=job_locks", "jobs.job_locks", "&")
}

func TestMigrateMySQL(t *testing.T) {
	t.Parallel()
	addr, db := mysqlDB(t)
	checkMigrate(t, "mysql://root@tcp("+addr+")/"+db, "tasklock_locks", "?")
}

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "locks.db")
	// status on a file that does not exist creates nothing, and is a
	// usage error, as for the jobs and locks commands: the URL names no
	// database.
	code, _, errOut := tl.Run(t, nil, "migrate", "status", "--store", "sqlite://"+path)
	if code != exitUsage || !strings.Contains(errOut, fmt.Sprintf("database file %q does not exist: check the path", path)) {
		t.Errorf("status of a missing file: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("status created %s: %v", path, err)
	}
	// Nor does exec with ?migrate=false.
	code, _, errOut = tl.Run(t, nil, "exec", "--store", "sqlite://"+path+"?migrate=false", "--key", "k", "--", "echo", "must-not-run")
	if code != exitUnavailable || !strings.Contains(errOut, "tasklock migrate up") {
		t.Errorf("exec ?migrate=false on a missing file: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("exec ?migrate=false created %s: %v", path, err)
	}
	// An empty file is an empty SQLite database.
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkMigrate(t, "sqlite://"+path+"?table=t1", "t1", "&")
}

func TestMigrateNoSchema(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"mem://", "redis://app:pw-S3cr3t@" + testserver.ClosedAddr(t)} {
		for _, sub := range []string{"status", "up"} {
			code, out, errOut := tl.Run(t, nil, "migrate", sub, "--store", url)
			if code != 0 || !strings.Contains(out, "keeps no schema: nothing to migrate") || strings.Contains(out+errOut, "S3cr3t") {
				t.Errorf("migrate %s %s: exit %d, stdout %q, stderr %q", sub, url, code, out, errOut)
			}
			r := runMigrateJSON(t, sub, "--store", url)
			if r.HasSchema || len(r.Migrations) != 0 || (sub == "up") != (r.Applied != nil) {
				t.Errorf("migrate %s --json: %+v", sub, r)
			}
		}
	}
}

func TestMigrateUsage(t *testing.T) {
	t.Parallel()
	store := []string{"TASKLOCK_STORE=sqlite://" + filepath.Join(t.TempDir(), "x.db")}
	closed := testserver.ClosedAddr(t)
	tests := []struct {
		env  []string
		args []string
		code int
		want string // in stderr
	}{
		{store, nil, exitUsage, "missing subcommand"},
		{store, []string{"down"}, exitUsage, `unknown subcommand "down"`},
		{store, []string{"up", "status"}, exitUsage, `unexpected argument "status"`},
		{nil, []string{"status"}, exitUsage, "--store is required"},
		{store, []string{"status", "--store", ""}, exitUsage, "--store is empty"},
		{store, []string{"status", "--timeout", "0s"}, exitUsage, "--timeout"},
		{store, []string{"status", "--bogus"}, exitUsage, "-bogus"},
		{nil, []string{"status", "--store", "postgres://h/db?mode=x"}, exitUsage, `mode="x"`},
		{nil, []string{"up", "--store", "mysql://u@h/db?bogus=1"}, exitUsage, `unknown query parameter "bogus"`},
		{nil, []string{"up", "--store", "ftp://h"}, exitUsage, `unknown scheme "ftp"`},
		{nil, []string{"status", "--store", "postgres://u@" + closed + "/db"}, exitUnavailable, "unreachable"},
		{nil, []string{"up", "--store", "mysql://u@" + closed + "/db"}, exitUnavailable, "unreachable"},
		{nil, []string{"up", "--store", "sqlite:///nonexistent-dir-tasklock/x.db"}, exitUsage, `directory "/nonexistent-dir-tasklock" does not exist`},
	}
	for _, tt := range tests {
		code, out, errOut := tl.Run(t, tt.env, append([]string{"migrate"}, tt.args...)...)
		if code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Errorf("migrate %q: exit %d (want %d), stderr %q (want %q)", tt.args, code, tt.code, errOut, tt.want)
		}
		if out != "" {
			t.Errorf("migrate %q: stdout %q", tt.args, out)
		}
	}
	// $TASKLOCK_STORE is used when --store is not given.
	if code, out, errOut := tl.Run(t, store, "migrate", "up"); code != 0 || !strings.Contains(out, "applied 0001_") {
		t.Errorf("migrate up with $TASKLOCK_STORE: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestSQLPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const pw = "pw-S3cr3t"
	closed := testserver.ClosedAddr(t)

	// PostgreSQL: the test server trusts loopback, so any password is
	// accepted; what matters is that it is never printed.
	pg := strings.Replace(pgURL(t), "postgres://postgres@", "postgres://postgres:"+pw+"@", 1)
	pgAt := func(hostport string) string {
		return "postgres://postgres:" + pw + "@" + hostport + "/db"
	}

	// MySQL: a user with a password.
	addr, db := mysqlDB(t)
	root, err := sql.Open("mysql", "root@tcp("+addr+")/"+db)
	if err != nil {
		t.Fatal(err)
	}
	// The server is shared by the process's tests, -count and -cpu runs
	// too: the user goes once the parallel runs below are done.
	t.Cleanup(func() {
		if _, err := root.ExecContext(context.Background(), "DROP USER IF EXISTS 'tl_cli'@'127.0.0.1'"); err != nil {
			t.Error(err)
		}
		root.Close()
	})
	for _, q := range []string{
		"CREATE USER 'tl_cli'@'127.0.0.1' IDENTIFIED BY '" + pw + "'",
		"GRANT ALL ON `" + db + "`.* TO 'tl_cli'@'127.0.0.1'",
	} {
		if _, err := root.ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	myTCP := "mysql://tl_cli:" + pw + "@tcp(" + addr + ")/" + db
	myHost := "mysql://tl_cli:" + pw + "@" + addr + "/" + db

	type run struct {
		name string
		args []string // after "exec" or "migrate"
		code int
	}
	// Each run takes a key of its own: they run in parallel.
	n := 0
	exec := func(name, store string, code int, extra ...string) run {
		n++
		key := "pw-" + strconv.Itoa(n)
		return run{name, append(append([]string{"exec", "--store", store, "--key", key, "--verbose"}, extra...), "--", "true"), code}
	}
	tests := []run{
		exec("pg success", pg, 0),
		exec("pg connection mode", pg+"&mode=connection", 0),
		exec("pg password parameter", strings.Replace(pg, ":"+pw+"@", "@", 1)+"&password="+pw, 0),
		exec("pg closed port", pgAt(closed), exitUnavailable),
		exec("pg unknown server parameter", pg+"&tabel="+pw, exitUsage),
		exec("pg bad table", pg+"&table=Bad-"+pw, exitUsage),
		exec("pg bad sslmode", pg+"&sslmode="+pw, exitUsage),
		exec("pg keyword DSN", "host=127.0.0.1 password="+pw, exitUsage),
		exec("pg not migrated", pg+"&table=missing&migrate=false", exitUnavailable),
		exec("mysql success", myTCP, 0),
		exec("mysql host form, connection mode", myHost+"?mode=connection", 0),
		exec("mysql wrong password", "mysql://tl_cli:wrong-"+pw+"@tcp("+addr+")/"+db, exitUnavailable),
		exec("mysql wrong password, host form", "mysql://tl_cli:wrong-"+pw+"@"+addr+"/"+db, exitUnavailable),
		exec("mysql closed port", "mysql://tl_cli:"+pw+"@tcp("+closed+")/"+db, exitUnavailable),
		exec("mysql unknown parameter", myHost+"?bogus="+pw, exitUsage),
		exec("mysql bad tls", myTCP+"?tls="+pw, exitUsage),
		exec("mysql unclosed tcp(", "mysql://tl_cli:"+pw+"@tcp("+addr+"/"+db, exitUsage),
		exec("mysql raw special characters", "mysql://tl_cli:"+pw+"/?#@tcp("+closed+")/"+db, exitUnavailable),
		exec("mysql DSN without scheme", "tl_cli:"+pw+"@tcp("+addr+")/"+db, exitUsage),
		exec("URL in the wrong flag", myTCP, exitUsage, "--ttl", myTCP),
		{"migrate up pg", []string{"migrate", "up", "--store", pg}, 0},
		{"migrate status pg", []string{"migrate", "status", "--store", pg, "--json"}, 0},
		{"migrate status mysql", []string{"migrate", "status", "--store", myHost}, 0},
		{"migrate up mysql wrong password", []string{"migrate", "up", "--store", "mysql://tl_cli:x" + pw + "@" + addr + "/" + db}, exitUnavailable},
		{"migrate status pg closed port", []string{"migrate", "status", "--store", pgAt(closed), "--json"}, exitUnavailable},
		{"migrate URL in the wrong flag", []string{"migrate", "status", "--store", pg, "--timeout", pg}, exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := tl.Run(t, nil, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, out, errOut)
			}
			if strings.Contains(out+errOut, "S3cr3t") {
				t.Errorf("the password was printed:\nstdout:\n%s\nstderr:\n%s", out, errOut)
			}
			if tt.code != 0 && errOut == "" {
				t.Errorf("no message on stderr")
			}
			if tt.code != 0 {
				t.Logf("exit %d: %s", code, strings.TrimSpace(errOut))
			}
		})
	}
}

// TestAdminChangesNoSchema: the jobs and locks commands (but jobs create)
// do not create the tables of a SQL store that has none, as they do not
// create a SQLite file: a mistyped database would get them. They say to
// run migrate up, and the store stays as it was.
func TestAdminChangesNoSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "other.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil { // an empty SQLite database
		t.Fatal(err)
	}
	for _, url := range []string{"sqlite://" + path, pgURL(t)} {
		for _, args := range [][]string{{"jobs", "list"}, {"jobs", "history"}, {"jobs", "audit"}, {"locks", "list"}, {"locks", "show", "k"}, {"jobs", "pause", "j", "--force"}} {
			code, out, errOut := tl.Run(t, nil, append(args, "--store", url)...)
			if code != exitUnavailable || out != "" || !strings.Contains(errOut, "run `tasklock migrate up` first") {
				t.Errorf("%q on %s: exit %d, stdout %q, stderr %q; want 69 saying to run migrate up", args, url, code, out, errOut)
			}
		}
		code, out, errOut := tl.Run(t, nil, "migrate", "status", "--store", url)
		if code != exitOK || strings.Contains(out, "yes") {
			t.Errorf("migrate status on %s after the jobs and locks commands: exit %d, want every migration pending\n%s%s", url, code, out, errOut)
		}
		// jobs create sets the store up, as it creates a SQLite file.
		code, out, errOut = tl.Run(t, nil, "jobs", "create", "j", "--schedule", "@daily", "--command", "true", "--store", url)
		if code != exitOK {
			t.Errorf("jobs create on %s: exit %d\n%s%s", url, code, out, errOut)
		}
		if code, out, errOut = tl.Run(t, nil, "jobs", "list", "--store", url); code != exitOK {
			t.Errorf("jobs list on %s after jobs create: exit %d\n%s%s", url, code, out, errOut)
		}
	}
}

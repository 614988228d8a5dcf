package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// sqlServer is a private PostgreSQL or MariaDB server that lockbench starts
// in a temporary directory for the run and kills when the run ends.
type sqlServer struct {
	name    string // "postgres", "mariadbd"
	addr    string
	dir     string
	logPath string
	version string
	cmd     *exec.Cmd
	exited  chan struct{}
	// tree: the server is a process per connection (PostgreSQL), so its
	// CPU time is that of the postmaster and all its children.
	tree bool

	stopOnce sync.Once
	kill     func() // stops the server; stop runs it once, then removes dir
}

// cpu returns the CPU time the server has used: for PostgreSQL the
// postmaster's, its reaped children's and its live children's.
func (s *sqlServer) cpu() (time.Duration, bool) {
	if s.tree {
		return processTreeCPU(s.cmd.Process.Pid)
	}
	return processCPU(s.cmd.Process.Pid)
}

// stop kills the server and removes its directory. It is safe to call more
// than once and from several goroutines.
func (s *sqlServer) stop() {
	s.stopOnce.Do(func() {
		if s.kill != nil && s.cmd != nil && s.cmd.Process != nil {
			s.kill()
		}
		_ = os.RemoveAll(s.dir)
	})
}

// logTail returns the end of the server's log, for error messages.
func (s *sqlServer) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n" + strings.TrimSpace(string(b))
}

// spawn starts the server process in its own process group, with its
// output in s.logPath, as cred's user when cred is set.
func (s *sqlServer) spawn(bin string, args []string, cred *syscall.Credential, started func(*sqlServer)) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("lockbench: %w", err)
	}
	defer logf.Close()
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = s.dir
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = procAttr()
	s.cmd.SysProcAttr.Credential = cred
	s.exited = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("lockbench: start %s: %w", s.name, err)
	}
	started(s)
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	return nil
}

// waitReady polls ping until it succeeds, the server exits, or 30 s pass.
func (s *sqlServer) waitReady(ctx context.Context, ping func(context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("lockbench: %s exited at start:%s", s.name, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lockbench: %s on %s did not accept connections within 30s: %w%s", s.name, s.addr, err, s.logTail())
		}
	}
}

// lookServer finds a server binary in $PATH or the sbin directories a
// non-root PATH may lack.
func lookServer(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("lockbench: %s not found in $PATH (make servers, or scripts/install-servers.sh)", name)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// --- PostgreSQL --------------------------------------------------------

const pgUser = "postgres"

// pgMaxConnections leaves room for P4-sql's 1,000 connection-mode locks,
// each on a connection of its own, plus every pool of the run.
const pgMaxConnections = 1300

// findPostgres returns postgres and initdb of one installation: the
// postgres on $PATH, else Debian's newest /usr/lib/postgresql/<major>/bin.
// As root it returns the "postgres" OS user to run them as: PostgreSQL
// refuses to run as root.
func findPostgres() (postgres, initdb string, cred *syscall.Credential, err error) {
	var dirs []string
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(debian, func(i, j int) bool { return major(debian[i]) > major(debian[j]) })
	for _, d := range append(dirs, debian...) {
		if isExecutable(filepath.Join(d, "postgres")) && isExecutable(filepath.Join(d, "initdb")) {
			postgres, initdb = filepath.Join(d, "postgres"), filepath.Join(d, "initdb")
			break
		}
	}
	if postgres == "" {
		return "", "", nil, errors.New("lockbench: postgres and initdb not found in $PATH or /usr/lib/postgresql/*/bin (make servers, or scripts/install-servers.sh postgres)")
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", "", nil, fmt.Errorf("lockbench: running as root, and PostgreSQL refuses root: no \"postgres\" OS user to run it as: %w", err)
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return "", "", nil, fmt.Errorf("lockbench: user postgres: bad uid %q or gid %q", u.Uid, u.Gid)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return postgres, initdb, cred, nil
}

// startPostgres runs initdb into a temporary directory and starts postgres
// on a free loopback port with fsync off (as the Redis server runs without
// persistence), trust authentication for the superuser "postgres", and
// room for 1,300 connections.
func startPostgres(ctx context.Context, started func(*sqlServer)) (*sqlServer, error) {
	bin, initdb, cred, err := findPostgres()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockbench-pg-")
	if err != nil {
		return nil, fmt.Errorf("lockbench: %w", err)
	}
	s := &sqlServer{name: "postgres", dir: dir, logPath: filepath.Join(dir, "postgres.log"), tree: true}
	fail := func(err error) (*sqlServer, error) {
		s.stop()
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("lockbench: %w", err))
		}
	}
	data := filepath.Join(dir, "data")
	ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ictx, initdb, "-D", data, "-U", pgUser, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	cmd.Dir = dir
	cmd.SysProcAttr = procAttr()
	cmd.SysProcAttr.Credential = cred
	if out, err := cmd.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("lockbench: initdb: %w\n%s", err, out))
	}
	// Backends are sessions of their own, out of the postmaster's process
	// group: SIGQUIT makes the postmaster kill them and exit at once.
	s.kill = func() {
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.exited:
			return
		case <-time.After(5 * time.Second):
		}
		for _, kid := range childPids(s.cmd.Process.Pid) {
			_ = syscall.Kill(kid, syscall.SIGKILL)
		}
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
		}
	}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = s.spawn(bin, []string{
			"-D", data, "-p", strconv.Itoa(port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off",
			"-c", "max_connections=" + strconv.Itoa(pgMaxConnections),
			"-c", "shared_buffers=128MB",
		}, cred, started)
		if err != nil {
			return fail(err)
		}
		err = s.waitReady(ctx, func(ctx context.Context) error { return pgPing(ctx, pgURL(s.addr)) })
		if err == nil {
			break
		}
		if attempt < 2 && strings.Contains(s.logTail(), "Address already in use") {
			s.kill()
			continue
		}
		return fail(err)
	}
	c, err := pgconn.Connect(ctx, pgURL(s.addr))
	if err != nil {
		return fail(fmt.Errorf("lockbench: postgres: %w", err))
	}
	defer c.Close(ctx)
	s.version = c.ParameterStatus("server_version")
	return s, nil
}

// pgURL is the URL of the database "postgres" on addr as the superuser.
func pgURL(addr string) string {
	return "postgres://" + pgUser + "@" + addr + "/postgres?sslmode=disable"
}

func pgPing(ctx context.Context, url string) error {
	c, err := pgconn.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "SELECT 1").ReadAll()
	return err
}

// --- MariaDB -----------------------------------------------------------

// mysqlDatabase is the database every MySQL contender works in.
const mysqlDatabase = "lockbench"

// startMariaDB creates a data directory with mariadb-install-db and starts
// mariadbd on a free loopback port, tuned the way internal/testserver does
// (redo log written at every commit but synced once a second, the analogue
// of PostgreSQL's fsync=off here; no binary log; no performance_schema),
// with room for 1,500 connections, and creates the database "lockbench".
func startMariaDB(ctx context.Context, started func(*sqlServer)) (*sqlServer, error) {
	bin, err := lookServer("mariadbd")
	if err != nil {
		return nil, err
	}
	install, err := lookServer("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockbench-mariadb-")
	if err != nil {
		return nil, fmt.Errorf("lockbench: %w", err)
	}
	s := &sqlServer{name: "mariadbd", dir: dir, logPath: filepath.Join(dir, "mariadbd.log")}
	fail := func(err error) (*sqlServer, error) {
		s.stop()
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return fail(fmt.Errorf("lockbench: %w", err))
	}
	var userArg []string
	if os.Geteuid() == 0 {
		userArg = []string{"--user=root"}
	}
	tuning := []string{
		"--innodb-buffer-pool-size=128M",
		"--innodb-log-file-size=64M",
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-use-native-aio=0",
		"--innodb-buffer-pool-load-at-startup=0",
		"--innodb-buffer-pool-dump-at-shutdown=0",
		"--performance-schema=OFF",
	}
	args := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}, userArg...)
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ictx, install, append(args, tuning...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = procAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("lockbench: mariadb-install-db: %w\n%s", err, out))
	}
	s.kill = func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
		}
	}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		sargs := append([]string{
			"--no-defaults", "--datadir=" + data,
			"--tmpdir=" + filepath.Join(dir, "tmp"),
			"--socket=" + filepath.Join(dir, "mysqld.sock"),
			"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
			"--skip-name-resolve", "--skip-host-cache", "--skip-log-bin",
			"--max-connections=1500",
		}, userArg...)
		if err := s.spawn(bin, append(sargs, tuning...), nil, started); err != nil {
			return fail(err)
		}
		err = s.waitReady(ctx, func(ctx context.Context) error { return mysqlExec(ctx, s.addr, "", "SELECT 1") })
		if err == nil {
			break
		}
		if attempt < 2 && (strings.Contains(s.logTail(), "Address already in use") || strings.Contains(s.logTail(), "Bind on TCP/IP port")) {
			s.kill()
			continue
		}
		return fail(err)
	}
	if err := mysqlExec(ctx, s.addr, "", "CREATE DATABASE "+mysqlDatabase+" CHARACTER SET utf8mb4"); err != nil {
		return fail(fmt.Errorf("lockbench: mariadbd: %w", err))
	}
	if err := mysqlQueryString(ctx, s.addr, "SELECT VERSION()", &s.version); err != nil {
		return fail(fmt.Errorf("lockbench: mariadbd: %w", err))
	}
	return s, nil
}

// quietLogger drops go-sql-driver's log lines ("unexpected EOF" while the
// server starts, "closing bad idle connection").
type quietLogger struct{}

func (quietLogger) Print(...any) {}

// mysqlConfig is the configuration of every MySQL client of the run: root
// on addr, database db, and interpolateParams, so that a statement with
// arguments is one COM_QUERY round trip (without it go-sql-driver prepares,
// executes and closes a server-side statement: three) — what a user who
// cares about locks' latency sets. mysqlstore sends no arguments and is the
// same either way.
func mysqlConfig(addr, db string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = addr
	cfg.DBName = db
	cfg.InterpolateParams = true
	cfg.Timeout = 10 * time.Second
	cfg.Logger = quietLogger{}
	return cfg
}

func mysqlOpenOne(addr, db string) (*sql.DB, error) {
	conn, err := mysql.NewConnector(mysqlConfig(addr, db))
	if err != nil {
		return nil, err
	}
	d := sql.OpenDB(conn)
	d.SetMaxOpenConns(1)
	return d, nil
}

func mysqlExec(ctx context.Context, addr, db, query string) error {
	d, err := mysqlOpenOne(addr, db)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = d.ExecContext(ctx, query)
	return err
}

func mysqlQueryString(ctx context.Context, addr, query string, out *string) error {
	d, err := mysqlOpenOne(addr, "")
	if err != nil {
		return err
	}
	defer d.Close()
	return d.QueryRowContext(ctx, query).Scan(out)
}

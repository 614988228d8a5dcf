package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// PostgresUser is the superuser every test server has; it logs in without a
// password (trust authentication on loopback).
const PostgresUser = "postgres"

// pgStartTimeout bounds how long a PostgreSQL server may take to accept
// connections after it was started (crash recovery after a SIGKILL
// included).
const pgStartTimeout = 30 * time.Second

// pgInitTimeout bounds initdb.
const pgInitTimeout = 2 * time.Minute

// Postgres is one PostgreSQL server (postmaster and its children) on a fixed
// loopback port and data directory, which it keeps across
// [Postgres.Restart].
//
// The server returned by [StartPostgres] is shared by every test of the test
// binary: tests get a database of their own from [Postgres.CreateDB], and
// must not Restart, Kill, Stop or Cont it (those fail the test). A test that
// injects faults into the server itself starts its own with
// [StartPostgresPrivate].
type Postgres struct {
	shared  bool
	bin     string // the postgres binary
	base    string // directory holding data/, the socket and the log
	dataDir string
	logPath string
	cred    *syscall.Credential // nil: run as this process's user
	port    int

	dbSeq atomic.Int64

	serverProc       // its mu also guards stopped; kill is Postgres.kill
	stopped    []int // children stopped by Stop, continued by Cont
}

// pgInstall is where the PostgreSQL binaries are and who runs them.
type pgInstall struct {
	initdb, postgres string
	cred             *syscall.Credential
}

// pgState is the per-test-binary state: one template cluster made by initdb,
// copied for every server, and the shared server.
var pgState struct {
	mu       sync.Mutex
	root     string // temp dir: template/, shared/, private-N/; owned by the server user
	template string // root/template, an initdb'd cluster that never runs
	seq      int
	shared   *Postgres
}

// StartPostgres returns the PostgreSQL server shared by all tests of this
// test binary, starting it on first use: initdb (once per test binary, into
// a temp dir) and postgres on a free 127.0.0.1 port with fsync=off. Give
// each test a database of its own with [Postgres.CreateDB].
//
// The shared server outlives the test that started it. It is stopped, and
// its files removed, by [Main] at the end of the test binary; without Main
// it still dies with the test binary (parent death signal on Linux) but
// leaves its temp directory behind. When the tests run as root, initdb and
// postgres run as the "postgres" OS user.
//
// A missing PostgreSQL installation skips the test, or fails it under
// CI=true (see [Require] and scripts/install-servers.sh postgres).
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	inst := requirePostgres(t)
	pgState.mu.Lock()
	defer pgState.mu.Unlock()
	if pgState.shared != nil {
		return pgState.shared
	}
	p, err := newPostgresLocked(inst, "shared", true)
	if err == nil {
		err = p.startFresh()
	}
	if err != nil {
		if p != nil {
			_ = p.kill()
		}
		t.Fatal(err)
	}
	pgState.shared = p
	return p
}

// StartPostgresPrivate starts a PostgreSQL server of the test's own, from a
// copy of the test binary's template cluster (no initdb per server), on a
// free 127.0.0.1 port. Unlike the shared server it may be restarted, killed,
// stopped and continued. It is killed, and its files removed, at t.Cleanup.
func StartPostgresPrivate(t testing.TB) *Postgres {
	t.Helper()
	inst := requirePostgres(t)
	pgState.mu.Lock()
	pgState.seq++
	p, err := newPostgresLocked(inst, "private-"+strconv.Itoa(pgState.seq), false)
	pgState.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.kill(); err != nil {
			t.Error(err)
		}
		_ = os.RemoveAll(p.base)
	})
	if err := p.startFresh(); err != nil {
		t.Fatal(err)
	}
	return p
}

// stopShared kills the shared server and removes every file of this test
// binary's servers. Servers started after it start from scratch.
func stopShared() {
	pgState.mu.Lock()
	defer pgState.mu.Unlock()
	if pgState.shared != nil {
		_ = pgState.shared.kill()
		pgState.shared = nil
	}
	if pgState.root != "" {
		_ = os.RemoveAll(pgState.root)
		pgState.root, pgState.template = "", ""
	}
}

// requirePostgres finds initdb and postgres, or skips (fails under CI=true).
func requirePostgres(t testing.TB) pgInstall {
	t.Helper()
	inst, err := findPostgres()
	if err == nil {
		return inst
	}
	msg := "testserver: " + err.Error() + "; run scripts/install-servers.sh postgres"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return pgInstall{}
}

// findPostgres looks for postgres in $PATH and the usual bin directories,
// then in Debian's /usr/lib/postgresql/<major>/bin (newest first), and takes
// initdb from the same directory so that both are of one version. As root it
// runs them as the "postgres" OS user: PostgreSQL refuses to run as root.
func findPostgres() (pgInstall, error) {
	var dirs []string
	if p, err := lookBinary("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(debian, func(i, j int) bool { return pgMajor(debian[i]) > pgMajor(debian[j]) })
	dirs = append(dirs, debian...)
	var inst pgInstall
	for _, d := range dirs {
		pg, ini := filepath.Join(d, "postgres"), filepath.Join(d, "initdb")
		if isExecutable(pg) && isExecutable(ini) {
			inst.postgres, inst.initdb = pg, ini
			break
		}
	}
	if inst.postgres == "" {
		return inst, errors.New("postgres and initdb not found in $PATH or /usr/lib/postgresql/*/bin")
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return inst, fmt.Errorf("running as root, and PostgreSQL refuses root: no \"postgres\" OS user to run it as (%v)", err)
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return inst, fmt.Errorf("user postgres: bad uid %q or gid %q", u.Uid, u.Gid)
		}
		inst.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return inst, nil
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// newPostgresLocked makes sure the template cluster exists and prepares a
// server directory base/name with a copy of it. Callers hold pgState.mu.
func newPostgresLocked(inst pgInstall, name string, shared bool) (*Postgres, error) {
	if err := ensureTemplateLocked(inst); err != nil {
		return nil, err
	}
	base := filepath.Join(pgState.root, name)
	p := &Postgres{
		shared:  shared,
		bin:     inst.postgres,
		base:    base,
		dataDir: filepath.Join(base, "data"),
		logPath: filepath.Join(base, "postgres.log"),
		cred:    inst.cred,
	}
	if err := mkdirOwned(base, inst.cred); err != nil {
		return nil, err
	}
	if err := copyTree(pgState.template, p.dataDir, inst.cred); err != nil {
		return nil, fmt.Errorf("testserver: copy the template cluster: %w", err)
	}
	return p, nil
}

// ensureTemplateLocked runs initdb once per test binary. Callers hold
// pgState.mu.
func ensureTemplateLocked(inst pgInstall) error {
	if pgState.template != "" {
		return nil
	}
	root, err := os.MkdirTemp("", "tasklock-pg-")
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	if err := chownTo(root, inst.cred); err != nil {
		_ = os.RemoveAll(root)
		return err
	}
	tmpl := filepath.Join(root, "template")
	logPath := filepath.Join(root, "initdb.log")
	ctx, cancel := context.WithTimeout(context.Background(), pgInitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, inst.initdb,
		"-D", tmpl, "-U", PostgresUser, "--auth=trust", "--encoding=UTF8", "--locale=C",
		"--no-sync", "--no-instructions")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = inst.cred
	err = cmd.Run()
	_ = os.WriteFile(logPath, out.Bytes(), 0o644)
	if err != nil {
		_ = os.RemoveAll(root)
		return fmt.Errorf("testserver: initdb: %w\n%s", err, out.String())
	}
	pgState.root, pgState.template = root, tmpl
	return nil
}

// chownTo gives path to cred's user (nothing when cred is nil).
func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if err := os.Lchown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("testserver: chown %s: %w", path, err)
	}
	return nil
}

func mkdirOwned(dir string, cred *syscall.Credential) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	return chownTo(dir, cred)
}

// copyTree copies the directory src to dst (which must not exist), keeping
// modes, and gives every copy to cred's user.
func copyTree(src, dst string, cred *syscall.Credential) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // sockets and the like: not part of a stopped cluster
		}
		return chownTo(target, cred)
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// startFresh starts the server on a free port, retrying on fresh ports when
// the one picked was taken before postgres could bind it.
func (p *Postgres) startFresh() error {
	return startOnFreePorts(1, func(ports []int) error {
		p.port = ports[0]
		return p.start()
	})
}

// errPgBusy means the previous server's processes or files are still in the
// way (a restart right after a kill); trying again shortly succeeds.
var errPgBusy = errors.New("testserver: previous postgres still shutting down")

// start spawns postgres on p.port and waits until it accepts connections.
func (p *Postgres) start() error {
	url := p.URL("postgres")
	err := p.launch(procSpec{
		name: "postgres " + p.Addr(),
		path: p.bin,
		args: []string{
			"-D", p.dataDir,
			"-p", strconv.Itoa(p.port),
			"-k", p.base,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off",
			"-c", "max_connections=200",
			"-c", "shared_buffers=16MB",
		},
		dir:     p.base,
		logPath: p.logPath,
		port:    p.port,
		cred:    p.cred,
	}, pgStartTimeout, "did not accept connections", func() error { return psqlExec(p.bin, url, "SELECT 1", 2*time.Second) }, p.kill)
	f, ok := startFailed(err)
	switch {
	case !ok || !f.exited:
		return err
	case f.logHas("Address already in use"):
		return f.portInUse()
	case f.logHas("is still in use", "already exists"):
		return fmt.Errorf("%w: %s%s", errPgBusy, p.Addr(), f.tail)
	}
	return err
}

// Addr returns the server's address, "127.0.0.1:port".
func (p *Postgres) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
}

// Port returns the server's TCP port.
func (p *Postgres) Port() int { return p.port }

// URL returns a connection URL for database dbname as the superuser
// [PostgresUser], without TLS.
func (p *Postgres) URL(dbname string) string {
	return "postgres://" + PostgresUser + "@" + p.Addr() + "/" + url.PathEscape(dbname) + "?sslmode=disable"
}

// Dir returns the server's data directory.
func (p *Postgres) Dir() string { return p.dataDir }

// LogPath returns the file that receives the server's output.
func (p *Postgres) LogPath() string { return p.logPath }

// Pid returns the process id of the postmaster (of the latest start).
func (p *Postgres) Pid() int { return p.process().Pid() }

// CreateDB creates an empty database for the calling test, named after it,
// and returns its URL. Databases are not dropped: they go with the server.
func (p *Postgres) CreateDB(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", p.dbSeq.Add(1), sanitize(strings.ToLower(t.Name())))
	if len(name) > 63 {
		name = name[:63]
	}
	if err := psqlExec(p.bin, p.URL("postgres"), `CREATE DATABASE "`+name+`"`, 30*time.Second); err != nil {
		t.Fatalf("testserver: postgres %s: CREATE DATABASE %s: %v", p.Addr(), name, err)
	}
	return p.URL(name)
}

// faultable fails the test when p is the shared server.
func (p *Postgres) faultable(t testing.TB, op string) {
	t.Helper()
	if p.shared {
		t.Fatalf("testserver: %s on the shared PostgreSQL server would break other tests; use StartPostgresPrivate", op)
	}
}

// Kill sends SIGKILL to the postmaster and every child process of it (each
// backend is a session of its own, out of the postmaster's process group),
// and waits until they have exited: a crash, as the clients see it.
func (p *Postgres) Kill(t testing.TB) {
	t.Helper()
	p.faultable(t, "Kill")
	if err := p.kill(); err != nil {
		t.Fatal(err)
	}
}

// kill stops the postmaster so that it forks no more, kills its children,
// kills it, and waits for all of them.
func (p *Postgres) kill() error {
	proc := p.process()
	if proc == nil || proc.exited() {
		return nil
	}
	_ = syscall.Kill(proc.pid, syscall.SIGSTOP)
	kids := childPids(proc.pid)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	err := proc.kill()
	if werr := waitGone(kids, killWait); err == nil {
		err = werr
	}
	p.mu.Lock()
	p.stopped = nil
	p.mu.Unlock()
	return err
}

// Restart kills the server (SIGKILL, as [Postgres.Kill]) if it is running,
// starts it again on the same port and data directory, and waits until it
// accepts connections. Everything committed survives (fsync=off only matters
// when the machine itself crashes); every client connection is broken.
func (p *Postgres) Restart(t testing.TB) {
	t.Helper()
	p.faultable(t, "Restart")
	if err := p.kill(); err != nil {
		t.Fatal(err)
	}
	restartOnSamePorts(t, pgStartTimeout, p.start, errPgBusy)
}

// Stop sends SIGSTOP to the postmaster and all its children and waits until
// they are stopped: connections stay open but nothing answers.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	p.faultable(t, "Stop")
	proc := p.process()
	proc.Stop(t)
	kids := childPids(proc.pid)
	for _, k := range kids {
		if err := syscall.Kill(k, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("testserver: SIGSTOP postgres child %d: %v", k, err)
		}
	}
	for _, k := range kids {
		_ = waitPidStopped(k, true, 5*time.Second)
	}
	p.mu.Lock()
	p.stopped = kids
	p.mu.Unlock()
}

// Cont continues what Stop stopped and waits until the postmaster runs.
func (p *Postgres) Cont(t testing.TB) {
	t.Helper()
	p.faultable(t, "Cont")
	p.mu.Lock()
	kids := p.stopped
	p.stopped = nil
	p.mu.Unlock()
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGCONT)
	}
	p.process().Cont(t)
}

// childPids lists the processes whose parent is ppid (Linux /proc; nil
// elsewhere, where PostgreSQL's children exit by themselves once they notice
// the postmaster is gone).
func childPids(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parent, _, err := procStat(pid); err == nil && parent == ppid {
			kids = append(kids, pid)
		}
	}
	return kids
}

// procStat returns the parent pid and state letter of pid.
func procStat(pid int) (ppid int, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, fmt.Errorf("testserver: cannot parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("testserver: cannot parse /proc/%d/stat", pid)
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err
}

// waitGone waits until every pid has exited (or is a zombie).
func waitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for {
			_, state, err := procStat(pid)
			if err != nil || state == 'Z' || state == 'X' {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("testserver: postgres child %d still alive %v after SIGKILL", pid, timeout)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return nil
}

// waitPidStopped waits until pid is stopped (want) or not.
func waitPidStopped(pid int, want bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, state, err := procStat(pid)
		if err != nil {
			return err
		}
		if (state == 'T' || state == 't') == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: pid %d in state %c, want stopped=%v", pid, state, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mariadbStartTimeout bounds how long mariadbd may take to accept a
// connection after it was started (InnoDB crash recovery included).
const mariadbStartTimeout = 30 * time.Second

// mariadbInstallTimeout bounds mariadb-install-db.
const mariadbInstallTimeout = 60 * time.Second

// MariaDB is one mariadbd process on a fixed loopback port with its own data
// directory, socket and pid file, which it keeps across [MariaDB.Restart].
// The root user has an empty password and may connect from 127.0.0.1.
//
// The server is tuned for tests, not for durability against machine crashes:
// innodb_flush_log_at_trx_commit=2 writes the redo log to the operating
// system at every commit but syncs it only once a second, so every committed
// transaction survives a SIGKILL of mariadbd (what [MariaDB.Kill] and
// [MariaDB.Restart] do) but not a crash of the machine. The binary log is
// off, the buffer pool small and performance_schema off: installing and
// starting a server takes one to a few seconds, a restart well under one.
type MariaDB struct {
	bin     string
	dir     string // holds data/, the socket, the pid file and the log
	logPath string
	port    int
	args    []string
	shared  bool

	serverProc
}

// StartMariaDB starts a MariaDB server of its own for one test: it creates a
// data directory with mariadb-install-db (root without a password, no test
// database), starts mariadbd on a free 127.0.0.1 port and waits until it
// accepts connections. Its output goes to mariadbd.log in [MariaDB.Dir]. The
// process group is killed and the directory removed at t.Cleanup.
//
// Installing and starting take a second or two; a test that does not
// restart, kill or stop the server should use [SharedMariaDB] and
// [MariaDB.CreateDB] instead. A missing mariadbd or mariadb-install-db skips
// the test (see [Require]).
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	bin := Require(t, "mariadbd")
	install := Require(t, "mariadb-install-db")
	// Not t.TempDir: the socket path must stay under the 108-byte limit of
	// a Unix socket address, and test names make t.TempDir paths long.
	dir, err := os.MkdirTemp("", "tasklock-mariadb-")
	if err != nil {
		t.Fatalf("testserver: MariaDB: %v", err)
	}
	m := &MariaDB{bin: bin, dir: dir}
	t.Cleanup(func() {
		if err := m.close(); err != nil {
			t.Error(err)
		}
	})
	if err := m.init(install); err != nil {
		t.Fatal(err)
	}
	return m
}

// mariadbShared is the test binary's shared server.
var mariadbShared struct {
	mu  sync.Mutex
	srv *MariaDB
	err error
}

// SharedMariaDB returns the test binary's shared MariaDB server, starting it
// on first use the way [StartMariaDB] does. Tests share it and each takes a
// fresh database with [MariaDB.CreateDB]; it refuses [MariaDB.Restart],
// [MariaDB.Kill], [MariaDB.Stop] and [MariaDB.Cont], which would disturb the
// other tests (use [StartMariaDB] for those).
//
// The server outlives the test that started it: the package's TestMain
// calls [StopSharedMariaDB] after m.Run to kill it and remove its directory.
// Without that call the parent death signal still kills it when the test
// binary exits (on Linux), but its directory under os.TempDir stays behind.
// If the first start failed, later calls fail at once with the same error.
func SharedMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	bin := Require(t, "mariadbd")
	install := Require(t, "mariadb-install-db")
	mariadbShared.mu.Lock()
	defer mariadbShared.mu.Unlock()
	if mariadbShared.srv == nil && mariadbShared.err == nil {
		dir, err := os.MkdirTemp("", "tasklock-mariadb-shared-")
		if err != nil {
			mariadbShared.err = fmt.Errorf("testserver: shared MariaDB: %w", err)
		} else {
			m := &MariaDB{bin: bin, dir: dir, shared: true}
			if err := m.init(install); err != nil {
				_ = m.close()
				mariadbShared.err = err
			} else {
				mariadbShared.srv = m
			}
		}
	}
	if mariadbShared.err != nil {
		t.Fatal(mariadbShared.err)
	}
	return mariadbShared.srv
}

// StopSharedMariaDB kills the shared server started by [SharedMariaDB], if
// any, and removes its directory. Call it from TestMain after m.Run (and
// before a goroutine leak check). It is safe to call when no shared server
// was started, and more than once.
func StopSharedMariaDB() error {
	mariadbShared.mu.Lock()
	defer mariadbShared.mu.Unlock()
	m := mariadbShared.srv
	mariadbShared.srv, mariadbShared.err = nil, nil
	if m == nil {
		return nil
	}
	return m.close()
}

// init installs the data directory and starts the server, retrying on
// fresh ports when a port picked as free was taken meanwhile.
func (m *MariaDB) init(install string) error {
	data := filepath.Join(m.dir, "data")
	m.logPath = filepath.Join(m.dir, "mariadbd.log")
	if err := os.MkdirAll(filepath.Join(m.dir, "tmp"), 0o755); err != nil {
		return fmt.Errorf("testserver: MariaDB: %w", err)
	}
	args := []string{
		"--no-defaults",
		"--datadir=" + data,
		"--auth-root-authentication-method=normal",
		"--skip-test-db",
		"--skip-name-resolve",
		// The bootstrap server deletes every #sql* file in its tmpdir as
		// it starts: with the shared /tmp, an install starting beside
		// another (two private servers of one test, or two test
		// binaries) removed the other's temporary table, and that
		// install failed ("Unknown table 'mysql.tmp_user_sys'").
		"--tmpdir=" + filepath.Join(m.dir, "tmp"),
	}
	args = append(args, mariadbUserArg()...)
	args = append(args, mariadbTuning()...)
	if err := m.install(install, args); err != nil {
		// Once more from scratch: a failed bootstrap leaves a partial
		// data directory behind.
		if rerr := os.RemoveAll(data); rerr != nil {
			return errors.Join(err, rerr)
		}
		if err2 := m.install(install, args); err2 != nil {
			return fmt.Errorf("%w (and again: %w)", err, err2)
		}
	}

	return startOnFreePorts(1, func(ports []int) error {
		m.port = ports[0]
		m.args = []string{
			"--no-defaults",
			"--datadir=" + data,
			"--tmpdir=" + filepath.Join(m.dir, "tmp"),
			"--socket=" + filepath.Join(m.dir, "mysqld.sock"),
			"--pid-file=" + filepath.Join(m.dir, "mysqld.pid"),
			"--port=" + strconv.Itoa(m.port),
			"--bind-address=127.0.0.1",
			"--skip-name-resolve",
			"--skip-host-cache",
			"--skip-log-bin",
			"--max-connections=1000",
		}
		m.args = append(m.args, mariadbUserArg()...)
		m.args = append(m.args, mariadbTuning()...)
		return m.start()
	})
}

// mariadbUserArg is --user=<current user> when running as root: mariadbd
// refuses to run as root unless told to, and mariadb-install-db then owns
// the files it creates by that user.
func mariadbUserArg() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	name := "root"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return []string{"--user=" + name}
}

// mariadbTuning are the settings that make a test server small and fast.
// mariadb-install-db passes them on to the mariadbd it bootstraps with, so
// both agree on the redo log size.
func mariadbTuning() []string {
	return []string{
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M",
		"--innodb-flush-log-at-trx-commit=2",
		// io_uring and libaio are not available in every sandbox.
		"--innodb-use-native-aio=0",
		"--innodb-buffer-pool-load-at-startup=0",
		"--innodb-buffer-pool-dump-at-shutdown=0",
		"--performance-schema=OFF",
	}
}

// install runs mariadb-install-db into m.dir/data.
func (m *MariaDB) install(bin string, args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), mariadbInstallTimeout)
	defer cancel()
	logPath := filepath.Join(m.dir, "install.log")
	p, err := spawn(procSpec{
		name:    "mariadb-install-db",
		path:    bin,
		args:    args,
		dir:     m.dir,
		logPath: logPath,
	})
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.kill()
		return fmt.Errorf("testserver: mariadb-install-db did not finish within %v%s", mariadbInstallTimeout, p.logTail())
	}
	if p.werr != nil {
		tail := p.logTail()
		if _, err := os.Stat(logPath); err != nil {
			tail = fmt.Sprintf(" (its log is gone: %v; was %s removed meanwhile?)", err, m.dir)
		}
		return fmt.Errorf("testserver: mariadb-install-db into %s: %w%s", m.dir, p.werr, tail)
	}
	return nil
}

// start spawns mariadbd and waits until it accepts a connection.
func (m *MariaDB) start() error {
	err := m.launch(procSpec{
		name:    "mariadbd " + m.Addr(),
		path:    m.bin,
		args:    m.args,
		dir:     m.dir,
		logPath: m.logPath,
		port:    m.port,
	}, mariadbStartTimeout, "did not accept connections", func() error { return mariadbExec(m.Addr(), "SELECT 1", 2*time.Second) }, nil)
	if f, ok := startFailed(err); ok && f.exited && f.logHas("Address already in use", "Bind on TCP/IP port") {
		return f.portInUse()
	}
	return err
}

// close kills the server and removes its directory.
func (m *MariaDB) close() error {
	err := m.kill()
	if rerr := os.RemoveAll(m.dir); rerr != nil && err == nil {
		err = fmt.Errorf("testserver: MariaDB: remove %s: %w", m.dir, rerr)
	}
	return err
}

// Addr returns the server's address, "127.0.0.1:port".
func (m *MariaDB) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port))
}

// DSN returns a go-sql-driver/mysql data source name for database dbName
// (empty: no default database) as root without a password:
// "root@tcp(127.0.0.1:port)/dbName?parseTime=true".
func (m *MariaDB) DSN(dbName string) string {
	return "root@tcp(" + m.Addr() + ")/" + dbName + "?parseTime=true"
}

// Dir returns the server's directory: data/ holds the data directory,
// mariadbd.log its output.
func (m *MariaDB) Dir() string { return m.dir }

// Pid returns the process id of the running server (of the latest start).
func (m *MariaDB) Pid() int { return m.process().Pid() }

// mariadbDBSeq numbers the databases CreateDB makes in this test binary.
var mariadbDBSeq atomic.Int64

// CreateDB creates a fresh, empty database for t and returns its DSN (see
// [MariaDB.DSN]). Its name is derived from t.Name and unique within the test
// binary. Databases are not dropped (DROP DATABASE can stall other tests'
// statements on a busy server); they go with the server's directory.
func (m *MariaDB) CreateDB(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", mariadbDBSeq.Add(1), strings.ToLower(sanitize(t.Name())))
	if len(name) > 64 { // MariaDB's limit on identifiers
		name = name[:64]
	}
	if err := mariadbExec(m.Addr(), "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4", 30*time.Second); err != nil {
		t.Fatalf("testserver: mariadbd %s: create database %s: %v", m.Addr(), name, err)
	}
	return m.DSN(name)
}

// refuseShared fails t when m is the shared server.
func (m *MariaDB) refuseShared(t testing.TB, op string) {
	t.Helper()
	if m.shared {
		t.Fatalf("testserver: %s on the shared MariaDB would disturb other tests; use StartMariaDB", op)
	}
}

// Kill sends SIGKILL to the server's process group and waits until it has
// exited. Committed transactions survive it (see [MariaDB]).
func (m *MariaDB) Kill(t testing.TB) {
	t.Helper()
	m.refuseShared(t, "Kill")
	m.process().Kill(t)
}

// Restart kills the server (SIGKILL) if it is running, starts it again with
// the same arguments on the same port and data directory, and waits until it
// accepts connections (after InnoDB crash recovery). Clients' connections
// are broken; committed data survives.
func (m *MariaDB) Restart(t testing.TB) {
	t.Helper()
	m.refuseShared(t, "Restart")
	m.process().Kill(t)
	restartOnSamePorts(t, mariadbStartTimeout, m.start)
}

// Stop sends SIGSTOP to the server's process group and, on Linux, waits until
// it is stopped. Clients' connections stay open but get no answers.
func (m *MariaDB) Stop(t testing.TB) {
	t.Helper()
	m.refuseShared(t, "Stop")
	m.process().Stop(t)
}

// Cont sends SIGCONT to the server's process group and, on Linux, waits until
// it runs again.
func (m *MariaDB) Cont(t testing.TB) {
	t.Helper()
	m.refuseShared(t, "Cont")
	m.process().Cont(t)
}

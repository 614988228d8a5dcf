package testserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The timing settings of every ZooKeeper test server. A short tick lets
// clients negotiate session timeouts down to ZooKeeperMinSessionTimeout, so
// that fault tests wait seconds, not the 4 s minimum of a default server.
const (
	// ZooKeeperTickTime is the server's tickTime.
	ZooKeeperTickTime = 200 * time.Millisecond
	// ZooKeeperMinSessionTimeout is the server's minSessionTimeout: a
	// client asking for less gets this.
	ZooKeeperMinSessionTimeout = 2 * ZooKeeperTickTime
	// ZooKeeperMaxSessionTimeout is the server's maxSessionTimeout: a
	// client asking for more gets this.
	ZooKeeperMaxSessionTimeout = 60 * time.Second
	// ZooKeeperContainerCheck is how often the server looks for empty
	// container nodes and expired TTL nodes to delete
	// (znode.container.checkIntervalMs; the server's default is a minute).
	// It deletes them without a rate limit (znode.container.maxPerMinute).
	ZooKeeperContainerCheck = 100 * time.Millisecond
)

// zkStartTimeout bounds how long a ZooKeeper server may take to serve
// requests after it was started: a JVM start and, after a restart, loading
// the snapshot and transaction log.
const zkStartTimeout = 30 * time.Second

// zkMainClass is the standalone server's entry point.
const zkMainClass = "org.apache.zookeeper.server.ZooKeeperServerMain"

// ZooKeeper is one standalone ZooKeeper server (a JVM running
// ZooKeeperServerMain) on a fixed loopback port with its own zoo.cfg and
// data directory, which it keeps across [ZooKeeper.Restart].
//
// The configuration is made for tests: tickTime 200 ms, session timeouts
// from 400 ms to 60 s, extended types enabled (TTL nodes), the AdminServer
// off, the four-letter words ruok, srvr, stat, mntr and cons allowed, and
// zookeeper.forceSync=no: the transaction log is written to the operating
// system before every answer but not synced, so everything acknowledged
// survives a SIGKILL of the server (what [ZooKeeper.Kill] and
// [ZooKeeper.Restart] do), sessions and their ephemeral nodes included, but
// not a crash of the machine. Empty container nodes and expired TTL nodes
// are removed within [ZooKeeperContainerCheck].
type ZooKeeper struct {
	java      string
	classpath string
	dir       string // holds zoo.cfg, data/ and zookeeper.log
	logPath   string
	port      int
	shared    bool
	extra     []string // zoo.cfg lines after the defaults

	serverProc
}

// ZooKeeperOption configures [StartZooKeeper].
type ZooKeeperOption func(*ZooKeeper)

// WithZooKeeperConfig appends lines to zoo.cfg after the defaults, so that
// they override them: WithZooKeeperConfig("extendedTypesEnabled=false")
// starts a server without TTL nodes, as most production servers are.
func WithZooKeeperConfig(lines ...string) ZooKeeperOption {
	return func(z *ZooKeeper) { z.extra = append(z.extra, lines...) }
}

// zkInstall is where java and the ZooKeeper jars are.
type zkInstall struct {
	java, classpath string
}

// StartZooKeeper starts a ZooKeeper server of the test's own on a free
// 127.0.0.1 port, with its files in a t.TempDir, and waits until it serves
// requests (the four-letter word srvr reports Mode: standalone). The JVM
// takes a second or two to start. Its output goes to zookeeper.log in
// [ZooKeeper.Dir]. The process group is killed at t.Cleanup.
//
// A test that does not restart, kill, stop or continue the server should use
// [SharedZooKeeper] instead, under a root node of its own. A missing java or
// ZooKeeper installation skips the test, or fails it under CI=true (see
// [Require] and scripts/install-servers.sh zookeeper).
func StartZooKeeper(t testing.TB, opts ...ZooKeeperOption) *ZooKeeper {
	t.Helper()
	inst := requireZooKeeper(t)
	z := &ZooKeeper{java: inst.java, classpath: inst.classpath, dir: t.TempDir()}
	for _, o := range opts {
		o(z)
	}
	z.killAtCleanup(t)
	if err := z.init(); err != nil {
		t.Fatal(err)
	}
	return z
}

// zkShared is the test binary's shared server.
var zkShared struct {
	mu  sync.Mutex
	srv *ZooKeeper
	err error
}

// SharedZooKeeper returns the test binary's shared ZooKeeper server,
// starting it on first use the way [StartZooKeeper] does. Tests share it and
// keep their nodes under a root node of their own; it refuses
// [ZooKeeper.Restart], [ZooKeeper.Kill], [ZooKeeper.Stop] and
// [ZooKeeper.Cont], which would disturb the other tests (use StartZooKeeper
// for those).
//
// The server outlives the test that started it: the package's TestMain
// calls [StopSharedZooKeeper] after m.Run to kill it and remove its
// directory. Without that call the parent death signal still kills it when
// the test binary exits (on Linux), but its directory under os.TempDir stays
// behind. If the first start failed, later calls fail at once with the same
// error.
func SharedZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	inst := requireZooKeeper(t)
	zkShared.mu.Lock()
	defer zkShared.mu.Unlock()
	if zkShared.srv == nil && zkShared.err == nil {
		dir, err := os.MkdirTemp("", "tasklock-zookeeper-shared-")
		if err != nil {
			zkShared.err = fmt.Errorf("testserver: shared ZooKeeper: %w", err)
		} else {
			z := &ZooKeeper{java: inst.java, classpath: inst.classpath, dir: dir, shared: true}
			if err := z.init(); err != nil {
				_ = z.close()
				zkShared.err = err
			} else {
				zkShared.srv = z
			}
		}
	}
	if zkShared.err != nil {
		t.Fatal(zkShared.err)
	}
	return zkShared.srv
}

// StopSharedZooKeeper kills the shared server started by [SharedZooKeeper],
// if any, and removes its directory. Call it from TestMain after m.Run (and
// before a goroutine leak check). It is safe to call when no shared server
// was started, and more than once.
func StopSharedZooKeeper() error {
	zkShared.mu.Lock()
	defer zkShared.mu.Unlock()
	z := zkShared.srv
	zkShared.srv, zkShared.err = nil, nil
	if z == nil {
		return nil
	}
	return z.close()
}

// requireZooKeeper finds java and the ZooKeeper jars, or skips (fails under
// CI=true).
func requireZooKeeper(t testing.TB) zkInstall {
	t.Helper()
	inst, err := findZooKeeper()
	if err == nil {
		return inst
	}
	msg := "testserver: " + err.Error() + "; run scripts/install-servers.sh zookeeper"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return zkInstall{}
}

// findZooKeeper looks for java in $PATH and the usual bin directories, and
// for the ZooKeeper server jars: $ZOOKEEPER_HOME (the Apache binary
// layout: *.jar and lib/*.jar), then Debian's /usr/share/java/zookeeper.jar,
// whose manifest names its dependencies in /usr/share/java, with
// slf4j-simple added so that the server's log reaches zookeeper.log.
func findZooKeeper() (zkInstall, error) {
	java, err := lookBinary("java")
	if err != nil {
		return zkInstall{}, errors.New("java not found in $PATH")
	}
	if home := os.Getenv("ZOOKEEPER_HOME"); home != "" {
		var jars []string
		for _, pattern := range []string{filepath.Join(home, "*.jar"), filepath.Join(home, "lib", "*.jar")} {
			m, _ := filepath.Glob(pattern)
			jars = append(jars, m...)
		}
		if len(jars) > 0 {
			return zkInstall{java: java, classpath: strings.Join(jars, string(os.PathListSeparator))}, nil
		}
	}
	const debianJar = "/usr/share/java/zookeeper.jar"
	if fi, err := os.Stat(debianJar); err == nil && !fi.IsDir() {
		cp := []string{debianJar}
		if _, err := os.Stat("/usr/share/java/slf4j-simple.jar"); err == nil {
			cp = append(cp, "/usr/share/java/slf4j-simple.jar")
		}
		return zkInstall{java: java, classpath: strings.Join(cp, string(os.PathListSeparator))}, nil
	}
	return zkInstall{}, errors.New("ZooKeeper jars not found ($ZOOKEEPER_HOME, " + debianJar + ")")
}

// init writes zoo.cfg for a free port and starts the server, retrying on
// fresh ports when a port picked as free was taken meanwhile.
func (z *ZooKeeper) init() error {
	z.logPath = filepath.Join(z.dir, "zookeeper.log")
	if err := os.MkdirAll(filepath.Join(z.dir, "data"), 0o755); err != nil {
		return fmt.Errorf("testserver: ZooKeeper: %w", err)
	}
	return startOnFreePorts(1, func(ports []int) error {
		z.port = ports[0]
		if err := z.writeConfig(); err != nil {
			return err
		}
		return z.start()
	})
}

// cfgPath is the server's configuration file.
func (z *ZooKeeper) cfgPath() string { return filepath.Join(z.dir, "zoo.cfg") }

// writeConfig writes zoo.cfg, the defaults and then the lines of
// WithZooKeeperConfig (a later line overrides an earlier one). Keys the
// server does not know as configuration (extendedTypesEnabled) become
// zookeeper.* system properties.
func (z *ZooKeeper) writeConfig() error {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	cfg := strings.Join([]string{
		"tickTime=" + ms(ZooKeeperTickTime),
		"initLimit=10",
		"syncLimit=5",
		"dataDir=" + filepath.Join(z.dir, "data"),
		"clientPort=" + strconv.Itoa(z.port),
		"clientPortAddress=127.0.0.1",
		"minSessionTimeout=" + ms(ZooKeeperMinSessionTimeout),
		"maxSessionTimeout=" + ms(ZooKeeperMaxSessionTimeout),
		"maxClientCnxns=0",
		"admin.enableServer=false",
		"4lw.commands.whitelist=ruok,srvr,stat,mntr,cons",
		"extendedTypesEnabled=true",
		"autopurge.purgeInterval=0",
	}, "\n") + "\n"
	for _, l := range z.extra {
		cfg += l + "\n"
	}
	if err := os.WriteFile(z.cfgPath(), []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("testserver: ZooKeeper: write zoo.cfg: %w", err)
	}
	return nil
}

// start spawns the JVM and waits until the server serves requests.
func (z *ZooKeeper) start() error {
	err := z.launch(procSpec{
		name: "zookeeper " + z.Addr(),
		path: z.java,
		args: []string{
			"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
			"-Djava.net.preferIPv4Stack=true",
			"-Dzookeeper.admin.enableServer=false",
			"-Dzookeeper.forceSync=no",
			"-Dzookeeper.jmx.log4j.disable=true",
			"-Dznode.container.checkIntervalMs=" + strconv.FormatInt(ZooKeeperContainerCheck.Milliseconds(), 10),
			// The default (10,000 a minute) would leave the containers of
			// a test that used thousands of keys in the way of the next.
			"-Dznode.container.maxPerMinute=10000000",
			"-Dorg.slf4j.simpleLogger.showDateTime=true",
			"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
			"-cp", z.classpath,
			zkMainClass, z.cfgPath(),
		},
		dir:     z.dir,
		logPath: z.logPath,
		port:    z.port,
	}, zkStartTimeout, "did not serve requests", func() error {
		out, err := fourLetterWord(z.Addr(), "srvr", time.Second)
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Mode: standalone") {
			return fmt.Errorf("srvr answered %q", strings.TrimSpace(out))
		}
		return nil
	}, nil)
	f, ok := startFailed(err)
	switch {
	case !ok:
		return err
	case f.logHas("Address already in use"):
		return f.portInUse()
	case f.exited:
		f.what = "exited at start"
	}
	return f
}

// fourLetterWord sends a four-letter word to addr and returns the whole
// answer (the server closes the connection after it).
func fourLetterWord(addr, word string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// FourLetterWord sends a four-letter word (ruok, srvr, stat, mntr or cons)
// to the server on a new connection and returns its answer. cons lists the
// server's connections with their session ids and negotiated timeouts.
func (z *ZooKeeper) FourLetterWord(word string) (string, error) {
	return fourLetterWord(z.Addr(), word, 5*time.Second)
}

// close kills the server and removes its directory.
func (z *ZooKeeper) close() error {
	err := z.kill()
	if rerr := os.RemoveAll(z.dir); rerr != nil && err == nil {
		err = fmt.Errorf("testserver: ZooKeeper: remove %s: %w", z.dir, rerr)
	}
	return err
}

// Addr returns the server's client address, "127.0.0.1:port".
func (z *ZooKeeper) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(z.port))
}

// Dir returns the server's directory: zoo.cfg, data/ (snapshots and
// transaction log) and zookeeper.log.
func (z *ZooKeeper) Dir() string { return z.dir }

// Pid returns the process id of the running server (of the latest start).
func (z *ZooKeeper) Pid() int { return z.process().Pid() }

// refuseShared fails t when z is the shared server.
func (z *ZooKeeper) refuseShared(t testing.TB, op string) {
	t.Helper()
	if z.shared {
		t.Fatalf("testserver: %s on the shared ZooKeeper would disturb other tests; use StartZooKeeper", op)
	}
}

// Kill sends SIGKILL to the server's process group and waits until it has
// exited. What the server acknowledged survives it (see [ZooKeeper]).
func (z *ZooKeeper) Kill(t testing.TB) {
	t.Helper()
	z.refuseShared(t, "Kill")
	z.process().Kill(t)
}

// Restart kills the server (SIGKILL) if it is running, starts it again on
// the same port with the same zoo.cfg and data directory, and waits until it
// serves requests. Clients' connections are broken; nodes, and sessions with
// their ephemeral nodes, survive: the server restores each session with a
// fresh timeout, so a client that reconnects within it keeps its session,
// and a session nobody reconnects to expires one session timeout after the
// restart.
func (z *ZooKeeper) Restart(t testing.TB) {
	t.Helper()
	z.refuseShared(t, "Restart")
	z.process().Kill(t)
	restartOnSamePorts(t, zkStartTimeout, z.start)
}

// Stop sends SIGSTOP to the server's process group and, on Linux, waits until
// it is stopped. Clients' connections stay open but get no answers, and no
// session expires while it is stopped: the server expires the sessions whose
// timeout passed meanwhile once it runs again.
func (z *ZooKeeper) Stop(t testing.TB) {
	t.Helper()
	z.refuseShared(t, "Stop")
	z.process().Stop(t)
}

// Cont sends SIGCONT to the server's process group and, on Linux, waits until
// it runs again.
func (z *ZooKeeper) Cont(t testing.TB) {
	t.Helper()
	z.refuseShared(t, "Cont")
	z.process().Cont(t)
}

package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// etcdStartTimeout bounds how long etcd may take to report itself healthy
// after it was started (a restart replaying its WAL included).
const etcdStartTimeout = 20 * time.Second

// Etcd is one single-member etcd server on fixed loopback client and peer
// ports and a fixed data directory, which it keeps across [Etcd.Restart].
//
// It runs with fast raft timings (heartbeat 10 ms, election timeout
// 100 ms), so its smallest lease TTL is one second, and without fsync
// (--unsafe-no-fsync, where the binary has it): everything a killed server
// had acknowledged survives a restart, as the kernel still has it; only a
// crash of the machine would lose it.
type Etcd struct {
	bin        string
	dir        string // holds data/ and etcd.log
	logPath    string
	clientPort int
	peerPort   int
	extra      []string // arguments added by EtcdOptions

	serverProc      // its mu also guards noFsync
	noFsync    bool // --unsafe-no-fsync is passed (the binary knows it)
}

// EtcdOption configures [StartEtcd].
type EtcdOption func(*etcdConfig)

type etcdConfig struct {
	args []string
}

// WithEtcdArgs appends command-line arguments to etcd's, after the defaults,
// so that they override them: WithEtcdArgs("--max-txn-ops", "16").
func WithEtcdArgs(args ...string) EtcdOption {
	return func(c *etcdConfig) { c.args = append(c.args, args...) }
}

// StartEtcd starts one etcd member on free 127.0.0.1 client and peer ports
// with its data directory in t.TempDir(), and waits until it reports itself
// healthy (GET /health: a leader elected, no alarms), which takes about
// 100 ms. Its log goes to etcd.log in that directory. The process group is
// killed at t.Cleanup. A missing etcd binary skips the test, or fails it
// under CI=true (see [Require] and scripts/install-servers.sh etcd).
func StartEtcd(t testing.TB, opts ...EtcdOption) *Etcd {
	t.Helper()
	bin := Require(t, "etcd")
	var cfg etcdConfig
	for _, o := range opts {
		o(&cfg)
	}
	dir := t.TempDir()
	e := &Etcd{bin: bin, dir: dir, logPath: filepath.Join(dir, "etcd.log"), extra: cfg.args, noFsync: true}
	e.killAtCleanup(t)
	err := startOnFreePorts(2, func(ports []int) error {
		e.clientPort, e.peerPort = ports[0], ports[1]
		return e.start()
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// args returns etcd's command line for the current ports.
func (e *Etcd) args() []string {
	client := "http://" + e.Addr()
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(e.peerPort))
	args := []string{
		"--name", "tasklock",
		"--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "tasklock=" + peer,
		"--initial-cluster-state", "new", // ignored when the data dir has a member
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		"--snapshot-count", "10000",
		"--logger", "zap",
		"--log-outputs", "stderr",
	}
	e.mu.Lock()
	if e.noFsync {
		args = append(args, "--unsafe-no-fsync")
	}
	e.mu.Unlock()
	return append(args, e.extra...)
}

// start spawns etcd and waits until it is healthy. A binary too old for
// --unsafe-no-fsync (before 3.4.10) is started again without it.
func (e *Etcd) start() error {
	for {
		err := e.startOnce()
		var unknown errUnknownFlag
		if errors.As(err, &unknown) && string(unknown) == "unsafe-no-fsync" {
			e.mu.Lock()
			retry := e.noFsync
			e.noFsync = false
			e.mu.Unlock()
			if retry {
				continue
			}
		}
		return err
	}
}

// errUnknownFlag names a flag the etcd binary refused.
type errUnknownFlag string

func (f errUnknownFlag) Error() string { return "testserver: etcd does not know --" + string(f) }

func (e *Etcd) startOnce() error {
	url := "http://" + e.Addr() + "/health"
	err := e.launch(procSpec{
		name:    "etcd " + e.Addr(),
		path:    e.bin,
		args:    e.args(),
		dir:     e.dir,
		logPath: e.logPath,
		port:    e.clientPort,
	}, etcdStartTimeout, "did not become healthy", func() error { return etcdHealthy(url) }, nil)
	f, ok := startFailed(err)
	if !ok || !f.exited {
		return err
	}
	const undefined = "flag provided but not defined: -"
	switch {
	case f.logHas(undefined):
		flag := f.tail[strings.Index(f.tail, undefined)+len(undefined):]
		if i := strings.IndexAny(flag, " \n"); i >= 0 {
			flag = flag[:i]
		}
		return errUnknownFlag(strings.TrimPrefix(flag, "-"))
	case f.logHas("address already in use"):
		return f.portInUse()
	}
	return err
}

// etcdHealthy asks etcd's /health endpoint, which answers {"health":"true"}
// once the member has a leader and no alarm is raised.
func etcdHealthy(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return permanent{err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("GET /health: %s %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Addr returns the client address, "127.0.0.1:port".
func (e *Etcd) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(e.clientPort))
}

// Endpoints returns the client endpoints for clientv3.Config.Endpoints:
// one, "http://127.0.0.1:port".
func (e *Etcd) Endpoints() []string { return []string{"http://" + e.Addr()} }

// Dir returns the directory holding the data directory (data/) and the log.
func (e *Etcd) Dir() string { return e.dir }

// LogPath returns the path of the server's log.
func (e *Etcd) LogPath() string { return e.logPath }

// Pid returns the process id of the running server (of the latest start).
func (e *Etcd) Pid() int { return e.process().Pid() }

// Kill sends SIGKILL to the server's process group and waits until it has
// exited: a crash, as clients see it.
func (e *Etcd) Kill(t testing.TB) {
	t.Helper()
	e.process().Kill(t)
}

// Restart kills the server (SIGKILL) if it is running, starts it again on
// the same ports and data directory, and waits until it is healthy. Every
// key, lease and revision it had acknowledged survives; leases get their
// full TTL again from the moment the new process became leader (etcd's
// behaviour on any leader change).
func (e *Etcd) Restart(t testing.TB) {
	t.Helper()
	e.Kill(t)
	restartOnSamePorts(t, etcdStartTimeout, e.start)
}

// Stop sends SIGSTOP to the server's process group and, on Linux, waits
// until it is stopped. Clients' connections stay open but get no answers.
// Nothing expires while it is stopped; leases whose time passed meanwhile
// expire as soon as it runs again.
func (e *Etcd) Stop(t testing.TB) {
	t.Helper()
	e.process().Stop(t)
}

// Cont sends SIGCONT to the server's process group and, on Linux, waits
// until it runs again.
func (e *Etcd) Cont(t testing.TB) {
	t.Helper()
	e.process().Cont(t)
}

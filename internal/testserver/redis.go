package testserver

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer PING after it
// was started.
const startTimeout = 15 * time.Second

// Redis is one redis-server process (also used for sentinels and cluster
// nodes) on a fixed loopback port and directory, which it keeps across
// [Redis.Restart].
type Redis struct {
	kind    string // "redis-server", "redis-sentinel", "redis-cluster"
	bin     string
	dir     string
	logPath string
	ports   []int // ports[0] is the client port
	args    []string

	serverProc
}

// RedisOption configures [StartRedis].
type RedisOption func(*redisConfig)

type redisConfig struct {
	args []string
}

// WithRedisArgs appends command-line arguments to redis-server's, after the
// defaults, so that they override them: WithRedisArgs("--appendonly", "yes",
// "--appendfsync", "always") turns persistence on.
func WithRedisArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.args = append(c.args, args...) }
}

// StartRedis starts one redis-server on a free 127.0.0.1 port with its
// directory in t.TempDir(), without persistence (--save "" --appendonly no)
// unless opts say otherwise, and waits until it answers PING. Its output goes
// to redis-server.log in that directory. The process group is killed at
// t.Cleanup. A missing redis-server skips the test (see [Require]).
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	bin := Require(t, "redis-server")
	var cfg redisConfig
	for _, o := range opts {
		o(&cfg)
	}
	dir := t.TempDir()
	return startServer(t, "redis-server", bin, dir, 1, func(ports []int) []string {
		args := redisBaseArgs(ports[0], dir)
		return append(args, cfg.args...)
	})
}

// redisBaseArgs are the arguments every data node starts with.
func redisBaseArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
		"--save", "",
		"--appendonly", "no",
		// Replicas sync at once instead of after the default 5 s.
		"--repl-diskless-sync-delay", "0",
	}
}

// startServer starts a Redis-like server with arguments built for nports
// free ports, retrying on fresh ports when one was taken meanwhile, and
// registers its cleanup. The caller has already created dir with t.TempDir,
// so the process is killed before dir is removed.
func startServer(t testing.TB, kind, bin, dir string, nports int, build func(ports []int) []string) *Redis {
	t.Helper()
	r := &Redis{kind: kind, bin: bin, dir: dir, logPath: filepath.Join(dir, kind+".log")}
	r.killAtCleanup(t)
	err := startOnFreePorts(nports, func(ports []int) error {
		r.ports = ports
		r.args = build(ports)
		return r.start()
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start spawns the server and waits until it answers PING.
func (r *Redis) start() error {
	addr := r.Addr()
	err := r.launch(procSpec{
		name:    r.kind + " " + addr,
		path:    r.bin,
		args:    r.args,
		dir:     r.dir,
		logPath: r.logPath,
		port:    r.ports[0],
	}, startTimeout, "did not answer PING", func() error {
		s, err := respString(addr, "PING")
		if err != nil {
			return err
		}
		if s != "PONG" {
			return fmt.Errorf("PING answered %q", s)
		}
		return nil
	}, nil)
	if f, ok := startFailed(err); ok && f.exited && f.logHas("Address already in use") {
		return f.portInUse()
	}
	return err
}

// Addr returns the server's address, "127.0.0.1:port".
func (r *Redis) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.ports[0]))
}

// Dir returns the server's working directory (--dir), which holds its log
// and any persistence files.
func (r *Redis) Dir() string { return r.dir }

// Pid returns the process id of the running server (of the latest start).
func (r *Redis) Pid() int { return r.process().Pid() }

// Kill sends SIGKILL to the server's process group and waits until it has
// exited.
func (r *Redis) Kill(t testing.TB) {
	t.Helper()
	r.process().Kill(t)
}

// Restart kills the server (SIGKILL) if it is running, starts it again with
// the same arguments on the same port and directory, and waits until it
// answers PING. Data survives only if persistence was turned on with
// [WithRedisArgs].
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	r.Kill(t)
	restartOnSamePorts(t, startTimeout, r.start)
}

// Stop sends SIGSTOP to the server's process group and, on Linux, waits until
// it is stopped. Clients' connections stay open but get no answers.
func (r *Redis) Stop(t testing.TB) {
	t.Helper()
	r.process().Stop(t)
}

// Cont sends SIGCONT to the server's process group and, on Linux, waits until
// it runs again.
func (r *Redis) Cont(t testing.TB) {
	t.Helper()
	r.process().Cont(t)
}

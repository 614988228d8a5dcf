package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The servers of the etcd, ZooKeeper and RedLock part. Each runs in a
// temporary directory, in its own process group, on free loopback ports,
// with its output in a log file there, and is killed by its pid (the
// group) when its store is done, on SIGINT/SIGTERM, and (Linux) by the
// kernel if lockbench dies: the same *server as the redis-server of P1–P4.
// The settings are internal/testserver's, which needs a testing.TB.

// coordStartTimeout bounds a server's start: a JVM's for ZooKeeper.
const coordStartTimeout = 30 * time.Second

// startLogged starts bin in dir, its output appended to dir/log, and calls
// started as soon as the process runs.
func startLogged(dir, log, bin string, args []string, started func(*server)) (*server, error) {
	s := &server{dir: dir, exited: make(chan struct{})}
	f, err := os.OpenFile(filepath.Join(dir, log), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("lockbench: %w", err)
	}
	defer f.Close()
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = f, f
	s.cmd.SysProcAttr = procAttr()
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("lockbench: start %s: %w", filepath.Base(bin), err)
	}
	started(s)
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// waitUp polls ready until it succeeds, the process exits or the start
// timeout passes; on failure it stops s and returns an error with the tail
// of its log.
func waitUp(ctx context.Context, s *server, name, log string, ready func() error) error {
	deadline := time.Now().Add(coordStartTimeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		fail := func(what string) error {
			tail := logTail(filepath.Join(s.dir, log))
			s.stop()
			return fmt.Errorf("lockbench: %s %s: %v%s", name, what, err, tail)
		}
		select {
		case <-s.exited:
			return fail("exited at start")
		case <-ctx.Done():
			s.stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail(fmt.Sprintf("did not serve within %v", coordStartTimeout))
		}
	}
}

// logTail returns the last lines of a server's log, indented, for an error.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n    " + strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n    ")
}

// startEtcd starts one etcd member as internal/testserver does: fast raft
// timings (heartbeat 10 ms, election timeout 100 ms, so the smallest lease
// TTL is 1 s) and no fsync (--unsafe-no-fsync, the analogue of Redis
// without persistence), logging warnings only.
func startEtcd(ctx context.Context, started func(*server)) (*server, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("lockbench: etcd not found on PATH (Debian/Ubuntu: apt-get install etcd-server): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort := port
	for peerPort == port { // two asks may get the same free port
		if peerPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "lockbench-etcd-")
	if err != nil {
		return nil, fmt.Errorf("lockbench: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	client, peer := "http://"+addr, "http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))
	s, err := startLogged(dir, "etcd.log", bin, []string{
		"--name", "lockbench",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "lockbench=" + peer, "--initial-cluster-state", "new",
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--snapshot-count", "10000",
		"--unsafe-no-fsync",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
	}, started)
	if err != nil {
		return nil, err
	}
	s.addr = addr
	var version string
	err = waitUp(ctx, s, "etcd", "etcd.log", func() error {
		if err := httpGet(client+"/health", `"health":"true"`, nil); err != nil {
			return err
		}
		var v struct{ Etcdserver string }
		if err := httpGet(client+"/version", "", &v); err != nil {
			return err
		}
		version = v.Etcdserver
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.version = version
	return s, nil
}

// httpGet GETs url and checks that the body holds want, or decodes it as
// JSON into v.
func httpGet(url, want string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if v != nil {
		return json.Unmarshal(body, v)
	}
	return nil
}

// The ZooKeeper server's timing: internal/testserver's. A client may ask
// for session timeouts from 400 ms to 60 s.
const (
	zkTickTime       = 200 * time.Millisecond
	zkMaxSessionTime = 60 * time.Second
)

// findZooKeeperJars returns java and the server's class path: the jars of
// $ZOOKEEPER_HOME (the Apache layout) or Debian's
// /usr/share/java/zookeeper.jar (its manifest names its dependencies), with
// slf4j-simple so that the server logs to its log file.
func findZooKeeperJars() (java, classpath string, err error) {
	java, err = exec.LookPath("java")
	if err != nil {
		return "", "", fmt.Errorf("lockbench: java not found on PATH (Debian/Ubuntu: apt-get install zookeeper): %w", err)
	}
	if home := os.Getenv("ZOOKEEPER_HOME"); home != "" {
		var jars []string
		for _, pattern := range []string{filepath.Join(home, "*.jar"), filepath.Join(home, "lib", "*.jar")} {
			m, _ := filepath.Glob(pattern)
			jars = append(jars, m...)
		}
		if len(jars) > 0 {
			return java, strings.Join(jars, string(os.PathListSeparator)), nil
		}
	}
	const debianJar = "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(debianJar); err != nil {
		return "", "", errors.New("lockbench: ZooKeeper jars not found ($ZOOKEEPER_HOME, " + debianJar + "; Debian/Ubuntu: apt-get install zookeeper)")
	}
	cp := []string{debianJar}
	if _, err := os.Stat("/usr/share/java/slf4j-simple.jar"); err == nil {
		cp = append(cp, "/usr/share/java/slf4j-simple.jar")
	}
	return java, strings.Join(cp, string(os.PathListSeparator)), nil
}

// startZooKeeper starts a standalone ZooKeeper server with
// internal/testserver's zoo.cfg and JVM flags: tickTime 200 ms, session
// timeouts 400 ms to 60 s, transaction log written but not synced
// (zookeeper.forceSync=no), container nodes checked every 100 ms; the JVM
// with a 256 MB heap, the serial GC and the C1 compiler only (quick to
// start).
func startZooKeeper(ctx context.Context, started func(*server)) (*server, error) {
	java, cp, err := findZooKeeperJars()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockbench-zookeeper-")
	if err != nil {
		return nil, fmt.Errorf("lockbench: %w", err)
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	cfg := strings.Join([]string{
		"tickTime=" + ms(zkTickTime),
		"initLimit=10",
		"syncLimit=5",
		"dataDir=" + filepath.Join(dir, "data"),
		"clientPort=" + strconv.Itoa(port),
		"clientPortAddress=127.0.0.1",
		"minSessionTimeout=" + ms(2*zkTickTime),
		"maxSessionTimeout=" + ms(zkMaxSessionTime),
		"maxClientCnxns=0",
		"admin.enableServer=false",
		"4lw.commands.whitelist=ruok,srvr,stat,mntr,cons",
		"extendedTypesEnabled=true",
		"autopurge.purgeInterval=0",
	}, "\n") + "\n"
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("lockbench: %w", err)
	}
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("lockbench: %w", err)
	}
	s, err := startLogged(dir, "zookeeper.log", java, []string{
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Djava.net.preferIPv4Stack=true",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.forceSync=no",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dznode.container.checkIntervalMs=100",
		"-Dznode.container.maxPerMinute=10000000",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-cp", cp,
		"org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath,
	}, started)
	if err != nil {
		return nil, err
	}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var version string
	err = waitUp(ctx, s, "zookeeper", "zookeeper.log", func() error {
		out, err := zkFourLetterWord(s.addr, "srvr")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Mode: standalone") {
			return fmt.Errorf("srvr answered %q", strings.TrimSpace(out))
		}
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, "Zookeeper version: "); ok {
				version, _, _ = strings.Cut(v, "-")
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.version = version
	return s, nil
}

// zkFourLetterWord sends a four-letter word and returns the whole answer.
func zkFourLetterWord(addr, word string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the private redis-server every measurement of one run talks to.
type server struct {
	cmd     *exec.Cmd
	addr    string
	dir     string
	version string
	out     bytes.Buffer // the server's own output, shown when it fails to start
	exited  chan struct{}

	stopOnce sync.Once
}

// startServer starts redis-server on a free loopback port, without
// persistence, in its own process group, and waits until it answers PING.
// It calls started as soon as the process runs, so that a signal handler
// can stop it even while startServer waits.
func startServer(ctx context.Context, started func(*server)) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("lockbench: redis-server not found on PATH (Debian/Ubuntu: apt-get install redis-server): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockbench-redis-")
	if err != nil {
		return nil, fmt.Errorf("lockbench: %w", err)
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, exited: make(chan struct{})}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning",
	)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	s.cmd.SysProcAttr = procAttr()
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("lockbench: start redis-server: %w", err)
	}
	started(s)
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()

	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = c.Ping(pctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case <-s.exited:
			s.stop()
			return nil, fmt.Errorf("lockbench: redis-server exited at start: %s", bytes.TrimSpace(s.out.Bytes()))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("lockbench: redis-server on %s did not answer PING within 10s: %w", s.addr, err)
		}
	}
	if info, err := c.InfoMap(ctx, "server").Result(); err == nil {
		s.version = info["Server"]["redis_version"]
	}
	return s, nil
}

// cpu returns the CPU time the server has used.
func (s *server) cpu() (time.Duration, bool) { return processCPU(s.cmd.Process.Pid) }

// stop kills the server's process group and removes its directory. It is
// safe to call more than once and from several goroutines.
func (s *server) stop() {
	s.stopOnce.Do(s.kill)
}

func (s *server) kill() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
		}
	}
	_ = os.RemoveAll(s.dir)
}

// freePort asks the kernel for a free loopback TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("lockbench: find a free port: %w", err)
	}
	defer l.Close()
	ta, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("lockbench: unexpected listener address %v", l.Addr())
	}
	return ta.Port, nil
}

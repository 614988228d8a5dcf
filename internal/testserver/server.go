package testserver

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// What every server type (Redis and its sentinels and cluster nodes, etcd,
// ZooKeeper, PostgreSQL, MariaDB) shares: a start on free ports retried when
// a port was taken meanwhile, a readiness wait that gives up as soon as the
// process exits, and a restart on the same ports.

// portAttempts is how often a start is retried on fresh ports when a port
// picked as free was taken before the server could bind it.
const portAttempts = 5

// errPortInUse means the server could not bind a port picked as free.
var errPortInUse = errors.New("testserver: port already in use")

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testserver: pick a free port: %w", err)
		}
		defer l.Close() // keep all open until all are picked, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ClosedAddr returns a loopback address nothing listens on (a port that
// was free a moment ago): a server that is down, for tests of how a client
// meets one.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0])
}

// startOnFreePorts calls start with n ports that were free a moment ago, and
// again with fresh ones while it fails with errPortInUse (something took a
// port before the server bound it), portAttempts times at most. It returns
// start's last error, or the error of picking the ports.
func startOnFreePorts(n int, start func(ports []int) error) error {
	var err error
	for range portAttempts {
		var ports []int
		if ports, err = freePorts(n); err != nil {
			return err
		}
		if err = start(ports); err == nil || !errors.Is(err, errPortInUse) {
			return err
		}
	}
	return err
}

// restartOnSamePorts calls start until it succeeds and fails the test when
// start returns any error but errPortInUse or one of retry, or when timeout
// passes. The ports were the server's a moment ago; if something grabbed one
// meanwhile, it waits a little for it to go away rather than fail at once.
func restartOnSamePorts(t testing.TB, timeout time.Duration, start func() error, retry ...error) {
	t.Helper()
	err := poll(timeout, func() error {
		err := start()
		if err == nil || errors.Is(err, errPortInUse) {
			return err
		}
		for _, r := range retry {
			if errors.Is(err, r) {
				return err
			}
		}
		return permanent{err}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// serverProc is the latest process of a server, which Restart replaces.
// Server types embed it; its mutex also guards their other mutable fields.
type serverProc struct {
	mu   sync.Mutex
	proc *Process
}

// process returns the latest process, nil before the first start.
func (s *serverProc) process() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// kill kills the latest process, if any, and waits until it has exited.
func (s *serverProc) kill() error {
	if p := s.process(); p != nil {
		return p.kill()
	}
	return nil
}

// killAtCleanup registers a cleanup with t that kills the latest process.
func (s *serverProc) killAtCleanup(t testing.TB) {
	t.Cleanup(func() {
		if err := s.kill(); err != nil {
			t.Error(err)
		}
	})
}

// launch spawns the server described by spec, makes it the latest process
// and waits up to timeout until ready returns nil and, when spec names a
// port, the process holds that port (the answer may have come from another
// server that bound the port first). A spawn error is returned
// as it is. When the process exits first, or timeout passes, launch kills
// the server with kill (nil: the process group) and returns a *startFailure
// whose message says that the server did not do what notReady says
// ("did not answer PING"); see [startFailed].
func (s *serverProc) launch(spec procSpec, timeout time.Duration, notReady string, ready func() error, kill func() error) error {
	p, err := spawn(spec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	err = poll(timeout, func() error {
		if p.exited() {
			return permanent{fmt.Errorf("exited with %v", p.werr)}
		}
		if err := ready(); err != nil || spec.port == 0 {
			return err
		}
		return holdsPort(p, spec.port)
	})
	if err == nil {
		return nil
	}
	exited := p.exited()
	if kill == nil {
		kill = p.kill
	}
	_ = kill()
	return &startFailure{name: p.name, what: notReady, exited: exited, tail: p.logTail(), err: err}
}

// startFailure is a server start that did not become ready.
type startFailure struct {
	name   string // the process's name: the server's kind and address
	what   string // "did not answer PING"
	exited bool   // the process had exited when the wait ended
	tail   string // the end of the server's log, as [Process.logTail]
	err    error  // why the wait ended
}

func (f *startFailure) Error() string {
	return fmt.Sprintf("testserver: %s %s: %v%s", f.name, f.what, f.err, f.tail)
}

func (f *startFailure) Unwrap() error { return f.err }

// startFailed returns err as a *startFailure, if it is one.
func startFailed(err error) (*startFailure, bool) {
	var f *startFailure
	ok := errors.As(err, &f)
	return f, ok
}

// logHas reports whether the end of the server's log contains any of s.
func (f *startFailure) logHas(s ...string) bool {
	for _, x := range s {
		if strings.Contains(f.tail, x) {
			return true
		}
	}
	return false
}

// portInUse is f as errPortInUse: the server could not bind its port.
func (f *startFailure) portInUse() error {
	return fmt.Errorf("%w: %s%s", errPortInUse, f.name, f.tail)
}

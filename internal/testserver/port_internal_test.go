package testserver

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
)

// A server started on a port another server holds fails to bind it, while
// its readiness check gets the other server's answer: the start must not
// pass for ready (a MariaDB test once wrote to another test's server and
// found it answering after its own was killed), but report the port taken,
// so that startOnFreePorts picks fresh ports.
func TestStartOnAPortAnotherServerHolds(t *testing.T) {
	t.Parallel()
	a := StartRedis(t)
	port := a.ports[0]
	bin := Require(t, "redis-server")
	dir := t.TempDir()
	b := &Redis{kind: "redis-server", bin: bin, dir: dir, logPath: filepath.Join(dir, "redis-server.log"), ports: []int{port}, args: redisBaseArgs(port, dir)}
	b.killAtCleanup(t)
	err := b.start()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("start on port %d, which another redis-server holds: %v; want errPortInUse", port, err)
	}

	if err := holdsPort(a.process(), port); err != nil {
		t.Errorf("holdsPort for the server listening on the port: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := holdsPort(a.process(), l.Addr().(*net.TCPAddr).Port); err == nil {
		t.Error("holdsPort for a port this test process listens on: nil, want an error")
	}
}

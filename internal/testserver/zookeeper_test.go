package testserver_test

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/internal/testserver"
)

// zkConnect opens a session with the given timeout and waits until it is
// established. It is closed at cleanup.
func zkConnect(t *testing.T, addr string, timeout time.Duration) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, timeout, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	waitCond(t, 10*time.Second, "a session", func() bool { return c.State() == zk.StateHasSession })
	return c
}

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// waitCond polls cond until it holds or d passes.
func waitCond(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// srvrOK reports whether the server answers srvr as a standalone server
// within 300ms.
func srvrOK(z *testserver.ZooKeeper) error {
	c, err := net.DialTimeout("tcp", z.Addr(), 300*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	out := string(b)
	if !strings.Contains(out, "Mode: standalone") {
		return fmt.Errorf("srvr: %q", out)
	}
	return nil
}

func TestZooKeeperRestartKeepsDataAndSessions(t *testing.T) {
	t.Parallel()
	start := time.Now()
	z := testserver.StartZooKeeper(t)
	t.Logf("start took %v", time.Since(start))
	addr, pid := z.Addr(), z.Pid()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:port", addr)
	}
	c := zkConnect(t, addr, 5*time.Second)
	session := c.SessionID()
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.Create("/kept", []byte("v"), zk.FlagPersistent, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create("/mine", nil, zk.FlagEphemeral, acl); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	z.Restart(t)
	t.Logf("restart took %v", time.Since(start))
	if z.Addr() != addr || z.Pid() == pid {
		t.Fatalf("after Restart: Addr %s (was %s), Pid %d (was %d)", z.Addr(), addr, z.Pid(), pid)
	}
	// The client reconnects to the same session: its ephemeral node is
	// still there, and so is the persistent one.
	waitCond(t, 10*time.Second, "the session back", func() bool {
		ok, _, err := c.Exists("/mine")
		return err == nil && ok
	})
	if c.SessionID() != session {
		t.Fatalf("session %x after the restart, was %x", c.SessionID(), session)
	}
	if b, _, err := c.Get("/kept"); err != nil || string(b) != "v" {
		t.Fatalf("/kept after the restart: %q, %v", b, err)
	}

	z.Kill(t)
	if err := srvrOK(z); err == nil {
		t.Fatal("srvr answered after Kill")
	}
	z.Restart(t) // from a killed server
	if err := srvrOK(z); err != nil {
		t.Fatalf("after Kill+Restart: %v", err)
	}

	z.Stop(t)
	if err := srvrOK(z); err == nil {
		t.Fatal("a stopped server answered srvr")
	}
	z.Cont(t)
	if err := srvrOK(z); err != nil {
		t.Fatalf("after Cont: %v", err)
	}
}

func TestZooKeeperConfig(t *testing.T) {
	t.Cleanup(func() {
		if err := testserver.StopSharedZooKeeper(); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	z := testserver.SharedZooKeeper(t)
	t.Logf("shared server ready in %v", time.Since(start))
	if testserver.SharedZooKeeper(t) != z {
		t.Fatal("SharedZooKeeper returned a second server")
	}

	// Short session timeouts are negotiated as asked.
	c := zkConnect(t, z.Addr(), testserver.ZooKeeperMinSessionTimeout)
	cons, err := z.FourLetterWord("cons")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("sid=0x%x", c.SessionID())
	var line string
	for _, l := range strings.Split(cons, "\n") {
		if strings.Contains(l, want) {
			line = l
		}
	}
	if ms := testserver.ZooKeeperMinSessionTimeout.Milliseconds(); !strings.Contains(line, fmt.Sprintf("to=%d,", ms)) {
		t.Fatalf("cons line of session %s: %q, want to=%d", want, line, ms)
	}

	// TTL nodes (extended types) and containers are removed by the server.
	acl := zk.WorldACL(zk.PermAll)
	root := fmt.Sprintf("/config-%d", time.Now().UnixNano())
	if _, err := c.Create(root, nil, zk.FlagPersistent, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTTL(root+"/ttl", nil, zk.FlagTTL, acl, 200*time.Millisecond); err != nil {
		t.Fatalf("CreateTTL: %v (extended types off?)", err)
	}
	if _, err := c.CreateContainer(root+"/box", nil, zk.FlagContainer, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(root+"/box/x", nil, zk.FlagPersistent, acl); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(root+"/box/x", -1); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitCond(t, 5*time.Second, "the TTL node and the empty container removed", func() bool {
		kids, _, err := c.Children(root)
		return err == nil && len(kids) == 0
	})
	t.Logf("TTL node (200ms) and empty container removed %v later", time.Since(start).Round(time.Millisecond))

	// Fault injection on the shared server fails the test instead.
	for name, fn := range map[string]func(testing.TB){"Restart": z.Restart, "Kill": z.Kill, "Stop": z.Stop, "Cont": z.Cont} {
		ft := &zkFatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn(ft)
		}()
		<-done
		if !strings.Contains(ft.msg, "shared ZooKeeper") {
			t.Errorf("%s on the shared server: %q, want a failure", name, ft.msg)
		}
	}
	if err := srvrOK(z); err != nil {
		t.Fatalf("shared server after the refused faults: %v", err)
	}
	if _, _, err := c.Exists("/"); err != nil {
		t.Fatalf("the shared server's client after the refused faults: %v", err)
	}
}

// zkFatalTB records a fatal failure instead of failing the real test.
type zkFatalTB struct {
	testing.TB
	msg string
}

func (f *zkFatalTB) Helper() {}
func (f *zkFatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *zkFatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

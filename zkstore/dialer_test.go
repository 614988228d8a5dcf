package zkstore

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/internal/testserver"
)

// silentFirst listens on a loopback port that holds the first connection
// open without a word, as a ZooKeeper that has just started listening
// does, and forwards every later one to addr. It returns its address.
func silentFirst(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	keep := func(c ...net.Conn) {
		mu.Lock()
		conns = append(conns, c...)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			keep(c)
			if first {
				continue // never answered
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			keep(up)
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// TestDialerGivesUpASilentHandshake: the first connection is accepted and
// never answered. With Dialer the client gives it up after
// HandshakeTimeout and has its session through the next one within
// seconds; go-zookeeper's own wait for that answer is ten receive
// timeouts (26.7 s for this 4 s session).
func TestDialerGivesUpASilentHandshake(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	const session = 4 * time.Second
	start := time.Now()
	c, err := dial(silentFirst(t, z.Addr()), session, Dialer(session))
	if err != nil {
		t.Fatalf("after a silent first connection: %v", err)
	}
	defer c.Close()
	took := time.Since(start)
	t.Logf("session after %v (handshake timeout %v)", took.Round(time.Millisecond), HandshakeTimeout(session))
	if took < HandshakeTimeout(session) {
		t.Fatalf("session after %v: the silent connection was not the first one tried", took)
	}
	if _, _, err := c.Exists("/"); err != nil {
		t.Fatalf("the session does not answer: %v", err)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	for session, want := range map[time.Duration]time.Duration{
		time.Second:      time.Second,
		4 * time.Second:  time.Second,
		10 * time.Second: 2500 * time.Millisecond,
		40 * time.Second: 5 * time.Second,
		time.Hour:        5 * time.Second,
	} {
		if got := HandshakeTimeout(session); got != want {
			t.Errorf("HandshakeTimeout(%v) = %v, want %v", session, got, want)
		}
	}
}

var _ zk.Dialer = Dialer(time.Second)

package storeurl

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/zkstore"
)

// defaultZKSessionTimeout is the session timeout a zk:// URL asks for
// without session_timeout: tasklock.DefaultTTL, so that exec's default
// --ttl fits.
const defaultZKSessionTimeout = 10 * time.Second

// zkConfig is a checked zk:// URL.
type zkConfig struct {
	u       *storeURL
	servers []string
	session time.Duration // the session timeout asked for
	root    string        // "": zkstore.DefaultRoot
}

// parseZK checks a zk:// URL:
//
//	zk://h1:p1,h2:p2[/root][?session_timeout=10s]
//
// The path is zkstore.Options.Root, with a leading '/' (zk://h/app/locks
// is the root node /app/locks); without a path it is zkstore.DefaultRoot.
// A missing port is 2181. ZooKeeper authentication (digest, ACLs) is not
// supported: the store's nodes get world:anyone rights.
func parseZK(u *storeURL) (opener, error) {
	if u.user != "" || u.hasPassword {
		return nil, u.badf("zk:// takes no user or password: ZooKeeper authentication is not supported")
	}
	addrs, err := u.hosts("2181")
	if err != nil {
		return nil, err
	}
	c := &zkConfig{u: u, servers: addrs, session: defaultZKSessionTimeout}
	if v, ok := u.query.str("session_timeout"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Millisecond || d > math.MaxInt32*time.Millisecond {
			return nil, u.badf("query parameter session_timeout=%q: want a duration such as 10s, at least 1ms", v)
		}
		c.session = d
	}
	if u.path != "" {
		c.root = "/" + u.path
	}
	// New only checks the options (the root): the Conn is never used.
	if _, err := zkstore.New(new(zk.Conn), &zkstore.Options{Root: c.root, SessionTimeout: c.session}); err != nil {
		return nil, u.badOption("the path is not a valid root node", err)
	}
	return c, nil
}

// open implements opener: it connects and waits until the server has
// granted a session, and builds the store with the session timeout the
// server granted (it may lower or raise the one asked for, to fit its
// minSessionTimeout and maxSessionTimeout). Closing the store closes the
// session, which deletes its lock nodes.
func (c *zkConfig) open(ctx context.Context) (driver.Store, func() error, error) {
	w := &zkWait{dialled: map[string]int{}, changed: make(chan struct{}, 1), dialer: zkstore.Dialer(c.session)}
	conn, _, err := zk.Connect(c.servers, c.session,
		zk.WithLogger(zkQuiet{}), zk.WithLogInfo(false),
		zk.WithDialer(w.dial), zk.WithEventCallback(w.event))
	if err != nil { // no server name resolves
		return nil, nil, err
	}
	granted, err := w.wait(ctx)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	store, err := zkstore.New(conn, &zkstore.Options{Root: c.root, SessionTimeout: granted})
	if err != nil { // checked by parseZK already
		conn.Close()
		return nil, nil, c.u.badOption("", err)
	}
	return store, func() error { err := store.Close(); conn.Close(); return err }, nil
}

// zkQuiet drops go-zookeeper's log lines (a refused connection, each
// reconnection): Open reports what failed, and the Locker what that meant
// for a lock.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// zkWait follows a Conn until its first session. go-zookeeper retries
// forever and reports neither why a server failed nor the session timeout
// it granted, so its dialer records both.
type zkWait struct {
	changed chan struct{} // signalled after every change below
	dialer  zk.Dialer     // zkstore.Dialer(session asked for): a silent handshake is given up

	mu       sync.Mutex
	dialled  map[string]int // connection attempts per address
	failures []string       // "address: error", latest last
	again    bool           // an address was dialled a second time: every server failed once
	granted  time.Duration  // from the last connect response
	session  time.Duration  // granted, once the session is established
}

func (w *zkWait) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// fail records why addr failed, until the session is established (the
// Conn lives on with this dialer, and reconnects while it lives).
func (w *zkWait) fail(addr string, err error) {
	w.mu.Lock()
	if w.session == 0 {
		w.failures = append(w.failures, addr+": "+err.Error())
	}
	w.mu.Unlock()
	w.signal()
}

// dial is the Conn's zk.Dialer: zkstore.Dialer's, which gives up a
// handshake the server does not answer. go-zookeeper tries the servers in
// turn, so dialling an address again before any session means that every
// server has failed once.
func (w *zkWait) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	w.mu.Lock()
	w.dialled[addr]++
	if w.dialled[addr] > 1 && w.session == 0 {
		w.again = true
	}
	w.mu.Unlock()
	w.signal()
	conn, err := w.dialer(network, addr, timeout)
	if err != nil {
		w.fail(addr, err)
		return nil, err
	}
	return &zkHandshakeConn{Conn: conn, w: w, addr: addr}, nil
}

// event is the Conn's event callback.
func (w *zkWait) event(ev zk.Event) {
	if ev.Type != zk.EventSession || ev.State != zk.StateHasSession {
		return
	}
	w.mu.Lock()
	if w.session == 0 {
		w.session = w.granted
	}
	w.mu.Unlock()
	w.signal()
}

// wait returns the granted session timeout once the session is established.
// It fails once every server has failed once, or when ctx ends.
func (w *zkWait) wait(ctx context.Context) (time.Duration, error) {
	for {
		w.mu.Lock()
		session, again, failures := w.session, w.again, strings.Join(w.failures, "; ")
		w.mu.Unlock()
		switch {
		case session > 0:
			return session, nil
		case again && failures != "":
			return 0, fmt.Errorf("no ZooKeeper server granted a session: %s", failures)
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			if failures == "" {
				return 0, fmt.Errorf("no ZooKeeper session yet: %w", ctx.Err())
			}
			return 0, fmt.Errorf("no ZooKeeper session yet: %w (%s)", ctx.Err(), failures)
		}
	}
}

// zkHandshakeConn reads the session timeout from the connect response, the
// first frame a server sends on a connection: length, protocol version,
// timeout in milliseconds, session id, password (all big-endian).
type zkHandshakeConn struct {
	net.Conn // zkstore.Dialer's
	w        *zkWait
	addr     string
	head     []byte // the frame's first 12 bytes, until complete
	done     bool
}

func (c *zkHandshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.done {
		return n, err
	}
	c.head = append(c.head, p[:n]...)
	switch {
	case len(c.head) >= 12:
		c.done = true
		ms := int32(binary.BigEndian.Uint32(c.head[8:12]))
		c.w.mu.Lock()
		c.w.granted = time.Duration(ms) * time.Millisecond
		c.w.mu.Unlock()
	case err != nil:
		c.done = true
		c.w.fail(c.addr, fmt.Errorf("no ZooKeeper handshake: %w", err))
	}
	return n, err
}

package zkstore

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Dialer returns a zk.Dialer, for zk.WithDialer, whose connections wait
// at most HandshakeTimeout(sessionTimeout) for the server's first answer
// (the connect response), where go-zookeeper waits ten times its receive
// timeout: two thirds of the session timeout, so 66.7 s for 10 s.
// ZooKeeper (3.8 at least) neither answers nor closes a connection it
// accepts in the moments after it starts listening, before it serves: a
// client that reconnects to a restarted server then is cut off for that
// long, and its session, its lock nodes and its locks are lost meanwhile.
// With this dialer an unanswered handshake is given up and go-zookeeper
// dials again. sessionTimeout is the one given to zk.Connect:
//
//	conn, _, err := zk.Connect(servers, 10*time.Second,
//		zk.WithDialer(zkstore.Dialer(10*time.Second)))
func Dialer(sessionTimeout time.Duration) zk.Dialer {
	limit := HandshakeTimeout(sessionTimeout)
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &handshakeConn{Conn: c, limit: limit}, nil
	}
}

// HandshakeTimeout is how long a connection made by Dialer waits for the
// server's connect response: a quarter of the session timeout, at least
// 1 s and at most 5 s.
func HandshakeTimeout(sessionTimeout time.Duration) time.Duration {
	return min(max(sessionTimeout/4, time.Second), 5*time.Second)
}

// handshakeConn caps the read deadlines set before the server's first
// byte arrives; later ones pass unchanged.
type handshakeConn struct {
	net.Conn
	limit    time.Duration
	answered atomic.Bool // a byte came from the server
}

// SetReadDeadline caps t at limit from now until the server has answered.
func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	if !c.answered.Load() && !t.IsZero() {
		if limit := time.Now().Add(c.limit); t.After(limit) {
			t = limit
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// Read notes the server's first byte.
func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, err
}

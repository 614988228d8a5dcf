package mysqlstore

import (
	"context"
	"net"
	"syscall"
	"time"
)

// KeepAliveDialer returns a dial function for mysql.RegisterDialContext that
// makes the client notice a dead or silently partitioned server within
// seconds instead of the operating system's default of hours:
//
//   - TCP keepalive probes start after idle seconds without traffic and are
//     sent every idle seconds, three times (net.KeepAliveConfig);
//   - on Linux, TCP_USER_TIMEOUT closes the connection when data it sent
//     stays unacknowledged for userTimeout (zero leaves it unset).
//
// Register it under a network name of your choice and use that name in the
// DSN instead of tcp:
//
//	mysql.RegisterDialContext("tcpka", mysqlstore.KeepAliveDialer(5*time.Second, 10*time.Second))
//	db, err := sql.Open("mysql", "app:secret@tcpka(db.internal:3306)/app")
//
// This matters most in connection mode, where a lock lives as long as its
// connection: the holder's renewals (pings) then fail fast at the socket
// rather than only when the Locker's renewal call times out. The server's
// side is covered by the session wait_timeout that connection mode sets on
// every lock connection (see the package documentation).
func KeepAliveDialer(idle, userTimeout time.Duration) func(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: idle, Interval: idle, Count: 3},
	}
	if userTimeout > 0 {
		ms := int(userTimeout / time.Millisecond)
		d.Control = func(network, address string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, ms) })
			if err != nil {
				return err
			}
			return serr
		}
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}
}

package pgstore

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from <netinet/tcp.h>.
const tcpUserTimeout = 0x12

// setUserTimeout sets TCP_USER_TIMEOUT: how long transmitted data may stay
// unacknowledged before the kernel drops the connection.
func setUserTimeout(c *net.TCPConn, d time.Duration) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d/time.Millisecond))
	})
	if err != nil {
		return err
	}
	return serr
}

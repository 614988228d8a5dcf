package mysqlstore

import "golang.org/x/sys/unix"

// setUserTimeout sets TCP_USER_TIMEOUT: the time sent data may stay
// unacknowledged before the kernel closes the connection.
func setUserTimeout(fd uintptr, ms int) error {
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
}

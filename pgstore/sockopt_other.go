//go:build !linux

package pgstore

import (
	"errors"
	"net"
	"time"
)

// errUnsupported is returned by setUserTimeout where the option does not
// exist.
var errUnsupported = errors.New("pgstore: TCP_USER_TIMEOUT not supported on this platform")

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist; the
// keepalive probes still detect a dead peer.
func setUserTimeout(c *net.TCPConn, d time.Duration) error { return errUnsupported }

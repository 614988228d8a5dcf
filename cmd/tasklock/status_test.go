//go:build linux

package main

import (
	"syscall"
	"testing"
)

// describeStatus is read after "command", "then it" and a node's name, so
// it is a verb phrase in each case, and it names a signal as kill(1) does:
// the run stopped at shutdown used to read "sent SIGTERM, then it killed by
// signal terminated".
func TestDescribeStatus(t *testing.T) {
	for ws, want := range map[syscall.WaitStatus]string{
		syscall.WaitStatus(3 << 8):          "exited with status 3",
		syscall.WaitStatus(0):               "exited with status 0",
		syscall.WaitStatus(syscall.SIGTERM): "was killed by signal SIGTERM",
		syscall.WaitStatus(syscall.SIGKILL): "was killed by signal SIGKILL",
	} {
		if got := describeStatus(ws); got != want {
			t.Errorf("describeStatus(%#x) = %q, want %q", uint32(ws), got, want)
		}
	}
}

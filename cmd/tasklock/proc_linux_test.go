package main

import (
	"errors"
	"os/exec"
	"testing"
)

// The supervisor's refusal to start COMMAND past its kill-by time is the
// lease's end, exit 70, whether or not the Lock has noticed its end yet:
// exec used to tell it apart from a command that cannot run (126) only by
// the Lock's Err, which could still be nil then (seen with --ttl 10ms).
func TestStartFailureLeaseEnded(t *testing.T) {
	err := startFailure("error 70 the lock's lease ended before COMMAND could start", nil)
	if !errors.Is(err, errLeaseEnded) || errors.Is(err, exec.ErrNotFound) {
		t.Errorf("the supervisor's lease-ended refusal: %v, want errLeaseEnded", err)
	}
	err = startFailure("error 127 exec: \"nosuch\": executable file not found in $PATH", nil)
	if errors.Is(err, errLeaseEnded) || !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("a command not found: %v, want exec.ErrNotFound only", err)
	}
	if err := startFailure("error 126 permission denied", nil); errors.Is(err, errLeaseEnded) || errors.Is(err, exec.ErrNotFound) {
		t.Errorf("a command that cannot run: %v matches errLeaseEnded or ErrNotFound", err)
	}
}

package clitest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test after timeout; what
// names the condition in the failure.
func WaitFor(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	if !Within(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Within polls cond until it holds or timeout has passed, and reports
// whether it held: WaitFor for a caller that goes on after a timeout.
func Within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	return true
}

// WaitOutput waits until stdout contains s.
func (p *Proc) WaitOutput(s string, timeout time.Duration) {
	p.t.Helper()
	p.WaitUntil(timeout, func() bool { return strings.Contains(p.Stdout(), s) }, "printing "+strconv.Quote(s))
}

// WaitStderr waits until stderr matches the regular expression re.
func (p *Proc) WaitStderr(re string, timeout time.Duration) {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	p.WaitUntil(timeout, func() bool { return rx.MatchString(p.Stderr()) }, "logging "+strconv.Quote(re))
}

// WaitUntil polls cond until it holds, failing the test if the process
// exits first or after timeout; what names the condition in the failure.
func (p *Proc) WaitUntil(timeout time.Duration, cond func() bool, what string) {
	p.t.Helper()
	WaitFor(p.t, timeout, func() bool {
		select {
		case <-p.done:
			p.t.Fatalf("tasklock exited (%v) before %s\nstdout:\n%s\nstderr:\n%s", p.state, what, p.Stdout(), p.Stderr())
		default:
		}
		return cond()
	}, "tasklock "+what)
}

//go:build unix && !linux

package main

import (
	"os/exec"
	"syscall"
)

// childAttr puts a child in its own process group, so that signals reach
// everything it started. This system has no parent-death signal: the child
// outlives a tasklock that is SIGKILLed.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// startCommand starts COMMAND as tasklock's own child, in its own process
// group. Without Linux's child subreaper and parent-death signal there is
// no supervisor here: signals reach COMMAND's process group only, so what
// COMMAND starts in another group or session is not stopped, and COMMAND
// outlives a tasklock that is SIGKILLed.
func startCommand(sp commandSpec) (*command, error) {
	cmd := exec.Command(sp.argv[0], sp.argv[1:]...)
	cmd.Env = sp.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = sp.stdin, sp.stdout, sp.stderr
	cmd.SysProcAttr = childAttr()
	cmd.WaitDelay = sp.waitDelay
	ch, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	c := &command{pid: ch.pid, done: make(chan struct{}), send: func(sig syscall.Signal) bool {
		// A group whose members have all been reaped is gone (ESRCH).
		return syscall.Kill(-ch.pid, sig) == nil
	}}
	go func() {
		<-ch.done
		c.status = waitStatus(ch.state)
		close(c.done)
	}()
	return c, nil
}

// signal sends sig to the child's process group. After the child has been
// reaped the group id cannot have been reused while any member lives, so
// stragglers are still reached; a group that is gone is not an error.
func (ch *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-ch.pid, sig)
}

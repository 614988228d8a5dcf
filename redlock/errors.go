package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tasklock/tasklock/driver"
)

// ErrTooSlow is wrapped by the error Acquire returns when a majority of the
// nodes granted the lease but the answers took so long that the lease's
// validity (TTL − elapsed − drift) was used up: the grants have been
// released again. It is transient; the call may be retried.
var ErrTooSlow = errors.New("redlock: the quorum answered after the lease's validity")

// ErrSplitVote is wrapped by the error Acquire returns when enough nodes
// answered for a majority but no owner won one: the key went to several
// contenders at once, each on fewer than a majority of the nodes (with 3
// nodes: one grant here, and each other node held by a different owner),
// counting every node that failed to answer as the other owner's; or it
// may have, the nodes that failed being able to give a majority to the
// request as well as to another owner (then the error wraps ErrUndecided,
// which wraps this). Every grant has been released again. It wraps
// driver.ErrTryAgain: the Locker retries it after a short jittered pause,
// so the contenders that tied do not tie again.
var ErrSplitVote = fmt.Errorf("redlock: the vote split, no owner won a majority: %w", driver.ErrTryAgain)

// ErrUndecided is wrapped by the error Acquire returns when the nodes that
// failed to answer (down, or silent past Acquire's wait) could decide the
// vote: they could give a majority to the request, and the answers in name
// another owner (with 3 nodes: one grant here, one node held by another
// owner, one without an answer). Acquire cannot tell whether the key is
// held, and does not guess: every grant has been released again. It wraps
// ErrSplitVote, and so driver.ErrTryAgain, and driver.ErrUndecided. Each such attempt waits for the
// silent nodes up to Acquire's bound (1 s, less for a shorter lease), so
// tasklock's TryObtain makes few of them: when its time for attempts is up
// (1.5 s) it returns an error wrapping this one that does not match
// tasklock.ErrNotObtained (see tasklock.Locker.TryObtain). Obtain tries
// again until its context ends.
var ErrUndecided error = undecidedError{}

// undecidedError is ErrUndecided: ErrSplitVote's text after its own, and
// driver.ErrUndecided too, for the Locker.
type undecidedError struct{}

func (undecidedError) Error() string {
	return "redlock: the nodes that did not answer could decide the vote: " + ErrSplitVote.Error()
}

func (undecidedError) Unwrap() []error { return []error{ErrSplitVote, driver.ErrUndecided} }

// NodeError is one node's failure in a call: the node's address (the
// client's Options().Addr, or "clients[i]" for a Sentinel failover client)
// and its error, which may wrap a go-redis error or, when the node did not
// answer within the node timeout, context.DeadlineExceeded.
type NodeError struct {
	Addr string
	Err  error
}

// Error implements error.
func (e *NodeError) Error() string { return e.Addr + ": " + e.Err.Error() }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError is returned when too few nodes answered for the store to
// decide: a lock call needs a majority of the nodes to give the same answer.
// It names every node that failed and its error; errors.Is and errors.As see
// each NodeError and what it wraps (context.DeadlineExceeded for a node that
// did not answer in time, a go-redis or network error otherwise).
//
// Acquire returns it when fewer than a majority of the nodes answered
// "granted" or "held" (the key may or may not be held), or when raising the
// fence counters failed on too many of them. Renew returns it for a lease
// renewed on fewer than a majority but not known to be gone from a majority,
// and as the call's error when fewer than a majority answered at all.
// Release, ForceRelease and Leases return it when too few nodes answered to
// tell, Subscribe when no node could be subscribed. The Locker treats it as
// transient: a renewal is retried while the lease may still be valid, and
// Obtain retries while its ctx has a deadline.
type QuorumError struct {
	Op     string       // "acquire", "renew", "release", "force release", "list leases", "subscribe"
	Key    string       // the lock's key; "" for a call about many keys
	Nodes  int          // how many nodes the store has
	Quorum int          // how many of them must agree: Nodes/2 + 1
	Failed []*NodeError // the nodes that failed, and why
	detail string       // what the other nodes answered, for Error
}

// Error implements error.
func (e *QuorumError) Error() string {
	var b strings.Builder
	b.WriteString("redlock: ")
	b.WriteString(e.Op)
	if e.Key != "" {
		fmt.Fprintf(&b, " %q", e.Key)
	}
	fmt.Fprintf(&b, ": no quorum (%d of %d nodes needed)", e.Quorum, e.Nodes)
	if e.detail != "" {
		b.WriteString(": ")
		b.WriteString(e.detail)
	}
	if len(e.Failed) > 0 {
		fmt.Fprintf(&b, "; %d failed: ", len(e.Failed))
		for i, ne := range e.Failed {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(ne.Error())
		}
	}
	return b.String()
}

// Unwrap returns the NodeError of every failed node.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, ne := range e.Failed {
		errs[i] = ne
	}
	return errs
}

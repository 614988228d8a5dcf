package tasklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/tasklock/tasklock/driver"
)

// Reentrant holds are scoped to a context: a Lock's Context (and every
// context derived from it) carries the chain of locks held in the call
// chain that obtained it, and an Obtain or TryObtain whose ctx carries a
// live lock of the same Locker on the same key returns a nested handle on
// that lock's lease instead of asking the store. See "Reentrant holds" in
// doc.go.

// holdsKey is the context key under which a context carries its holds.
type holdsKey struct{}

// holdNode is one link of the chain of holds a context carries: the lock,
// then the holds of the context it was obtained with. Nodes are never
// changed once made, so contexts share them freely.
type holdNode struct {
	lock *Lock
	next *holdNode
}

// holdsOf returns the chain of holds ctx carries, nil when none.
func holdsOf(ctx context.Context) *holdNode {
	n, _ := ctx.Value(holdsKey{}).(*holdNode)
	return n
}

// withHold returns parent carrying l's hold in front of the holds l was
// obtained under.
func withHold(parent context.Context, l *Lock) context.Context {
	return context.WithValue(parent, holdsKey{}, &holdNode{lock: l, next: l.inherited})
}

// lease returns the Lock that owns l's lease: l itself, or for a nested
// handle the outermost hold.
func (l *Lock) lease() *Lock {
	if l.outer != nil {
		return l.outer
	}
	return l
}

// reenter records in o the chain of holds ctx carries, and returns a
// nested handle on this Locker's live lock on key that the chain contains,
// or nil when there is none: then the caller contends as usual. It makes
// no store call. The error is ctx's when a hold is there but ctx has ended.
func (lk *Locker) reenter(ctx context.Context, key string, o *resolved) (*Lock, error) {
	holds := holdsOf(ctx)
	o.holds = holds
	if o.mode != driver.ModeMutex {
		return nil, nil // only a mutex is reentrant
	}
	for n := holds; n != nil; n = n.next {
		outer := n.lock.lease()
		if outer.lk != lk || outer.key != key || outer.mode != driver.ModeMutex {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("tasklock: obtain %q: %w", key, err)
		}
		lk.eng.expireIfDue(outer) // a resumed process must not nest on an expired lease
		nested := &Lock{
			lk: lk, key: key, token: outer.token, owner: outer.owner, fence: outer.fence,
			acquiredAt: outer.acquiredAt, outer: outer, inherited: holds,
		}
		if lk.eng.nest(n.lock, nested) {
			return nested, nil
		}
	}
	return nil, nil
}

// releaseNested ends a nested handle. The lease stays with the outer hold.
// It returns nil when the handle ended by a Release (its own or the outer
// one's), and an error matching ErrNotHeld with the cause when the outer
// lease was lost first.
func (l *Lock) releaseNested() error {
	cause := l.lk.eng.unnest(l)
	if cause == nil || errors.Is(cause, ErrReleased) {
		return nil
	}
	return notHeld(cause)
}

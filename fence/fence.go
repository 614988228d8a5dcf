// Package fence is the resource side of tasklock's fencing tokens: the check
// that the thing a lock protects makes, so that a holder that was paused or
// partitioned past its lease cannot overwrite the work of the holder that
// replaced it.
//
// Every grant of a tasklock lock carries a fence (tasklock.Lock.Fence) that is
// strictly greater than every earlier fence for the key from the same store.
// Pass it along with every write to the protected resource, and have the
// resource refuse a write whose fence is lower than the highest it has seen.
// Register is that rule in memory: use it as is for an in-process resource,
// as the oracle that counts stale writes in a test, or as the model for the
// check a real resource makes, e.g. in SQL:
//
//	UPDATE report SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// and treat "no row updated" as a stale fence.
package fence

import (
	"fmt"
	"sync"

	"github.com/tasklock/tasklock"
)

// Register accepts a write only when the writer's fence is at least the
// highest fence it has accepted. The zero value is ready to use; a Register
// is safe for concurrent use.
type Register struct {
	mu       sync.Mutex
	highest  uint64
	accepted int
	rejected int
}

// Write records a write made under fence. It returns an error matching
// tasklock.ErrStaleFence, and records nothing, when a higher fence was
// accepted before.
func (r *Register) Write(fence uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.highest {
		r.rejected++
		return fmt.Errorf("%w: %d < %d", tasklock.ErrStaleFence, fence, r.highest)
	}
	r.highest = fence
	r.accepted++
	return nil
}

// Highest returns the highest fence accepted so far.
func (r *Register) Highest() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}

// Counts returns how many writes were accepted and rejected.
func (r *Register) Counts() (accepted, rejected int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted, r.rejected
}

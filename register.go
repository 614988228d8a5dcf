package tasklock

import (
	"fmt"
	"sync"
)

// FencedRegister is the resource side of fencing: it accepts a write only
// when the writer's fence is at least the highest fence it has accepted, so
// a holder that was paused or partitioned past its lease cannot overwrite
// the work of the holder that replaced it. Use it in tests as the oracle
// that counts stale writes, or as the model for the check a real resource
// makes (e.g. UPDATE ... WHERE fence <= $1). The zero value is ready to use.
type FencedRegister struct {
	mu       sync.Mutex
	highest  uint64
	accepted int
	rejected int
}

// Write records a write made under fence. It returns an error matching
// ErrStaleFence, and records nothing, when a higher fence was accepted
// before.
func (r *FencedRegister) Write(fence uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.highest {
		r.rejected++
		return fmt.Errorf("%w: %d < %d", ErrStaleFence, fence, r.highest)
	}
	r.highest = fence
	r.accepted++
	return nil
}

// Highest returns the highest fence accepted so far.
func (r *FencedRegister) Highest() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}

// Counts returns how many writes were accepted and rejected.
func (r *FencedRegister) Counts() (accepted, rejected int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted, r.rejected
}

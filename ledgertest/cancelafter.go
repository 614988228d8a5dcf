package ledgertest

import (
	"context"

	"github.com/tasklock/tasklock/ledger"
)

// CancelAfter passes SetJobState through to the Ledger it wraps until N
// trigger requests were added, then calls Cancel and fails with the
// context's error, as a store that did not answer in time: a backfill that
// runs out of time half way. It wraps a real ledger; it is not a mock.
type CancelAfter struct {
	ledger.Ledger
	N      int
	Cancel context.CancelFunc
}

// SetJobState implements ledger.Ledger.
func (c *CancelAfter) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if p.Op == ledger.JobTrigger {
		if c.N == 0 {
			c.Cancel()
			return ledger.JobState{}, ctx.Err()
		}
		c.N--
	}
	return c.Ledger.SetJobState(ctx, p)
}

package schedule

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// A pass whose claims of a sharded tick's shards failed (the store made
// them but the answer was lost) is claimed again by the retried pass, and
// each shard is handled once: run, or recorded missed, not both. The
// failed pass used to leave the tick watched: once the store answered, a
// free node claimed its shards through the watch (pollShards) and ran
// them, and the retried pass's claim of the same shards, under the node's
// own token, succeeded again — the shard was recorded missed beside its
// run, or ran twice (seen after a PostgreSQL outage, three serves).
func TestShardsFailedPassHandledOnce(t *testing.T) {
	c := newCluster(t)
	flaky := &flakyLedger{Ledger: c.ledger}
	c.wrapLedger = func(string, ledger.Ledger) ledger.Ledger { return flaky }
	var mu sync.Mutex
	ran := map[string]int{}
	job := Job{Name: "sh", Schedule: "@every 10s", Shards: 2, Handler: func(_ context.Context, run Run) error {
		mu.Lock()
		ran[fmt.Sprintf("%s/%d", run.Tick.Format(time.TimeOnly), run.Shard)]++
		mu.Unlock()
		return nil
	}}
	c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	tick := t0.Add(10 * time.Second)
	flaky.failClaims.Store(true)
	c.step(10 * time.Second) // the tick's pass: claims made, answer lost
	flaky.failClaims.Store(false)
	// The store answers again: the watch (a poll after the tick) and the
	// retried pass (500ms after the failure) both come due.
	for range 4 {
		c.step(DefaultPollInterval)
	}
	c.settle(true)
	var final []ledger.RunRecord
	waitFor(t, "both shards of the tick to have a final record", func() bool {
		final = c.finalAfter("sh", tick.Add(-time.Second))
		return len(final) >= 2
	})
	perShard := map[int][]string{}
	for _, r := range final {
		if r.Tick.Equal(tick) {
			perShard[r.Shard] = append(perShard[r.Shard], fmt.Sprintf("attempt %d %s", r.Attempt, r.Status))
		}
	}
	for k := range 2 {
		if len(perShard[k]) != 1 {
			t.Errorf("shard %d of the tick has %d final records, want 1: %v", k, len(perShard[k]), perShard[k])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range ran {
		if n > 1 {
			t.Errorf("shard-run %s ran %d times", k, n)
		}
	}
}

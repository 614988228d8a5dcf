package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

// cancelAfter passes SetJobState through to a real ledger until n trigger
// requests were added, then cancels ctx and fails as a store that did not
// answer within --timeout: a backfill that runs out of time half way.
type cancelAfter struct {
	ledger.Ledger
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if p.Op == ledger.JobTrigger {
		if c.n == 0 {
			c.cancel()
			return ledger.JobState{}, ctx.Err()
		}
		c.n--
	}
	return c.Ledger.SetJobState(ctx, p)
}

// A backfill that fails after some requests says how many it made, that
// they stay, and (with --rerun) where to start again.
func TestJobsBackfillPartialSaysWhatStays(t *testing.T) {
	var l ledger.Ledger = memstore.New(nil)
	now := time.Now().UTC().Truncate(time.Minute)
	if _, err := l.SetJobState(context.Background(), ledger.JobStateParams{Job: "m", Op: ledger.JobRegister, Spec: "@every 1m", Since: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	from, to := now.Add(-30*time.Minute), now.Add(-20*time.Minute)
	for _, rerun := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		err := jobsBackfill(ctx, &cancelAfter{Ledger: l, n: 3, cancel: cancel}, "m", from, to, schedule.BackfillOptions{Rerun: rerun}, false, &out)
		cancel()
		want := []string{`backfill "m" stopped after requesting 3 ticks, ` + from.Format(time.RFC3339) + " to " + from.Add(2*time.Minute).Format(time.RFC3339), "those requests stay and the fleet runs them"}
		if rerun {
			want = append(want, "--from "+from.Add(2*time.Minute+time.Second).Format(time.RFC3339))
		}
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("rerun %v: jobsBackfill = %v, want an error saying %q", rerun, err, w)
			}
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("rerun %v: %v does not wrap the store's error", rerun, err)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

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
		err := jobsBackfill(ctx, &ledgertest.CancelAfter{Ledger: l, N: 3, Cancel: cancel}, "m", from, to, schedule.BackfillOptions{Rerun: rerun}, false, &out)
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

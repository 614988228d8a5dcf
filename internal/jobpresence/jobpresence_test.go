package jobpresence_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/jobpresence"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// Triggerable takes a job for removed from every node only when nothing
// was recorded for a tick more than ForgetAfter past: a paused job, a run
// in progress, a recent tick or a recent registration keep it, and so
// does a job the ledger cannot judge.
func TestTriggerable(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	old := now.Add(-time.Hour).Truncate(time.Minute)
	for _, c := range []struct {
		name   string
		st     ledger.JobState
		last   *ledger.RunRecord
		ok     bool
		why    string // in why
		config bool   // LooksConfigured without running
	}{
		{"last ran long ago", ledger.JobState{Spec: "@every 1m", Since: old}, &ledger.RunRecord{Tick: old, Status: ledger.RunOK}, false, "is more than 1m0s past", false},
		{"paused", ledger.JobState{Spec: "@every 1m", Since: old, Paused: true}, &ledger.RunRecord{Tick: old, Status: ledger.RunOK}, true, "", false},
		{"running long", ledger.JobState{Spec: "@every 1m", Since: old}, &ledger.RunRecord{Tick: old, Status: ledger.RunRunning}, true, `is running on node "n1"`, false},
		{"ran at its last tick", ledger.JobState{Spec: "@every 1m", Since: old}, &ledger.RunRecord{Tick: now.Truncate(time.Minute), Status: ledger.RunFailed}, true, "is not 1m0s past", true},
		{"registered long ago, never ran", ledger.JobState{Spec: "@every 1m", Since: old}, nil, false, "has not run yet", false},
		{"registered just now", ledger.JobState{Spec: "@hourly", Since: now.Add(-time.Minute)}, nil, true, "has not run yet", true},
		// The ledger cannot tell: not refused (a trigger once refused with
		// an empty reason).
		{"never registered", ledger.JobState{}, nil, true, "", false},
		{"a schedule this build cannot read", ledger.JobState{Spec: "@fortnightly", Since: old}, nil, true, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := memstore.New(nil)
			c.st.Job = "j"
			if c.last != nil {
				r := *c.last
				r.Job, r.Attempt, r.Node, r.Start = "j", 1, "n1", r.Tick
				if r.Status != ledger.RunRunning {
					r.End = r.Tick
				}
				if err := l.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
					t.Fatal(err)
				}
			}
			ok, why, err := jobpresence.Triggerable(ctx, l, c.st, now)
			if err != nil || ok != c.ok || !strings.Contains(why, c.why) || (c.why == "" && why != "") {
				t.Errorf("Triggerable = %v, %q, %v; want %v with %q", ok, why, err, c.ok, c.why)
			}
			if config, _, err := jobpresence.LooksConfigured(ctx, l, c.st, now, false); err != nil || config != c.config {
				t.Errorf("LooksConfigured (running not counted) = %v, %v; want %v", config, err, c.config)
			}
		})
	}
}

// Removed names the job and says why, for the caller to add how to force.
func TestRemoved(t *testing.T) {
	got := jobpresence.Removed("a\nb", "its next tick is more than 1m0s past")
	want := `job "a\nb" looks removed from the configuration of every node of serve: its next tick is more than 1m0s past; its run would wait until a node has it again`
	if got != want {
		t.Errorf("Removed = %q, want %q", got, want)
	}
}

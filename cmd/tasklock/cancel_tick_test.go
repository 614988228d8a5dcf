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
)

// jobs history shows a triggered run's tick to the second, marked
// "(trigger)", without its trigger ID; jobs cancel with that tick used to
// answer `no such run ... (trigger "", shard 0)`. The tick as the table
// shows it now names the one triggered run in progress within that second,
// and names the IDs when there are several.
func TestJobsCancelTickAsHistoryShowsIt(t *testing.T) {
	ctx := context.Background()
	var l ledger.Ledger = memstore.New(nil)
	second := time.Date(2026, 11, 28, 12, 14, 11, 0, time.UTC)
	running := func(tick time.Time, trigger string) ledger.RunRecord {
		return ledger.RunRecord{Job: "report", Tick: tick, Trigger: trigger, Attempt: 1, Node: "n1",
			Start: tick, Status: ledger.RunRunning}
	}
	if err := l.RecordRuns(ctx, []ledger.RunRecord{
		running(second.Add(230*time.Millisecond), "TRIGGERA"),
		{Job: "report", Tick: second.Add(500 * time.Millisecond), Trigger: "TRIGGERB", Attempt: 1, Node: "n1",
			Start: second, End: second.Add(time.Second), Status: ledger.RunOK},
	}); err != nil {
		t.Fatal(err)
	}
	var f actFlags
	k, err := f.runKey("report", "2026-11-28T12:14:11Z")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := jobsCancel(ctx, l, k, false, &out); err != nil {
		t.Fatalf("cancel at the tick jobs history shows: %v", err)
	}
	if !strings.Contains(out.String(), "2026-11-28T12:14:11.23Z") {
		t.Errorf("output %q does not name the triggered run", out.String())
	}
	states, err := l.JobStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, st := range states {
		for _, tr := range st.Triggers {
			if tr.RunTrigger == "TRIGGERA" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no cancel request for trigger TRIGGERA: %+v", states)
	}

	// Two triggered runs in progress in that second: which one is not
	// guessed.
	if err := l.RecordRuns(ctx, []ledger.RunRecord{running(second.Add(700*time.Millisecond), "TRIGGERC")}); err != nil {
		t.Fatal(err)
	}
	err = jobsCancel(ctx, l, k, false, &out)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--trigger TRIGGERA") || !strings.Contains(err.Error(), "--trigger TRIGGERC") {
		t.Errorf("two triggered runs in the second: %v, want a usage error naming both --trigger IDs", err)
	}

	// No run at all: the message says how to name a triggered run.
	k.Tick = second.Add(-time.Hour)
	if err := jobsCancel(ctx, l, k, false, &out); err == nil || !strings.Contains(err.Error(), "--trigger") {
		t.Errorf("no run: %v, want it to mention --trigger", err)
	}
}

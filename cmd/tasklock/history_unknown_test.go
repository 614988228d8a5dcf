package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// jobs history --job with a mistyped name said only "no runs recorded", as
// for a job that has not run yet; it now says the store knows no such job.
func TestJobsHistoryNamesAnUnknownJob(t *testing.T) {
	ctx := context.Background()
	var l ledger.Ledger = memstore.New(nil)
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: "report", Op: ledger.JobRegister, Spec: "@hourly", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := jobsHistory(ctx, l, ledger.RunQuery{Job: "reprot"}, false, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `knows no job named "reprot"`) {
		t.Errorf("history of an unknown job: %q, want it to say the store knows no such job", out.String())
	}
	out.Reset()
	if err := jobsHistory(ctx, l, ledger.RunQuery{Job: "report"}, false, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "no runs recorded" {
		t.Errorf("history of a known job that has not run: %q, want no runs recorded", got)
	}
}

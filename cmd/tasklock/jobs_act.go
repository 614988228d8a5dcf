package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/dashboard/jobdefs"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// actFlags are the flags of jobs cancel and of jobs trigger's note.
type actFlags struct {
	shard   int
	trigger string
	note    string
}

// checkNote checks --note as the dashboard checks a trigger's note.
func (f *actFlags) checkNote() error {
	f.note = strings.TrimSpace(f.note)
	switch {
	case len(f.note) > apijson.MaxNote:
		return usagef("--note is %d bytes, more than %d", len(f.note), apijson.MaxNote)
	case !utf8.ValidString(f.note):
		return usagef("--note is not UTF-8")
	}
	return nil
}

// runKey checks cancel's JOB, TICK, --shard and --trigger.
func (f *actFlags) runKey(job, tick string) (ledger.RunKey, error) {
	t, err := parseTick("TICK", tick)
	if err != nil {
		return ledger.RunKey{}, err
	}
	if f.shard < 0 || f.shard >= ledger.MaxShards {
		return ledger.RunKey{}, usagef("--shard %d: want 0 to %d", f.shard, ledger.MaxShards-1)
	}
	return ledger.RunKey{Job: job, Tick: t, Trigger: f.trigger, Shard: f.shard}, nil
}

// jobsCancel asks the node running the run k (runKey's) to stop it, and
// records who asked in the audit.
func jobsCancel(ctx context.Context, l ledger.Ledger, k ledger.RunKey, asJSON bool, w io.Writer) error {
	job, t := k.Job, k.Tick
	id, last, err := schedule.RequestCancel(ctx, l, k)
	switch {
	case errors.Is(err, schedule.ErrNoRun), errors.Is(err, schedule.ErrRunEnded):
		return noJobError(strings.TrimPrefix(err.Error(), "schedule: "))
	case err != nil:
		return err
	}
	detail := apijson.RunDetail(k, last.Attempt) + " on node " + last.Node + " (request " + id + ")"
	if err := jobdefs.Record(ctx, l, ledger.AuditEntry{Who: cliActor(), Job: job, Action: "cancel", Detail: detail}); err != nil {
		return fmt.Errorf("cancel requested, but writing its audit entry failed: %w", err)
	}
	if asJSON {
		return writeJSON(w, struct {
			Cancel string       `json:"cancel"`
			Run    *apijson.Run `json:"run"`
		}{id, apijson.FromRun(last)})
	}
	fmt.Fprintf(w, "asked node %s to cancel %s's run of %s, attempt %d (request %s); it stops within a second\n",
		last.Node, job, t.Format(time.RFC3339Nano), last.Attempt, id)
	return nil
}

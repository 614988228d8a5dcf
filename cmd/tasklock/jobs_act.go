package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
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

// triggeredRunAt returns k, or, when k names a scheduled tick to the
// second that has no run, the triggered run in progress within that second:
// jobs history shows a triggered run's tick to the second, marked
// "(trigger)", without its ID, so that is the tick a user copies. Several
// such runs are a usage error naming their --trigger IDs.
func triggeredRunAt(ctx context.Context, l ledger.Ledger, k ledger.RunKey) (ledger.RunKey, error) {
	if k.Trigger != "" || k.Tick.Nanosecond() != 0 {
		return k, nil
	}
	rs, err := l.Runs(ctx, ledger.RunQuery{Job: k.Job, From: k.Tick, To: k.Tick.Add(time.Second)})
	if err != nil {
		return k, fmt.Errorf("reading the run's records: %w", err)
	}
	var found []ledger.RunKey
	for _, r := range rs {
		switch {
		case r.Shard != k.Shard:
		case r.Trigger == "" && r.Tick.Equal(k.Tick):
			return k, nil // the scheduled tick itself
		case r.Trigger != "" && !r.Status.Final() && !slices.ContainsFunc(found, func(f ledger.RunKey) bool { return f.Trigger == r.Trigger }):
			found = append(found, ledger.RunKey{Job: k.Job, Tick: r.Tick, Trigger: r.Trigger, Shard: r.Shard})
		}
	}
	switch len(found) {
	case 0:
		return k, nil
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, f := range found {
		ids[i] = "--trigger " + f.Trigger
	}
	return k, usagef("%d triggered runs of %q in progress at %s: give one of %s", len(found), k.Job,
		k.Tick.UTC().Format(time.RFC3339), strings.Join(ids, ", "))
}

// jobsCancel asks the node running the run k (runKey's) to stop it, and
// records who asked in the audit.
func jobsCancel(ctx context.Context, l ledger.Ledger, k ledger.RunKey, asJSON bool, w io.Writer) error {
	k, err := triggeredRunAt(ctx, l, k)
	if err != nil {
		return err
	}
	job, t := k.Job, k.Tick
	id, last, err := schedule.RequestCancel(ctx, l, k)
	switch {
	case errors.Is(err, schedule.ErrNoRun):
		msg := strings.TrimPrefix(err.Error(), "schedule: ")
		if k.Trigger == "" {
			msg += `; a triggered run needs --trigger ID ("tasklock jobs history --json" shows its tick and trigger)`
		}
		return noJobError(msg)
	case errors.Is(err, schedule.ErrRunEnded):
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

// Package jobpresence tells, from the ledger alone, whether a node of
// tasklock serve still seems to have a registered job: whether a trigger
// or a re-run asked for it would be taken, or would wait, pending, until
// a node has the job again. A job taken out of every node's configuration
// keeps its state (its schedule as registered, its pause) until jobs
// forget drops it, so the ledger cannot say so outright; it can say that
// nothing was recorded for a tick that is well past.
//
// The CLI (jobs trigger, jobs forget) and the dashboard (trigger and
// retry) decide with the same functions, so that they refuse the same
// jobs for the same reason.
package jobpresence

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tasklock/tasklock/dashboard/jobdefs"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// ForgetAfter is how long past a job's next tick after its latest run (or
// its first tick after its registration, when it has no run) nothing may
// be recorded before the job is taken for removed from every node: by
// jobs forget, which forgets only such a job, and by a trigger, which
// refuses one.
const ForgetAfter = time.Minute

// State returns job's stored state and whether the ledger keeps one.
func State(ctx context.Context, l ledger.Ledger, job string) (ledger.JobState, bool, error) {
	sts, err := l.Jobs(ctx)
	if err != nil {
		return ledger.JobState{}, false, err
	}
	i := slices.IndexFunc(sts, func(st ledger.JobState) bool { return st.Job == job })
	if i < 0 {
		return ledger.JobState{}, false, nil
	}
	return sts[i], true, nil
}

// LooksConfigured reports whether a node of serve still seems to have the
// registered job of stored state st, by its registered schedule: the next
// tick after the job's latest record, or after its registration when it
// has none, is not ForgetAfter past; or, with running, the latest record
// is of a run in progress. why says what it saw. A job never registered,
// or whose schedule this build cannot read or gives no next tick, does not
// look configured, with why "".
func LooksConfigured(ctx context.Context, l ledger.Ledger, st ledger.JobState, now time.Time, running bool) (bool, string, error) {
	sched, err := schedule.Parse(st.Spec, time.UTC)
	if st.Spec == "" || err != nil {
		return false, "", nil
	}
	runs, err := l.Runs(ctx, ledger.RunQuery{Job: st.Job, Limit: 1})
	if err != nil {
		return false, "", err
	}
	if len(runs) == 0 {
		// Not run yet: a job just added to serve's file (an hourly one,
		// a daily one) was forgotten under the node that runs it, and
		// vanished from jobs list and trigger. Its first tick after it
		// was registered stands in for the next after a record.
		next := sched.Next(st.Since)
		if st.Since.IsZero() || next.IsZero() {
			return false, "", nil
		}
		return now.Sub(next) <= ForgetAfter, fmt.Sprintf("a node of serve registered it at %s and it has not run yet; its first tick, %s, is %s %v past",
			st.Since.UTC().Format(time.RFC3339), next.UTC().Format(time.RFC3339), notMore(now.Sub(next)), ForgetAfter), nil
	}
	last := runs[0]
	if running && last.Status == ledger.RunRunning {
		return true, fmt.Sprintf("its latest record, of tick %s, is running on node %s", last.Tick.UTC().Format(time.RFC3339), redact.Quote(last.Node)), nil
	}
	next := sched.Next(last.Tick)
	if next.IsZero() {
		return false, "", nil
	}
	return now.Sub(next) <= ForgetAfter, fmt.Sprintf("its latest record, of tick %s, is %s on node %s, and its next tick, %s, is %s %v past",
		last.Tick.UTC().Format(time.RFC3339), last.Status, redact.Quote(last.Node), next.UTC().Format(time.RFC3339), notMore(now.Sub(next)), ForgetAfter), nil
}

// Triggerable reports whether a node of serve would take a request to run
// the registered job of stored state st (a trigger, a re-run): the job is
// paused (a paused job records no ticks, and a trigger runs it), or it
// LooksConfigured, a run in progress counting, or the ledger cannot tell
// (LooksConfigured's why is "": no schedule registered, or one this build
// cannot read). When it is not, the request would wait, pending, until a
// node has the job again; why says what the ledger shows (see
// LooksConfigured), and Removed words the refusal.
func Triggerable(ctx context.Context, l ledger.Ledger, st ledger.JobState, now time.Time) (bool, string, error) {
	if st.Paused {
		return true, "", nil
	}
	configured, why, err := LooksConfigured(ctx, l, st, now, true)
	return configured || why == "", why, err
}

// DeletedAtRunTime says, when job was deleted at run time (jobs delete, or
// the dashboard's API) and no node has started a run of it since, who
// deleted it and when; "" otherwise, and when the store keeps no catalog.
// The deletion stays in the catalog's audit: the job's newest create,
// update or delete entry is a delete, and no definition of it is stored.
// A node that registers the job again from its configuration file (a
// file may name it: --force created it beside the file) and runs it has
// a run that started after the delete.
func DeletedAtRunTime(ctx context.Context, l ledger.Ledger, job string) (string, error) {
	cat, ok := l.(ledger.Catalog)
	if !ok {
		return "", nil
	}
	defs, err := cat.JobDefs(ctx)
	if err != nil {
		return "", err
	}
	if slices.ContainsFunc(defs, func(d ledger.JobDef) bool { return d.Job == job }) {
		return "", nil
	}
	defines := func(e ledger.AuditEntry) bool {
		op := jobdefs.Op(e.Action)
		return op == jobdefs.Create || op == jobdefs.Update || op == jobdefs.Delete
	}
	var last *ledger.AuditEntry // the newest create, update or delete
	for q := (ledger.AuditQuery{Job: job, Limit: 100}); ; {
		es, err := cat.Audit(ctx, q)
		if err != nil {
			return "", err
		}
		if i := slices.IndexFunc(es, defines); i >= 0 {
			last = &es[i]
			break
		}
		if len(es) < q.Limit {
			break
		}
		q.Before = es[len(es)-1].Seq
	}
	if last == nil || last.Action != string(jobdefs.Delete) {
		return "", nil
	}
	runs, err := l.Runs(ctx, ledger.RunQuery{Job: job, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(runs) > 0 && runs[0].Start.After(last.At) {
		return "", nil
	}
	return fmt.Sprintf("by %s at %s", last.Who, last.At.UTC().Format(time.RFC3339)), nil
}

// Requestable reports whether a node of serve would take a request to run
// the registered job of stored state st: it was not deleted at run time
// since it last ran (DeletedAtRunTime), and it is Triggerable. why says
// what the ledger shows when it is not.
func Requestable(ctx context.Context, l ledger.Ledger, st ledger.JobState, now time.Time) (bool, string, error) {
	by, err := DeletedAtRunTime(ctx, l, st.Job)
	if err != nil {
		return false, "", err
	}
	if by != "" {
		return false, "it was deleted at run time " + by + ", and no node has started a run of it since", nil
	}
	return Triggerable(ctx, l, st, now)
}

// Removed says why a run of job, not Triggerable for the reason why, is
// refused; the caller adds how to ask for it anyway.
func Removed(job, why string) string {
	return fmt.Sprintf("job %q looks removed from the configuration of every node of serve: %s; its run would wait until a node has it again", job, why)
}

// notMore is "not" when past is within ForgetAfter, else "more than".
func notMore(past time.Duration) string {
	if past <= ForgetAfter {
		return "not"
	}
	return "more than"
}

package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/dashboard/jobdefs"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/jobpresence"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

const jobsUsage = `Usage:
  tasklock jobs list    --store URL [--json]
  tasklock jobs history --store URL [JOB | --job JOB] [--status S] [--since D] [--limit N] [--json]
  tasklock jobs trigger --store URL JOB [--note TEXT] [--force] [--json]
  tasklock jobs cancel  --store URL JOB TICK [--shard N] [--trigger ID] [--json]
  tasklock jobs pause   --store URL JOB [--force] [--json]
  tasklock jobs resume  --store URL JOB [--force] [--json]
  tasklock jobs forget  --store URL JOB [--force] [--json]
  tasklock jobs backfill --store URL JOB --from T1 --to T2 [--overlap skip|allow]
                        [--max N] [--rerun] [--force] [--json]
  tasklock jobs rerun   --store URL JOB TICK [--overlap skip|allow] [--force] [--json]
  tasklock jobs create  --store URL [JOB] (-f FILE | --schedule S --command C ...) [--config FILE] [--force] [--json]
  tasklock jobs update  --store URL [JOB] (-f FILE | --schedule S ...) [--config FILE] [--force] [--json]
  tasklock jobs delete  --store URL JOB [--cancel] [--json]
  tasklock jobs audit   --store URL [JOB | --job JOB] [--limit N] [--json]
  tasklock jobs notifications --store URL [JOB | --job JOB] [--limit N] [--json]

Reads and changes the scheduler's ledger in a store: what ran where, and
the pause and trigger-now state every node of "tasklock serve" obeys
(within a second).

  list     every job the store knows of (one a node of serve registered,
           one with history or a stored state, one defined at run time):
           its state (ok, paused, broken: its schedule gives no next tick,
           or defined: created at run time, but no node of serve has
           registered it yet, so nothing runs it), pending trigger
           requests, and its latest run (tick, status, node, fence; for
           a sharded job the tick's overall status, as history gives it,
           and no node or fence: history has each shard's)
  history  run records, newest first: tick, job, shard (k/N for a job with
           shards:, one row per shard), attempt, node, fence, status, the
           tick's overall status (its latest attempt's status, such as a
           backfill's after the tick's missed record; sharded jobs: ok when
           every shard is ok, running while any runs, else the worst),
           duration, error (whole: a skipped run's names the lock's holder).
           JOB (or --job JOB) and --status (ok, failed, timeout, lost, cancelled, interrupted,
           skipped, missed, running) filter;
           --since D shows ticks of the last D (e.g. 24h); --limit N caps
           the rows (default 50). A run whose node was killed shows as
           running until another node notices (within the node's lease,
           10s), then as interrupted, its duration ≤ the time until then
           (the command ran for an unknown part of it)
  trigger  ask for one run of JOB now, on one node; prints the request ID.
           --note TEXT (at most 1000 bytes) is kept in the audit entry
  cancel   stop JOB's run of TICK in progress (the tick as history shows
           it; --shard N for a shard of a sharded job, --trigger ID for a
           triggered run, needed only when several triggered runs are in
           progress in TICK's second): the node running it cancels it
           within a second, a command's process tree is stopped as on
           timeout, the attempt is recorded cancelled and not retried. A
           run that has ended, or that history does not hold, is refused
           (exit 1)
  pause    stop every node from starting new runs of JOB (running ones end;
           the ticks of a backfill or re-run not yet started are recorded
           skipped, and new ones are refused until resume; trigger still
           runs)
  resume   undo pause
  forget   delete the stored state of JOB — registration, pause, pending
           triggers — once it was removed from the configuration (its
           history stays until pruned). A node that still has JOB
           registers it again when it starts or reloads. A JOB that is
           paused, or still runs — its schedule's next tick after its
           latest record (after its registration, when it has none) is
           not a minute past — is refused (exit 1; --force to go on)
  backfill run the ticks of JOB's schedule from T1 to T2 (both included;
           RFC 3339 times such as 2026-11-27T02:00:00Z, UTC when no
           offset is given), each once across the fleet: a tick that
           already has an attempt in the history (it ran, failed, timed
           out...) is not run again unless --rerun; missed and skipped
           ticks have none. --overlap skip (the default) runs them one at
           a time and never beside another run of JOB; allow runs them at
           once on whichever nodes take them. A range of more than --max
           ticks (default 1000, at most 5000) is refused, not cut: ask
           for a longer one as several backfills. Nodes take the
           requests within a second; jobs history shows the runs. When
           the store fails part way (--timeout), the error says how many
           ticks were requested: those requests stay and run
  rerun    run JOB's TICK once more, as its next attempt number. A TICK
           from before the job could have run is refused (exit 64): one
           before serve first ran it with its current schedule, unless
           history holds a run of JOB at or before TICK

  create   define a job at run time: every node of serve runs it within a
           second, as if it were in its configuration file. -f FILE is
           one job in YAML or JSON, with the keys of a job of the file
           (see "tasklock help serve"; - reads stdin), checked as the file
           is; or flags: --schedule, --command (split at blanks, no
           quotes; use -f for arguments with blanks), --http-url,
           --timezone, --run-timeout (the key timeout:), --overlap,
           --misfire, --retries, --jitter, --lock-ttl, --kill-grace,
           --max-hold, --min-hold, --run-on; flags after -f replace its
           keys. JOB names the job when the snippet does not
  update   change a job defined at run time: -f replaces its definition,
           flags change the keys they name (an empty value unsets one). A
           run in progress finishes; the new definition takes the next tick
  delete   delete a job defined at run time: its run in progress finishes,
           or with --cancel is cancelled (a command gets SIGTERM, then
           SIGKILL after its kill_grace)
  audit    who changed what, newest first: every create, update, delete,
           pause, resume, trigger and forget made with these commands or
           the dashboard's API. JOB (or --job) filters; --limit (default 50)
  notifications  the delivery log of serve's notifications (notify:),
           newest first: every attempt to deliver one to a webhook or
           command, with its result. JOB (or --job) filters; --limit (default 50)

The configuration file is authoritative for the jobs it names: create and
update refuse a job of the file (with --config FILE, the jobs of FILE;
without, a job a node of serve registered that was never created at run
time; --force goes on) and the nodes ignore a definition of such a name,
with a warning. Changes are recorded in the audit as cli:USER@HOST.

create and update also refuse (exit 64, even with --force) a job whose
lock another job takes, as the file's check does: a job named x/shard/2
beside a job x with shards: 3, or the other way round; the two would
skip each other's ticks. They check the other jobs defined at run time
and, with --config FILE, the jobs of FILE.

trigger, pause and resume refuse a JOB no node of serve has registered
(exit 1, no job named "JOB"), and forget one the store knows nothing of;
trigger, backfill and rerun also refuse one that no node seems to have
any more (deleted at run time with jobs delete and not run since; or not
paused, no run in progress, its next tick more than a minute past with
nothing recorded), whose runs would wait until a node has it again;
--force does each anyway (backfill and rerun still need a JOB some node
registered: its schedule names the ticks).

Flags go anywhere on the line. A subcommand takes the flags its usage line
above names, and --timeout; another subcommand's flag is refused (exit 64,
naming the flag), not ignored.
  --store URL    the store, as for serve; default $TASKLOCK_STORE
  --json         print JSON: list {"jobs": [...]}, history {"runs": [...]},
                 trigger/pause/resume the job's state after the change
  --timeout D    how long to wait for the store (default 30s), every
                 subcommand
  --force        trigger, pause, resume or forget a job the store does
                 not know; trigger, backfill or rerun a job no node seems
                 to have; create or update a job of a configuration file
  --config FILE  create, update: refuse the jobs of this serve
                 configuration file
  --cancel       delete: cancel the job's runs in progress

Exit status: 0 done; 1 no job of that name, or a create, update or delete
refused (a job defined already, or not at run time, or of the file); 64
bad usage or URL, a job whose lock another job takes, or a change to a
mem:// store (this command's own memory, which no serve shares); 69 store
unreachable or failing, or the store keeps no ledger.
`

var jobsSubs = map[string]string{"list": "", "history": "[JOB]", "trigger": "JOB", "pause": "JOB", "resume": "JOB", "forget": "JOB",
	"backfill": "JOB", "rerun": "JOB TICK", "cancel": "JOB TICK", "create": "[JOB]", "update": "[JOB]", "delete": "JOB", "audit": "[JOB]",
	"notifications": "[JOB]"}

// The JSON shapes of jobs, shared with the dashboard's API.
type (
	jobJSON       = apijson.Job
	triggerJSON   = apijson.Trigger
	runRecordJSON = apijson.Run
)

// runJobs is the jobs command.
func runJobs(args []string, stdout, stderr io.Writer) int {
	var (
		job, status string
		since       time.Duration
		limit       int
		force       bool
		past        backfillFlags
		def         defineFlags
		act         actFlags
	)
	var given *flag.FlagSet // for checkOwnFlags: one flag set parses every subcommand's flags
	extra := func(fs *flag.FlagSet) {
		given = fs
		past.register(fs)
		def.register(fs) // after: it shares --overlap with backfill
		fs.BoolVar(&force, "force", false, "")
		fs.StringVar(&job, "job", "", "")
		fs.StringVar(&status, "status", "", "")
		fs.DurationVar(&since, "since", 0, "")
		fs.IntVar(&limit, "limit", 50, "")
		fs.IntVar(&act.shard, "shard", 0, "")
		fs.StringVar(&act.trigger, "trigger", "", "")
		fs.StringVar(&act.note, "note", "", "")
	}
	var (
		q        ledger.RunQuery          // history
		run      ledger.RunKey            // cancel
		tick     time.Time                // rerun
		from, to time.Time                // backfill
		opts     schedule.BackfillOptions // backfill, rerun
		change   jobdefs.Change           // create, update, delete
	)
	// check checks and parses what needs no store, before it is opened.
	check := func(a *adminArgs) error {
		if err := checkOwnFlags(a.sub, given); err != nil {
			return err
		}
		if err := checkJobArg(a); err != nil {
			return err
		}
		var err error
		switch a.sub {
		case "history", "audit", "notifications":
			// JOB, as the other subcommands take it, or --job.
			if len(a.positional) == 1 {
				if job != "" && job != a.positional[0] {
					return usagef("JOB %s and --job %s differ", redact.Quote(a.positional[0]), redact.Quote(job))
				}
				job = a.positional[0]
			}
			if limit <= 0 {
				return usagef("--limit must be positive, got %d", limit)
			}
		}
		switch a.sub {
		case "history":
			if since < 0 {
				return usagef("--since must be positive, got %v", since)
			}
			switch ledger.RunStatus(status) {
			case "", ledger.RunOK, ledger.RunFailed, ledger.RunTimeout, ledger.RunLost, ledger.RunCancelled, ledger.RunInterrupted,
				ledger.RunSkipped, ledger.RunMissed, ledger.RunRunning:
			default:
				return usagef("--status %s: want ok, failed, timeout, lost, cancelled, interrupted, skipped, missed or running", redact.Quote(status))
			}
			q = ledger.RunQuery{Job: job, Status: ledger.RunStatus(status), Limit: limit}
			if since > 0 {
				q.From = time.Now().Add(-since)
			}
		case "trigger":
			err = act.checkNote()
		case "cancel":
			run, err = act.runKey(a.positional[0], a.positional[1])
		case "backfill":
			if opts, err = past.options(); err == nil {
				from, to, err = past.window()
			}
		case "rerun":
			if opts, err = past.options(); err == nil {
				tick, err = parseTick("TICK", a.positional[1])
			}
		case "create", "update", "delete":
			name := ""
			if len(a.positional) > 0 {
				name = a.positional[0]
			}
			change, err = def.change(a.sub, name, os.Stdin)
		}
		return err
	}
	return adminRun("jobs", jobsUsage, args, stdout, stderr, jobsSubs, extra, check, func(ctx context.Context, a *adminArgs, store driver.Store) error {
		l, ok := store.(ledger.Ledger)
		if !ok {
			return fmt.Errorf("%s; give the store tasklock serve runs on", noLedger(a.store, "jobs"))
		}
		switch a.sub {
		case "list":
			return jobsList(ctx, l, a.json, stdout)
		case "create", "update", "delete":
			return jobsDefine(ctx, a, l, &def, change, force, stdout)
		case "audit":
			return jobsAudit(ctx, a, l, job, limit, stdout)
		case "notifications":
			return jobsNotifications(ctx, a, l, job, limit, stdout)
		case "history":
			return jobsHistory(ctx, l, q, a.json, stdout)
		case "backfill", "rerun":
			if !force {
				if err := checkRequestable(ctx, l, a.positional[0], time.Now()); err != nil {
					return err
				}
			}
			if a.sub == "rerun" {
				return jobsRerun(ctx, l, a.positional[0], tick, opts, a.json, stdout)
			}
			return jobsBackfill(ctx, l, a.positional[0], from, to, opts, a.json, stdout)
		case "cancel":
			return jobsCancel(ctx, l, run, a.json, stdout)
		}
		p := ledger.JobStateParams{Job: a.positional[0]}
		switch a.sub {
		case "pause":
			p.Op = ledger.JobPause
		case "resume":
			p.Op = ledger.JobResume
		case "trigger":
			p.Op, p.Trigger = ledger.JobTrigger, rand.Text()
		case "forget":
			p.Op = ledger.JobForget
		}
		if !force {
			st, err := checkKnown(ctx, l, p.Job, p.Op == ledger.JobForget)
			if err != nil {
				return err
			}
			switch p.Op {
			case ledger.JobForget:
				err = checkForgettable(ctx, l, st, time.Now())
			case ledger.JobTrigger:
				err = checkTriggerable(ctx, l, st, time.Now())
			}
			if err != nil {
				return err
			}
		}
		st, err := l.SetJobState(ctx, p)
		if err != nil {
			return err
		}
		if err := auditState(ctx, l, p, a.sub, act.note); err != nil {
			return err
		}
		if a.json {
			// The job as jobs list shows it, with its last run.
			j := stateJSON(st)
			runs, err := l.Runs(ctx, ledger.RunQuery{Job: p.Job, Limit: 1})
			if err != nil {
				return err
			}
			if err := setLastRuns(ctx, l, runs, func(string) *jobJSON { return &j }); err != nil {
				return err
			}
			return writeJSON(stdout, j)
		}
		switch a.sub {
		case "trigger":
			fmt.Fprintf(stdout, "requested a run of %s now (trigger %s)\n", redact.Quote(p.Job), p.Trigger)
		case "pause":
			fmt.Fprintf(stdout, "paused %s\n", redact.Quote(p.Job))
		case "forget":
			fmt.Fprintf(stdout, "forgot %s\n", redact.Quote(p.Job))
		default:
			fmt.Fprintf(stdout, "resumed %s\n", redact.Quote(p.Job))
		}
		return nil
	})
}

// jobsFlags are the flags each jobs subcommand takes besides --store,
// --json and --timeout, which every one takes, as jobsUsage gives them,
// in its order: runJobs parses all of them with one flag set, so
// checkOwnFlags refuses the others rather than ignore them.
var jobsFlags = []struct {
	sub   string
	flags []string
}{
	{"list", nil},
	{"history", []string{"job", "status", "since", "limit"}},
	{"trigger", []string{"note", "force"}},
	{"cancel", []string{"shard", "trigger"}},
	{"pause", []string{"force"}},
	{"resume", []string{"force"}},
	{"forget", []string{"force"}},
	{"backfill", []string{"from", "to", "overlap", "max", "rerun", "force"}},
	{"rerun", []string{"overlap", "force"}},
	{"create", defineFlagNames()},
	{"update", defineFlagNames()},
	{"delete", []string{"cancel"}},
	{"audit", []string{"job", "limit"}},
	{"notifications", []string{"job", "limit"}},
}

// checkOwnFlags refuses the flags given in fs that sub does not take (see
// jobsFlags), naming each with the subcommands that take it. delete's -f
// and job keys are left to defineFlags.change, which refuses them itself.
func checkOwnFlags(sub string, fs *flag.FlagSet) error {
	var msgs []string
	fs.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "store" || f.Name == "json" || f.Name == "timeout":
			return
		case takesFlag(sub, f.Name):
			return
		case sub == "delete" && snippetFlag(f.Name):
			return
		}
		var takers []string
		for _, e := range jobsFlags {
			if slices.Contains(e.flags, f.Name) {
				takers = append(takers, e.sub)
			}
		}
		msg := fmt.Sprintf("%s is not a flag of %s", flagText(f.Name), sub)
		switch len(takers) {
		case 0:
		case 1:
			msg += fmt.Sprintf(" (%s takes it)", takers[0])
		default:
			msg += fmt.Sprintf(" (%s and %s take it)", strings.Join(takers[:len(takers)-1], ", "), takers[len(takers)-1])
		}
		msgs = append(msgs, msg)
	})
	if len(msgs) == 0 {
		return nil
	}
	return usagef("%s", strings.Join(msgs, "; "))
}

// takesFlag reports whether the jobs subcommand sub takes the flag name
// (see jobsFlags).
func takesFlag(sub, name string) bool {
	for _, e := range jobsFlags {
		if e.sub == sub {
			return slices.Contains(e.flags, name)
		}
	}
	return false
}

// flagText is the flag name as a user types it: -f, --limit.
func flagText(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// checkJobArg refuses an empty JOB argument, and for trigger, pause and
// resume, which store a state for JOB even when serve never registered it
// (--force), a name that could not be a job's.
func checkJobArg(a *adminArgs) error {
	switch a.sub {
	case "list", "history", "audit", "notifications": // JOB filters; "" is none
		return nil
	}
	if len(a.positional) == 0 {
		return nil
	}
	job := a.positional[0]
	switch a.sub {
	case "trigger", "pause", "resume":
		msg := redact.CheckName(job)
		if len(job) > schedule.MaxJobName {
			msg = fmt.Sprintf("%d bytes long, the maximum is %d", len(job), schedule.MaxJobName)
		}
		if msg != "" {
			return usagef("JOB %s: %s", redact.Quote(job), msg)
		}
	}
	if job == "" {
		return usagef("JOB is empty")
	}
	return nil
}

func stateJSON(st ledger.JobState) jobJSON { return apijson.FromState(st) }

// checkKnown refuses a job no node registered (any stored state will do
// when anyState): commands must not create ghost jobs. It returns the
// job's stored state.
func checkKnown(ctx context.Context, l ledger.Ledger, job string, anyState bool) (ledger.JobState, error) {
	st, ok, err := jobpresence.State(ctx, l, job)
	switch {
	case err != nil:
		return st, err
	case ok && (st.Spec != "" || anyState):
		return st, nil
	case anyState:
		return st, noJobError(fmt.Sprintf("no job named %q: the store keeps no state of it (--force to go on)", job))
	}
	return st, noJobError(fmt.Sprintf("no job named %q: no node of tasklock serve has it in its configuration (--force to go on)", job))
}

// checkForgettable refuses to forget a registered job, of stored state st,
// that a node of serve may still have: one that is paused (a paused job
// forgotten under a node that has it would run again: its pause is
// dropped), or one that still runs (the next tick of its registered
// schedule after its latest record, or after its registration when it has
// no record, is not jobpresence.ForgetAfter past).
func checkForgettable(ctx context.Context, l ledger.Ledger, st ledger.JobState, now time.Time) error {
	job := st.Job
	if st.Spec != "" && st.Paused {
		return noJobError(fmt.Sprintf("job %q is paused: forget drops the pause, and a node that still has it would run it again; "+
			"resume it first, or --force to go on", job))
	}
	configured, why, err := jobpresence.LooksConfigured(ctx, l, st, now, false)
	if err != nil || !configured {
		return err
	}
	return noJobError(fmt.Sprintf("job %q still looks configured: %s; forget is for a job removed from the configuration of every node (--force to go on)", job, why))
}

// checkTriggerable refuses to trigger (or re-run, or backfill) a
// registered job, of stored state st, that no node of serve seems to have
// any more (jobpresence.Requestable): one deleted at run time and not run
// since, or one not paused, not running, whose next tick after its latest
// record (or after its registration) is more than
// jobpresence.ForgetAfter past with nothing recorded. Its request would
// wait, pending, until a node has the job again (a job taken out of every
// node's file, or deleted, keeps its state until jobs forget).
func checkTriggerable(ctx context.Context, l ledger.Ledger, st ledger.JobState, now time.Time) error {
	ok, why, err := jobpresence.Requestable(ctx, l, st, now)
	if err != nil || ok {
		return err
	}
	return noJobError(jobpresence.Removed(st.Job, why) + fmt.Sprintf(" (--force to ask for it anyway; jobs forget %s drops its state)", st.Job))
}

// storeKnowsJob reports whether the store keeps any state of job, or its
// definition when it was defined at run time; true when it cannot tell.
func storeKnowsJob(ctx context.Context, l ledger.Ledger, job string) bool {
	if _, ok, err := jobpresence.State(ctx, l, job); err != nil || ok {
		return true
	}
	if c, ok := l.(ledger.Catalog); ok {
		defs, err := c.JobDefs(ctx)
		if err != nil {
			return true
		}
		for _, d := range defs {
			if d.Job == job {
				return true
			}
		}
	}
	return false
}

// noJobError is the error of a command about a job the store does not
// know: exit status 1.
type noJobError string

func (e noJobError) Error() string { return string(e) }

// Is makes it match errNotFound.
func (e noJobError) Is(target error) bool { return target == errNotFound }

// jobsList joins the job states the ledger knows with each job's latest
// run (of the newest 1,000 records).
func jobsList(ctx context.Context, l ledger.Ledger, asJSON bool, w io.Writer) error {
	states, err := l.Jobs(ctx)
	if err != nil {
		return err
	}
	runs, err := l.Runs(ctx, ledger.RunQuery{Limit: 1000})
	if err != nil {
		return err
	}
	jobs := map[string]*jobJSON{}
	get := func(name string) *jobJSON {
		j := jobs[name]
		if j == nil {
			j = &jobJSON{Job: name, State: apijson.StateOK, Triggers: []triggerJSON{}}
			jobs[name] = j
		}
		return j
	}
	now := time.Now()
	for _, st := range states {
		j := get(st.Job)
		*j = stateJSON(st)
		j.SetBroken(apijson.SpecBroken(st.Spec, now))
	}
	if err := setLastRuns(ctx, l, runs, get); err != nil {
		return err
	}
	if cat, ok := l.(ledger.Catalog); ok {
		// A job created at run time shows before a node registers it:
		// until then nothing runs it, and list says so.
		defs, err := cat.JobDefs(ctx)
		if err != nil {
			return err
		}
		for _, d := range defs {
			if j := get(d.Job); j.State == apijson.StateOK && j.Spec == "" && j.LastRun == nil {
				j.State = apijson.StateDefined
			}
		}
	}
	out := make([]jobJSON, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, *j)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Job < out[k].Job })
	if asJSON {
		return writeJSON(w, map[string]any{"jobs": out})
	}
	if len(out) == 0 {
		fmt.Fprintln(w, "no jobs in this store's ledger yet")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tTRIGGERS\tLAST_TICK\tLAST_STATUS\tNODE\tFENCE")
	for _, j := range out {
		state := j.State
		tick, st, node, fence := "-", "-", "-", "-"
		if r := j.LastRun; r != nil {
			tick, st, node, fence = r.Tick.Format(time.RFC3339), r.Status, r.Node, fenceText(r.Fence)
			if r.TickStatus != "" { // a sharded job: the tick's status, not one shard's
				st = r.TickStatus
				node, fence = "-", "-" // its shards ran on several nodes: see history
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", redact.Printable(j.Job), state, len(j.Triggers), tick, st, redact.Printable(node), fence)
	}
	return tw.Flush()
}

// setLastRuns sets each job's LastRun to its latest record in runs (newest
// first). A sharded job's latest record carries the TickStatus of its whole
// tick, from the tick's records in runs and, where runs holds only some of
// them, in l: one shard's own status says nothing of the others'.
func setLastRuns(ctx context.Context, l ledger.Ledger, runs []ledger.RunRecord, get func(string) *jobJSON) error {
	type tick struct {
		trigger string
		at      time.Time
	}
	latest := map[string]tick{}
	var last []ledger.RunRecord // each job's first record, then its tick's other shards
	for _, r := range runs {
		t, seen := latest[r.Job]
		switch {
		case !seen:
			latest[r.Job] = tick{r.Trigger, r.Tick}
			last = append(last, r)
		case r.Shards > 1 && r.Trigger == t.trigger && r.Tick.Equal(t.at):
			last = append(last, r)
		}
	}
	conv, err := apijson.FromRunsOf(ctx, l, last)
	if err != nil {
		return err
	}
	for _, r := range conv {
		if j := get(r.Job); j.LastRun == nil {
			j.LastRun = r
		}
	}
	return nil
}

func jobsHistory(ctx context.Context, l ledger.Ledger, q ledger.RunQuery, asJSON bool, w io.Writer) error {
	runs, err := l.Runs(ctx, q)
	if err != nil {
		return err
	}
	conv, err := apijson.FromRunsOf(ctx, l, runs)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, map[string]any{"runs": conv})
	}
	if len(runs) == 0 {
		if q.Job != "" && !storeKnowsJob(ctx, l, q.Job) {
			fmt.Fprintf(w, "no runs recorded: the store knows no job named %s (jobs list shows the jobs it knows)\n", redact.Quote(q.Job))
			return nil
		}
		fmt.Fprintln(w, "no runs recorded")
		return nil
	}
	plain, err := plainTickStatuses(ctx, l, q, runs)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TICK\tJOB\tSHARD\tATTEMPT\tNODE\tFENCE\tSTATUS\tTICK STATUS\tDURATION\tERROR")
	for _, r := range conv {
		tick := r.Tick.UTC().Format(time.RFC3339)
		if r.Trigger != "" {
			tick += " (trigger)"
		}
		dur := "-"
		if r.Start != nil && r.End != nil {
			dur = r.End.Sub(*r.Start).Round(time.Millisecond).String()
			if noticedElsewhere(r.Status, r.Error) {
				dur = "≤" + dur // its end is when another node noticed
			}
		}
		shard, tickStatus := "-", cmp.Or(string(plain[runTick{r.Job, r.Trigger, r.Tick.UnixNano()}]), "-")
		if r.Shards > 1 {
			shard, tickStatus = fmt.Sprintf("%d/%d", r.Shard, r.Shards), r.TickStatus
		}
		// Whole, as the other columns: a skip's reason ends with the
		// lock's holder, which the operator needs. It is the last column,
		// so its length shifts no other.
		msg := strings.ReplaceAll(r.Error, "\n", " ")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", tick, redact.Printable(r.Job), shard, r.Attempt, redact.Printable(r.Node), fenceText(r.Fence), r.Status, tickStatus, dur, redact.Printable(msg))
	}
	return tw.Flush()
}

// runTick names one tick (or trigger-now request) of a job in a listing.
type runTick struct {
	job, trigger string
	tick         int64 // Unix nanoseconds
}

// plainTickStatuses returns the overall status of each tick of a job
// without shards among runs, the listing of q: the status of the tick's
// latest attempt (schedule.TickStatus), which a backfill's or re-run's
// run after a missed or failed one is. A listing holds a tick's attempts
// newest first, so a limit that cuts it keeps the latest; a status filter
// may leave it out, and then each tick's records are read again from l.
func plainTickStatuses(ctx context.Context, l ledger.Ledger, q ledger.RunQuery, runs []ledger.RunRecord) (map[runTick]ledger.RunStatus, error) {
	groups := make(map[runTick][]ledger.RunRecord)
	for _, r := range runs {
		if r.Shards <= 1 {
			k := runTick{r.Job, r.Trigger, r.Tick.UnixNano()}
			groups[k] = append(groups[k], r)
		}
	}
	out := make(map[runTick]ledger.RunStatus, len(groups))
	for k, g := range groups {
		if q.Status != "" {
			tick := g[0].Tick
			// To is a second on: a store may keep ticks to the millisecond
			// or the second; the records are matched exactly below.
			all, err := l.Runs(ctx, ledger.RunQuery{Job: k.job, From: tick, To: tick.Add(time.Second)})
			if err != nil {
				return nil, err
			}
			g = slices.DeleteFunc(all, func(r ledger.RunRecord) bool {
				return r.Trigger != k.trigger || !r.Tick.Equal(tick) || r.Shards > 1
			})
		}
		out[k] = schedule.TickStatus(g)
	}
	return out, nil
}

// fenceText is a run's fence in a table: "-" for 0, a run that took no
// lock (skipped, missed).
func fenceText(f uint64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatUint(f, 10)
}

// noticedElsewhere reports whether a record of status with error errText is
// a run that another node recorded interrupted when it found the run's
// node stopped (the error as schedule/sweep.go writes it): its end is when
// that node noticed, so end − start only bounds the run. A run its own
// serve stopped at the end of a shutdown's --grace is interrupted too, with
// its true end.
func noticedElsewhere(status, errText string) bool {
	return status == string(ledger.RunInterrupted) && strings.HasPrefix(errText, "schedule: run interrupted:")
}

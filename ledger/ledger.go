package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// ErrUnsupported is wrapped by the errors a ledger returns for a request it
// can never satisfy as made: a Retain longer than it can keep, a name or a
// record it cannot store. It is driver.ErrUnsupported, the lock contract's
// sentinel, so one errors.Is test covers both contracts.
var ErrUnsupported = driver.ErrUnsupported

// Ledger is implemented by stores that can keep the tick ledger of package
// schedule. Like driver's optional capabilities it is found by type
// assertion on the store. The package doc says what every implementation
// promises and which clock decides what.
type Ledger interface {
	// Claim claims every key in ps, in as few round trips as the store
	// allows (one script or statement per batch); each claim is atomic on
	// its own, the batch need not be. It returns one result per claim, in
	// order: nil when the key is now claimed by p.Token — by this call, or
	// by an earlier call with the same Token, so a failed call may be
	// repeated — and a *ClaimedError when another token claimed it first
	// and the claim is still retained. A non-nil error result means the
	// call failed as a whole and no per-claim result is known: any subset
	// of the claims may have been made. An empty ps returns (nil, nil)
	// without a round trip.
	Claim(ctx context.Context, ps []ClaimParams) ([]error, error)

	// RecordRuns stores every record in rs, replacing an existing record
	// with the same RunKey (Job, Tick, Trigger, Shard, Attempt). The store sets
	// Recorded from its own clock; the caller's value is ignored. A non-nil
	// error means any subset may have been stored; repeating the call is
	// safe.
	RecordRuns(ctx context.Context, rs []RunRecord) error

	// Runs returns the run records that match q, newest first: ordered by
	// Tick descending, then Job, Trigger and Shard ascending and Attempt
	// descending (RunKey.Compare). With q.Before set it continues a listing after that key,
	// so that a listing read page by page returns every record once.
	Runs(ctx context.Context, q RunQuery) ([]RunRecord, error)

	// SetJobState applies one change to a job's stored state and returns the
	// state after it. Pause and resume are idempotent; JobTrigger with an ID
	// already pending and JobTriggerDone with an ID not pending change
	// nothing, so every call may be repeated after an error.
	SetJobState(ctx context.Context, p JobStateParams) (JobState, error)

	// JobStates returns the state of every job that is paused or has a
	// trigger request pending, in no particular order. A job in the default
	// state (running, nothing pending) may be left out, and the states
	// returned need not carry Spec and Since. Schedulers call it about
	// twice a second, so it should cost one round trip and should not grow
	// with the number of registered jobs that are neither paused nor
	// triggered.
	JobStates(ctx context.Context) ([]JobState, error)

	// Jobs returns the state of every job the ledger knows — registered
	// (JobRegister), paused or with a trigger request pending — with every
	// field set, in no particular order. Commands and dashboards call it;
	// it may cost a scan of the job states.
	Jobs(ctx context.Context) ([]JobState, error)

	// Prune deletes what the ledger no longer needs and reports how much it
	// deleted. It always deletes the claims whose retention has passed; run
	// records and trigger requests as p says. Several nodes may prune at
	// once; the result is the same as one prune.
	Prune(ctx context.Context, p PruneParams) (PruneResult, error)
}

// ErrClaimed is wrapped by the *ClaimedError that Ledger.Claim returns for
// a key another token has claimed.
var ErrClaimed = errors.New("tasklock: tick already claimed")

// ClaimedError is the per-claim result of Ledger.Claim when another token
// claimed the key first. Node and At describe that claim when the store can
// tell.
type ClaimedError struct {
	Node string    // the claiming node's name, "" when unknown
	At   time.Time // when it was claimed, by the store's clock; zero when unknown
}

// Error implements error.
func (e *ClaimedError) Error() string {
	if e.Node == "" {
		return ErrClaimed.Error()
	}
	return ErrClaimed.Error() + " by " + e.Node
}

// Unwrap returns ErrClaimed.
func (e *ClaimedError) Unwrap() error { return ErrClaimed }

// ClaimParams names one tick to claim in Ledger.Claim. The key is (Job,
// Tick, Trigger, Shard).
type ClaimParams struct {
	Job string
	// Tick is the scheduled instant, in UTC and a whole second; for a
	// trigger-now request, the TriggerRequest.At the store returned.
	Tick time.Time
	// Trigger is "" for a scheduled tick and the request's ID for a
	// trigger-now run.
	Trigger string
	// Shard is the shard index of a sharded job's shard-run, from 0 to the
	// job's shard count - 1; 0 for a job that is not sharded. It is part of
	// the key: (Job, Tick, Trigger, Shard).
	Shard int
	// Node is the claiming node's name, shown to others in ClaimedError.
	Node string
	// Token identifies the claimer: random, unique per scheduler instance.
	// A claim the same token already holds succeeds again.
	Token string
	// Retain is how long the store keeps the claim at least, from the
	// moment it is made, by the store's clock. Positive.
	Retain time.Duration
}

// RunStatus is the outcome of a run, as recorded in the ledger.
type RunStatus string

// The run statuses.
const (
	RunOK      RunStatus = "ok"      // the handler returned nil with the job's lock held throughout
	RunFailed  RunStatus = "failed"  // the handler returned an error or panicked, or the lock could not be taken
	RunTimeout RunStatus = "timeout" // the attempt's timeout or the job's MaxHold ended it
	RunLost    RunStatus = "lost"    // the job's lock was lost while the handler ran
	RunSkipped RunStatus = "skipped" // not run: the previous run still held the job's lock, or the node shut down first
	RunMissed  RunStatus = "missed"  // not run: the tick came while no node ran the job, and the misfire policy passed it over
	// RunRunning marks an attempt under way: the claiming node writes it
	// when the attempt starts and replaces it (same RunKey) with the
	// attempt's outcome. It is the only status that is not final.
	RunRunning RunStatus = "running"
	// RunInterrupted is written by another node in place of a RunRunning
	// record whose node stopped (its node lease ended) before it recorded
	// the outcome, or by the run's own node when it shut down and stopped
	// the attempt at the end of its grace period: the attempt may or may
	// not have finished its work.
	RunInterrupted RunStatus = "interrupted"
	// RunCancelled: someone asked for the run to stop (a JobCancel
	// request) and its node stopped it; no further attempt is made.
	RunCancelled RunStatus = "cancelled"
)

// RunStatuses lists every run status, final ones first in the order people
// read them, RunRunning last.
var RunStatuses = []RunStatus{RunOK, RunFailed, RunTimeout, RunLost, RunCancelled, RunInterrupted, RunSkipped, RunMissed, RunRunning}

// Final reports whether st ends a run: every status but RunRunning.
func (st RunStatus) Final() bool { return st != RunRunning }

// RunKey identifies one run record: one attempt at one shard of one tick
// (or trigger) of one job.
type RunKey struct {
	Job     string
	Tick    time.Time
	Trigger string
	Shard   int
	Attempt int
}

// RunRecord is one entry of a job's history.
type RunRecord struct {
	Job     string
	Tick    time.Time // the scheduled instant (UTC); for a trigger, the request's time
	Trigger string    // the trigger request's ID; "" for a scheduled tick
	Shard   int       // the shard index, 0 to Shards-1; 0 when the job is not sharded
	Shards  int       // the job's shard count when it ran; 0 or 1 when not sharded (data, not key)
	Attempt int       // 1 for the first attempt; 0 when none was made (skipped, missed)
	Node    string    // the node that claimed the tick
	Fence   uint64    // the job lock's fence; 0 when no lock was held
	Start   time.Time // when the attempt started, by the node's clock; zero if it never did
	End     time.Time // when it ended, by the node's clock
	Status  RunStatus
	Error   string // the error, "" with RunOK
	Output  string // the tail of what the handler wrote to Run.Output
	// Recorded is set by the store to its clock when the record is written;
	// Prune measures age by it.
	Recorded time.Time
}

// Key returns the record's RunKey.
func (r RunRecord) Key() RunKey {
	return RunKey{Job: r.Job, Tick: r.Tick, Trigger: r.Trigger, Shard: r.Shard, Attempt: r.Attempt}
}

// RunQuery selects run records in Ledger.Runs. Zero fields select
// everything.
type RunQuery struct {
	Job    string    // only this job; "" for every job
	From   time.Time // only ticks at or after From; zero: no lower bound
	To     time.Time // only ticks before To; zero: no upper bound
	Status RunStatus // only this status; "" for any
	Limit  int       // at most this many records; 0: no limit
	// Before continues a listing: only records that come after this key in
	// the listing order (that is, older) are returned. Pass the Key of the
	// last record of the previous page.
	Before *RunKey
}

// JobState is the stored state of one job that every node obeys.
type JobState struct {
	Job      string
	Paused   bool
	Triggers []TriggerRequest // pending trigger-now requests, oldest first
	// Spec is the schedule the fleet registered the job with (JobRegister);
	// "" when it was never registered.
	Spec string
	// Since is when the fleet first saw the job with this Spec, by the
	// registering node's clock, in UTC: ticks before it are not owed.
	// Zero when Spec is "".
	Since time.Time
}

// TriggerRequest is a pending request to run a job once, on one node: now
// (trigger-now), or one past tick of its schedule (backfill, re-run); or,
// with Cancel, to stop one of its runs in progress.
type TriggerRequest struct {
	ID string    // chosen by the requester: random, unique
	At time.Time // when the store received it, by its clock
	// Tick, when set, is the scheduled tick to run (a whole second, UTC),
	// for a backfill or a re-run; zero for a trigger-now. For a cancel, the
	// tick of the run to stop when RunTrigger is "".
	Tick time.Time
	// Rerun runs Tick even when it already ran, as a new attempt; without
	// it a Tick that already ran is not run again.
	Rerun bool
	// Cancel makes the request a cancel request (JobCancel): it runs
	// nothing; the node running the job's run named by Tick, RunTrigger and
	// Shard stops it (its record ends RunCancelled, no further attempt is
	// made) and removes the request with JobTriggerDone. A request no node
	// takes — the run ended meanwhile — waits to be pruned
	// (PruneParams.TriggersOlderThan). The run is named by its RunTrigger
	// (RunRecord.Trigger, an ID unique to one run) when it was triggered,
	// otherwise by its Tick (RunRecord.Tick, a whole second); and by its
	// Shard in both cases. Every attempt of that run is meant.
	Cancel     bool
	RunTrigger string // Cancel: the run's RunRecord.Trigger; "" for a scheduled tick's run
	Shard      int    // Cancel: the run's RunRecord.Shard
}

// CancelField returns tr's cancel target (RunTrigger and Shard) as one
// string, for stores that keep it in one field: "" when tr is not a cancel
// request, otherwise the shard in decimal, "/" and RunTrigger.
// TriggerRequest.SetCancelField reads it back.
func (tr *TriggerRequest) CancelField() string {
	if !tr.Cancel {
		return ""
	}
	return strconv.Itoa(tr.Shard) + "/" + tr.RunTrigger
}

// SetCancelField sets Cancel, RunTrigger and Shard from a CancelField; ""
// leaves them unset.
func (tr *TriggerRequest) SetCancelField(f string) error {
	if f == "" {
		return nil
	}
	n, trigger, ok := strings.Cut(f, "/")
	shard, err := strconv.Atoi(n)
	if !ok || err != nil || shard < 0 || shard >= MaxShards {
		return fmt.Errorf("malformed cancel target %q", f)
	}
	tr.Cancel, tr.RunTrigger, tr.Shard = true, trigger, shard
	return nil
}

// Request returns the trigger request p's JobTrigger or JobCancel adds,
// without its At: the store sets At to its clock.
func (p *JobStateParams) Request() TriggerRequest {
	tr := TriggerRequest{ID: p.Trigger}
	if !p.Tick.IsZero() {
		tr.Tick = p.Tick.Round(0).UTC()
	}
	switch p.Op {
	case JobTrigger:
		tr.Rerun = p.Rerun && !p.Tick.IsZero()
	case JobCancel:
		tr.Cancel, tr.RunTrigger, tr.Shard = true, p.RunTrigger, p.Shard
	}
	return tr
}

// JobStateOp is the change SetJobState makes.
type JobStateOp uint8

// The job state changes.
const (
	JobPause       JobStateOp = iota + 1 // set Paused
	JobResume                            // clear Paused
	JobTrigger                           // add a TriggerRequest with ID Trigger, At the store's now, Tick and Rerun
	JobTriggerDone                       // remove the TriggerRequest with ID Trigger
	// JobRegister records that the fleet runs the job with schedule Spec
	// from Since on: when the stored Spec differs from the params' (or
	// none is stored) it sets Spec and Since; otherwise it changes nothing,
	// so the first node to register a spec sets its Since and later nodes
	// read it back from the returned state. It leaves Paused and Triggers
	// as they are.
	JobRegister
	// JobForget deletes everything stored about the job's state:
	// registration, pause and pending triggers. Its run records stay until
	// pruned. The returned state is the default one.
	JobForget
	// JobCancel adds a cancel request (TriggerRequest.Cancel) with ID
	// Trigger, At the store's now, and the run's Tick, RunTrigger and
	// Shard; like JobTrigger it changes nothing when a request with that ID
	// is pending, and the node that takes it removes it with
	// JobTriggerDone. Stores keep it among Triggers, in the order received.
	JobCancel
)

// JobStateParams are the inputs of Ledger.SetJobState.
type JobStateParams struct {
	Job     string
	Op      JobStateOp
	Trigger string // JobTrigger, JobCancel and JobTriggerDone: the request's ID
	// JobTrigger: the request's TriggerRequest.Tick (zero, or a whole
	// second; stored in UTC) and TriggerRequest.Rerun (only with a Tick).
	// JobCancel: the run's Tick (a whole second; zero with RunTrigger).
	Tick  time.Time
	Rerun bool
	// JobCancel: the run's RunRecord.Trigger ("" for a scheduled tick's
	// run, then Tick names it) and RunRecord.Shard.
	RunTrigger string
	Shard      int
	// JobRegister: the schedule (non-empty, at most 1024 bytes) and the
	// time from which its ticks are owed (non-zero; stored in UTC with at
	// least millisecond precision).
	Spec  string
	Since time.Time
}

// MaxSpecLen bounds JobStateParams.Spec.
const MaxSpecLen = 1024

// Check reports what makes p invalid whatever the store. Stores prefix the
// error with their name.
func (p *JobStateParams) Check() error {
	switch {
	case p.Job == "":
		return errors.New("set job state: empty Job")
	case (p.Op == JobTrigger || p.Op == JobTriggerDone || p.Op == JobCancel) && p.Trigger == "":
		return fmt.Errorf("set job state %q: empty Trigger", p.Job)
	case p.Op == JobRegister && p.Spec == "":
		return fmt.Errorf("register job %q: empty Spec", p.Job)
	case p.Op == JobRegister && len(p.Spec) > MaxSpecLen:
		return fmt.Errorf("register job %q: Spec is %d bytes, more than %d", p.Job, len(p.Spec), MaxSpecLen)
	case p.Op == JobTrigger && p.Rerun && p.Tick.IsZero():
		return fmt.Errorf("trigger job %q: Rerun without a Tick", p.Job)
	case p.Op == JobTrigger && !p.Tick.IsZero() && !p.Tick.Equal(p.Tick.Truncate(time.Second)):
		return fmt.Errorf("trigger job %q: Tick %v is not a whole second", p.Job, p.Tick)
	case p.Op == JobRegister && p.Since.IsZero():
		return fmt.Errorf("register job %q: zero Since", p.Job)
	case p.Op == JobCancel && (p.Tick.IsZero() == (p.RunTrigger == "")):
		return fmt.Errorf("cancel a run of job %q: name the run by its Tick or by its RunTrigger, not both, not neither", p.Job)
	case p.Op == JobCancel && !p.Tick.Equal(p.Tick.Truncate(time.Second)):
		return fmt.Errorf("cancel a run of job %q: Tick %v is not a whole second", p.Job, p.Tick)
	case p.Op == JobCancel && (p.Shard < 0 || p.Shard >= MaxShards):
		return fmt.Errorf("cancel a run of job %q: Shard %d is not in [0, %d)", p.Job, p.Shard, MaxShards)
	case p.Op < JobPause || p.Op > JobCancel:
		return fmt.Errorf("set job state %q: unknown op %d", p.Job, p.Op)
	}
	return nil
}

// PruneParams say which run records and trigger requests Ledger.Prune
// deletes. Expired claims are always deleted.
type PruneParams struct {
	// RunsOlderThan deletes run records recorded more than this long before
	// the store's now. Zero: none by age.
	RunsOlderThan time.Duration
	// KeepPerJob then keeps only each job's newest KeepPerJob records, in
	// the order Runs lists them. Zero: no limit by count.
	KeepPerJob int
	// TriggersOlderThan deletes trigger requests received more than this
	// before the store's now, so that a request no node took does not wait
	// for ever. Zero: none.
	TriggersOlderThan time.Duration
}

// PruneResult counts what Ledger.Prune deleted. Stores that cannot count
// cheaply may report zero.
type PruneResult struct {
	Claims   int
	Runs     int
	Triggers int
}

// Check reports what makes p invalid whatever the store: an empty Job or
// Token, a zero Tick, a Retain that is not positive. Stores add their own
// limits and prefix the error with their name.
func (p *ClaimParams) Check() error {
	switch {
	case p.Job == "":
		return errors.New("claim: empty Job")
	case p.Tick.IsZero():
		return fmt.Errorf("claim %q: zero Tick", p.Job)
	case p.Token == "":
		return fmt.Errorf("claim %q: empty Token", p.Job)
	case p.Retain <= 0:
		return fmt.Errorf("claim %q: Retain %v is not positive", p.Job, p.Retain)
	case p.Shard < 0 || p.Shard >= MaxShards:
		return fmt.Errorf("claim %q: Shard %d is not in [0, %d)", p.Job, p.Shard, MaxShards)
	}
	return nil
}

// MaxShards bounds a job's shard count: ClaimParams.Shard and
// RunRecord.Shard are below it.
const MaxShards = 1024

// Compare orders run keys as Ledger.Runs lists them — Tick descending,
// then Job, Trigger and Shard ascending, then Attempt descending — returning a
// negative number when k comes before o, zero when they are equal and a
// positive number otherwise.
func (k RunKey) Compare(o RunKey) int {
	if c := o.Tick.Compare(k.Tick); c != 0 {
		return c
	}
	if c := strings.Compare(k.Job, o.Job); c != 0 {
		return c
	}
	if c := strings.Compare(k.Trigger, o.Trigger); c != 0 {
		return c
	}
	if c := cmp.Compare(k.Shard, o.Shard); c != 0 {
		return c
	}
	return cmp.Compare(o.Attempt, k.Attempt)
}

// Matches reports whether q selects r by its Job, From, To, Status and
// Before fields (Limit is the caller's to apply).
func (q *RunQuery) Matches(r *RunRecord) bool {
	switch {
	case q.Job != "" && r.Job != q.Job:
		return false
	case !q.From.IsZero() && r.Tick.Before(q.From):
		return false
	case !q.To.IsZero() && !r.Tick.Before(q.To):
		return false
	case q.Status != "" && r.Status != q.Status:
		return false
	case q.Before != nil && r.Key().Compare(*q.Before) <= 0:
		return false
	}
	return true
}

// Registrar is implemented by ledgers that register many jobs in one call.
// Like Catalog it is optional and found by type assertion: a Scheduler
// starting with thousands of jobs registers them in a few round trips
// instead of one each.
type Registrar interface {
	// RegisterJobs applies JobRegister for every params in ps (their Op is
	// not read) in as few round trips as the store allows, each
	// registration atomic on its own, and returns each job's registration
	// after it, in order: Job, Spec and Since as SetJobState returns them
	// (Paused and Triggers are left unset). An invalid params fails the
	// call before anything is registered; any other error means any subset
	// may have been registered, and repeating the call is safe.
	RegisterJobs(ctx context.Context, ps []JobStateParams) ([]JobState, error)
}

// CheckRegister reports what makes a batch of Registrar.RegisterJobs
// invalid whatever the store: the first params that JobStateParams.Check
// refuses as a JobRegister. Stores prefix the error with their name.
func CheckRegister(ps []JobStateParams) error {
	for i := range ps {
		p := ps[i]
		p.Op = JobRegister
		if err := p.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Catalog is implemented by ledgers that also keep job definitions made at
// run time (tasklock jobs create, the HTTP API) and an audit list of who
// changed what. Like Ledger it is found by type assertion on the store; a
// store without it cannot keep jobs defined at run time, and the callers
// say so with an error wrapping ErrUnsupported.
//
// A definition is opaque to the store: the caller encodes it (tasklock
// serve stores a job's configuration as JSON) and bounds its size by
// MaxJobDef. Every change of a definition appends an audit entry in the
// same atomic step, so the audit never misses a change that was made and
// never shows one that was not.
type Catalog interface {
	// PutJobDef creates, replaces or (with Delete) deletes the definition
	// of p.Job and appends p.Audit to the audit list, atomically. With
	// IfVersion non-zero the change is made only when the stored version
	// equals it (-1: only when no definition is stored), otherwise
	// ErrVersion is returned and nothing changes. It returns the stored
	// definition after the change (for a delete, the one deleted, with
	// Deleted set); deleting a job that has no definition returns
	// ErrNoJobDef and appends nothing. Versions start at 1 and rise by 1
	// with every change of the job's definition, also across a delete and
	// a new create.
	PutJobDef(ctx context.Context, p JobDefParams) (JobDef, error)

	// JobDefs returns every stored definition, in no particular order, in
	// one round trip where the store allows. Every node calls it about
	// twice a second.
	JobDefs(ctx context.Context) ([]JobDef, error)

	// AppendAudit appends e to the audit list (for an action that changes
	// no definition: pause, resume, trigger, backfill, re-run). The store
	// sets e.At from its own clock.
	AppendAudit(ctx context.Context, e AuditEntry) error

	// Audit returns the audit entries that match q, newest first (by Seq
	// descending).
	Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error)
}

// MaxJobDef bounds JobDefParams.Def, in bytes.
const MaxJobDef = 64 << 10

// ErrVersion is returned by Catalog.PutJobDef when IfVersion does not match
// the stored version.
var ErrVersion = errors.New("tasklock: the job's definition changed meanwhile")

// ErrNoJobDef is returned by Catalog.PutJobDef for a delete of a job that
// has no stored definition.
var ErrNoJobDef = errors.New("tasklock: no job with that name was defined at run time")

// JobDef is one stored job definition.
type JobDef struct {
	Job     string
	Def     string    // the caller's encoding of the job
	Version int64     // 1 for the first, rising by one with each change
	Updated time.Time // when it was last changed, by the store's clock
	Deleted bool      // only in PutJobDef's result for a delete
}

// JobDefParams are the inputs of Catalog.PutJobDef.
type JobDefParams struct {
	Job       string
	Def       string // the new definition; ignored with Delete; at most MaxJobDef bytes
	Delete    bool
	IfVersion int64      // 0: any; -1: only if none is stored; n: only if the stored version is n
	Audit     AuditEntry // appended with the change; its Job is set to Job
}

// Check reports what makes p invalid whatever the store.
func (p *JobDefParams) Check() error {
	switch {
	case p.Job == "":
		return errors.New("put job definition: empty Job")
	case !p.Delete && p.Def == "":
		return fmt.Errorf("put job definition %q: empty Def", p.Job)
	case len(p.Def) > MaxJobDef:
		return fmt.Errorf("put job definition %q: Def is %d bytes, more than %d", p.Job, len(p.Def), MaxJobDef)
	case p.IfVersion < -1:
		return fmt.Errorf("put job definition %q: IfVersion %d", p.Job, p.IfVersion)
	}
	return p.Audit.Check()
}

// AuditEntry is one line of the audit list: who did what to which job.
type AuditEntry struct {
	Seq    int64     // set by the store: rising, unique; the listing order
	At     time.Time // set by the store, to its clock
	Who    string    // the actor: an API token's name, "cli:user@host", a session id
	Job    string    // the job acted on; "" for none
	Action string    // "create", "update", "delete", "pause", "resume", "trigger", "backfill", "rerun", ...
	Detail string    // what changed, for people: a diff or the request's parameters
}

// MaxAuditDetail bounds AuditEntry.Detail, in bytes.
const MaxAuditDetail = 16 << 10

// Check reports what makes e invalid whatever the store.
func (e *AuditEntry) Check() error {
	switch {
	case e.Who == "":
		return errors.New("audit entry: empty Who")
	case e.Action == "":
		return errors.New("audit entry: empty Action")
	case len(e.Detail) > MaxAuditDetail:
		return fmt.Errorf("audit entry: Detail is %d bytes, more than %d", len(e.Detail), MaxAuditDetail)
	}
	return nil
}

// AuditQuery selects audit entries in Catalog.Audit.
type AuditQuery struct {
	Job    string // only this job's; "" for all
	Before int64  // only entries with Seq below it; 0: from the newest
	Limit  int    // at most this many; 0: no limit
}

// Marker is implemented by ledgers that keep each node's claim mark: a
// node's statement that it has claimed every tick in [From, Through] of
// every job it prefers under View. Like Registrar it is optional and found
// by type assertion. With it a Scheduler claims a plain job's tick at the
// tick only on the job's preferred node, and the other nodes claim it as a
// fallback, a little later, only when the preferred node's mark does not
// cover it; without it every node claims every tick.
//
// The store keeps marks as given: it never reads View or compares times.
type Marker interface {
	// Mark stores m as m.Node's mark, replacing that node's earlier one, to
	// be kept for ttl (positive) by the store's clock, and returns every
	// node's mark that is kept now, m included, in no particular order, in
	// one round trip where the store allows. Repeating a call is safe.
	Mark(ctx context.Context, m ClaimMark, ttl time.Duration) ([]ClaimMark, error)
}

// MaxMarkView bounds ClaimMark.View and ClaimMark.Node, in bytes.
const MaxMarkView = 256

// ClaimMark is one node's claim mark (see Marker). Times round-trip to
// the nanosecond.
type ClaimMark struct {
	Node    string    // the node's name (ClaimParams.Node)
	View    string    // opaque to the store: what the node's preference was computed from
	From    time.Time // the first instant the statement covers
	Through time.Time // the last; before From: it covers nothing
}

// Check reports what makes m, with ttl, invalid whatever the store.
func (m *ClaimMark) Check(ttl time.Duration) error {
	switch {
	case m.Node == "":
		return errors.New("mark: empty Node")
	case len(m.Node) > MaxMarkView:
		return fmt.Errorf("mark: Node is %d bytes, more than %d", len(m.Node), MaxMarkView)
	case len(m.View) > MaxMarkView:
		return fmt.Errorf("mark %q: View is %d bytes, more than %d", m.Node, len(m.View), MaxMarkView)
	case ttl <= 0:
		return fmt.Errorf("mark %q: ttl %v is not positive", m.Node, ttl)
	}
	return nil
}

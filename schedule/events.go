package schedule

import (
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// EventType tells what happened to a tick on this node.
type EventType uint8

// The event types. Each tick or trigger request this node claims has one
// EventClaimed and then exactly one of: EventMissed; EventSkipped; one
// EventRunStarted and EventRunEnded pair per attempt; or nothing more when
// the job is paused (Event.Paused).
const (
	EventClaimed          EventType = iota + 1 // this node claimed the tick (or trigger request); Late says how late it was handled
	EventClaimedElsewhere                      // another node had claimed the tick first
	EventMissed                                // the tick came while no node ran the job and the misfire policy passed it over; Late
	EventSkipped                               // the tick was not run: the previous run still held the job's lock (or ran here past the tick's MisfireAfter), no MaxConcurrent or pool permit was free (limits.go), or the node shut down first; Error says which
	EventRunStarted                            // an attempt starts: Attempt, Fence, Start; Late is Start − Tick
	EventRunEnded                              // an attempt ended: Status, Duration, Error, as recorded in history
	// EventBroken: the job's schedule gave no tick after Tick, so the job
	// will not run again on this node (see Scheduler.Broken); Error says
	// why. Once per job and Scheduler.
	EventBroken
	// EventRunInterrupted: this node found the running record of an
	// attempt whose node stopped (RanOn; its node lease ended) before it
	// recorded the outcome, and replaced it with an interrupted record:
	// Attempt, Fence, Start, Duration (to when it was noticed), Status,
	// Error.
	EventRunInterrupted
	// EventTickEnded: this node made its last attempt at a claimed tick
	// (or shard-run, or trigger request) and recorded it: no retry
	// follows here. Its fields are those of EventRunEnded for that last
	// attempt, whose Status is the tick's outcome on this node. It
	// follows the attempt's EventRunEnded, once per tick that made at
	// least one attempt (see outcome.go).
	EventTickEnded
)

var eventNames = [...]string{"", "claimed", "claimed_elsewhere", "missed", "skipped", "run_started", "run_ended", "broken", "run_interrupted", "tick_ended"}

// String returns the event's name in snake case, as used in metrics labels.
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "unknown"
}

// Event is passed to Config.OnEvent.
type Event struct {
	Type    EventType
	Job     string
	Tick    time.Time // the scheduled instant, UTC; for a trigger-now request, when it was made
	Trigger string    // the trigger-now request's ID; "" for a scheduled tick
	Node    string    // this node
	Paused  bool      // EventClaimed, EventClaimedElsewhere: the job is paused here, so the tick will not run
	// CatchUp: the tick was missed and runs late by the misfire policy.
	// On EventClaimed it is the claim's view: a tick that turns late while
	// its lock is taken (past MisfireAfter by then) runs as a catch-up run
	// with CatchUp set from its EventRunStarted on, though its EventClaimed
	// had it unset.
	CatchUp bool
	// Requested: EventRunStarted, EventRunEnded: the run of a past tick
	// asked for by RequestBackfill or RequestRerun (jobs backfill, jobs
	// rerun, the dashboard's retry). Its Late is how long ago the tick
	// was, not how late the schedule ran it: lateness metrics leave it out.
	Requested bool
	Attempt   int    // EventRunStarted, EventRunEnded: 1 for the first attempt
	Fence     uint64 // EventRunStarted, EventRunEnded: the job lock's fence; 0 with OverlapAllow
	// First marks the EventRunStarted of this node's first attempt at a
	// tick it claimed: Attempt 1, or, for a shard-run taken over from a
	// stopped node or a re-run of a past tick, the first attempt after
	// those already recorded. Each EventClaimed that runs has one.
	First bool
	// Late is how late the tick was handled: for EventClaimed and
	// EventMissed the time of the claim − Tick, for EventRunStarted and
	// EventRunEnded Start − Tick (retries start later by their backoff).
	// A claim made ahead of its tick (Config.ClaimAhead) is negative.
	Late     time.Duration
	Start    time.Time        // EventRunStarted, EventRunEnded: when the attempt started
	Duration time.Duration    // EventRunEnded: how long the attempt took
	Status   ledger.RunStatus // EventRunEnded, EventSkipped, EventMissed: the status recorded in history
	Error    string           // EventRunEnded, EventSkipped, EventMissed: the error text recorded in history
	RanOn    string           // EventRunInterrupted: the node the attempt ran on
	// Shard and Shards: the shard-run's index and the job's shard count
	// for a job with Job.Shards; 0 and 0 otherwise.
	Shard, Shards int
}

// emit passes e to Config.OnEvent.
func (s *Scheduler) emit(e Event) {
	if s.onEvent != nil {
		e.Node = s.node
		s.onEvent(e)
	}
}

// recordEvent is the event of a history record that was not attempted
// (EventSkipped, EventMissed).
func recordEvent(t EventType, r *ledger.RunRecord, late time.Duration) Event {
	return Event{Type: t, Job: r.Job, Tick: r.Tick, Trigger: r.Trigger, Shard: r.Shard, Shards: r.Shards, Late: late, Status: r.Status, Error: r.Error}
}

// startEvent is the EventRunStarted of rec, an attempt at w.
func (w work) startEvent(rec *ledger.RunRecord) Event {
	e := w.runEvent(EventRunStarted, rec)
	e.First = rec.Attempt == w.first
	return e
}

// runEvent is runEvent for an attempt at w: CatchUp and Requested are w's.
func (w work) runEvent(t EventType, rec *ledger.RunRecord) Event {
	e := runEvent(t, rec, w.catchUp)
	e.Requested = w.past
	return e
}

// runEvent is the event of an attempt's history record (EventRunStarted
// before the handler is called, EventRunEnded once recorded).
func runEvent(t EventType, r *ledger.RunRecord, catchUp bool) Event {
	e := Event{
		Type: t, Job: r.Job, Tick: r.Tick, Trigger: r.Trigger, Shard: r.Shard, Shards: r.Shards, CatchUp: catchUp,
		Attempt: r.Attempt, Fence: r.Fence, Start: r.Start, Late: r.Start.Sub(r.Tick),
	}
	if t == EventRunEnded || t == EventTickEnded {
		e.Duration, e.Status, e.Error = r.End.Sub(r.Start), r.Status, r.Error
	}
	return e
}

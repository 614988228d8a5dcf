// Package ledger is the contract a store implements so that package schedule
// can run every tick of every job once across a fleet: which node claimed
// which tick of which job, the history of runs, the pause and trigger-now
// state every node obeys, and pruning.
//
// Most code should call package schedule, not a Ledger: a Scheduler owns
// ticks, misfire handling, retries and the job's lock, and calls a Ledger
// only to claim ticks and to read or change what is stored about runs and
// jobs. Its history comes back in this package's types (Scheduler.Runs
// returns RunRecords; an Event's Status is a RunStatus such as RunOK). The
// CLI (tasklock jobs) and the dashboard read the same Ledger to show the
// fleet's history.
//
// # Relation to package driver
//
// Package driver is the lock contract: leases, fences, renewal. This package
// is the scheduler's contract, apart from it. A store usually implements
// both on the same connection, and a program finds the ledger by type
// assertion on the store it already has:
//
//	store := memstore.New(nil)
//	l, ok := any(store).(ledger.Ledger) // memstore, redisstore, pgstore, ... implement it
//
// A ledger's claims are not locks: nothing here is renewed or fenced, a
// claim is never held by a process, and a store's lock listing
// (driver.Lister) does not show them. While a run is in progress the
// scheduler also holds the job's lock, through a tasklock.Locker on the same
// store; that is the lock contract's business, not the ledger's. The two
// contracts share one sentinel: ErrUnsupported is driver.ErrUnsupported.
//
// The conformance suite every ledger passes is package ledgertest, beside
// the lock contract's storetest.
//
// # What a ledger promises
//
//   - A claim is made once. Of all the Claim calls for one key (Job, Tick,
//     Trigger, Shard), across every client of the store, exactly one token gets nil
//     while the claim is retained; every other token gets a *ClaimedError. A
//     claim is retained at least ClaimParams.Retain after it was made, by the
//     store's clock; after that the store may forget it (Prune does).
//   - Times go in and come back equal (time.Time.Equal) when they are whole
//     seconds, as scheduled ticks are; other times (Start, End, Recorded,
//     TriggerRequest.At, JobState.Since) keep at least millisecond
//     precision, and a time the store returned is stored back exactly when
//     passed in again.
//   - Stores return errors and never log. A store returns a *ClaimedError
//     only when it knows another token holds the claim, and an error
//     wrapping ErrUnsupported for a request it can never satisfy as made (a
//     Retain longer than it can keep, a name it cannot store); any other
//     error is taken as "nothing known" and the caller may retry the same
//     call.
//   - Every change may be repeated after an error: a claim by the same
//     token succeeds again, RecordRuns replaces records by RunKey, and
//     SetJobState's changes are idempotent.
//   - All methods are safe for concurrent use. A method called with a
//     cancelled or expired ctx returns an error.
//
// # Which clock decides what
//
// Every time that decides something at the store is read from the store's
// clock (Redis TIME, SQL now(), etcd lease TTLs, ZooKeeper's modification
// times), never from the caller's:
//
//   - how long a claim is retained (ClaimParams.Retain counts from the
//     moment the store makes the claim);
//   - a run record's age: RunRecord.Recorded is set by the store when it
//     writes the record, and PruneParams.RunsOlderThan is measured by it;
//   - when a trigger request arrived (TriggerRequest.At), and so
//     PruneParams.TriggersOlderThan.
//
// The callers' clocks only fill in what the store keeps as data and never
// compares with its own now: a tick is a scheduled instant every node
// computes alike from the job's schedule; RunRecord.Start and End are read
// by the node that ran the attempt; JobState.Since is the registering
// node's now, and the first node to register a schedule sets it for the
// whole fleet (JobRegister). So a node whose clock is off can at worst
// claim a tick early or late; it can never claim a tick twice or make
// another node's claim expire early.
package ledger

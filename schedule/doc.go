// Package schedule runs periodic jobs across a cluster so that every tick of
// every job runs once, on one node, however many nodes run the same
// Scheduler and however far apart their clocks are.
//
// It is built on the public tasklock API (a job's runs hold the job's lock)
// and on a store's tick ledger (package ledger), which every store but
// redlock implements and checks with ledgertest.Run.
//
//	store := memstore.New(nil) // or redisstore, pgstore, ...
//	locker, _ := tasklock.New(store, nil)
//	s, _ := schedule.New(locker, store, &schedule.Config{Node: "web-1"})
//	_ = s.Add(schedule.Job{Name: "report", Schedule: "0 30 6 * * MON-FRI", TimeZone: "Europe/Berlin", Handler: report})
//	_ = s.Start(ctx)
//	defer s.Shutdown(ctx)
//
// # Ticks and claims
//
// A tick is an instant (UTC) at which a job is due, computed from its
// schedule in its time zone; every node computes the same ticks. Before a
// node runs tick T of job J it claims (J, T) in the ledger; a claim succeeds
// once, for one node, and is kept for Config.ClaimRetention. So a node whose
// clock runs seconds ahead claims first and the others find the tick taken,
// and a node that starts late and looks back over the last MisfireWindow
// finds every tick that was run already claimed.
//
// With Config.PreferredNodes and a ledger that keeps claim marks
// (ledger.Marker: memstore, redisstore), a plain job's tick is claimed at
// the tick by one node only, the job's preferred node (a rendezvous hash
// over the live nodes); the others claim it twice Config.PollInterval
// later (1s by default) unless that node's mark says it claimed it. So a
// stopped or slow preferred node costs a tick lateness, never the tick. Sharded, LeaderOnly and
// label-restricted (Job.Nodes) jobs and trigger requests are claimed by
// every node, as with other ledgers (prefer.go says why it is safe).
//
// With Config.ClaimAhead a node claims a plain job's tick, takes its lock
// and writes its running record up to ClaimAhead (at most a second) before
// the tick, and starts the handler at the tick: with thousands of jobs due
// at one instant, the store work no longer makes the last of them late.
//
// Each node only looks at ticks up to its own now (plus ClaimAhead). A tick it handles within
// Job.MisfireAfter of the tick is on time and runs; later ones came while no
// node ran the job (all were down, or the ledger was unreachable) and go to
// the job's Misfire policy: MisfireOnce runs the newest of them, MisfireSkip
// none, MisfireCatchUp the newest CatchUpMax. Those not run are recorded as
// missed. At most MaxBacklog missed ticks per job are looked at in one pass.
// A tick is handled when its claim returns: lateness is measured then, so
// a ledger slow to answer as it comes back makes ticks missed, not late;
// and again once the job's lock is taken, so a lock slow to come makes the
// tick a catch-up run (missed, with MisfireSkip).
// The ticks of a job one pass claims run one after another, catch-up runs
// (Run.CatchUp) first; an on-time tick whose turn comes more than
// MisfireAfter after it was due is skipped (with OverlapAllow it does not
// wait its turn). So no tick starts more than MisfireAfter late unless
// the policy chose it as a catch-up run, or the job asked for a wait
// (Jitter, After, Pool), each bounded by its own option.
//
// Only ticks the fleet owes are looked at: Start (or Add after Start)
// registers each job's schedule in the ledger, and the first node to
// register a schedule records when (ledger.JobRegister). The look back
// never reaches before that, so a new job — on the first start of the
// fleet, or added later — and a job whose schedule (or time zone) changed
// start at their next tick, with no missed ticks from before they existed.
// A known job keeps its registration across restarts and gets its misfire
// handling.
//
// If a job's schedule ever cannot give a next tick, the job is broken: it
// is logged at ERROR, reported once with EventBroken, listed by
// Scheduler.Broken, and not run again until the schedule is fixed.
//
// # Schedules
//
// Job.Schedule is a cron spec with five fields (minute hour day-of-month
// month day-of-week) or six (seconds first), a descriptor (@hourly, @daily,
// @weekly, @monthly, @yearly) or "@every D". Cron specs are read in
// Job.TimeZone; @every ticks every D of elapsed time from the Unix epoch, the
// same instants on every node whatever the zone. See Parse.
//
// Day-of-week takes 0–7, 0 and 7 being Sunday. The two day fields combine
// as in Vixie cron: when both are restricted, a day matching either field
// runs ("0 0 13 * FRI": the 13th and every Friday); a day field that starts
// with * (*, ?, "*/2") counts as unrestricted, and a day must then match
// both ("0 0 */2 * FRI": Fridays with an odd date; "0 0 * * MON": Mondays).
//
// A spec Parse accepts always has a next tick: Parse rejects a spec that
// never fires ("0 0 30 2 *") and Next finds ticks however rare (February
// 29th, years apart), from any instant and in any zone, whether Go reads
// the zone's offsets from the system's zone files or its embedded tzdata
// (which lists transitions for fewer years and derives the rest from the
// zone's rule).
//
// # Daylight saving time
//
// A cron schedule names wall-clock times, and each such time is one tick:
//
//   - in the hour skipped when clocks spring forward, a time the clock
//     never shows runs at the instant it would have been without the change
//     (02:30 in New York on the night of the change runs at 03:30 EDT; in
//     Lord Howe, where the change is 30 minutes, 02:15 runs at 02:45): a
//     tick is never lost. If that instant is a tick of the schedule anyway,
//     it runs once.
//   - in the hour repeated when clocks fall back, a time the clock shows
//     twice runs the first time only: a 01:30 daily job runs once. A
//     schedule whose hour field names every hour (*, @hourly, "*/15 * * * *")
//     follows the clock on the wall instead and runs in both passes of the
//     hour, so hourly work stays hourly.
//
// For work that must run every N minutes of elapsed time, use @every.
//
// # Runs and the job's lock
//
// A run holds the job's lock (Config.KeyPrefix + Job.Name) from its first
// attempt to its last, renewed by the Locker and fenced: Run.Fence is the
// lock's fence. So runs of one job never overlap across the cluster: a tick
// that comes while the previous run holds the lock is recorded as skipped,
// and so is one that waited on this node, past Job.MisfireAfter, for the run
// of an earlier tick claimed in the same pass.
// Job.Overlap = OverlapAllow runs every tick regardless and takes no lock.
// The handler's context ends when the lock is lost or Job.Lock.MaxHold is
// reached (the run is recorded as lost or timed out), when an attempt's
// Timeout passes, or when Shutdown's grace period ends. Failed and timed-out
// attempts are retried Job.Retries times with backoff, under the same lock.
//
// # History
//
// Every attempt, skipped tick and missed tick is recorded in the ledger —
// job, tick, node, fence, attempt, start, end, status (ok, failed, timeout,
// lost, cancelled, interrupted, skipped, missed), error, and the tail of Run.Output —
// and kept for Config.HistoryKeep records per job and Config.HistoryMaxAge.
// Runs queries it by job, time range and status. Config.Redact, when set,
// rewrites the error and the output tail before they are recorded, so that
// secrets a handler printed are not kept where every reader of the ledger
// sees them.
//
// An attempt is recorded as running before its handler starts, and its
// outcome replaces that record. A claimed tick that may wait first — for
// its parents, jitter, a pool's permit, a lock it waits for — is recorded
// as running (its first attempt, pending) before it waits, and the skip
// that may take the attempt's place replaces that record under the same
// attempt number. So a node killed after claiming a tick leaves a record
// of it; what a kill between the claim and that first write loses is one
// write wide. Attempt numbers above a scheduled tick's first (retries,
// re-runs, backfills) are claimed in the ledger before use, so two runs of
// one tick never share one; a backfill or re-run of a tick that has no
// record yet claims the tick itself, so that the schedule does not run it
// again, and a backfill that finds the schedule's run just claimed it
// waits (up to 5 s) for that run's record: it runs the tick only if that
// run was skipped or left no record by then.
//
// Each Scheduler holds a node lease (the lock Config.NodeKeyPrefix +
// Config.Node, taken by Start, or held by the caller: see
// Config.NodeLeaseTaken), and every node looks, every third of
// Config.NodeLeaseTTL, for running records whose node holds no node lease:
// that node was killed or cut off for longer than its lease. It replaces
// them with interrupted records (reported with EventRunInterrupted). If the
// node was only slow and records the outcome after all, the outcome
// replaces the interrupted record; a tick keeps one record per attempt
// either way. After a store outage the leases of live nodes may have
// lapsed, and their holders take them again within a sweep or so: a node
// whose store calls failed for a sweep interval (a third of NodeLeaseTTL)
// or more, or that finds its own node lease gone (the store was out for
// longer than a lease, or lost its data), or taken again since it last
// looked (a new fence: its caller, or the node, retook it after such an
// outage), judges no other node stopped until a NodeLeaseTTL after the
// store answered it again. Its own lease may have outlived the
// outage at the store while another's did not: each ends at its holder's
// last renewal. An outcome whose write failed
// is written again by the node's next sweep that reads the store. A node
// that starts under the name of a stopped one settles that one's running
// records itself once it holds the node lease. Limits:
// a kill between the claim and the running record (while taking the job's
// lock, or during Job.Jitter) leaves the claimed tick without a record; and
// should the slow node record its outcome just as another node settles the
// run, the later write wins.
//
// RequestCancel asks, through the ledger (a ledger.JobCancel request), for a
// run in progress to stop, whichever node runs it: that node takes the
// request at its next poll of the job states, cancels the run's context
// with ErrCancelled (a handler stops as on Job.Timeout), records the
// attempt cancelled, makes no further attempt, and removes the request. A
// request for a run that ended meanwhile is pruned with the trigger
// requests. RequestRerun runs a failed tick again.
//
// A trigger-now, backfill or re-run request is run by the node whose claim
// of it wins, which removes it from the ledger as the run starts. A node
// that stops first (killed, or shut down with the request queued behind a
// run of the job) leaves it pending, and another node takes it over once
// the stopped node's lease has ended (a retake claim, as for a sharded
// job's shard-runs below): nothing asked for is dropped. A node starts the
// backfills and re-runs of a plain job that it takes in tick order, oldest
// first, also those it takes in several polls, each once the one before
// has started its first attempt; runs that may overlap (OverlapAllow) then
// run side by side, at most Job.MaxConcurrent of them on the node when the
// job has that limit.
//
// # Sharded jobs
//
// Job.Shards = N > 1 splits each tick into N shard-runs (Run.Shard 0 to
// N-1, Run.Shards N), each claimed with the key (job, tick, trigger, shard)
// once across the cluster and holding its own lock, the job's key +
// "/shard/" + the index. At the tick a node claims the shards k with
// k mod L = r, r being its rank among the L live nodes (the node leases,
// listed with Config.NodeLister at most a third of Config.NodeLeaseTTL
// before) and runs them at once; a poll later a node
// with no shard-run of the job under way claims a shard no one claimed,
// one at a time. A shard whose claiming node stopped (its node lease ended)
// before recording an outcome is taken over by a free node, on a retake
// claim (trigger + "~" + the stopped node, so all takers contend on one key
// and a chain goes on if the taker stops too), after the stopped node's
// shard lock expires: about Job.Lock.TTL and a poll. The retaken run is
// recorded under the tick's key as the next attempt; the stopped node's
// attempt is settled interrupted as the retake claims the shard. History keeps one record per shard-run
// (ledger.RunRecord.Shard, Shards); TickStatus is a tick's overall status.
//
// # Pause, resume and trigger
//
// Pause, Resume and Trigger are stored in the ledger, and every node reads
// the job states every Config.PollInterval (500 ms), so every node obeys
// them within a second. A trigger runs once across the cluster: the request
// is claimed like a tick.
//
// # Dependencies
//
// Job.After makes a job wait for others, its parents, tick by tick: the
// child's tick T, its schedule's previous tick being P, runs once every
// parent has a successful run (every shard ok, for a sharded parent) for a
// tick in (P, T]. The rule is read from the ledger in ticks, so every node
// decides alike whatever its clock, and parents may be on other schedules
// and run by other nodes. The node that claimed T waits before taking the
// job's lock, reading the ledger every Config.PollInterval and at once when
// a parent's run ends on it; after Job.Within it records T as skipped,
// naming each parent not done and its last status. Add refuses a job that
// closes a cycle (Cycle). A trigger request (trigger-now, backfill, re-run)
// does not wait.
//
// # Events
//
// Config.OnEvent receives a typed Event for every tick this node claims or
// finds claimed elsewhere, every attempt's start and end (job, tick, node,
// fence, attempt, status, duration, and lateness: start − tick), and every
// tick skipped or missed. It is called synchronously and must not block;
// package metrics turns the events into Prometheus metrics, and tasklock
// serve logs a line per run start and end from them.
//
// # Shutdown
//
// Shutdown stops claiming, lets running handlers finish for up to
// Config.ShutdownGrace, then cancels them with ErrShutdown (an attempt so
// stopped is recorded interrupted), and returns once every run has
// recorded its result and released its lock.
package schedule

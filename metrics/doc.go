// Package metrics turns the events of tasklock Lockers and schedule
// Schedulers into Prometheus metrics (client_golang). It lives outside the
// root package so that the library's import graph stays free of Prometheus:
// the Locker and the Scheduler only emit typed events to a hook.
//
//	reg := prometheus.NewRegistry()
//	m, err := metrics.New(reg)
//	...
//	locker, _ := tasklock.New(store, &tasklock.Config{OnEvent: m.LockEvent})
//	sched, _ := schedule.New(locker, store, &schedule.Config{OnEvent: m.ScheduleEvent})
//	http.Handle("/metrics", metrics.Handler(reg))
//
// LockEvent and ScheduleEvent only update counters, histograms and a map
// of held locks, so they never block the Locker or the Scheduler. One
// Metrics may take the events of several Lockers and Schedulers.
//
// # Metrics
//
// Locks (from tasklock.Event):
//
//	tasklock_obtain_attempts_total{result,kind} obtained | not_obtained (the key was held); mutex | read | write | permit
//	tasklock_obtain_wait_seconds              histogram of Obtain's wait before a grant (0 for TryObtain)
//	tasklock_renewals_total{result}           ok | failed (a failed renewal is retried until the lease's validity ends)
//	tasklock_locks_lost_total{cause}          lost | max_hold | stalled | closed | unsupported | other (see Cause)
//	tasklock_locks_held{kind}                 gauge: granted and not yet released or lost, by kind
//
// Jobs (from schedule.Event):
//
//	tasklock_job_runs_total{job,status}       attempts that ended: ok | failed | timeout | lost; and ticks skipped: skipped
//	tasklock_job_run_duration_seconds{job}    histogram of attempts' durations
//	tasklock_tick_lateness_seconds            histogram of first attempts' start − scheduled tick (not of
//	                                          trigger-now requests, nor of backfills' and re-runs' past ticks)
//	tasklock_ticks_missed_total{job}          ticks the misfire policy passed over after downtime
//	tasklock_tick_claims_total{result}        claimed | claimed_elsewhere (another node claimed the tick first)
//
// Jobs by tick (each tick, or trigger-now request, counted once, by the node
// that claimed it; sum by (job) gives the fleet's):
//
//	tasklock_job_ticks_due_total{job}         ticks claimed to handle (not while paused)
//	tasklock_job_ticks_started_total{job}     ticks whose first attempt here started (Event.First: a retaken shard-run's too)
//	tasklock_job_ticks_succeeded_total{job}   ticks that ended ok (after retries)
//	tasklock_job_ticks_skipped_total{job}     ticks not run: previous run in progress, no MaxConcurrent or pool permit, shutdown
//	tasklock_ticks_missed_total{job}          (above) ticks the misfire policy passed over
//	tasklock_job_late_seconds{job}            histogram of scheduled ticks' first attempt's start − tick (as above)
//	tasklock_job_last_success_timestamp_seconds{job}  gauge: end of the last ok run, Unix seconds (max by (job) for the fleet)
//
// A due tick ends as exactly one of started, skipped or missed, so due −
// started − skipped − missed is the ticks in hand (a run waiting for its
// jitter or a pool permit). The counters of a job are made at 0 the first
// time this node claims one of its ticks, so that rules comparing them
// (deploy/prometheus/tasklock-rules.yml) see every job; the last success
// gauge appears with the first success.
//
// Missed ticks are counted only in tasklock_ticks_missed_total, not as runs.
// Trigger-now runs and retries are not in the lateness histogram: they are
// late by design. With many jobs, the job label makes many series (about 20
// per job); aggregate with sum without (job) in dashboards.
//
// docs/grafana-dashboard.json in the repository is a Grafana dashboard of
// these metrics.
package metrics

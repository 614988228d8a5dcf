package metrics_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tasklock/tasklock/internal/leakcheck"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/metrics"
	"github.com/tasklock/tasklock/schedule"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// value returns the sample of the series named by series (a name with its
// labels as Handler writes them, e.g. `tasklock_renewals_total{result="ok"}`),
// 0 when there is none.
func value(t *testing.T, g prometheus.Gatherer, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler(g).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f
		}
	}
	return 0
}

func TestLockEvents(t *testing.T) {
	m, reg := newMetrics(t)
	ev := func(ty tasklock.EventType, key string, fence uint64, err error) tasklock.Event {
		return tasklock.Event{Type: ty, Key: key, Owner: "n1", Fence: fence, Err: err}
	}
	obtained := ev(tasklock.EventObtained, "a", 1, nil)
	obtained.Wait = 300 * time.Millisecond
	for _, e := range []tasklock.Event{
		obtained,
		ev(tasklock.EventObtained, "b", 7, nil),
		ev(tasklock.EventObtained, "c", 9, nil),
		ev(tasklock.EventObtained, "d", 2, nil),
		ev(tasklock.EventObtained, "e", 3, nil),
		ev(tasklock.EventNotObtained, "a", 0, &tasklock.NotObtainedError{Key: "a", Owner: "n2"}),
		ev(tasklock.EventQueued, "a", 0, nil),
		ev(tasklock.EventRenewed, "a", 1, nil),
		ev(tasklock.EventRenewed, "b", 7, nil),
		ev(tasklock.EventRenewFailed, "b", 7, errors.New("timeout")),
		ev(tasklock.EventLost, "b", 7, fmt.Errorf("%w: the store no longer has this lease", tasklock.ErrLockLost)),
		ev(tasklock.EventLost, "c", 9, tasklock.ErrMaxHold),
		ev(tasklock.EventReleased, "c", 9, nil), // released at the store after MaxHold: counted once
		ev(tasklock.EventLost, "d", 2, tasklock.ErrStalled),
		ev(tasklock.EventLost, "e", 3, tasklock.ErrClosed),
		ev(tasklock.EventReleased, "zz", 5, nil), // never seen obtained
		// Two readers of one owner share key and fence: both counted.
		{Type: tasklock.EventObtained, Key: "r", Owner: "n1", Fence: 4, Mode: tasklock.ModeRead},
		{Type: tasklock.EventObtained, Key: "r", Owner: "n1", Fence: 4, Mode: tasklock.ModeRead},
		{Type: tasklock.EventReleased, Key: "r", Owner: "n1", Fence: 4, Mode: tasklock.ModeRead},
		{Type: tasklock.EventObtained, Key: "s", Owner: "n1", Fence: 8, Mode: tasklock.ModePermit},
		{Type: tasklock.EventNotObtained, Key: "s", Owner: "n1", Mode: tasklock.ModePermit},
	} {
		m.LockEvent(e)
	}
	want := `
# HELP tasklock_obtain_attempts_total Attempts to obtain a lock, by result (obtained, or not_obtained because another owner held it) and kind (mutex; read or write, the sides of a read-write lock; permit, of a semaphore).
# TYPE tasklock_obtain_attempts_total counter
tasklock_obtain_attempts_total{kind="mutex",result="not_obtained"} 1
tasklock_obtain_attempts_total{kind="mutex",result="obtained"} 5
tasklock_obtain_attempts_total{kind="permit",result="not_obtained"} 1
tasklock_obtain_attempts_total{kind="permit",result="obtained"} 1
tasklock_obtain_attempts_total{kind="read",result="not_obtained"} 0
tasklock_obtain_attempts_total{kind="read",result="obtained"} 2
tasklock_obtain_attempts_total{kind="write",result="not_obtained"} 0
tasklock_obtain_attempts_total{kind="write",result="obtained"} 0
# HELP tasklock_renewals_total Lease renewals, by result: ok, or failed (retried until the lease's validity ends).
# TYPE tasklock_renewals_total counter
tasklock_renewals_total{result="failed"} 1
tasklock_renewals_total{result="ok"} 2
# HELP tasklock_locks_lost_total Locks that ended other than by Release, by cause: lost, max_hold, stalled, closed, unsupported, other.
# TYPE tasklock_locks_lost_total counter
tasklock_locks_lost_total{cause="closed"} 1
tasklock_locks_lost_total{cause="lost"} 1
tasklock_locks_lost_total{cause="max_hold"} 1
tasklock_locks_lost_total{cause="other"} 0
tasklock_locks_lost_total{cause="stalled"} 1
tasklock_locks_lost_total{cause="unsupported"} 0
# HELP tasklock_locks_held Locks held now by the Lockers reporting here, by kind: mutex, read, write, permit.
# TYPE tasklock_locks_held gauge
tasklock_locks_held{kind="mutex"} 1
tasklock_locks_held{kind="permit"} 1
tasklock_locks_held{kind="read"} 1
tasklock_locks_held{kind="write"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"tasklock_obtain_attempts_total", "tasklock_renewals_total", "tasklock_locks_lost_total", "tasklock_locks_held"); err != nil {
		t.Fatal(err)
	}
	if n, sum := value(t, reg, "tasklock_obtain_wait_seconds_count"), value(t, reg, "tasklock_obtain_wait_seconds_sum"); n != 8 || sum != 0.3 {
		t.Errorf("obtain wait: count %v sum %v, want 8 and 0.3", n, sum)
	}
	if v := value(t, reg, `tasklock_obtain_wait_seconds_bucket{le="0.25"}`); v != 7 {
		t.Errorf("obtain waits up to 250ms: %v, want 7", v)
	}
}

func TestCause(t *testing.T) {
	for err, want := range map[error]string{
		tasklock.ErrMaxHold: "max_hold", tasklock.ErrStalled: "stalled", tasklock.ErrClosed: "closed",
		fmt.Errorf("%w: the store refused the renewal: %w", tasklock.ErrLockLost, tasklock.ErrUnsupported): "unsupported",
		fmt.Errorf("%w: not renewed within its validity", tasklock.ErrLockLost):                            "lost",
		fmt.Errorf("wrapped: %w", tasklock.ErrMaxHold):                                                     "max_hold",
		errors.New("something else"):                                                                       "other",
	} {
		if got := metrics.Cause(err); got != want {
			t.Errorf("Cause(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestScheduleEvents(t *testing.T) {
	m, reg := newMetrics(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(ty schedule.EventType, job string, attempt int, trigger string, late, d time.Duration, st ledger.RunStatus) schedule.Event {
		return schedule.Event{Type: ty, Job: job, Tick: tick, Trigger: trigger, Attempt: attempt, Late: late, Duration: d, Status: st}
	}
	// A backfill's run of a day-old tick: its Late is the tick's age, not
	// lateness (before, every backfill filled the +Inf bucket).
	backfill, backfilled := run(schedule.EventRunStarted, "a", 1, "", 24*time.Hour, 0, ""), run(schedule.EventRunEnded, "a", 1, "", 24*time.Hour, time.Second, ledger.RunOK)
	backfill.Requested, backfilled.Requested = true, true
	for _, e := range []schedule.Event{
		backfill, backfilled,
		run(schedule.EventClaimed, "a", 0, "", 0, 0, ""),
		run(schedule.EventClaimedElsewhere, "b", 0, "", 0, 0, ""),
		run(schedule.EventClaimedElsewhere, "b", 0, "", 0, 0, ""),
		run(schedule.EventRunStarted, "a", 1, "", 20*time.Millisecond, 0, ""),
		run(schedule.EventRunEnded, "a", 1, "", 20*time.Millisecond, 2*time.Second, ledger.RunFailed),
		run(schedule.EventRunStarted, "a", 2, "", 3*time.Second, 0, ""), // a retry: not lateness
		run(schedule.EventRunEnded, "a", 2, "", 3*time.Second, time.Second, ledger.RunOK),
		run(schedule.EventRunStarted, "a", 1, "trig", time.Minute, 0, ""), // trigger-now: not lateness
		run(schedule.EventRunEnded, "a", 1, "trig", time.Minute, time.Second, ledger.RunOK),
		run(schedule.EventRunStarted, "b", 1, "", -time.Millisecond, 0, ""), // a node whose clock is ahead
		run(schedule.EventSkipped, "b", 0, "", 0, 0, ledger.RunSkipped),
		run(schedule.EventRunInterrupted, "b", 1, "", 0, 0, ledger.RunInterrupted),
		run(schedule.EventMissed, "c", 0, "", time.Hour, 0, ledger.RunMissed),
		run(schedule.EventMissed, "c", 0, "", time.Hour, 0, ledger.RunMissed),
	} {
		m.ScheduleEvent(e)
	}
	want := `
# HELP tasklock_job_runs_total Job run attempts that ended, and ticks skipped, by job and status (ok, failed, timeout, lost, cancelled, skipped; interrupted, counted by the node that found a dead node's run).
# TYPE tasklock_job_runs_total counter
tasklock_job_runs_total{job="a",status="failed"} 1
tasklock_job_runs_total{job="a",status="ok"} 3
tasklock_job_runs_total{job="b",status="interrupted"} 1
tasklock_job_runs_total{job="b",status="skipped"} 1
# HELP tasklock_ticks_missed_total Ticks that came while no node ran the job and that the misfire policy passed over, by job.
# TYPE tasklock_ticks_missed_total counter
tasklock_ticks_missed_total{job="a"} 0
tasklock_ticks_missed_total{job="b"} 0
tasklock_ticks_missed_total{job="c"} 2
# HELP tasklock_tick_claims_total Ticks and trigger requests this node tried to claim, by result: claimed, or claimed_elsewhere by another node first.
# TYPE tasklock_tick_claims_total counter
tasklock_tick_claims_total{result="claimed"} 1
tasklock_tick_claims_total{result="claimed_elsewhere"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"tasklock_job_runs_total", "tasklock_ticks_missed_total", "tasklock_tick_claims_total"); err != nil {
		t.Fatal(err)
	}
	if n, sum := value(t, reg, `tasklock_job_run_duration_seconds_count{job="a"}`), value(t, reg, `tasklock_job_run_duration_seconds_sum{job="a"}`); n != 4 || sum != 5 {
		t.Errorf("run duration of a: count %v sum %v, want 4 and 5", n, sum)
	}
	if n, sum := value(t, reg, "tasklock_tick_lateness_seconds_count"), value(t, reg, "tasklock_tick_lateness_seconds_sum"); n != 2 || sum != 0.02 {
		t.Errorf("tick lateness: count %v sum %v, want 2 (first attempts of scheduled ticks, not a backfill's) and 0.02", n, sum)
	}
}

// The per-job tick series: due, started, succeeded, skipped (and missed)
// by tick, lateness by job, and the last success's end. A shard-run taken
// over from a stopped node counts started as it counts due and succeeded
// (its first attempt here, Event.First, is attempt 2). Before: due and
// succeeded but not started, so a node's succeeded could pass its started.
func TestJobTickMetrics(t *testing.T) {
	m, reg := newMetrics(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(ty schedule.EventType, job string, attempt int, trigger string, late, d time.Duration, st ledger.RunStatus) schedule.Event {
		return schedule.Event{Type: ty, Job: job, Tick: tick, Trigger: trigger, Attempt: attempt, First: ty == schedule.EventRunStarted && attempt == 1,
			Late: late, Start: tick.Add(late), Duration: d, Status: st}
	}
	// A shard-run taken over from a stopped node: its first attempt here
	// is attempt 2, started on this node, late by the takeover's wait
	// (not the tick's lateness: it started on time on the stopped node).
	retake := ev(schedule.EventRunStarted, "c", 2, "", 12*time.Second, 0, "")
	retake.First = true
	for _, e := range []schedule.Event{
		ev(schedule.EventClaimed, "a", 0, "", 0, 0, ""),
		ev(schedule.EventRunStarted, "a", 1, "", 2*time.Second, 0, ""), // waited for a pool permit
		ev(schedule.EventRunEnded, "a", 1, "", 2*time.Second, time.Second, ledger.RunFailed),
		ev(schedule.EventRunStarted, "a", 2, "", 5*time.Second, 0, ""), // a retry: the tick started before
		ev(schedule.EventRunEnded, "a", 2, "", 5*time.Second, 3*time.Second, ledger.RunOK),
		ev(schedule.EventClaimed, "a", 0, "trig", 0, 0, ""),
		ev(schedule.EventRunStarted, "a", 1, "trig", time.Millisecond, 0, ""), // trigger-now: started, not late
		ev(schedule.EventRunEnded, "a", 1, "trig", time.Millisecond, time.Second, ledger.RunOK),
		ev(schedule.EventClaimed, "a", 0, "", 0, 0, ""),
		ev(schedule.EventSkipped, "a", 0, "", 0, 0, ledger.RunSkipped),
		{Type: schedule.EventClaimed, Job: "p", Tick: tick, Paused: true}, // paused: not due
		ev(schedule.EventClaimed, "b", 0, "", 0, 0, ""),
		ev(schedule.EventClaimed, "b", 0, "", 0, 0, ""),
		ev(schedule.EventMissed, "b", 0, "", time.Hour, 0, ledger.RunMissed),
		ev(schedule.EventRunStarted, "b", 1, "", time.Hour, 0, ""),
		ev(schedule.EventRunEnded, "b", 1, "", time.Hour, time.Second, ledger.RunLost),
		ev(schedule.EventClaimed, "c", 0, "", 12*time.Second, 0, ""),
		retake,
		ev(schedule.EventRunEnded, "c", 2, "", 12*time.Second, time.Second, ledger.RunOK),
	} {
		m.ScheduleEvent(e)
	}
	want := `
# HELP tasklock_job_ticks_due_total Ticks and trigger-now requests of the job this node claimed to handle (not while paused): each is counted by one node of the fleet, so sum by (job) is the fleet's. Each ends as started, skipped or missed.
# TYPE tasklock_job_ticks_due_total counter
tasklock_job_ticks_due_total{job="a"} 3
tasklock_job_ticks_due_total{job="b"} 2
tasklock_job_ticks_due_total{job="c"} 1
# HELP tasklock_job_ticks_started_total Ticks and trigger-now requests of the job whose first attempt started on this node.
# TYPE tasklock_job_ticks_started_total counter
tasklock_job_ticks_started_total{job="a"} 2
tasklock_job_ticks_started_total{job="b"} 1
tasklock_job_ticks_started_total{job="c"} 1
# HELP tasklock_job_ticks_succeeded_total Ticks and trigger-now requests of the job that ended ok on this node (after retries, if any).
# TYPE tasklock_job_ticks_succeeded_total counter
tasklock_job_ticks_succeeded_total{job="a"} 2
tasklock_job_ticks_succeeded_total{job="b"} 0
tasklock_job_ticks_succeeded_total{job="c"} 1
# HELP tasklock_job_ticks_skipped_total Ticks of the job this node claimed and did not run: the previous run was in progress, a MaxConcurrent or pool permit was not free, or the node shut down.
# TYPE tasklock_job_ticks_skipped_total counter
tasklock_job_ticks_skipped_total{job="a"} 1
tasklock_job_ticks_skipped_total{job="b"} 0
tasklock_job_ticks_skipped_total{job="c"} 0
# HELP tasklock_ticks_missed_total Ticks that came while no node ran the job and that the misfire policy passed over, by job.
# TYPE tasklock_ticks_missed_total counter
tasklock_ticks_missed_total{job="a"} 0
tasklock_ticks_missed_total{job="b"} 1
tasklock_ticks_missed_total{job="c"} 0
# HELP tasklock_job_last_success_timestamp_seconds When the job's last run that ended ok on this node ended, in Unix seconds; max by (job) is the fleet's.
# TYPE tasklock_job_last_success_timestamp_seconds gauge
tasklock_job_last_success_timestamp_seconds{job="a"} ` + fmt.Sprint(tick.Add(8*time.Second).Unix()) + `
tasklock_job_last_success_timestamp_seconds{job="c"} ` + fmt.Sprint(tick.Add(13*time.Second).Unix()) + `
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"tasklock_job_ticks_due_total", "tasklock_job_ticks_started_total", "tasklock_job_ticks_succeeded_total",
		"tasklock_job_ticks_skipped_total", "tasklock_ticks_missed_total", "tasklock_job_last_success_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}
	if n, sum := value(t, reg, `tasklock_job_late_seconds_count{job="a"}`), value(t, reg, `tasklock_job_late_seconds_sum{job="a"}`); n != 1 || sum != 2 {
		t.Errorf("late of a: count %v sum %v, want 1 (the first attempt of the scheduled tick) and 2", n, sum)
	}
	if n := value(t, reg, `tasklock_job_late_seconds_count{job="c"}`); n != 0 {
		t.Errorf("late of c: count %v, want 0 (a retake is not the tick's first attempt)", n)
	}
	if n := value(t, reg, `tasklock_job_late_seconds_bucket{job="a",le="1"}`); n != 0 {
		t.Errorf("late of a: %v in le=1, want 0", n)
	}
	if n := value(t, reg, `tasklock_job_late_seconds_bucket{job="b",le="1800"}`); n != 0 {
		t.Errorf("late of b: %v in le=1800, want 0 (an hour late)", n)
	}
}

func TestNewRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Fatal("a second Metrics on one registry: no error")
	}
	m, err := metrics.New(nil)
	if err != nil || m == nil {
		t.Fatalf("New(nil) = %v, %v", m, err)
	}
	if err := prometheus.NewPedanticRegistry().Register(m); err != nil {
		t.Fatalf("registering New(nil)'s Metrics: %v", err)
	}
}

func TestHandler(t *testing.T) {
	m, reg := newMetrics(t)
	m.LockEvent(tasklock.Event{Type: tasklock.EventObtained, Key: "k", Owner: "o", Fence: 1})
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `tasklock_obtain_attempts_total{kind="mutex",result="obtained"} 1`) {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
}

// A real Locker and Scheduler on memstore, wired to one Metrics, move its
// counters.
func TestLockerAndScheduler(t *testing.T) {
	m, reg := newMetrics(t)
	store := memstore.New(nil)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lk, err := tasklock.New(store, &tasklock.Config{Owner: "node-1", Logger: quiet, OnEvent: m.LockEvent})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	s, err := schedule.New(lk, store, &schedule.Config{PollInterval: 10 * time.Millisecond, Logger: quiet, OnEvent: m.ScheduleEvent})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, schedule.Run) error { return nil }
	bad := func(context.Context, schedule.Run) error { return errors.New("boom") }
	for _, j := range []schedule.Job{
		{Name: "every-second", Schedule: "@every 1s", Handler: ok},
		{Name: "bad", Schedule: "0 0 3 1 1 *", Handler: bad},
	} {
		if err := s.Add(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	if _, err := s.Trigger(context.Background(), "bad"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a scheduled run and a failed triggered one", func() bool {
		return value(t, reg, `tasklock_job_runs_total{job="every-second",status="ok"}`) >= 1 &&
			value(t, reg, `tasklock_job_runs_total{job="bad",status="failed"}`) == 1 &&
			value(t, reg, "tasklock_tick_lateness_seconds_count") >= 1
	})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := value(t, reg, `tasklock_obtain_attempts_total{kind="mutex",result="obtained"}`); v < 2 {
		t.Errorf("obtained %v locks, want at least 2 (a job's lock per run)", v)
	}
	if v := value(t, reg, `tasklock_job_run_duration_seconds_count{job="bad"}`); v != 1 {
		t.Errorf("run durations of bad: %v, want 1", v)
	}
	if v := value(t, reg, `tasklock_tick_claims_total{result="claimed"}`); v < 2 {
		t.Errorf("claims: %v, want at least 2", v)
	}
	// Every run released its lock; one lock is held, then lost at Close.
	if v := value(t, reg, `tasklock_locks_held{kind="mutex"}`); v != 0 {
		t.Errorf("locks held after the runs: %v, want 0", v)
	}
	if _, err := lk.TryObtain(context.Background(), "held", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := lk.TryObtain(context.Background(), "held", nil); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("second TryObtain: %v", err)
	}
	if v := value(t, reg, `tasklock_locks_held{kind="mutex"}`); v != 1 {
		t.Errorf("locks held: %v, want 1", v)
	}
	if v := value(t, reg, `tasklock_obtain_attempts_total{kind="mutex",result="not_obtained"}`); v < 1 {
		t.Errorf("not obtained: %v, want at least 1", v)
	}
	_ = lk.Close()
	if held, closed := value(t, reg, `tasklock_locks_held{kind="mutex"}`), value(t, reg, `tasklock_locks_lost_total{cause="closed"}`); held != 0 || closed != 1 {
		t.Errorf("after Close: %v held, %v lost with cause closed; want 0 and 1", held, closed)
	}
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for wait := 100 * time.Microsecond; !cond(); wait = min(2*wait, 10*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(wait) // polling interval
	}
}

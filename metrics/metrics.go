package metrics

import (
	"errors"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// Histogram buckets, in seconds.
var (
	// waitBuckets spans a lock handed over at once (P3's 1 ms) to a long
	// wait for a job's lock.
	waitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// durationBuckets spans jobs from a quick HTTP call to a nightly batch.
	durationBuckets = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	// latenessBuckets centres on P5's target (p99 ≤ 100 ms) and reaches
	// the default MisfireAfter (5s) and beyond.
	latenessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// jobLateBuckets are fewer, as there is a histogram per job, and reach
	// the minutes a run may wait for a pool's permit.
	jobLateBuckets = []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 1800}
)

// The values of tasklock_locks_lost_total's cause label.
const (
	CauseMaxHold     = "max_hold"    // tasklock.ErrMaxHold
	CauseStalled     = "stalled"     // tasklock.ErrStalled
	CauseClosed      = "closed"      // tasklock.ErrClosed
	CauseUnsupported = "unsupported" // the store refused a renewal it can never make (tasklock.ErrUnsupported)
	CauseLost        = "lost"        // any other tasklock.ErrLockLost: the store no longer had the lease, or it was not renewed in time
	CauseOther       = "other"       // a cause that matches none of the above
)

var causes = []string{CauseMaxHold, CauseStalled, CauseClosed, CauseUnsupported, CauseLost, CauseOther}

// Cause names a lock's loss cause (tasklock.Event.Err of EventLost, or
// context.Cause of a Lock's Context) as in the cause label.
func Cause(err error) string {
	switch {
	case errors.Is(err, tasklock.ErrMaxHold):
		return CauseMaxHold
	case errors.Is(err, tasklock.ErrStalled):
		return CauseStalled
	case errors.Is(err, tasklock.ErrClosed):
		return CauseClosed
	case errors.Is(err, tasklock.ErrUnsupported):
		return CauseUnsupported
	case errors.Is(err, tasklock.ErrLockLost):
		return CauseLost
	}
	return CauseOther
}

// Metrics is a prometheus.Collector of tasklock's metrics, fed by
// LockEvent and ScheduleEvent. Its methods are safe for concurrent use.
type Metrics struct {
	obtains     *prometheus.CounterVec
	obtainWait  prometheus.Histogram
	renewals    *prometheus.CounterVec
	renewed     prometheus.Counter
	renewFailed prometheus.Counter
	lost        *prometheus.CounterVec
	held        *prometheus.GaugeVec
	heldMu      sync.Mutex
	heldLocks   map[heldKey]int // the grants counted in held: readers of one owner can share a key and fence

	runs        *prometheus.CounterVec
	runDuration *prometheus.HistogramVec
	lateness    prometheus.Histogram
	missed      *prometheus.CounterVec
	claims      *prometheus.CounterVec
	claimed     prometheus.Counter
	elsewhere   prometheus.Counter

	// Per job, by tick (see the package doc).
	due         *prometheus.CounterVec
	started     *prometheus.CounterVec
	succeeded   *prometheus.CounterVec
	skipped     *prometheus.CounterVec
	late        *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
	jobsMu      sync.Mutex
	jobs        map[string]*jobSeries
}

// jobSeries are one job's per-tick series, made (at 0) the first time the
// job is seen, so that a rule comparing them finds every one.
type jobSeries struct {
	due, started, succeeded, skipped prometheus.Counter
	late                             prometheus.Observer
	lastSuccess                      prometheus.Gauge // nil before the first success; guarded by Metrics.jobsMu
	last                             float64          // lastSuccess's value; guarded by Metrics.jobsMu
}

// heldKey identifies one grant of a lock.
type heldKey struct {
	key, owner string
	fence      uint64
	mode       tasklock.Mode
}

// New returns a Metrics registered with reg; a nil reg registers it
// nowhere, for the caller to register. The error is reg's, e.g. when
// another Metrics is registered there already.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		obtains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tasklock_obtain_attempts_total",
			Help: "Attempts to obtain a lock, by result (obtained, or not_obtained because another owner held it) and kind (mutex; read or write, the sides of a read-write lock; permit, of a semaphore).",
		}, []string{"result", "kind"}),
		obtainWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tasklock_obtain_wait_seconds",
			Help:    "How long Obtain waited before the lock was granted (0 for TryObtain).",
			Buckets: waitBuckets,
		}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tasklock_renewals_total",
			Help: "Lease renewals, by result: ok, or failed (retried until the lease's validity ends).",
		}, []string{"result"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tasklock_locks_lost_total",
			Help: "Locks that ended other than by Release, by cause: lost, max_hold, stalled, closed, unsupported, other.",
		}, []string{"cause"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tasklock_locks_held",
			Help: "Locks held now by the Lockers reporting here, by kind: mutex, read, write, permit.",
		}, []string{"kind"}),
		heldLocks: map[heldKey]int{},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tasklock_job_runs_total",
			Help: "Job run attempts that ended, and ticks skipped, by job and status (ok, failed, timeout, lost, cancelled, skipped; interrupted, counted by the node that found a dead node's run).",
		}, []string{"job", "status"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tasklock_job_run_duration_seconds",
			Help:    "How long job run attempts took, by job.",
			Buckets: durationBuckets,
		}, []string{"job"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tasklock_tick_lateness_seconds",
			Help:    "How late scheduled ticks started: first attempt's start minus the tick (trigger-now requests, backfills' and re-runs' past ticks, and retries are not counted).",
			Buckets: latenessBuckets,
		}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tasklock_ticks_missed_total",
			Help: "Ticks that came while no node ran the job and that the misfire policy passed over, by job.",
		}, []string{"job"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tasklock_tick_claims_total",
			Help: "Ticks and trigger requests this node tried to claim, by result: claimed, or claimed_elsewhere by another node first.",
		}, []string{"result"}),
	}
	for _, k := range kinds {
		m.obtains.WithLabelValues("obtained", k.String())
		m.obtains.WithLabelValues("not_obtained", k.String())
		m.held.WithLabelValues(k.String())
	}
	m.renewed = m.renewals.WithLabelValues("ok")
	m.renewFailed = m.renewals.WithLabelValues("failed")
	for _, c := range causes {
		m.lost.WithLabelValues(c)
	}
	m.due = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tasklock_job_ticks_due_total",
		Help: "Ticks and trigger-now requests of the job this node claimed to handle (not while paused): each is counted by one node of the fleet, so sum by (job) is the fleet's. Each ends as started, skipped or missed.",
	}, []string{"job"})
	m.started = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tasklock_job_ticks_started_total",
		Help: "Ticks and trigger-now requests of the job whose first attempt started on this node.",
	}, []string{"job"})
	m.succeeded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tasklock_job_ticks_succeeded_total",
		Help: "Ticks and trigger-now requests of the job that ended ok on this node (after retries, if any).",
	}, []string{"job"})
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tasklock_job_ticks_skipped_total",
		Help: "Ticks of the job this node claimed and did not run: the previous run was in progress, a MaxConcurrent or pool permit was not free, or the node shut down.",
	}, []string{"job"})
	m.late = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tasklock_job_late_seconds",
		Help:    "How late the job's scheduled ticks started on this node: first attempt's start minus the tick, waits for jitter and pool permits included (trigger-now requests and backfills' and re-runs' past ticks are not counted).",
		Buckets: jobLateBuckets,
	}, []string{"job"})
	m.lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tasklock_job_last_success_timestamp_seconds",
		Help: "When the job's last run that ended ok on this node ended, in Unix seconds; max by (job) is the fleet's.",
	}, []string{"job"})
	m.jobs = map[string]*jobSeries{}
	m.claimed = m.claims.WithLabelValues("claimed")
	m.elsewhere = m.claims.WithLabelValues("claimed_elsewhere")
	if reg != nil {
		if err := reg.Register(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.obtains, m.obtainWait, m.renewals, m.lost, m.held,
		m.runs, m.runDuration, m.lateness, m.missed, m.claims,
		m.due, m.started, m.succeeded, m.skipped, m.late, m.lastSuccess,
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// LockEvent counts a Locker's event. Pass it as tasklock.Config.OnEvent
// (or call it from yours): it does not block.
func (m *Metrics) LockEvent(e tasklock.Event) {
	switch e.Type {
	case tasklock.EventObtained:
		m.obtains.WithLabelValues("obtained", e.Mode.String()).Inc()
		m.obtainWait.Observe(e.Wait.Seconds())
		m.heldMu.Lock()
		m.heldLocks[heldKey{e.Key, e.Owner, e.Fence, e.Mode}]++
		m.heldMu.Unlock()
		m.held.WithLabelValues(e.Mode.String()).Inc()
	case tasklock.EventNotObtained:
		m.obtains.WithLabelValues("not_obtained", e.Mode.String()).Inc()
	case tasklock.EventRenewed:
		m.renewed.Inc()
	case tasklock.EventRenewFailed:
		m.renewFailed.Inc()
	case tasklock.EventLost:
		m.lost.WithLabelValues(Cause(e.Err)).Inc()
		m.ended(e)
	case tasklock.EventReleased:
		m.ended(e)
	}
}

// ended takes a lock out of the held count. A lock ends once (lost, or
// released), but the count never goes below the grants seen.
func (m *Metrics) ended(e tasklock.Event) {
	k := heldKey{e.Key, e.Owner, e.Fence, e.Mode}
	m.heldMu.Lock()
	n := m.heldLocks[k]
	switch {
	case n > 1:
		m.heldLocks[k] = n - 1
	case n == 1:
		delete(m.heldLocks, k)
	}
	m.heldMu.Unlock()
	if n > 0 {
		m.held.WithLabelValues(e.Mode.String()).Dec()
	}
}

// kinds are the values of the kind label.
var kinds = []tasklock.Mode{tasklock.ModeMutex, tasklock.ModeRead, tasklock.ModeWrite, tasklock.ModePermit}

// ScheduleEvent counts a Scheduler's event. Pass it as
// schedule.Config.OnEvent (or call it from yours): it does not block.
func (m *Metrics) ScheduleEvent(e schedule.Event) {
	switch e.Type {
	case schedule.EventClaimed:
		m.claimed.Inc()
		if !e.Paused {
			m.job(e.Job).due.Inc()
		}
	case schedule.EventClaimedElsewhere:
		m.elsewhere.Inc()
	case schedule.EventRunStarted:
		if e.First {
			// This node's first attempt at a tick it claimed: attempt 1,
			// or the first after a stopped node's (a retake) or earlier
			// runs' (a re-run), so started counts what due counted.
			m.job(e.Job).started.Inc()
		}
		if e.Attempt == 1 {
			js := m.job(e.Job)
			if e.Trigger == "" && !e.Requested { // a backfill's tick is past by design
				late := max(e.Late, 0).Seconds()
				m.lateness.Observe(late)
				js.late.Observe(late)
			}
		}
	case schedule.EventRunEnded:
		m.runs.WithLabelValues(e.Job, string(e.Status)).Inc()
		m.runDuration.WithLabelValues(e.Job).Observe(e.Duration.Seconds())
		if e.Status == ledger.RunOK {
			js := m.job(e.Job)
			js.succeeded.Inc()
			end := float64(e.Start.Add(e.Duration).UnixNano()) / 1e9
			m.jobsMu.Lock()
			if js.lastSuccess == nil { // no series before the first success
				js.lastSuccess = m.lastSuccess.WithLabelValues(e.Job)
			}
			if end > js.last {
				js.last = end
				js.lastSuccess.Set(end)
			}
			m.jobsMu.Unlock()
		}
	case schedule.EventSkipped:
		m.runs.WithLabelValues(e.Job, string(e.Status)).Inc()
		m.job(e.Job).skipped.Inc()
	case schedule.EventRunInterrupted:
		m.runs.WithLabelValues(e.Job, string(e.Status)).Inc()
	case schedule.EventMissed:
		m.missed.WithLabelValues(e.Job).Inc()
	}
}

// job returns the per-tick series of the named job, making them at 0 the
// first time: tasklock_ticks_missed_total's too.
func (m *Metrics) job(name string) *jobSeries {
	m.jobsMu.Lock()
	defer m.jobsMu.Unlock()
	js := m.jobs[name]
	if js == nil {
		js = &jobSeries{
			due: m.due.WithLabelValues(name), started: m.started.WithLabelValues(name),
			succeeded: m.succeeded.WithLabelValues(name), skipped: m.skipped.WithLabelValues(name),
			late: m.late.WithLabelValues(name),
		}
		m.missed.WithLabelValues(name)
		m.jobs[name] = js
	}
	return js
}

// Handler serves the metrics g gathers in Prometheus' text (or
// OpenMetrics) format, e.g. at /metrics.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

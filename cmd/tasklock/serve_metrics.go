//go:build unix

package main

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/internal/buildinfo"
	"github.com/tasklock/tasklock/internal/slogfilter"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/metrics"
	"github.com/tasklock/tasklock/schedule"
)

// logFormats are the values of serve's --log-format.
var logFormats = []string{"text", "json"}

// newLogHandler returns serve's log handler: slog's text or JSON handler
// (format is checked by parseServe) writing to w from level up.
func newLogHandler(format string, w io.Writer, level slog.Level) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// observer turns the Locker's and the Schedulers' events into metrics and
// into serve's log lines of runs.
type observer struct {
	reg *prometheus.Registry
	m   *metrics.Metrics
	log *slog.Logger
	// broken, when set, returns the jobs in force and whether each is
	// broken, for tasklock_job_broken.
	broken func() map[string]bool
	// graces are the jobs' misfire.grace, for tasklock_job_ticks_late_total
	// and tasklock_job_grace_seconds (setJobs).
	graces atomic.Pointer[map[string]time.Duration]
	// lateTicks is tasklock_job_ticks_late_total.
	lateTicks *prometheus.CounterVec
	// notifications is tasklock_notifications_total (notify.go).
	notifications *prometheus.CounterVec
}

func newObserver(log *slog.Logger) *observer {
	m, _ := metrics.New(nil) // registered below; New(nil) cannot fail
	reg := prometheus.NewRegistry()
	o := &observer{reg: reg, m: m, log: log}
	o.lateTicks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tasklock_job_ticks_late_total",
		Help: "Scheduled ticks of the job whose first attempt started on this node later than the job's misfire.grace after the tick (waiting for jitter, a pool permit, or run by the misfire policy; backfills' and re-runs' past ticks are not counted).",
	}, []string{"job"})
	o.notifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tasklock_notifications_total",
		Help: "Notifications this node sent, by job, event (failure, timeout, lost, missed, interrupted, recovery) and result (delivered, failed), one per notification and target.",
	}, []string{"job", "event", "result"})
	reg.MustRegister(o.notifications)
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), brokenCollector{o}, graceCollector{o},
		buildInfoGauge(buildinfo.Get()), o.lateTicks)
	return o
}

// setJobs takes the jobs in force, the configuration file's and those
// defined at run time, for the grace of each: their
// tasklock_job_ticks_late_total series start at 0. A nil observer (a
// server built by a test without one) takes nothing.
func (o *observer) setJobs(file, runtime []config.Job) {
	if o == nil {
		return
	}
	g := make(map[string]time.Duration, len(file)+len(runtime))
	for _, j := range slices.Concat(runtime, file) { // the file's win a name
		g[j.Name] = cmp.Or(j.MisfireAfter, schedule.DefaultMisfireAfter)
		o.lateTicks.WithLabelValues(j.Name)
	}
	o.graces.Store(&g)
}

// graceDesc describes tasklock_job_grace_seconds.
var graceDesc = prometheus.NewDesc("tasklock_job_grace_seconds",
	"The job's misfire.grace: how late a tick may start and still count as on time.", []string{"job"}, nil)

// graceCollector serves tasklock_job_grace_seconds for the jobs in force.
type graceCollector struct{ o *observer }

// Describe implements prometheus.Collector.
func (c graceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- graceDesc }

// Collect implements prometheus.Collector.
func (c graceCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.o.graces.Load()
	if g == nil {
		return
	}
	for job, d := range *g {
		ch <- prometheus.MustNewConstMetric(graceDesc, prometheus.GaugeValue, d.Seconds(), job)
	}
}

// brokenDesc describes tasklock_job_broken.
var brokenDesc = prometheus.NewDesc("tasklock_job_broken",
	"1 when the job's schedule gives no next tick, so it does not run until the schedule is fixed; 0 otherwise.", []string{"job"}, nil)

// brokenCollector serves tasklock_job_broken for the jobs in force.
type brokenCollector struct{ o *observer }

// Describe implements prometheus.Collector.
func (c brokenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- brokenDesc }

// Collect implements prometheus.Collector.
func (c brokenCollector) Collect(ch chan<- prometheus.Metric) {
	if c.o.broken == nil {
		return
	}
	for job, broken := range c.o.broken() {
		v := 0.0
		if broken {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(brokenDesc, prometheus.GaugeValue, v, job)
	}
}

// buildInfoGauge is tasklock_build_info{version, revision, goversion} 1:
// which build each serve runs, for dashboards to join on.
func buildInfoGauge(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tasklock_build_info",
		Help: "The build of tasklock serve: module version, VCS revision and Go version; always 1.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "revision": in.Revision, "goversion": in.GoVersion,
		},
	})
	g.Set(1)
	return g
}

// metricsHandler serves the metrics at /metrics of the --http server.
func (o *observer) metricsHandler() http.Handler { return metrics.Handler(o.reg) }

// lockEvent is the Locker's Config.OnEvent.
func (o *observer) lockEvent(e tasklock.Event) { o.m.LockEvent(e) }

// scheduleEvent is the Schedulers' Config.OnEvent: besides the metrics it
// logs one line per run start and end, and per tick skipped or missed. Runs
// that failed, timed out, lost their lock, were cancelled or were
// interrupted log at WARN, a broken job at ERROR, the rest at INFO.
func (o *observer) scheduleEvent(e schedule.Event) {
	o.m.ScheduleEvent(e)
	if e.Type == schedule.EventRunStarted && e.Attempt == 1 && e.Trigger == "" && !e.Requested {
		if g := o.graces.Load(); g != nil {
			if grace, ok := (*g)[e.Job]; ok && e.Late > grace {
				o.lateTicks.WithLabelValues(e.Job).Inc()
			}
		}
	}
	var msg string
	level := slog.LevelInfo
	switch e.Type {
	case schedule.EventRunStarted:
		msg = "run started"
	case schedule.EventRunEnded:
		msg = "run ended"
		level = runLevel(e.Status)
	case schedule.EventSkipped:
		msg = "tick skipped"
	case schedule.EventMissed:
		msg = "tick missed"
	case schedule.EventRunInterrupted:
		msg, level = "run interrupted: its node stopped before recording the outcome", slog.LevelWarn
	case schedule.EventBroken:
		msg, level = "job broken: its schedule gives no next tick; it will not run until the schedule is fixed", slog.LevelError
	default:
		return
	}
	if !o.log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("job", e.Job), slog.Time("tick", e.Tick))
	if e.Trigger != "" {
		attrs = append(attrs, slog.String("trigger", e.Trigger))
	}
	if e.Shards > 1 {
		attrs = append(attrs, slog.Int("shard", e.Shard))
	}
	attrs = append(attrs, slog.String("node", e.Node))
	switch e.Type {
	case schedule.EventRunStarted:
		attrs = append(attrs, slog.Uint64("fence", e.Fence), slog.Int("attempt", e.Attempt), slog.Duration("late", e.Late))
	case schedule.EventRunEnded:
		attrs = append(attrs, slog.Uint64("fence", e.Fence), slog.Int("attempt", e.Attempt),
			slog.String("status", string(e.Status)), slog.Duration("duration", e.Duration))
	case schedule.EventMissed:
		attrs = append(attrs, slog.String("status", string(e.Status)), slog.Duration("late", e.Late))
	case schedule.EventRunInterrupted:
		attrs = append(attrs, slog.String("ran_on", e.RanOn), slog.Uint64("fence", e.Fence), slog.Int("attempt", e.Attempt),
			slog.String("status", string(e.Status)))
	default:
		attrs = append(attrs, slog.String("status", string(e.Status)))
	}
	if e.Error != "" {
		attrs = append(attrs, slog.String("err", e.Error))
	}
	o.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// runLevel is the level of a run's end: WARN when it did not succeed.
func runLevel(st ledger.RunStatus) slog.Level {
	switch st {
	case ledger.RunFailed, ledger.RunTimeout, ledger.RunLost, ledger.RunInterrupted, ledger.RunCancelled:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// schedulerLogger is the logger serve gives its Schedulers: warnings and
// errors only, because serve logs the runs itself (scheduleEvent) and the
// Schedulers' own lines of runs would repeat them. An interrupted run is
// the one the Scheduler logs at WARN; serve's own line of it (with its
// fence and status) is the one kept.
func schedulerLogger(log *slog.Logger) *slog.Logger {
	return slog.New(withoutRunLines{slogfilter.AtLeast(log.Handler(), slog.LevelWarn)})
}

// schedulerInterrupted is the message of the Scheduler's line of an
// interrupted run (schedule/sweep.go), which scheduleEvent logs instead.
const schedulerInterrupted = "schedule: run interrupted"

// withoutRunLines drops the Scheduler's lines of runs that serve logs
// itself.
type withoutRunLines struct{ slog.Handler }

func (h withoutRunLines) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == schedulerInterrupted {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h withoutRunLines) WithAttrs(a []slog.Attr) slog.Handler {
	return withoutRunLines{h.Handler.WithAttrs(a)}
}

func (h withoutRunLines) WithGroup(g string) slog.Handler {
	return withoutRunLines{h.Handler.WithGroup(g)}
}

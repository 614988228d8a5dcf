package dashboard

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
)

// Bounds of /api/overview's parameters.
const (
	defaultWindow  = 24 * time.Hour
	minWindow      = time.Hour
	maxWindow      = 7 * 24 * time.Hour
	defaultBucket  = time.Minute
	maxBars        = 1440 // window / bucket
	maxSampledRuns = 10000
	maxMissedList  = 50
)

// overviewQuery reads window= and bucket= (Go durations, e.g. 24h, 5m).
func overviewQuery(r *http.Request) (window, bucket time.Duration, err error) {
	q := r.URL.Query()
	window, bucket = defaultWindow, defaultBucket
	if s := q.Get("window"); s != "" {
		if window, err = time.ParseDuration(s); err != nil || window < minWindow || window > maxWindow {
			return 0, 0, errors.New("window: want a duration from 1h to 168h, such as 24h")
		}
	}
	if s := q.Get("bucket"); s != "" {
		if bucket, err = time.ParseDuration(s); err != nil || bucket < time.Minute || bucket%time.Minute != 0 {
			return 0, 0, errors.New("bucket: want a whole number of minutes, such as 1m or 15m")
		}
	}
	if window/bucket > maxBars {
		return 0, 0, errors.New("bucket: " + window.String() + " in buckets of " + bucket.String() +
			" is more than " + strconv.Itoa(maxBars) + " buckets; take a longer bucket")
	}
	return window, bucket, nil
}

// overviewBucket is one bucket of /api/overview's charts.
type overviewBucket struct {
	At     time.Time        `json:"at"`
	Counts map[string]int64 `json:"counts"`
	P50MS  *float64         `json:"p50_ms"`
	P99MS  *float64         `json:"p99_ms"`
}

// periodStats sums the buckets of one period (the last hour, the last
// day).
type periodStats struct {
	Runs        map[string]int64 `json:"runs"`
	Total       int64            `json:"total"`
	FailureRate *float64         `json:"failure_rate"` // failed, timeout, lost and interrupted over the runs that ended so; null when none did
	P50MS       *float64         `json:"p50_ms"`
	P99MS       *float64         `json:"p99_ms"`
	LockLosses  int64            `json:"lock_losses"` // runs that ended lost: the job's lock, or a pool's or max_concurrent's permit, was lost while it ran
	lateness    ledger.Lateness
}

// missedJob is a job that missed its last tick.
type missedJob struct {
	Job  string    `json:"job"`
	Tick time.Time `json:"tick"` // the missed tick
}

// ms is d in milliseconds, for JSON.
func ms(d time.Duration) *float64 {
	v := float64(d.Microseconds()) / 1000
	return &v
}

// add counts bucket b into p.
func (p *periodStats) add(b *ledger.StatsBucket) {
	for st, n := range b.Counts {
		p.Runs[string(st)] += n
		p.Total += n
	}
	p.lateness.Add(&b.Lateness)
}

// finish computes p's derived figures.
func (p *periodStats) finish() {
	var bad, ended int64
	for st, n := range p.Runs {
		switch ledger.RunStatus(st) {
		case ledger.RunFailed, ledger.RunTimeout, ledger.RunLost, ledger.RunInterrupted:
			bad += n
			ended += n
		case ledger.RunOK:
			ended += n
		}
	}
	if ended > 0 {
		r := float64(bad) / float64(ended)
		p.FailureRate = &r
	}
	p.LockLosses = p.Runs[string(ledger.RunLost)]
	if d, ok := p.lateness.Quantile(0.5); ok {
		p.P50MS = ms(d)
	}
	if d, ok := p.lateness.Quantile(0.99); ok {
		p.P99MS = ms(d)
	}
}

// runStats aggregates the window: in the store when it implements
// ledger.Stats, else from at most maxSampledRuns of the newest records
// (sampled).
func (h *handler) runStats(ctx context.Context, q ledger.StatsQuery) (ledger.RunStats, int, error) {
	if st, ok := h.ledger.(ledger.Stats); ok {
		s, err := st.RunStats(ctx, q)
		return s, 0, err
	}
	rs, err := h.ledger.Runs(ctx, ledger.RunQuery{From: q.From, To: q.To, Limit: maxSampledRuns})
	if err != nil {
		return ledger.RunStats{}, 0, err
	}
	out := ledger.NewRunStats(q)
	for i := range rs {
		out.Add(&q, &rs[i])
	}
	out.Sampled = len(rs) == maxSampledRuns
	return out, len(rs), nil
}

// overview is GET /api/overview?window=24h&bucket=1m: the fleet at a
// glance (see the package documentation).
func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	if h.ledger == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no schedule ledger")
		return
	}
	window, bucket, err := overviewQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	now := h.clock.Now().UTC()
	q := ledger.StatsQuery{From: now.Add(-window).Truncate(bucket), To: now, Bucket: bucket}
	conf := h.configured()
	var (
		stats            ledger.RunStats
		read             int
		states           []ledger.JobState
		leases           []driver.Lease
		errA, errJ, errL error
		errR             error
		wg               sync.WaitGroup
	)
	wg.Go(func() { stats, read, errA = h.runStats(ctx, q) })
	wg.Go(func() { states, errJ = h.ledger.Jobs(ctx) })
	wg.Go(func() { _, errR = h.recentRuns(ctx, len(conf)) })
	if h.lister != nil {
		wg.Go(func() { leases, errL = h.lister.Leases(ctx, "") })
	}
	wg.Wait()
	if err := errors.Join(errA, errJ, errL, errR); err != nil {
		h.storeError(w, r, err)
		return
	}

	hour := periodStats{Runs: map[string]int64{}}
	day := periodStats{Runs: map[string]int64{}}
	all := periodStats{Runs: map[string]int64{}}
	buckets := make([]overviewBucket, len(stats.Buckets))
	for i := range stats.Buckets {
		b := &stats.Buckets[i]
		ob := overviewBucket{At: b.At, Counts: map[string]int64{}}
		for st, n := range b.Counts {
			ob.Counts[string(st)] = n
		}
		if d, ok := b.Lateness.Quantile(0.5); ok {
			ob.P50MS = ms(d)
		}
		if d, ok := b.Lateness.Quantile(0.99); ok {
			ob.P99MS = ms(d)
		}
		buckets[i] = ob
		// A bucket counts in a period when it starts inside it: the
		// periods are whole buckets, up to one bucket longer.
		if !b.At.Before(now.Add(-time.Hour).Truncate(bucket)) {
			hour.add(b)
		}
		if !b.At.Before(now.Add(-24 * time.Hour).Truncate(bucket)) {
			day.add(b)
		}
		all.add(b)
	}
	hour.finish()
	day.finish()
	all.finish()

	// Jobs by state, and those that missed their last tick.
	byState := make(map[string]ledger.JobState, len(states))
	for _, st := range states {
		byState[st.Job] = st
	}
	jobs := map[string]int{"total": 0, "active": 0, "paused": 0, "broken": 0}
	for name, j := range conf {
		jobs["total"]++
		st := byState[name]
		switch ticks, err := h.next(j, now, 1); {
		case err != nil || len(ticks) == 0:
			jobs["broken"]++
			continue
		case st.Paused:
			jobs["paused"]++
			continue
		}
		jobs["active"]++
	}
	// The jobs the ledger knows that are not configured here (defined at
	// run time elsewhere, or all of them without Options.Jobs).
	for _, st := range states {
		if _, ok := conf[st.Job]; ok {
			continue
		}
		jobs["total"]++
		switch {
		case apijson.SpecBroken(st.Spec, now) != "":
			jobs["broken"]++
		case st.Paused:
			jobs["paused"]++
		default:
			jobs["active"]++
		}
	}
	missed := []missedJob{}
	if hour.Runs[string(ledger.RunMissed)] > 0 {
		if missed, err = h.missedJobs(ctx, now.Add(-time.Hour)); err != nil {
			h.storeError(w, r, err)
			return
		}
	}

	nodes, locks := map[string]int{"alive": 0}, map[string]int{"held": 0, "waiting": 0}
	for _, l := range leases {
		if l.Waiting {
			locks["waiting"]++
			continue
		}
		locks["held"]++
		if strings.HasPrefix(l.Key, h.opts.NodeKeyPrefix) {
			nodes["alive"]++
		}
	}
	out := map[string]any{
		"at": now, "from": q.From, "to": q.To,
		"window_ms": window.Milliseconds(), "bucket_ms": bucket.Milliseconds(),
		"sampled": stats.Sampled, "jobs": jobs, "missed": missed,
		"last_hour": hour, "last_day": day, "window": all, "buckets": buckets,
	}
	if h.lister != nil {
		out["nodes"], out["locks"] = nodes, locks
	} else {
		out["nodes"], out["locks"] = nil, nil
	}
	if stats.Sampled {
		out["sample_note"] = "this store keeps no run aggregates (ledger.Stats): the figures come from the newest " +
			strconv.Itoa(read) + " run records of the window only"
	}
	writeJSON(w, http.StatusOK, out)
}

// missedJobs lists the jobs whose newest record is a missed tick, among
// those with a missed record since from: one Runs call for the missed
// records (made only when the aggregate counted some, so it costs nothing
// while nothing is missed), and one RecentStatuses call to keep the jobs
// that have not run since (without ledger.Stats, the newest records this
// dashboard knows decide).
func (h *handler) missedJobs(ctx context.Context, from time.Time) ([]missedJob, error) {
	rs, err := h.ledger.Runs(ctx, ledger.RunQuery{From: from, Status: ledger.RunMissed, Limit: 4 * maxMissedList})
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]time.Time{}
	for _, r := range rs {
		if _, ok := seen[r.Job]; !ok {
			seen[r.Job] = r.Tick
			names = append(names, r.Job)
		}
	}
	still := func(job string) bool {
		h.lastMu.Lock()
		defer h.lastMu.Unlock()
		lr, ok := h.lastRun[job]
		return !ok || lr.Status == ledger.RunMissed || !lr.Tick.After(seen[job])
	}
	if st, ok := h.ledger.(ledger.Stats); ok && len(names) > 0 {
		recent, err := st.RecentStatuses(ctx, names, 1)
		if err != nil {
			return nil, err
		}
		still = func(job string) bool { return len(recent[job]) > 0 && recent[job][0] == ledger.RunMissed }
	}
	out := []missedJob{}
	for _, n := range names {
		if len(out) < maxMissedList && still(n) {
			tick := seen[n]
			out = append(out, missedJob{Job: n, Tick: tick})
		}
	}
	return out, nil
}

// maxRecentParam bounds /api/jobs' recent=.
const maxRecentParam = 100

// recentParam reads /api/jobs' recent=N: 0 when absent.
func recentParam(r *http.Request) (int, error) {
	s := r.URL.Query().Get("recent")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxRecentParam {
		return 0, errors.New("recent: want a whole number from 1 to " + strconv.Itoa(maxRecentParam))
	}
	return n, nil
}

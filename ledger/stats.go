package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Stats is implemented by ledgers that can aggregate their run records in
// the store, for the dashboard's overview: counts by status per time bucket
// and a histogram of tick lateness, without reading the history record by
// record. Like Catalog it is found by type assertion on the store; without
// it a caller may read a bounded number of the newest records with Runs and
// say that its figures are sampled.
type Stats interface {
	// RunStats aggregates the run records whose Tick is in [q.From, q.To),
	// in buckets of q.Bucket from q.From. A record counts once, with the
	// status it has now (a running record replaced by its outcome counts
	// as the outcome; one written again, as by a RecordRuns repeated
	// after an error, still once). Its cost grows with the number of
	// records in the window at most, never with the whole history. A store
	// that keeps rollups written with the records (redisstore) may differ
	// in what its documentation states: pruned records still count until
	// the rollup expires.
	RunStats(ctx context.Context, q StatsQuery) (RunStats, error)

	// RecentStatuses returns, for each job of jobs, the statuses of its
	// newest n run records in the order Runs lists them (newest first), in
	// one round trip where the store allows. A job without records is left
	// out of the map.
	RecentStatuses(ctx context.Context, jobs []string, n int) (map[string][]RunStatus, error)
}

// Latest is implemented by ledgers that read the newest run record of many
// jobs in one round trip, for the dashboard's jobs table: without it a
// caller reads them with one Runs call per job. Like Stats it is found by
// type assertion on the store.
type Latest interface {
	// LatestRuns returns the newest run record of each job of jobs (the
	// first that Runs would list for the job), without its Output, in one
	// round trip per MaxRecent jobs where the store allows. A job without
	// records has none; the order of the result is unspecified.
	LatestRuns(ctx context.Context, jobs []string) ([]RunRecord, error)
}

// StatsQuery selects what Stats.RunStats aggregates.
type StatsQuery struct {
	// Ticks in [From, To); From a whole minute (so that stores can keep
	// per-minute rollups), before To.
	From, To time.Time
	Bucket   time.Duration // the width of a bucket: a whole number of minutes, at least one
}

// MaxStatsBuckets bounds (To-From)/Bucket in a StatsQuery.
const MaxStatsBuckets = 10080

// MaxRecent bounds RecentStatuses' n and the number of its jobs.
const MaxRecent = 1000

// Check reports what makes q invalid whatever the store.
func (q *StatsQuery) Check() error {
	switch {
	case q.From.IsZero() || q.To.IsZero():
		return errors.New("run stats: zero From or To")
	case !q.From.Before(q.To):
		return fmt.Errorf("run stats: From %v is not before To %v", q.From, q.To)
	case !q.From.Equal(q.From.Truncate(time.Minute)):
		return fmt.Errorf("run stats: From %v is not a whole minute", q.From)
	case q.Bucket < time.Minute || q.Bucket%time.Minute != 0:
		return fmt.Errorf("run stats: Bucket %v is not a whole number of minutes", q.Bucket)
	case q.To.Sub(q.From)/q.Bucket >= MaxStatsBuckets:
		return fmt.Errorf("run stats: %v in buckets of %v is more than %d buckets", q.To.Sub(q.From), q.Bucket, MaxStatsBuckets)
	}
	return nil
}

// Buckets returns how many buckets q has: the last one may be partial.
func (q *StatsQuery) Buckets() int {
	return int((q.To.Sub(q.From) + q.Bucket - 1) / q.Bucket)
}

// Index returns the bucket of tick t, which must be in [From, To).
func (q *StatsQuery) Index(t time.Time) int { return int(t.Sub(q.From) / q.Bucket) }

// CheckRecent reports what makes RecentStatuses' arguments invalid.
func CheckRecent(jobs []string, n int) error {
	switch {
	case n < 1 || n > MaxRecent:
		return fmt.Errorf("recent statuses: n %d is not in [1, %d]", n, MaxRecent)
	case len(jobs) > MaxRecent:
		return fmt.Errorf("recent statuses: %d jobs, more than %d", len(jobs), MaxRecent)
	}
	return nil
}

// CheckLatest reports what makes LatestRuns' arguments invalid.
func CheckLatest(jobs []string) error {
	if len(jobs) > MaxRecent {
		return fmt.Errorf("latest runs: %d jobs, more than %d", len(jobs), MaxRecent)
	}
	return nil
}

// LatenessBounds are the upper bounds of the buckets of a lateness
// histogram: bucket i counts the lateness d with LatenessBounds[i-1] < d
// <= LatenessBounds[i] (bucket 0 everything up to the first bound, also a
// negative lateness from clock skew), and one bucket more counts what is
// later than the last bound. They are fixed so that stores can keep
// histograms and add them up.
var LatenessBounds = [...]time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
}

// LatenessBuckets is the number of buckets of a lateness histogram.
const LatenessBuckets = len(LatenessBounds) + 1

// Lateness is a histogram of tick lateness (LatenessBounds).
type Lateness [LatenessBuckets]int64

// LatenessBucket returns the histogram bucket of lateness d.
func LatenessBucket(d time.Duration) int {
	i, _ := slices.BinarySearch(LatenessBounds[:], d)
	return i
}

// Add adds o to h.
func (h *Lateness) Add(o *Lateness) {
	for i := range h {
		h[i] += o[i]
	}
}

// Count returns the number of values in h.
func (h *Lateness) Count() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile estimates the q-quantile (0 < q <= 1) of h: it finds the bucket
// that holds it and interpolates linearly inside it, from 0 for the first
// bucket; a quantile in the last bucket (later than every bound) is
// reported as the last bound. ok is false when h is empty.
func (h *Lateness) Quantile(q float64) (d time.Duration, ok bool) {
	n := h.Count()
	if n == 0 {
		return 0, false
	}
	rank := q * float64(n)
	var seen float64
	for i, c := range h {
		if c == 0 || seen+float64(c) < rank {
			seen += float64(c)
			continue
		}
		if i == len(LatenessBounds) {
			return LatenessBounds[i-1], true
		}
		lo := time.Duration(0)
		if i > 0 {
			lo = LatenessBounds[i-1]
		}
		frac := (rank - seen) / float64(c)
		return lo + time.Duration(frac*float64(LatenessBounds[i]-lo)), true
	}
	return LatenessBounds[len(LatenessBounds)-1], true
}

// RunStats is what Stats.RunStats returns.
type RunStats struct {
	// Buckets has one entry per bucket of the query, oldest first, also
	// for buckets without records.
	Buckets []StatsBucket
	// Sampled is set when the figures come from part of the records (a
	// caller's fallback), not from every record in the window.
	Sampled bool
}

// StatsBucket aggregates the run records of one bucket.
type StatsBucket struct {
	At     time.Time           // the bucket's start
	Counts map[RunStatus]int64 // records by status; nil when none
	// Lateness is the histogram of Start - Tick of the bucket's records
	// that have a Start and an Attempt of at most 1 (the first attempt:
	// retries start late by design).
	Lateness Lateness
}

// NewRunStats returns the empty buckets of q.
func NewRunStats(q StatsQuery) RunStats {
	bs := make([]StatsBucket, q.Buckets())
	for i := range bs {
		bs[i].At = q.From.Add(time.Duration(i) * q.Bucket).UTC()
	}
	return RunStats{Buckets: bs}
}

// Add counts r in rs when its Tick is in q's window: the one home of what a
// record adds to the aggregate, for stores that aggregate in Go.
func (rs *RunStats) Add(q *StatsQuery, r *RunRecord) {
	if r.Tick.Before(q.From) || !r.Tick.Before(q.To) {
		return
	}
	b := &rs.Buckets[q.Index(r.Tick)]
	b.count(r.Status, 1)
	if late, ok := r.Lateness(); ok {
		b.Lateness[LatenessBucket(late)]++
	}
}

// Count adds n records of status st to b.
func (b *StatsBucket) count(st RunStatus, n int64) {
	if b.Counts == nil {
		b.Counts = make(map[RunStatus]int64)
	}
	b.Counts[st] += n
}

// AddCount adds n records of status st to the bucket of tick t (for stores
// that aggregate in the store and add up their groups here); a t outside
// the window is ignored.
func (rs *RunStats) AddCount(q *StatsQuery, t time.Time, st RunStatus, n int64) {
	if n == 0 || t.Before(q.From) || !t.Before(q.To) {
		return
	}
	rs.Buckets[q.Index(t)].count(st, n)
}

// AddLateness adds n values to lateness bucket i of the bucket of tick t.
func (rs *RunStats) AddLateness(q *StatsQuery, t time.Time, i int, n int64) {
	if n == 0 || i < 0 || i >= LatenessBuckets || t.Before(q.From) || !t.Before(q.To) {
		return
	}
	rs.Buckets[q.Index(t)].Lateness[i] += n
}

// Lateness returns how late r's attempt started after its tick, for a first
// attempt (Attempt 0 or 1) that started; ok is false otherwise.
func (r *RunRecord) Lateness() (d time.Duration, ok bool) {
	if r.Start.IsZero() || r.Attempt > 1 {
		return 0, false
	}
	return r.Start.Sub(r.Tick), true
}

// LatenessSQL returns a SQL CASE expression that gives the lateness
// histogram bucket (LatenessBounds) of the lateness us, a SQL expression in
// microseconds: the one home of the bounds for the SQL stores' GROUP BY.
func LatenessSQL(us string) string {
	var b strings.Builder
	b.WriteString("CASE")
	for i, d := range LatenessBounds {
		fmt.Fprintf(&b, " WHEN %s <= %d THEN %d", us, d.Microseconds(), i)
	}
	fmt.Fprintf(&b, " ELSE %d END", len(LatenessBounds))
	return b.String()
}

// KeyedStatus is one record's key and status, as stores read them for
// RecentStatuses.
type KeyedStatus struct {
	Key    RunKey
	Status RunStatus
}

// GroupRecent appends the statuses of rs to out by job, each job's in the
// order Runs lists them, for stores that read several jobs' newest records
// in one unordered answer.
func GroupRecent(out map[string][]RunStatus, rs []KeyedStatus) {
	slices.SortFunc(rs, func(a, b KeyedStatus) int {
		if c := strings.Compare(a.Key.Job, b.Key.Job); c != 0 {
			return c
		}
		return a.Key.Compare(b.Key)
	})
	for _, r := range rs {
		out[r.Key.Job] = append(out[r.Key.Job], r.Status)
	}
}

package mysqlstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Stats = (*Store)(nil)

// statsSQL is RunStats' statement for q: one GROUP BY over the window's
// range of rev_tick (minus the tick in µs), read from the covering key
// by_stats of migration 007 (TestRunStatsPlan shows the plan). The
// lateness bucket is -1 for records without one (not started, retries).
func (s *Store) statsSQL(q *ledger.StatsQuery) string {
	from, to := q.From.UnixMicro(), q.To.UnixMicro()
	return `SELECT FLOOR((-rev_tick - ` + strconv.FormatInt(from, 10) + `) / ` + strconv.FormatInt(q.Bucket.Microseconds(), 10) + `) AS b, status,
  CASE WHEN started_at IS NULL OR attempt > 1 THEN -1 ELSE ` + ledger.LatenessSQL("TIMESTAMPDIFF(MICROSECOND, tick, started_at)") + ` END AS lb,
  COUNT(*)
FROM ` + s.ledgerTable("_runs") + ` FORCE INDEX (by_stats)
WHERE rev_tick <= ` + strconv.FormatInt(-from, 10) + ` AND rev_tick > ` + strconv.FormatInt(-to, 10) + `
GROUP BY b, status, lb`
}

// RunStats implements ledger.Stats with one statement (statsSQL).
func (s *Store) RunStats(ctx context.Context, q ledger.StatsQuery) (ledger.RunStats, error) {
	if err := ctx.Err(); err != nil {
		return ledger.RunStats{}, err
	}
	if err := q.Check(); err != nil {
		return ledger.RunStats{}, fmt.Errorf("mysqlstore: %w", err)
	}
	out := ledger.NewRunStats(q)
	rows, err := s.db.QueryContext(ctx, s.statsSQL(&q))
	if err != nil {
		return ledger.RunStats{}, s.wrapLedger("run stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			b, lb, n int64
			status   string
		)
		if err := rows.Scan(&b, &status, &lb, &n); err != nil {
			return ledger.RunStats{}, s.wrapLedger("run stats", err)
		}
		at := q.From.Add(q.Bucket * time.Duration(b))
		out.AddCount(&q, at, ledger.RunStatus(status), n)
		out.AddLateness(&q, at, int(lb), n)
	}
	if err := rows.Err(); err != nil {
		return ledger.RunStats{}, s.wrapLedger("run stats", err)
	}
	return out, nil
}

// recentChunk is the most jobs one RecentStatuses statement names.
const recentChunk = 200

// recentSQL is RecentStatuses' statement for jobs: a UNION ALL of one
// LIMITed read of the primary key (a job's history in listing order) per
// job.
func (s *Store) recentSQL(jobs []string, n int) string {
	return s.perJob("job, rev_tick, trigger_id, shard, rev_attempt, status", jobs, n)
}

// perJob is a statement reading columns from the newest n run records of
// each job of jobs: a UNION ALL of one LIMITed read of the primary key (a
// job's history in listing order) per job.
func (s *Store) perJob(columns string, jobs []string, n int) string {
	var b strings.Builder
	for i, job := range jobs {
		if i > 0 {
			b.WriteString("\nUNION ALL ")
		}
		b.WriteString("(SELECT " + columns + " FROM " + s.ledgerTable("_runs") +
			" FORCE INDEX (PRIMARY) WHERE job = " + string(appendHex(nil, job)) +
			" ORDER BY rev_tick, trigger_id, shard, rev_attempt LIMIT " + strconv.Itoa(n) + ")")
	}
	return b.String()
}

// LatestRuns implements ledger.Latest with one statement per 200 jobs
// (perJob): one row of the primary key per job.
func (s *Store) LatestRuns(ctx context.Context, jobs []string) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ledger.CheckLatest(jobs); err != nil {
		return nil, fmt.Errorf("mysqlstore: %w", err)
	}
	var out []ledger.RunRecord
	for chunk := range slices.Chunk(jobs, recentChunk) {
		rows, err := s.db.QueryContext(ctx, s.perJob(latestColumns, chunk, 1))
		if err == nil {
			out, err = scanRuns(rows, out)
		}
		if err != nil {
			return nil, s.wrapLedger("latest runs", err)
		}
	}
	return out, nil
}

// RecentStatuses implements ledger.Stats with one statement per 200 jobs
// (recentSQL): it reads n rows per job whatever the length of the
// history.
func (s *Store) RecentStatuses(ctx context.Context, jobs []string, n int) (map[string][]ledger.RunStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ledger.CheckRecent(jobs, n); err != nil {
		return nil, fmt.Errorf("mysqlstore: %w", err)
	}
	out := make(map[string][]ledger.RunStatus)
	for chunk := range slices.Chunk(jobs, recentChunk) {
		rows, err := s.db.QueryContext(ctx, s.recentSQL(chunk, n))
		if err != nil {
			return nil, s.wrapLedger("recent statuses", err)
		}
		var recs []ledger.KeyedStatus
		for rows.Next() {
			var (
				r               ledger.KeyedStatus
				revTick, revAtt int64
				status          string
			)
			if err := rows.Scan(&r.Key.Job, &revTick, &r.Key.Trigger, &r.Key.Shard, &revAtt, &status); err != nil {
				rows.Close()
				return nil, s.wrapLedger("recent statuses", err)
			}
			r.Key.Tick, r.Key.Attempt, r.Status = time.UnixMicro(-revTick).UTC(), int(-revAtt), ledger.RunStatus(status)
			recs = append(recs, r)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, s.wrapLedger("recent statuses", err)
		}
		ledger.GroupRecent(out, recs)
	}
	return out, nil
}

package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Stats = (*Store)(nil)

// statsSQL is RunStats' statement: one GROUP BY over the window's tick
// range, which the covering index of migration 0008 serves (TestRunStatsPlan
// shows the plan). $1 From, $2 To, $3 the bucket in seconds; the lateness
// bucket is -1 for records without one (not started, retries).
func statsSQL(runs string) string {
	return `SELECT floor(extract(epoch FROM tick - $1::timestamptz) / $3)::bigint AS b, status,
  CASE WHEN started_at IS NULL OR attempt > 1 THEN -1 ELSE ` + ledger.LatenessSQL("(extract(epoch FROM started_at - tick) * 1000000)") + ` END AS lb,
  count(*)
FROM ` + runs + ` WHERE tick >= $1 AND tick < $2
GROUP BY 1, 2, 3`
}

// recentSQL is RecentStatuses' statement: for each job of $1, its newest
// $2 records through the job index (a LATERAL LIMIT per job).
func recentSQL(runs string) string {
	return `SELECT j.job, r.tick, r.trigger_id, r.shard, r.attempt, r.status
FROM unnest($1::text[]) AS j(job)
CROSS JOIN LATERAL (SELECT tick, trigger_id, shard, attempt, status FROM ` + runs + ` AS x
  WHERE x.job = j.job COLLATE "C" ORDER BY tick DESC, trigger_id, shard, attempt DESC LIMIT $2) AS r`
}

// latestSQL is LatestRuns' statement: for each job of $1, its newest
// record without its output, through the job index.
func latestSQL(runs string) string {
	return `SELECT r.* FROM unnest($1::text[]) AS j(job)
CROSS JOIN LATERAL (SELECT job, tick, trigger_id, shard, attempt, shards, node, fence, started_at, ended_at, status, error, ''::text AS output, recorded_at
  FROM ` + runs + ` AS x WHERE x.job = j.job COLLATE "C" ORDER BY tick DESC, trigger_id, shard, attempt DESC LIMIT 1) AS r`
}

// LatestRuns implements ledger.Latest with one statement (latestSQL).
func (s *Store) LatestRuns(ctx context.Context, jobs []string) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ledger.CheckLatest(jobs); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, latestSQL(s.ledger().runs), jobs)
	if err != nil {
		return nil, s.wrapLedger("latest runs", err)
	}
	out, err := scanRuns(rows)
	if err != nil {
		return nil, s.wrapLedger("latest runs", err)
	}
	return out, nil
}

// RunStats implements ledger.Stats with one statement (statsSQL).
func (s *Store) RunStats(ctx context.Context, q ledger.StatsQuery) (ledger.RunStats, error) {
	if err := ctx.Err(); err != nil {
		return ledger.RunStats{}, err
	}
	if err := q.Check(); err != nil {
		return ledger.RunStats{}, fmt.Errorf("pgstore: %w", err)
	}
	out := ledger.NewRunStats(q)
	rows, err := s.pool.Query(ctx, statsSQL(s.ledger().runs), q.From, q.To, int64(q.Bucket/time.Second))
	if err != nil {
		return ledger.RunStats{}, s.wrapLedger("run stats", err)
	}
	var (
		b, lb, n int64
		status   string
	)
	_, err = pgx.ForEachRow(rows, []any{&b, &status, &lb, &n}, func() error {
		at := q.From.Add(q.Bucket * time.Duration(b))
		out.AddCount(&q, at, ledger.RunStatus(status), n)
		out.AddLateness(&q, at, int(lb), n)
		return nil
	})
	if err != nil {
		return ledger.RunStats{}, s.wrapLedger("run stats", err)
	}
	return out, nil
}

// RecentStatuses implements ledger.Stats with one statement (recentSQL).
func (s *Store) RecentStatuses(ctx context.Context, jobs []string, n int) (map[string][]ledger.RunStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ledger.CheckRecent(jobs, n); err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	out := make(map[string][]ledger.RunStatus)
	if len(jobs) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, recentSQL(s.ledger().runs), jobs, n)
	if err != nil {
		return nil, s.wrapLedger("recent statuses", err)
	}
	var (
		recs           []ledger.KeyedStatus
		r              ledger.KeyedStatus
		shard, attempt int32
		status         string
	)
	_, err = pgx.ForEachRow(rows, []any{&r.Key.Job, &r.Key.Tick, &r.Key.Trigger, &shard, &attempt, &status}, func() error {
		k := r
		k.Key.Tick, k.Key.Shard, k.Key.Attempt, k.Status = r.Key.Tick.UTC(), int(shard), int(attempt), ledger.RunStatus(status)
		recs = append(recs, k)
		return nil
	})
	if err != nil {
		return nil, s.wrapLedger("recent statuses", err)
	}
	ledger.GroupRecent(out, recs)
	return out, nil
}

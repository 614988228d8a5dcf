package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Stats = (*Store)(nil)

// statsSQL is RunStats' statement: one GROUP BY over the window's tick
// range, read from the covering index of migration 0007 (TestRunStatsPlan
// shows the plan). ?1 From and ?2 To in µs, ?3 the bucket in µs. The
// lateness bucket is -1 for records without one (not started, retries).
func (l *ledgerSQL) statsSQL() string {
	return `SELECT (tick - ?1) / ?3 AS b, status,
  CASE WHEN started_at IS NULL OR attempt > 1 THEN -1 ELSE ` + ledger.LatenessSQL("(started_at - tick)") + ` END AS lb,
  count(*)
FROM ` + l.runs + ` WHERE tick >= ?1 AND tick < ?2
GROUP BY b, status, lb`
}

// RunStats implements ledger.Stats with one statement (statsSQL).
func (s *Store) RunStats(ctx context.Context, q ledger.StatsQuery) (ledger.RunStats, error) {
	if err := ctx.Err(); err != nil {
		return ledger.RunStats{}, wrap(ctx, "run stats", "", err)
	}
	if err := q.Check(); err != nil {
		return ledger.RunStats{}, fmt.Errorf("sqlitestore: %w", err)
	}
	out := ledger.NewRunStats(q)
	err := s.queryText(ctx, s.ledger.statsSQL(), []any{usec(q.From), usec(q.To), q.Bucket.Microseconds()}, func(rows *sql.Rows) error {
		var (
			b, lb, n int64
			status   string
		)
		if err := rows.Scan(&b, &status, &lb, &n); err != nil {
			return err
		}
		at := q.From.Add(q.Bucket * time.Duration(b))
		out.AddCount(&q, at, ledger.RunStatus(status), n)
		out.AddLateness(&q, at, int(lb), n)
		return nil
	})
	if err != nil {
		return ledger.RunStats{}, wrap(ctx, "run stats", "", err)
	}
	return out, nil
}

// recentChunk is the most jobs one RecentStatuses statement names
// (SQLite allows 500 terms in a compound SELECT).
const recentChunk = 200

// RecentStatuses implements ledger.Stats with one statement per 200 jobs:
// a UNION ALL of one indexed, LIMITed read of each job's newest records,
// so it reads n rows per job whatever the length of the history.
func (s *Store) RecentStatuses(ctx context.Context, jobs []string, n int) (map[string][]ledger.RunStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "recent statuses", "", err)
	}
	if err := ledger.CheckRecent(jobs, n); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	out := make(map[string][]ledger.RunStatus)
	for chunk := range slices.Chunk(jobs, recentChunk) {
		var (
			b    strings.Builder
			args = []any{n}
		)
		for i, job := range chunk {
			if i > 0 {
				b.WriteString("\nUNION ALL ")
			}
			args = append(args, job)
			fmt.Fprintf(&b, `SELECT * FROM (SELECT job, tick, "trigger", shard, attempt, status FROM %s WHERE job = ?%d ORDER BY tick DESC, "trigger", shard, attempt DESC LIMIT ?1)`,
				s.ledger.runs, len(args))
		}
		var recs []ledger.KeyedStatus
		err := s.queryText(ctx, b.String(), args, func(rows *sql.Rows) error {
			var (
				r    ledger.KeyedStatus
				tick int64
			)
			if err := rows.Scan(&r.Key.Job, &tick, &r.Key.Trigger, &r.Key.Shard, &r.Key.Attempt, &r.Status); err != nil {
				return err
			}
			r.Key.Tick = fromUsec(tick)
			recs = append(recs, r)
			return nil
		})
		if err != nil {
			return nil, wrap(ctx, "recent statuses", "", err)
		}
		ledger.GroupRecent(out, recs)
	}
	return out, nil
}

package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Stats = (*Store)(nil)

// statsSQL is RunStats' statement: the rollup rows (migration 0007) of
// the window's minutes, a range of the rollup table's primary key
// (TestRunStatsPlan shows the plan). ?1 From and ?2 To in µs.
func (l *ledgerSQL) statsSQL() string {
	return `SELECT minute, status, late, n FROM ` + l.rollup + ` WHERE minute >= ?1 AND minute < ?2 AND n > 0`
}

// RunStats implements ledger.Stats with one statement (statsSQL) over the
// per-minute rollups that triggers keep in the transaction of every write
// of the runs table: it reads at most one row per minute, status and
// lateness bucket of the window, however many records that holds. The
// minute of To counts whole.
func (s *Store) RunStats(ctx context.Context, q ledger.StatsQuery) (ledger.RunStats, error) {
	if err := ctx.Err(); err != nil {
		return ledger.RunStats{}, wrap(ctx, "run stats", "", err)
	}
	if err := q.Check(); err != nil {
		return ledger.RunStats{}, fmt.Errorf("sqlitestore: %w", err)
	}
	out := ledger.NewRunStats(q)
	err := s.queryText(ctx, s.ledger.statsSQL(), []any{usec(q.From), usec(q.To)}, func(rows *sql.Rows) error {
		var (
			minute, late, n int64
			status          string
		)
		if err := rows.Scan(&minute, &status, &late, &n); err != nil {
			return err
		}
		at := fromUsec(minute)
		out.AddCount(&q, at, ledger.RunStatus(status), n)
		out.AddLateness(&q, at, int(late), n)
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
		stmt, args := s.perJob(`job, tick, "trigger", shard, attempt, status`, chunk, n)
		var recs []ledger.KeyedStatus
		err := s.queryText(ctx, stmt, args, func(rows *sql.Rows) error {
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

// perJob is a statement reading columns from the newest n run records of
// each job of jobs: a UNION ALL of one indexed, LIMITed read per job.
func (s *Store) perJob(columns string, jobs []string, n int) (string, []any) {
	var (
		b    strings.Builder
		args = []any{n}
	)
	for i, job := range jobs {
		if i > 0 {
			b.WriteString("\nUNION ALL ")
		}
		args = append(args, job)
		fmt.Fprintf(&b, `SELECT * FROM (SELECT %s FROM %s WHERE job = ?%d ORDER BY tick DESC, "trigger", shard, attempt DESC LIMIT ?1)`,
			columns, s.ledger.runs, len(args))
	}
	return b.String(), args
}

// LatestRuns implements ledger.Latest with one statement per 200 jobs
// (perJob): one indexed row per job, whatever the length of the history.
func (s *Store) LatestRuns(ctx context.Context, jobs []string) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "latest runs", "", err)
	}
	if err := ledger.CheckLatest(jobs); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	var out []ledger.RunRecord
	for chunk := range slices.Chunk(jobs, recentChunk) {
		stmt, args := s.perJob(runColumns("''"), chunk, 1)
		err := s.queryText(ctx, stmt, args, func(rows *sql.Rows) error {
			r, err := scanRun(rows)
			out = append(out, r)
			return err
		})
		if err != nil {
			return nil, wrap(ctx, "latest runs", "", err)
		}
	}
	return out, nil
}

package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunStatsPlan: with a history of 50,000 records over five weeks,
// RunStats' GROUP BY for one hour reads the range from the covering index
// of migration 0008 (an index-only scan), and RecentStatuses reads each
// job through the job index with a LIMIT.
func TestRunStatsPlan(t *testing.T) {
	pool := newPool(t, newDB(t), nil)
	st := newStore(t, pool, nil)
	ctx := context.Background()
	runs := st.ledger().runs
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `INSERT INTO `+runs+` (job, tick, trigger_id, shard, shards, attempt, node, fence, started_at, ended_at, status, error, output, recorded_at)
SELECT 'job' || (i % 100), $1::timestamptz + i * interval '1 minute', '', 0, 0, 1, 'n', 0, $1::timestamptz + i * interval '1 minute', NULL, 'ok', '', '', now()
FROM generate_series(1, 50000) AS i`, from); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+runs); err != nil {
		t.Fatal(err)
	}
	plan := func(stmt string, args ...any) string {
		rows, err := pool.Query(ctx, "EXPLAIN "+stmt, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		return strings.Join(lines, "\n")
	}
	at := from.Add(20 * 24 * time.Hour)
	p := plan(statsSQL(runs), at, at.Add(time.Hour), int64(60))
	t.Logf("RunStats plan:\n%s", p)
	if !strings.Contains(p, "Index Only Scan using ") || !strings.Contains(p, "_runs_stats") {
		t.Errorf("RunStats does not read the covering index:\n%s", p)
	}
	p = plan(recentSQL(runs), []string{"job1", "job2"}, 50)
	t.Logf("RecentStatuses plan:\n%s", p)
	if !strings.Contains(p, "_runs_job") || !strings.Contains(p, "Limit") || strings.Contains(p, "Seq Scan on "+strings.Trim(runs, `"`)) {
		t.Errorf("RecentStatuses does not read the job index with a limit:\n%s", p)
	}
}

package sqlitestore

import (
	"strings"
	"testing"
	"time"
)

// TestRunStatsPlan: RunStats' GROUP BY reads its tick range from the
// covering index of migration 0007 (SEARCH ... USING COVERING INDEX), not
// by a scan of the runs table, and RecentStatuses reads each job through
// the job index.
func TestRunStatsPlan(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	st := newStoreT(t, db)
	ctx := ctxT(t)
	plan := func(stmt string, args ...any) string {
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+stmt, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		return strings.Join(lines, "\n")
	}
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := plan(st.ledger.statsSQL(), usec(from), usec(from.Add(time.Hour)), time.Minute.Microseconds())
	t.Logf("RunStats plan:\n%s", p)
	if !strings.Contains(p, "SEARCH") || !strings.Contains(p, "COVERING INDEX") || !strings.Contains(p, "_runs_stats_idx (tick>? AND tick<?)") {
		t.Errorf("RunStats does not read a range of the covering index:\n%s", p)
	}
	p = plan(`SELECT * FROM (SELECT job, tick, "trigger", shard, attempt, status FROM `+st.ledger.runs+` WHERE job = ?1 ORDER BY tick DESC, "trigger", shard, attempt DESC LIMIT 50)`, "j")
	t.Logf("RecentStatuses plan (one job):\n%s", p)
	if !strings.Contains(p, "_runs_job_idx (job=?)") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("RecentStatuses does not read the job index in order:\n%s", p)
	}
}

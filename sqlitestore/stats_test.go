package sqlitestore

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// TestRunStatsPlan: RunStats reads a range of the rollup table's primary
// key (SEARCH ... USING PRIMARY KEY (minute>? AND minute<?)), never the
// runs table, and RecentStatuses reads each job through the job index.
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
	p := plan(st.ledger.statsSQL(), usec(from), usec(from.Add(time.Hour)))
	t.Logf("RunStats plan:\n%s", p)
	if !strings.Contains(p, "SEARCH") || !strings.Contains(p, "_runs_rollup USING PRIMARY KEY (minute>? AND minute<?)") || strings.Contains(p, "_runs ") {
		t.Errorf("RunStats does not read a range of the rollups:\n%s", p)
	}
	p = plan(`SELECT * FROM (SELECT job, tick, "trigger", shard, attempt, status FROM `+st.ledger.runs+` WHERE job = ?1 ORDER BY tick DESC, "trigger", shard, attempt DESC LIMIT 50)`, "j")
	t.Logf("RecentStatuses plan (one job):\n%s", p)
	if !strings.Contains(p, "_runs_job_idx (job=?)") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("RecentStatuses does not read the job index in order:\n%s", p)
	}
}

// TestRunStatsRollups: migration 0007 counts the records a ledger made by
// 0006 holds, and its triggers keep the counts exact through what changes
// records afterwards: a running record replaced by its outcome, the same
// records written again, and Prune. The oracle is Runs.
func TestRunStatsRollups(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	ctx := context.Background()
	migrateTo(t, ctx, db, 6)
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 300 {
		tick := from.Add(time.Duration(i) * 13 * time.Second)
		start := tick.Add(time.Duration(i%9) * 7 * time.Millisecond)
		status := []string{"ok", "failed", "running"}[i%3]
		if _, err := db.ExecContext(ctx, `INSERT INTO tasklock_locks_runs (job, tick, "trigger", shard, attempt, shards, node, fence, started_at, ended_at, status, error, output, recorded_at)
VALUES (?1, ?2, '', 0, 1, 0, 'n', 0, ?3, NULL, ?4, '', '', 1)`, fmt.Sprint("j", i%4), usec(tick), usec(start), status); err != nil {
			t.Fatal(err)
		}
	}
	s := newStoreT(t, db) // migrates 0007
	q := ledger.StatsQuery{From: from, To: from.Add(time.Hour), Bucket: 5 * time.Minute}
	check := func(when string) {
		t.Helper()
		rs, err := s.Runs(ctx, ledger.RunQuery{From: q.From, To: q.To})
		if err != nil {
			t.Fatal(err)
		}
		want := ledger.NewRunStats(q)
		for i := range rs {
			want.Add(&q, &rs[i])
		}
		got, err := s.RunStats(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for i := range got.Buckets {
			g, w := got.Buckets[i], want.Buckets[i]
			if !maps.Equal(g.Counts, w.Counts) || g.Lateness != w.Lateness {
				t.Errorf("%s: bucket %v = %v %v, want %v %v", when, g.At, g.Counts, g.Lateness, w.Counts, w.Lateness)
			}
			for _, c := range g.Counts {
				n += c
			}
		}
		t.Logf("%s: %d records in the window", when, n)
	}
	check("after migrating")
	rs, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning})
	if err != nil || len(rs) == 0 {
		t.Fatalf("running records: %d, %v", len(rs), err)
	}
	for i := range rs {
		rs[i].Status, rs[i].Start = ledger.RunTimeout, rs[i].Start.Add(time.Second)
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	check("after replacing running records")
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	check("after writing them again")
	if _, err := s.Prune(ctx, ledger.PruneParams{KeepPerJob: 20}); err != nil {
		t.Fatal(err)
	}
	check("after pruning")
}

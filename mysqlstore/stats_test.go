package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
)

// TestRunStatsPlan: RunStats reads its range from the covering key
// by_stats (EXPLAIN: key by_stats, type range, "Using index"), and
// RecentStatuses each job's rows through the primary key.
func TestRunStatsPlan(t *testing.T) {
	db := openDB(t, testserver.SharedMariaDB(t).CreateDB(t))
	s := mustNew(t, db, &Options{Table: "plan", Migrate: true})
	ctx := context.Background()
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var rs []ledger.RunRecord
	for i := range 2000 {
		tick := from.Add(time.Duration(i) * time.Minute)
		rs = append(rs, ledger.RunRecord{Job: fmt.Sprint("job", i%20), Tick: tick, Attempt: 1, Status: ledger.RunOK, Start: tick, End: tick})
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	explain := func(stmt string) string {
		rows, err := db.QueryContext(ctx, "EXPLAIN "+stmt)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var lines []string
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var parts []string
			for i, c := range cols {
				parts = append(parts, c+"="+vals[i].String)
			}
			lines = append(lines, strings.Join(parts, " "))
		}
		return strings.Join(lines, "\n")
	}
	q := ledger.StatsQuery{From: from.Add(10 * time.Hour), To: from.Add(11 * time.Hour), Bucket: time.Minute}
	p := explain(s.statsSQL(&q))
	t.Logf("RunStats plan:\n%s", p)
	if !strings.Contains(p, "key=by_stats") || !strings.Contains(p, "type=range") || !strings.Contains(p, "Using index") {
		t.Errorf("RunStats does not read a range of by_stats alone:\n%s", p)
	}
	p = explain(s.recentSQL([]string{"job1", "job2"}, 50))
	t.Logf("RecentStatuses plan:\n%s", p)
	if strings.Count(p, "key=PRIMARY") != 2 || strings.Contains(p, "type=ALL") {
		t.Errorf("RecentStatuses does not read the primary key per job:\n%s", p)
	}
}

package dashboard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// TestDashboardShardedRuns: a sharded job's records list one per shard,
// each with the tick's overall status; paging with a cursor that falls
// between two shards of a tick lists every record once; the jobs list
// shows the last tick's overall status.
func TestDashboardShardedRuns(t *testing.T) {
	st := memstore.New(nil)
	tick1 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	tick2 := tick1.Add(10 * time.Second)
	var rs []ledger.RunRecord
	for k := range 4 {
		rs = append(rs, ledger.RunRecord{Job: "a", Tick: tick1, Shard: k, Shards: 4, Attempt: 1, Node: "n1", Start: tick1, End: tick1.Add(time.Second), Status: ledger.RunOK})
		st2 := ledger.RunOK
		if k == 2 {
			st2 = ledger.RunRunning
		}
		rs = append(rs, ledger.RunRecord{Job: "a", Tick: tick2, Shard: k, Shards: 4, Attempt: 1, Node: "n2", Start: tick2, Status: st2})
	}
	if err := st.RecordRuns(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	srv := server(t, st, "", nil)
	type run struct {
		Tick       time.Time
		Shard      int
		Shards     int
		Status     string
		TickStatus string `json:"tick_status"`
	}
	var all []run
	next := ""
	for pages := 0; ; pages++ {
		u := srv.URL + "/api/runs?job=a&limit=3"
		if next != "" {
			u += "&before=" + next
		}
		code, body, _ := call(t, nil, "GET", u, nil, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", u, code, body)
		}
		var page struct {
			Runs []run
			Next string
		}
		decode(t, body, &page)
		all = append(all, page.Runs...)
		if next = page.Next; next == "" || pages > 10 {
			break
		}
	}
	seen := map[string]int{}
	for _, r := range all {
		seen[fmt.Sprint(r.Tick.Unix(), "/", r.Shard)]++
		if r.Shards != 4 {
			t.Errorf("record %+v: shards %d, want 4", r, r.Shards)
		}
	}
	if len(all) != 8 || len(seen) != 8 {
		t.Errorf("listed %d records, %d distinct (%v), want 8", len(all), len(seen), seen)
	}
	// The first page holds tick2's shards 0-2: its overall status is running.
	code, body, _ := call(t, nil, "GET", srv.URL+"/api/runs?job=a&limit=8", nil, "")
	var page struct{ Runs []run }
	decode(t, body, &page)
	if code != 200 || len(page.Runs) != 8 {
		t.Fatalf("%d %s", code, body)
	}
	for _, r := range page.Runs {
		want := "ok"
		if r.Tick.Equal(tick2) {
			want = "running"
		}
		if r.TickStatus != want {
			t.Errorf("tick %v shard %d: tick_status %q, want %q", r.Tick, r.Shard, r.TickStatus, want)
		}
	}
	code, body, _ = call(t, nil, "GET", srv.URL+"/api/jobs?name=a", nil, "")
	var jobs struct {
		Jobs []struct {
			Job     string
			LastRun *run `json:"last_run"`
		}
	}
	decode(t, body, &jobs)
	if code != 200 || len(jobs.Jobs) != 1 || jobs.Jobs[0].LastRun == nil || jobs.Jobs[0].LastRun.TickStatus != "running" {
		t.Errorf("jobs: %d %s, want a's last run with tick_status running", code, body)
	}
}

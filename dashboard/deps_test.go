package dashboard_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

// /api/jobs carries each job's parents (after) and the configured jobs
// that wait for it (children), also for a parent that is not configured
// but known to the ledger.
func TestDashboardJobsAfterAndChildren(t *testing.T) {
	st := memstore.New(nil)
	jobs := []schedule.Job{
		{Name: "extract", Schedule: "@hourly"},
		{Name: "load", Schedule: "@hourly", After: []string{"extract"}},
		{Name: "report", Schedule: "@hourly", After: []string{"load", "extract"}},
		{Name: "orphan", Schedule: "@hourly", After: []string{"elsewhere"}},
	}
	if _, err := st.SetJobState(context.Background(), ledger.JobStateParams{Job: "elsewhere", Op: ledger.JobPause}); err != nil {
		t.Fatal(err)
	}
	srv := server(t, st, "", func(o *dashboard.Options) { o.Jobs = func() []schedule.Job { return jobs } })
	code, body, _ := call(t, nil, "GET", srv.URL+"/api/jobs", nil, "")
	if code != 200 {
		t.Fatalf("GET /api/jobs = %d %s", code, body)
	}
	var got struct {
		Jobs []struct {
			Job      string    `json:"job"`
			After    *[]string `json:"after"`
			Children *[]string `json:"children"`
		} `json:"jobs"`
	}
	decode(t, body, &got)
	type edges struct{ after, children []string }
	want := map[string]edges{
		"elsewhere": {nil, []string{"orphan"}},
		"extract":   {nil, []string{"load", "report"}},
		"load":      {[]string{"extract"}, []string{"report"}},
		"orphan":    {[]string{"elsewhere"}, nil},
		"report":    {[]string{"load", "extract"}, nil},
	}
	if len(got.Jobs) != len(want) {
		t.Fatalf("jobs = %s", body)
	}
	for _, j := range got.Jobs {
		w := want[j.Job]
		var after, children []string
		if j.After != nil {
			after = *j.After
		}
		if j.Children != nil {
			children = *j.Children
		}
		if !reflect.DeepEqual(after, w.after) || !reflect.DeepEqual(children, w.children) {
			t.Errorf("%s: after %v children %v, want %v and %v", j.Job, after, children, w.after, w.children)
		}
		if (j.After != nil && len(*j.After) == 0) || (j.Children != nil && len(*j.Children) == 0) {
			t.Errorf("%s: an empty list is sent, want it omitted: %s", j.Job, body)
		}
	}
}

// A job's last run, once seen running, shows its outcome once the outcome
// is recorded under the same key: the page's memory of last runs took a
// newer record only when its key was newer, so a run seen running stayed
// "running" on every page after it ended.
func TestDashboardLastRunFollowsTheSameRun(t *testing.T) {
	st := memstore.New(nil)
	clk := &stepClock{now: time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)}
	jobs := []schedule.Job{{Name: "extract", Schedule: "@hourly"}}
	srv := server(t, st, "", func(o *dashboard.Options) {
		o.Jobs = func() []schedule.Job { return jobs }
		o.Clock = clk
	})
	tick := clk.Now().Truncate(time.Hour)
	rec := ledger.RunRecord{Job: "extract", Tick: tick, Attempt: 1, Node: "n1", Start: tick, Status: ledger.RunRunning}
	last := func() string { t.Helper(); return lastRunOf(t, srv.URL, "extract", "").Status }
	for _, st2 := range []ledger.RunStatus{ledger.RunRunning, ledger.RunOK} {
		rec.Status = st2
		if st2.Final() {
			rec.End = tick.Add(time.Second)
		}
		if err := st.RecordRuns(context.Background(), []ledger.RunRecord{rec}); err != nil {
			t.Fatal(err)
		}
		clk.advance(2 * time.Second) // past the recent runs' one-second reuse
		if got := last(); got != string(st2) {
			t.Fatalf("last run %q after recording it %s", got, st2)
		}
	}
}

// A page re-rendered for the live update that a run ended reads that run:
// the summary that names the change also retires the recent runs read
// before it, though they are younger than their one-second reuse. Before,
// the jobs page showed a sharded tick "running" until the next change.
func TestDashboardRecentRunsFollowSummary(t *testing.T) {
	st := memstore.New(nil)
	clk := &stepClock{now: time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)}
	jobs := []schedule.Job{{Name: "sync", Schedule: "@hourly", Shards: 3}}
	srv := server(t, st, "tok", func(o *dashboard.Options) {
		o.Jobs = func() []schedule.Job { return jobs }
		o.Clock = clk
		o.EventInterval = 100 * time.Millisecond
	})
	tick := clk.Now().Truncate(time.Hour)
	record := func(status func(shard int) ledger.RunStatus) {
		t.Helper()
		var rs []ledger.RunRecord
		for s := range 3 {
			r := ledger.RunRecord{Job: "sync", Tick: tick, Attempt: 1, Shard: s, Shards: 3, Node: "n1", Start: tick, Status: status(s)}
			if r.Status.Final() {
				r.End = tick.Add(time.Second)
			}
			rs = append(rs, r)
		}
		if err := st.RecordRuns(context.Background(), rs); err != nil {
			t.Fatal(err)
		}
	}
	tickStatus := func() string { t.Helper(); return lastRunOf(t, srv.URL, "sync", "tok").TickStatus }
	record(func(int) ledger.RunStatus { return ledger.RunRunning })
	nextEvent := events(t, srv.URL, "tok")
	nextEvent()
	if got := tickStatus(); got != string(ledger.RunRunning) {
		t.Fatalf("tick status %q while every shard runs", got)
	}
	record(func(s int) ledger.RunStatus {
		if s == 1 {
			return ledger.RunFailed
		}
		return ledger.RunOK
	})
	clk.advance(100 * time.Millisecond) // a new summary, within the recent runs' reuse
	if ch := nextEvent(); !slices.Contains(ch, "jobs") {
		t.Fatalf("the summary after the shards ended changed %v, want jobs", ch)
	}
	if got := tickStatus(); got != string(ledger.RunFailed) {
		t.Fatalf("tick status %q after the summary named the shards' end, want failed", got)
	}
}

// lastRunOf is job name's last run as GET /api/jobs?name= gives it, with
// the bearer token when not "".
func lastRunOf(t *testing.T, url, name, token string) (last struct {
	Status     string `json:"status"`
	TickStatus string `json:"tick_status"`
}) {
	t.Helper()
	var hdr map[string]string
	if token != "" {
		hdr = map[string]string{"Authorization": "Bearer " + token}
	}
	code, body, _ := call(t, nil, "GET", url+"/api/jobs?name="+name, hdr, "")
	if code != 200 {
		t.Fatalf("GET /api/jobs = %d %s", code, body)
	}
	var got struct {
		Jobs []struct {
			LastRun *struct {
				Status     string `json:"status"`
				TickStatus string `json:"tick_status"`
			} `json:"last_run"`
		} `json:"jobs"`
	}
	decode(t, body, &got)
	if len(got.Jobs) != 1 || got.Jobs[0].LastRun == nil {
		t.Fatalf("jobs = %s", body)
	}
	return *got.Jobs[0].LastRun
}

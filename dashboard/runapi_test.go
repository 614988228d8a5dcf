package dashboard_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

// runJSON is what the tests read of /api/run.
type runJSON struct {
	Run struct {
		ID, Job, Node, Status, Error, Output string
		Attempt                              int
		Fence                                uint64
		Truncated                            bool `json:"output_truncated"`
	} `json:"run"`
	Attempts []struct {
		ID, Output string
		Attempt    int
		Truncated  bool `json:"output_truncated"`
	} `json:"attempts"`
	Lock struct {
		Key    string `json:"key"`
		Fence  uint64 `json:"fence"`
		Held   *struct{ Owner string }
		Events []struct {
			Event, Node string
			Fence       uint64
			At          *time.Time
		}
	} `json:"lock"`
	Lateness *int64 `json:"lateness_ms"`
	Duration *int64 `json:"duration_ms"`
}

// A run's page reads it whole, 64 KiB of output and all, with its other
// attempts and its lock; the run lists send only the end of long outputs.
func TestRunEndpoint(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		srv := server(t, st, "", nil)
		tick := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
		big := strings.Repeat("0123456789abcde\n", 4<<10) // 64 KiB
		big = "FIRST LINE\n" + big[11:len(big)-10] + "LAST LINE\n"
		rec := func(attempt int, st ledger.RunStatus, out string) ledger.RunRecord {
			start := tick.Add(time.Duration(1500+attempt*1000) * time.Millisecond)
			return ledger.RunRecord{Job: "a", Tick: tick, Attempt: attempt, Node: "n1", Fence: uint64(10 + attempt),
				Start: start, End: start.Add(750 * time.Millisecond), Status: st, Error: map[bool]string{true: "", false: "exit status 1"}[st == ledger.RunOK], Output: out}
		}
		if err := st.RecordRuns(context.Background(), []ledger.RunRecord{
			rec(1, ledger.RunFailed, big), rec(2, ledger.RunOK, "short"),
			{Job: "a", Tick: tick.Add(10 * time.Second), Attempt: 1, Node: "n2", Fence: 12, Start: tick.Add(10 * time.Second), Status: ledger.RunRunning},
		}); err != nil {
			t.Fatal(err)
		}
		// The list: ids, and the big output cut to its end.
		code, body, _ := call(t, nil, "GET", srv.URL+"/api/runs?job=a", nil, "")
		var list struct {
			Runs []struct {
				ID, Output string
				Attempt    int
				Truncated  bool `json:"output_truncated"`
			}
		}
		decode(t, body, &list)
		if code != 200 || len(list.Runs) != 3 {
			t.Fatalf("runs: %d %s", code, body)
		}
		first := list.Runs[2] // oldest: attempt 1 of tick
		if first.Attempt != 1 || !first.Truncated || len(first.Output) != dashboard.ListOutputMax || !strings.HasSuffix(first.Output, "LAST LINE\n") {
			t.Fatalf("listed big output: attempt %d, truncated %v, %d bytes", first.Attempt, first.Truncated, len(first.Output))
		}
		if list.Runs[1].Truncated || list.Runs[1].Output != "short" || list.Runs[1].ID == "" {
			t.Fatalf("listed short output: %+v", list.Runs[1])
		}
		// The run by id: all of its output, its other attempt, its lock.
		code, body, _ = call(t, nil, "GET", srv.URL+"/api/run?id="+url.QueryEscape(first.ID), nil, "")
		var got runJSON
		decode(t, body, &got)
		if code != 200 || got.Run.Output != big || got.Run.Truncated || got.Run.Attempt != 1 || got.Run.Fence != 11 || got.Run.Error != "exit status 1" {
			t.Fatalf("run by id: %d, attempt %d, output intact %v (%d bytes), fence %d", code, got.Run.Attempt, got.Run.Output == big, len(got.Run.Output), got.Run.Fence)
		}
		if len(got.Attempts) != 1 || got.Attempts[0].Attempt != 2 || got.Attempts[0].Output != "short" || got.Attempts[0].ID != list.Runs[1].ID {
			t.Fatalf("attempts: %+v", got.Attempts)
		}
		if got.Lateness == nil || *got.Lateness != 2500 || got.Duration == nil || *got.Duration != 750 {
			t.Fatalf("lateness %v, duration %v: want 2500 and 750 ms", got.Lateness, got.Duration)
		}
		if got.Lock.Key != schedule.DefaultKeyPrefix+"a" || got.Lock.Fence != 11 || got.Lock.Held != nil ||
			len(got.Lock.Events) != 2 || got.Lock.Events[0].Event != "taken" || got.Lock.Events[1].Event != "released" ||
			!got.Lock.Events[1].At.Equal(tick.Add(3250*time.Millisecond)) {
			t.Fatalf("lock: %+v", got.Lock)
		}
		// The same run by its fields.
		code, body, _ = call(t, nil, "GET", srv.URL+"/api/run?job=a&attempt=1&tick="+tick.Format(time.RFC3339), nil, "")
		var byFields runJSON
		decode(t, body, &byFields)
		if code != 200 || byFields.Run.ID != first.ID || byFields.Run.Output != big {
			t.Fatalf("run by fields: %d, id %q want %q", code, byFields.Run.ID, first.ID)
		}
		// A running run: its lock is held, by whoever holds the key.
		code, body, _ = call(t, nil, "GET", srv.URL+"/api/run?job=a&attempt=1&tick="+tick.Add(10*time.Second).Format(time.RFC3339), nil, "")
		decode(t, body, &got)
		if code != 200 || got.Run.Status != "running" || got.Duration != nil || len(got.Lock.Events) != 2 || got.Lock.Events[1].Event != "held" {
			t.Fatalf("running run: %d %s", code, body)
		}
		// An interrupted run: its end is when another node noticed its
		// node had stopped, not when its lock went; the lock expires
		// lock_ttl after the dead node's last renewal, which no record
		// shows, so the event has no time.
		itick := tick.Add(20 * time.Second)
		if err := st.RecordRuns(context.Background(), []ledger.RunRecord{{Job: "a", Tick: itick, Attempt: 1, Node: "n3", Fence: 13,
			Start: itick, End: itick.Add(9 * time.Second), Status: ledger.RunInterrupted, Error: "schedule: run interrupted"}}); err != nil {
			t.Fatal(err)
		}
		code, body, _ = call(t, nil, "GET", srv.URL+"/api/run?job=a&attempt=1&tick="+itick.Format(time.RFC3339), nil, "")
		got = runJSON{}
		decode(t, body, &got)
		if code != 200 || got.Run.Status != "interrupted" || len(got.Lock.Events) != 2 || got.Lock.Events[1].Event != "expired" || got.Lock.Events[1].At != nil {
			t.Fatalf("interrupted run: %d %s, want its lock expired at no given time", code, body)
		}
		for q, want := range map[string]int{
			"id=nope":               400,
			"job=a":                 400,
			"job=a&tick=2026-03-04": 400,
			"job=a&tick=2026-03-04T05:06:00Z&shard=-1":           400,
			"job=a&tick=2026-03-04T05:06:00Z&attempt=3":          404,
			"job=a&tick=2026-03-04T05:06:00Z&attempt=2147483648": 400, // above int32, the attempt column of the SQL stores
			"job=b&tick=2026-03-04T05:06:00Z&attempt=1":          404,
		} {
			if code, body, _ := call(t, nil, "GET", srv.URL+"/api/run?"+q, nil, ""); code != want || !strings.Contains(body, `"error"`) {
				t.Errorf("run?%s: %d %s, want %d", q, code, body, want)
			}
		}
	})
}

// The job page asks for 5 next ticks and, naming one job, gets its
// definition, what it runs included, secrets hidden.
func TestJobDefinitionAndTicks(t *testing.T) {
	st := memstore.New(nil)
	srv := server(t, st, "", func(o *dashboard.Options) {
		jobs := []schedule.Job{
			{Name: "b", Schedule: "0 30 2 * * *", TimeZone: "Europe/Berlin", Timeout: 90 * time.Second, Retries: 2,
				Overlap: schedule.OverlapAllow, Misfire: schedule.MisfireSkip, Shards: 4, Pool: "reports", Nodes: []string{"gpu"}, After: []string{"a"}},
			{Name: "a", Schedule: "@every 10s", LeaderOnly: true},
		}
		o.Jobs = func() []schedule.Job { return jobs }
		o.Handler = func(job string) []dashboard.DefField {
			return []dashboard.DefField{{Key: "url", Value: "POST https://user:" + secret + "@hooks.example/run"}}
		}
		c := newFakeClock()
		c.add(27 * 24 * time.Hour) // 2026-03-28 12:00 UTC
		o.Clock = c
	})
	code, body, _ := call(t, nil, "GET", srv.URL+"/api/jobs?name=b&ticks=5", nil, "")
	var got struct {
		Jobs []struct {
			NextTicks  []time.Time `json:"next_ticks"`
			Definition *struct {
				Timeout  int64 `json:"timeout_ms"`
				Retries  int
				Overlap  string
				Misfire  string
				Shards   int
				Pool     string
				Nodes    []string
				RunOn    string `json:"run_on"`
				After    []string
				Handler  []dashboard.DefField
				TimeZone string `json:"timezone"`
			}
		}
	}
	decode(t, body, &got)
	if code != 200 || len(got.Jobs) != 1 || got.Jobs[0].Definition == nil {
		t.Fatalf("jobs?name=b: %d %s", code, body)
	}
	// 02:30 in Berlin, in CEST (00:30Z) from the 29th of March 2026, when
	// 02:30 does not exist: schedule runs that day's tick at 03:30 CEST.
	want := []string{"2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z", "2026-04-01T00:30:00Z", "2026-04-02T00:30:00Z"}
	var ticks []string
	for _, tk := range got.Jobs[0].NextTicks {
		ticks = append(ticks, tk.UTC().Format(time.RFC3339))
	}
	if strings.Join(ticks, " ") != strings.Join(want, " ") {
		t.Errorf("next 5 ticks %v, want %v", ticks, want)
	}
	d := got.Jobs[0].Definition
	if d.Timeout != 90000 || d.Retries != 2 || d.Overlap != "allow" || d.Misfire != "skip" || d.Shards != 4 || d.Pool != "reports" ||
		strings.Join(d.Nodes, ",") != "gpu" || d.RunOn != "any" || strings.Join(d.After, ",") != "a" || d.TimeZone != "Europe/Berlin" {
		t.Errorf("definition: %+v", d)
	}
	if len(d.Handler) != 1 || d.Handler[0].Key != "url" || !strings.Contains(d.Handler[0].Value, "hooks.example/run") {
		t.Errorf("handler: %+v", d.Handler)
	}
	// Listing every job: 3 ticks each, no definitions.
	_, body, _ = call(t, nil, "GET", srv.URL+"/api/jobs", nil, "")
	if strings.Contains(body, `"definition"`) || strings.Count(body, "2026-03-") < 3 {
		t.Errorf("jobs list: %s", body)
	}
	_, body, _ = call(t, nil, "GET", srv.URL+"/api/jobs?name=a", nil, "")
	if !strings.Contains(body, `"run_on":"leader"`) {
		t.Errorf("a's definition: %s", body)
	}
	for _, q := range []string{"ticks=0", "ticks=21", "ticks=x"} {
		if code, body, _ := call(t, nil, "GET", srv.URL+"/api/jobs?"+q, nil, ""); code != 400 || !strings.Contains(body, "ticks:") {
			t.Errorf("jobs?%s: %d %s", q, code, body)
		}
	}
}

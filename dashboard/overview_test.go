package dashboard_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/redisstore"
)

// overviewJSON is what the test reads of /api/overview.
type overviewJSON struct {
	At, From, To time.Time
	WindowMS     int64 `json:"window_ms"`
	BucketMS     int64 `json:"bucket_ms"`
	Sampled      bool
	Jobs         map[string]int
	Nodes        map[string]int
	Locks        map[string]int
	Missed       []struct {
		Job  string
		Tick time.Time
	}
	LastHour periodJSON `json:"last_hour"`
	LastDay  periodJSON `json:"last_day"`
	Buckets  []struct {
		At     time.Time
		Counts map[string]int64
		P50MS  *float64 `json:"p50_ms"`
		P99MS  *float64 `json:"p99_ms"`
	}
}

type periodJSON struct {
	Runs        map[string]int64
	Total       int64
	FailureRate *float64 `json:"failure_rate"`
	P50MS       *float64 `json:"p50_ms"`
	P99MS       *float64 `json:"p99_ms"`
	LockLosses  int64    `json:"lock_losses"`
}

// overviewStores runs f on memstore, SQLite and Redis: the three ways of
// aggregating (in memory, GROUP BY, rollups).
func overviewStores(t *testing.T, f func(t *testing.T, st ledgerStore)) {
	eachStore(t, f)
	t.Run("redisstore", func(t *testing.T) {
		srv := testserver.StartRedis(t)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { c.Close() })
		st, err := redisstore.New(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		f(t, st)
	})
}

// TestDashboardOverview: /api/overview's counts, failure rates, lateness
// quantiles and chart buckets equal what the test counts itself from the
// records it wrote (26 hours of them, every status), and it lists the
// jobs whose newest record is a missed tick, the jobs by state, the live
// nodes and the locks.
func TestDashboardOverview(t *testing.T) {
	overviewStores(t, testOverview)
}

func testOverview(t *testing.T, st ledgerStore) {
	ctx := context.Background()
	now := time.Date(2031, 3, 4, 10, 20, 30, 0, time.UTC)
	clock := &stepClock{now: now}
	statuses := []ledger.RunStatus{ledger.RunOK, ledger.RunOK, ledger.RunOK, ledger.RunFailed, ledger.RunTimeout, ledger.RunLost, ledger.RunSkipped, ledger.RunOK, ledger.RunInterrupted}
	lates := []time.Duration{2 * time.Millisecond, 7 * time.Millisecond, 30 * time.Millisecond, 80 * time.Millisecond, 3 * time.Millisecond, 450 * time.Millisecond, 1500 * time.Millisecond}
	var rs []ledger.RunRecord
	for i := 0; i < 26*60; i += 1 {
		tick := now.Add(-26 * time.Hour).Truncate(time.Minute).Add(time.Duration(i)*time.Minute + 17*time.Second)
		for j := range 1 + i%3 {
			job := "a" // a configured job: the jobs page lists it
			if j > 0 {
				job = fmt.Sprintf("a%d", j)
			}
			r := ledger.RunRecord{Job: job, Tick: tick, Attempt: 1, Node: "n1", Status: statuses[(i+j)%len(statuses)]}
			if r.Status == ledger.RunSkipped {
				r.Attempt = 0
			} else {
				r.Start = tick.Add(lates[(i*7+j)%len(lates)])
				r.End = r.Start.Add(time.Second)
			}
			rs = append(rs, r)
		}
	}
	// Job m missed its last tick; m2 missed one, then ran.
	rs = append(rs,
		ledger.RunRecord{Job: "m", Tick: now.Add(-20 * time.Minute).Truncate(time.Second), Status: ledger.RunOK, Attempt: 1, Start: now.Add(-20 * time.Minute)},
		ledger.RunRecord{Job: "m", Tick: now.Add(-10 * time.Minute).Truncate(time.Second), Status: ledger.RunMissed},
		ledger.RunRecord{Job: "m2", Tick: now.Add(-10 * time.Minute).Truncate(time.Second), Status: ledger.RunMissed},
		ledger.RunRecord{Job: "m2", Tick: now.Add(-5 * time.Minute).Truncate(time.Second), Status: ledger.RunOK, Attempt: 1, Start: now.Add(-5 * time.Minute)})
	for i := 0; i < len(rs); i += 500 {
		if err := st.RecordRuns(ctx, rs[i:min(i+500, len(rs))]); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []ledger.JobStateParams{
		{Job: "b", Op: ledger.JobPause},
		{Job: "elsewhere", Op: ledger.JobRegister, Spec: "CRON_TZ=No/Such_Zone * * * * *", Since: now},
		{Job: "fine", Op: ledger.JobRegister, Spec: "@hourly", Since: now},
	} {
		if _, err := st.SetJobState(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for i, key := range []string{"serve/node/n1", "serve/node/n2", "schedule/a", "other"} {
		if _, err := st.Acquire(ctx, driver.AcquireParams{Key: key, Token: fmt.Sprint("t", i), Owner: "o", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	srv := server(t, st, "", func(o *dashboard.Options) { o.Clock = clock })

	// The oracle, counted from rs: a bucket is in the last hour (day) when
	// it starts at or after now-1h (now-24h) truncated to the bucket.
	type period struct {
		runs map[string]int64
		late ledger.Lateness
	}
	count := func(since time.Time) period {
		p := period{runs: map[string]int64{}}
		for _, r := range rs {
			if r.Tick.Before(since) || !r.Tick.Before(now) {
				continue
			}
			p.runs[string(r.Status)]++
			if !r.Start.IsZero() && r.Attempt <= 1 {
				k := 0
				for k < len(ledger.LatenessBounds) && r.Start.Sub(r.Tick) > ledger.LatenessBounds[k] {
					k++
				}
				p.late[k]++
			}
		}
		return p
	}
	hour, day := count(now.Add(-time.Hour).Truncate(time.Minute)), count(now.Add(-24*time.Hour).Truncate(time.Minute))
	check := func(name string, got periodJSON, want period) {
		t.Helper()
		if !maps.Equal(got.Runs, want.runs) {
			t.Errorf("%s: runs %v, want %v", name, got.Runs, want.runs)
		}
		var total, bad, ended int64
		for st, n := range want.runs {
			total += n
			switch ledger.RunStatus(st) {
			case ledger.RunOK:
				ended += n
			case ledger.RunFailed, ledger.RunTimeout, ledger.RunLost, ledger.RunInterrupted:
				ended += n
				bad += n
			}
		}
		if got.Total != total || got.FailureRate == nil || *got.FailureRate != float64(bad)/float64(ended) {
			t.Errorf("%s: total %d failure rate %v, want %d and %v", name, got.Total, got.FailureRate, total, float64(bad)/float64(ended))
		}
		if got.LockLosses != want.runs["lost"] {
			t.Errorf("%s: lock losses %d, want %d", name, got.LockLosses, want.runs["lost"])
		}
		p50, _ := want.late.Quantile(0.5)
		p99, _ := want.late.Quantile(0.99)
		if got.P50MS == nil || got.P99MS == nil || *got.P50MS != float64(p50.Microseconds())/1000 || *got.P99MS != float64(p99.Microseconds())/1000 {
			t.Errorf("%s: p50 %v p99 %v, want %v and %v", name, got.P50MS, got.P99MS, p50, p99)
		}
	}

	_, body, _ := call(t, nil, "GET", srv.URL+"/api/overview", nil, "")
	var o overviewJSON
	decode(t, body, &o)
	check("last hour", o.LastHour, hour)
	check("last day", o.LastDay, day)
	if o.Sampled {
		t.Error("sampled, from a store with ledger.Stats")
	}
	if !o.From.Equal(now.Add(-24*time.Hour).Truncate(time.Minute)) || o.BucketMS != 60000 || o.WindowMS != 86400000 || len(o.Buckets) != 24*60+1 {
		t.Errorf("from %v bucket %d window %d, %d buckets", o.From, o.BucketMS, o.WindowMS, len(o.Buckets))
	}
	var nbars int64
	for i, b := range o.Buckets {
		for _, n := range b.Counts {
			nbars += n
		}
		if i == len(o.Buckets)-5 && (b.P50MS == nil || b.P99MS == nil) {
			t.Errorf("bucket %v has no lateness quantiles", b.At)
		}
	}
	var dayTotal int64
	for _, n := range day.runs {
		dayTotal += n
	}
	if nbars != dayTotal {
		t.Errorf("the buckets hold %d runs, want %d", nbars, dayTotal)
	}
	if len(o.Missed) != 1 || o.Missed[0].Job != "m" || !o.Missed[0].Tick.Equal(now.Add(-10*time.Minute).Truncate(time.Second)) {
		t.Errorf("missed %+v, want m only", o.Missed)
	}
	if want := map[string]int{"total": 5, "active": 3, "paused": 1, "broken": 1}; !maps.Equal(o.Jobs, want) {
		t.Errorf("jobs %v, want %v", o.Jobs, want)
	}
	if o.Nodes["alive"] != 2 || o.Locks["held"] != 4 || o.Locks["waiting"] != 0 {
		t.Errorf("nodes %v locks %v", o.Nodes, o.Locks)
	}

	// A shorter window in longer buckets: the same day, fewer bars.
	_, body, _ = call(t, nil, "GET", srv.URL+"/api/overview?window=6h&bucket=15m", nil, "")
	decode(t, body, &o)
	if len(o.Buckets) != 6*4+1 || o.BucketMS != 15*60000 {
		t.Errorf("6h in 15m: %d buckets of %d ms", len(o.Buckets), o.BucketMS)
	}

	// The jobs page's sparkline: each job's newest statuses, newest first,
	// as Runs lists them; none for a job without runs.
	_, body, _ = call(t, nil, "GET", srv.URL+"/api/jobs?recent=7", nil, "")
	var jobs struct {
		Jobs []struct {
			Job    string
			Recent []string
		}
	}
	decode(t, body, &jobs)
	got := map[string]string{}
	for _, j := range jobs.Jobs {
		got[j.Job] = strings.Join(j.Recent, ",")
	}
	runs, err := st.Runs(ctx, ledger.RunQuery{Job: "a", Limit: 7})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range runs {
		want = append(want, string(r.Status))
	}
	if got["a"] != strings.Join(want, ",") || len(want) != 7 || got["b"] != "" {
		t.Errorf("recent: a %q, want %q; b %q, want none", got["a"], want, got["b"])
	}
}

// TestDashboardOverviewParams: bad window and bucket values are 400 with
// the parameter named.
func TestDashboardOverviewParams(t *testing.T) {
	srv := server(t, memstore.New(nil), "", nil)
	for _, q := range []string{"window=1m", "window=30d", "window=x", "bucket=30s", "bucket=90s", "bucket=0", "window=168h&bucket=1m", "recent=0"} {
		path := "/api/overview?" + q
		if q == "recent=0" {
			path = "/api/jobs?" + q
		}
		code, body, _ := call(t, nil, "GET", srv.URL+path, nil, "")
		name, _, _ := strings.Cut(q, "=")
		if strings.Contains(q, "&") {
			name = "bucket"
		}
		if code != http.StatusBadRequest || !strings.Contains(body, name+":") {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
}

// withoutStats hides a store's ledger.Stats, as etcdstore and zkstore lack
// it.
type withoutStats struct{ ledgerStore }

// TestDashboardOverviewSampled: a store without ledger.Stats is answered
// from its newest 10,000 records of the window: complete (not sampled)
// while the window holds fewer, and marked sampled with a note when it
// holds more.
func TestDashboardOverviewSampled(t *testing.T) {
	st := memstore.New(nil)
	now := time.Now().UTC()
	srv := server(t, withoutStats{st}, "", nil)
	get := func() overviewJSON {
		_, body, _ := call(t, nil, "GET", srv.URL+"/api/overview?window=1h", nil, "")
		var o overviewJSON
		decode(t, body, &o)
		if o.Sampled != strings.Contains(body, `"sample_note":"this store keeps no run aggregates`) {
			t.Errorf("sampled %v and the note disagree: %s", o.Sampled, body[:min(len(body), 300)])
		}
		return o
	}
	record(t, st, 10, 9000, now.Add(-30*time.Minute))
	if o := get(); o.Sampled || o.LastHour.Total != 9000 {
		t.Errorf("9,000 records: sampled %v, total %d", o.Sampled, o.LastHour.Total)
	}
	record(t, st, 10, 2000, now.Add(-10*time.Minute))
	if o := get(); !o.Sampled || o.LastHour.Total != 10000 {
		t.Errorf("11,000 records: sampled %v, total %d; want sampled, 10,000", o.Sampled, o.LastHour.Total)
	}
}

package dashboard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// stepClock is a clock the test moves; its timers are the system's.
type stepClock struct {
	tasklock.SystemClock
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type nodeJSON struct {
	Node     string
	Alive    bool
	LastSeen *time.Time `json:"last_seen"`
}

func getNodes(t *testing.T, url string) map[string]nodeJSON {
	t.Helper()
	_, body, _ := call(t, nil, "GET", url+"/api/nodes", nil, "")
	var out struct{ Nodes []nodeJSON }
	decode(t, body, &out)
	m := map[string]nodeJSON{}
	for _, n := range out.Nodes {
		m[n.Node] = n
	}
	return m
}

// A node's last_seen is its node lock's last renewal, not now; once the
// lock is gone (the node was killed) it shows as gone, last seen then —
// not when another node recorded its run as interrupted. Before: a live
// node's last_seen was always now, and a killed one's the time its
// interrupted record was written.
func TestDashboardNodeLastSeen(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &stepClock{now: t0}
	st := memstore.New(clock)
	ctx := context.Background()
	if _, err := st.Acquire(ctx, driver.AcquireParams{Key: "serve/node/n2", Token: "t", Owner: dashboard.NodeOwner("n2", "v1"), TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	srv := server(t, st, "", func(o *dashboard.Options) { o.Clock = clock })
	clock.advance(3 * time.Second)
	n := getNodes(t, srv.URL)["n2"]
	if !n.Alive || n.LastSeen == nil || !n.LastSeen.Equal(t0) {
		t.Fatalf("live node: %+v, want alive, last seen at its lock's renewal %v", n, t0)
	}
	// n2 dies at t0+4s in a run; n1 notices at t0+20s.
	err := st.RecordRuns(ctx, []ledger.RunRecord{
		{Job: "a", Tick: t0, Attempt: 1, Node: "n2", Start: t0.Add(time.Second), End: t0.Add(20 * time.Second), Status: ledger.RunInterrupted, Error: "node n2 stopped"},
		{Job: "a", Tick: t0.Add(-time.Minute), Attempt: 1, Node: "n2", Start: t0.Add(-time.Minute), End: t0.Add(-50 * time.Second), Status: ledger.RunOK},
	})
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(20 * time.Second)
	n = getNodes(t, srv.URL)["n2"]
	if n.Alive || n.LastSeen == nil || !n.LastSeen.Equal(t0.Add(time.Second)) {
		t.Fatalf("killed node: %+v, want gone, last seen %v (its run's start, the latest sign of life)", n, t0.Add(time.Second))
	}
}

// /api/jobs gives each job's state: broken (its schedule gives no next
// tick), paused or ok; registered jobs that are not configured here are
// listed with their registered spec.
func TestDashboardJobStates(t *testing.T) {
	st := memstore.New(nil)
	ctx := context.Background()
	for _, p := range []ledger.JobStateParams{
		{Job: "b", Op: ledger.JobPause},
		{Job: "elsewhere", Op: ledger.JobRegister, Spec: "CRON_TZ=No/Such_Zone * * * * *", Since: time.Now()},
		{Job: "fine", Op: ledger.JobRegister, Spec: "@hourly", Since: time.Now()},
	} {
		if _, err := st.SetJobState(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	srv := server(t, st, "", nil)
	_, body, _ := call(t, nil, "GET", srv.URL+"/api/jobs", nil, "")
	var out struct {
		Jobs []struct {
			Job    string
			State  string
			Broken string
			Spec   string
		}
	}
	decode(t, body, &out)
	want := map[string]string{"a": "ok", "b": "paused", "c/d": "ok", "elsewhere": "broken", "fine": "ok"}
	got := map[string]string{}
	for _, j := range out.Jobs {
		got[j.Job] = j.State
		if j.State == "broken" && j.Broken == "" {
			t.Errorf("%s is broken without a reason", j.Job)
		}
	}
	for job, state := range want {
		if got[job] != state {
			t.Errorf("%s: state %q, want %q (%s)", job, got[job], state, body)
		}
	}
}

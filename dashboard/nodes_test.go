package dashboard_test

import (
	"context"
	"fmt"
	"slices"
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

// nodesWithLeader is /api/nodes with the leader fields.
type nodesWithLeader struct {
	Nodes []struct {
		Node       string
		Alive      bool
		Leader     bool
		LeaderTerm uint64 `json:"leader_term"`
	}
	Leader *struct {
		Node        string
		Term        uint64
		ExpiresInMS int64 `json:"expires_in_ms"`
	}
}

func getLeader(t *testing.T, url string) nodesWithLeader {
	t.Helper()
	code, body, _ := call(t, nil, "GET", url+"/api/nodes", map[string]string{"Authorization": "Bearer tok"}, "")
	if code != 200 {
		t.Fatalf("/api/nodes: %d %s", code, body)
	}
	var out nodesWithLeader
	decode(t, body, &out)
	return out
}

// leaders returns the nodes marked leader, as "NODE@TERM".
func (n nodesWithLeader) leaders() []string {
	var out []string
	for _, v := range n.Nodes {
		if v.Leader || v.LeaderTerm != 0 {
			out = append(out, fmt.Sprintf("%s@%d", v.Node, v.LeaderTerm))
		}
	}
	return out
}

// /api/nodes names the holder of the serve/leader election as the leader,
// with its term, and marks its node; when the leadership moves, the mark
// moves with it, the term grows, and /api/events reports the nodes
// section changed. Before: nothing showed which node leads.
func TestDashboardNodeLeader(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		ctx := context.Background()
		lockers := map[string]*tasklock.Locker{}
		for _, n := range []string{"n1", "n2"} {
			if _, err := st.Acquire(ctx, driver.AcquireParams{Key: dashboard.DefaultNodeKeyPrefix + n, Token: "node-" + n, Owner: dashboard.NodeOwner(n, "v1"), TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			lk, err := tasklock.New(st, &tasklock.Config{Owner: n})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lk.Close() })
			lockers[n] = lk
		}
		srv := server(t, st, "tok", nil)
		nextEvent := events(t, srv.URL, "tok")
		nextEvent()

		got := getLeader(t, srv.URL)
		if got.Leader != nil || len(got.leaders()) != 0 || len(got.Nodes) != 2 {
			t.Fatalf("before an election: leader %+v, marked %v, %d nodes; want none marked of 2", got.Leader, got.leaders(), len(got.Nodes))
		}

		var terms []uint64
		for _, n := range []string{"n1", "n2"} {
			e := lockers[n].Election(dashboard.DefaultLeaderKey, nil)
			l, err := e.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := getLeader(t, srv.URL)
			if got.Leader == nil || got.Leader.Node != n || got.Leader.Term != l.Fence() || got.Leader.ExpiresInMS <= 0 || got.Leader.ExpiresInMS > tasklock.DefaultTTL.Milliseconds() {
				t.Fatalf("%s elected with term %d: leader %+v", n, l.Fence(), got.Leader)
			}
			if m := got.leaders(); len(m) != 1 || m[0] != fmt.Sprintf("%s@%d", n, l.Fence()) {
				t.Fatalf("%s elected with term %d: nodes marked %v", n, l.Fence(), m)
			}
			for changed := nextEvent(); !slices.Contains(changed, "nodes"); changed = nextEvent() {
			}
			terms = append(terms, l.Fence())
			if err := e.Resign(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if terms[1] <= terms[0] {
			t.Errorf("terms %v, want growing", terms)
		}
		if got := getLeader(t, srv.URL); got.Leader != nil || len(got.leaders()) != 0 {
			t.Errorf("after resigning: leader %+v, marked %v", got.Leader, got.leaders())
		}

		// Another election key: serve/leader's holder is not the leader.
		l, err := lockers["n1"].Election(dashboard.DefaultLeaderKey, nil).Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		other := server(t, st, "tok", func(o *dashboard.Options) { o.LeaderKey = "fleet/leader" })
		if got := getLeader(t, other.URL); got.Leader != nil || len(got.leaders()) != 0 {
			t.Errorf("LeaderKey fleet/leader: leader %+v, marked %v", got.Leader, got.leaders())
		}
	})
}

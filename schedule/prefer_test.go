package schedule

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// claimsOf returns, per node, the claim events (claimed or claimed
// elsewhere) of job's tick.
func (l *eventLog) claimsOf(job string, tick time.Time) map[string]EventType {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]EventType)
	for _, e := range l.evs {
		if e.Job == job && e.Tick.Equal(tick) && (e.Type == EventClaimed || e.Type == EventClaimedElsewhere) {
			out[e.Node] = e.Type
		}
	}
	return out
}

// settleNodes is settle for some of the nodes only.
func (c *cluster) settleNodes(nodes ...*node) {
	c.t.Helper()
	waitFor(c.t, "the nodes to settle", func() bool {
		for _, n := range nodes {
			s := n.s
			s.mu.Lock()
			ok := s.stepped.Equal(n.clock.Now()) && s.active == 0
			s.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	})
}

// agreed waits until every node counts every other one as agreeing on its
// view: from then on each plain tick is claimed by its preferred node.
func (c *cluster) agreed(nodes ...*node) {
	c.t.Helper()
	for range 20 {
		ok := true
		for _, n := range nodes {
			n.s.mu.Lock()
			ok = ok && len(n.s.pref.agree) == len(nodes)-1 && len(n.s.pref.nodes) == len(nodes)
			n.s.mu.Unlock()
		}
		if ok {
			return
		}
		c.step(DefaultPollInterval) // each node exchanges marks every poll
	}
	c.t.Fatal("the nodes never agreed on a view")
}

// markedCluster is a cluster whose nodes see the ledger's claim marks,
// with a recorder on its clock.
func markedCluster(t *testing.T) (*cluster, *recorder) {
	c := newCluster(t)
	c.marks = true
	return c, newRecorder(c.clock)
}

func plainJobs(rec *recorder, n int) []Job {
	var jobs []Job
	for i := range n {
		jobs = append(jobs, Job{Name: fmt.Sprintf("j%02d", i), Schedule: "@every 10s", Handler: rec.ok, MisfireWindow: 10 * time.Second})
	}
	return jobs
}

// With a ledger that keeps marks, a plain job's tick is claimed by its
// preferred node alone, at the tick, and never by the others, whose
// fallbacks find it covered; a job restricted by labels and a LeaderOnly
// one are claimed as before.
func TestPreferredNodeClaimsAlone(t *testing.T) {
	c, rec := markedCluster(t)
	var log eventLog
	jobs := plainJobs(rec, 12)
	jobs = append(jobs,
		Job{Name: "labelled", Schedule: "@every 10s", Handler: rec.ok, Nodes: []string{"x"}, MisfireWindow: 10 * time.Second},
		Job{Name: "leader", Schedule: "@every 10s", Handler: rec.ok, LeaderOnly: true, MisfireWindow: 10 * time.Second})
	// Every node says it leads: a LeaderOnly job is claimed by whoever
	// leads, never left to a preferred node.
	cfg := &Config{OnEvent: log.on, Labels: []string{"x"}, IsLeader: func() bool { return true }}
	var nodes []*node
	for _, name := range []string{"a", "b", "c"} {
		nodes = append(nodes, c.node(name, 0, cfg).add(t, jobs...).start(t))
	}
	c.settle(true)
	c.agreed(nodes...)
	owners := make(map[string]int)
	tick := t0.Add(10 * time.Second)
	for c.clock.Now().Before(tick.Add(3 * time.Second)) {
		c.step(DefaultPollInterval)
	}
	for _, j := range jobs[:12] {
		want := preferred([]string{"a", "b", "c"}, j.Name)
		owners[want]++
		got := log.claimsOf(j.Name, tick)
		if len(got) != 1 || got[want] != EventClaimed {
			t.Errorf("%s@%v: claims %v, want one by its preferred node %s", j.Name, tick, got, want)
		}
		if n := rec.times(j.Name, tick, ""); n != 1 {
			t.Errorf("%s@%v ran %d times", j.Name, tick, n)
		}
	}
	if len(owners) < 2 {
		t.Errorf("every job prefers one node: %v", owners)
	}
	for _, name := range []string{"labelled", "leader"} {
		if got := log.claimsOf(name, tick); len(got) != 3 {
			t.Errorf("%s@%v: claims %v, want one by every node", name, tick, got)
		}
	}
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatal(d)
	}
}

// Without Config.PreferredNodes (the default) a ledger that keeps marks
// changes nothing: every node claims every plain tick at the tick.
func TestPreferredNodesOffByDefault(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	var log eventLog
	jobs := plainJobs(rec, 6)
	for _, name := range []string{"a", "b", "c"} {
		c.node(name, 0, &Config{OnEvent: log.on}).add(t, jobs...).start(t)
	}
	c.settle(true)
	tick := t0.Add(10 * time.Second)
	for c.clock.Now().Before(tick.Add(3 * time.Second)) {
		c.step(DefaultPollInterval)
	}
	for _, j := range jobs {
		got := log.claimsOf(j.Name, tick)
		claimed := 0
		for _, e := range got {
			if e == EventClaimed {
				claimed++
			}
		}
		if len(got) != 3 || claimed != 1 {
			t.Errorf("%s@%v: claims %v, want one by every node, one of them won", j.Name, tick, got)
		}
		if n := rec.times(j.Name, tick, ""); n != 1 {
			t.Errorf("%s@%v ran %d times", j.Name, tick, n)
		}
	}
	// Nor does any node write a mark: the probe's own is the only one.
	marks, err := c.ledger.Mark(context.Background(), ledger.ClaimMark{Node: "probe", View: "v"}, time.Minute)
	if err != nil || len(marks) != 1 {
		t.Errorf("marks %v, %v: want the probe's alone", marks, err)
	}
}

// Nodes that disagree on the view — here one has a job the other has not —
// trust none of each other's marks: every node claims every tick at the
// tick, and every tick still runs once.
func TestPreferenceNeedsTheSameView(t *testing.T) {
	c, rec := markedCluster(t)
	var log eventLog
	jobs := plainJobs(rec, 8)
	a := c.node("a", 0, &Config{OnEvent: log.on}).add(t, jobs...).start(t)
	extra := Job{Name: "extra", Schedule: "@every 10s", Handler: rec.ok, MisfireWindow: 10 * time.Second}
	b := c.node("b", 0, &Config{OnEvent: log.on}).add(t, append(jobs, extra)...).start(t)
	c.settle(true)
	for range 4 {
		c.step(DefaultPollInterval)
	}
	for _, n := range []*node{a, b} {
		n.s.mu.Lock()
		nodes, agree := len(n.s.pref.nodes), len(n.s.pref.agree)
		n.s.mu.Unlock()
		if nodes != 2 || agree != 0 {
			t.Fatalf("%s sees %d live nodes and %d agreeing, want 2 and 0", n.name, nodes, agree)
		}
	}
	tick := t0.Add(10 * time.Second)
	for c.clock.Now().Before(tick.Add(time.Second)) {
		c.step(DefaultPollInterval)
	}
	for _, j := range jobs {
		if got := log.claimsOf(j.Name, tick); len(got) != 2 {
			t.Errorf("%s@%v: claims %v, want both nodes' at the tick", j.Name, tick, got)
		}
		if n := rec.times(j.Name, tick, ""); n != 1 {
			t.Errorf("%s@%v ran %d times", j.Name, tick, n)
		}
	}
}

// covered trusts a mark only from the job's preferred node, with this
// node's view, for ticks from From through Through.
func TestCoveredNeedsOwnerViewAndSpan(t *testing.T) {
	c, rec := markedCluster(t)
	n := c.node("a", 0, nil).add(t, plainJobs(rec, 1)...)
	s := n.s
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs["j00"]
	nodes := []string{"b", "c", "d"} // a view without this node: the job is another's whatever its hash
	owner := preferred(nodes, j.Name)
	s.pref.marks = map[string]ledger.ClaimMark{}
	s.adopt(nodes, t0)
	from, through := t0.Add(10*time.Second), t0.Add(30*time.Second)
	mark := ledger.ClaimMark{Node: owner, View: s.pref.view, From: from, Through: through}
	s.pref.marks = map[string]ledger.ClaimMark{owner: mark}
	s.agreeOn(true)
	if !j.lag || j.owner != owner {
		t.Fatalf("job of %s (lag %v) on %s", j.owner, j.lag, s.node)
	}
	for _, tc := range []struct {
		tick time.Time
		want bool
	}{{from, true}, {through, true}, {from.Add(-time.Nanosecond), false}, {through.Add(time.Nanosecond), false}} {
		if got := s.covered(j, tc.tick); got != tc.want {
			t.Errorf("covered(%v) = %v with a mark for [%v, %v]", tc.tick, got, from, through)
		}
	}
	bad := mark
	bad.View = "another"
	s.pref.marks[owner] = bad
	if s.covered(j, from) {
		t.Error("covered by a mark of another view")
	}
	s.pref.marks[owner] = mark
	s.jobsChanged()
	if s.covered(j, from) {
		t.Error("covered while the jobs changed since the view was made")
	}
}

// stoppableLedger blocks Claim while its gate is shut, as if its node were
// stopped (SIGSTOP) in the middle of a pass; its marks do not move either.
type stoppableLedger struct {
	*memstore.Store
	mu   sync.Mutex
	shut chan struct{} // nil: open
}

func (g *stoppableLedger) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	g.mu.Lock()
	ch := g.shut
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return g.Store.Claim(ctx, ps)
}

// A preferred node that stops claiming costs lateness, not ticks: the
// others claim its jobs' ticks a fallback delay after them, each once, and
// when it comes back its late claims find them taken.
func TestFallbackForAStoppedPreferredNode(t *testing.T) {
	c, rec := markedCluster(t)
	jobs := plainJobs(rec, 12)
	a := c.node("a", 0, nil).add(t, jobs...).start(t)
	b := c.node("b", 0, nil).add(t, jobs...).start(t)
	g := &stoppableLedger{Store: c.ledger}
	lk := c.node("c", 0, nil) // for its Locker and clock; its Scheduler is replaced
	conf := Config{Node: "c", Clock: lk.clock, Logger: discardLogger(), PreferredNodes: true}
	s, err := New(lk.lk, g, &conf)
	if err != nil {
		t.Fatal(err)
	}
	lk.s = s
	lk.add(t, jobs...).start(t)
	c.settle(true)
	c.agreed(a, b, lk)

	var ofC []string
	for _, j := range jobs {
		if preferred([]string{"a", "b", "c"}, j.Name) == "c" {
			ofC = append(ofC, j.Name)
		}
	}
	if len(ofC) == 0 {
		t.Fatal("no job prefers c")
	}
	g.mu.Lock()
	gate := make(chan struct{})
	g.shut = gate
	g.mu.Unlock()
	// c's next pass (at the tick) blocks; two ticks pass.
	first := t0.Add(10 * time.Second)
	for c.clock.Now().Before(first.Add(10*time.Second + 2*DefaultPollInterval + time.Second)) {
		c.advance(DefaultPollInterval)
		c.settleNodes(a, b)
	}
	for _, tick := range []time.Time{first, first.Add(10 * time.Second)} {
		for _, name := range ofC {
			if n := rec.times(name, tick, ""); n != 1 {
				t.Fatalf("%s@%v ran %d times while its preferred node c was stopped", name, tick, n)
			}
		}
	}
	for _, cl := range rec.snapshot() {
		if slices.Contains(ofC, cl.Job) && cl.Node == "c" && !cl.Tick.Before(first) {
			t.Errorf("%s@%v ran on c, which was stopped", cl.Job, cl.Tick)
		}
		// At the first tick stopped, c still counts among the live nodes
		// (its mark is kept a node lease long): its jobs wait for the
		// fallback. Ten seconds later its mark is gone, and with it c.
		if slices.Contains(ofC, cl.Job) && cl.Tick.Equal(first) && cl.at.Sub(cl.Tick) < 2*DefaultPollInterval {
			t.Errorf("%s@%v ran %v after its tick, before the fallback delay", cl.Job, cl.Tick, cl.at.Sub(cl.Tick))
		}
	}
	close(gate)
	g.mu.Lock()
	g.shut = nil
	g.mu.Unlock()
	c.step(DefaultPollInterval)
	c.step(DefaultPollInterval)
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatal(d)
	}
	// Back, c claims its jobs' next tick at the tick again.
	next := first.Add(20 * time.Second)
	for c.clock.Now().Before(next) {
		c.step(DefaultPollInterval)
	}
	c.agreed(a, b, lk)
	next = next.Add(10 * time.Second)
	for c.clock.Now().Before(next) {
		c.step(DefaultPollInterval)
	}
	for _, cl := range rec.snapshot() {
		if cl.Tick.Equal(next) && slices.Contains(ofC, cl.Job) && (cl.Node != "c" || !cl.at.Equal(next)) {
			t.Errorf("%s@%v ran on %s at %v, want on c at the tick", cl.Job, cl.Tick, cl.Node, cl.at)
		}
	}
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatal(d)
	}
}

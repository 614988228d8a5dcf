package schedule

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
)

// depGate is a handler that blocks each run until the test releases it, and
// then returns the error the test chose for its tick.
type depGate struct {
	rec     *recorder
	started chan Run
	release chan error
}

func newDepGate(rec *recorder) *depGate {
	return &depGate{rec: rec, started: make(chan Run, 16), release: make(chan error)}
}

func (g *depGate) handler(ctx context.Context, run Run) error {
	g.rec.note(run)
	g.started <- run
	select {
	case err := <-g.release:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (g *depGate) wait(t *testing.T) Run {
	t.Helper()
	select {
	case r := <-g.started:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a run to start")
		return Run{}
	}
}

// before is a time before the tests' first tick, t0 (when their jobs are
// registered, so that t0 is owed).
var before = t0.Add(-time.Second)

// waitingChild starts node a with a job "parent" that fails and a job
// "child" after it (Within 30m), both "@every 1h", and returns once the
// child's tick t0 waits, its pending record written; rec counts the
// child's runs.
func waitingChild(t *testing.T) (*cluster, *node, *recorder) {
	t.Helper()
	c := newCluster(t)
	rec := newRecorder(c.clock)
	parent := func(context.Context, Run) error { return errors.New("parent failed") }
	a := c.node("a", 0, nil).add(t,
		Job{Name: "parent", Schedule: "@every 1h", Handler: parent},
		Job{Name: "child", Schedule: "@every 1h", After: []string{"parent"}, Within: 30 * time.Minute, Handler: rec.ok},
	).start(t)
	c.waitRecords("parent", before, 1)
	waitFor(t, "the child's pending record", func() bool {
		rs := c.history("child")
		return len(rs) == 1 && rs[0].Status == ledger.RunRunning
	})
	return c, a, rec
}

// waitedAgain waits until a tick of n went to sleep waiting for its
// parents more than w times.
func waitedAgain(t *testing.T, n *node, w int64) {
	t.Helper()
	waitFor(t, "the child to look at its parents again", func() bool { return n.s.deps.waits.Load() > w })
}

// A child's tick runs once its parent's run of the same tick ended ok on
// the same node, woken by that end: the clock does not move meanwhile.
func TestDepsParentOKChildRunsSameTick(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	parent := newDepGate(rec)
	var mu sync.Mutex
	var childAt []time.Time // when (by the cluster's clock) the child ran
	child := func(ctx context.Context, run Run) error {
		rec.note(run)
		mu.Lock()
		childAt = append(childAt, c.clock.Now())
		mu.Unlock()
		return nil
	}
	n := c.node("n1", 0, nil).add(t,
		Job{Name: "parent", Schedule: "0 * * * * *", Handler: parent.handler},
		Job{Name: "child", Schedule: "0 * * * * *", After: []string{"parent"}, Handler: child},
	).start(t)
	tick := t0 // the first tick: the jobs were registered at it
	if r := parent.wait(t); !r.Tick.Equal(tick) {
		t.Fatalf("parent ran tick %v, want %v", r.Tick, tick)
	}
	waitedAgain(t, n, 0)
	if got := rec.times("child", tick, ""); got != 0 {
		t.Fatalf("child ran %d times while its parent was running", got)
	}
	reads := n.s.deps.reads.Load()
	parent.release <- nil
	rs := c.waitRecords("child", before, 1)
	if got := n.s.deps.reads.Load(); got != reads {
		t.Errorf("the child read its parent's runs %d more times after the parent's ok run ended on its node", got-reads)
	}
	if len(rs) != 1 || rs[0].Status != ledger.RunOK || !rs[0].Tick.Equal(tick) {
		t.Fatalf("child's history = %+v, want one ok run of tick %v", rs, tick)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(childAt) != 1 || !childAt[0].Equal(tick) {
		t.Fatalf("child ran at %v, want once at %v: woken by the parent's end, not by a poll", childAt, tick)
	}
	if p := c.history("parent"); len(p) != 1 || p[0].Status != ledger.RunOK {
		t.Fatalf("parent's history = %+v", p)
	}
}

// A child whose parent failed waits Within, then records its tick as
// skipped, naming the parent and its last status.
func TestDepsParentFailedChildSkippedAfterWithin(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	parent := newDepGate(rec)
	n := c.node("n1", 0, nil).add(t,
		Job{Name: "parent", Schedule: "0 * * * * *", Handler: parent.handler},
		Job{Name: "other", Schedule: "0 30 * * * *", Handler: rec.ok}, // no run in the test
		Job{Name: "child", Schedule: "0 * * * * *", After: []string{"parent", "other"}, Within: 10 * time.Second, Handler: rec.ok},
	).start(t)
	tick := t0
	parent.wait(t)
	parent.release <- errors.New("boom")
	c.waitRecords("parent", before, 1)
	// Up to just before Within the child keeps waiting. (A tick may see
	// the clock move between reading it and arming its poll timer, and
	// then sleep up to a poll interval past Within.)
	deadline := tick.Add(10 * time.Second)
	var rs []ledger.RunRecord
	for i := 0; len(rs) == 0; i++ {
		if i > 30 {
			t.Fatalf("child still waiting at %v", c.clock.Now())
		}
		w := n.s.deps.waits.Load()
		c.advance(500 * time.Millisecond)
		waitFor(t, "the child to wait again or give up", func() bool {
			rs = c.finalAfter("child", before)
			return len(rs) > 0 || n.s.deps.waits.Load() > w
		})
		if len(rs) > 0 && c.clock.Now().Before(deadline) {
			t.Fatalf("at %v, %v after the tick, child recorded %+v; want it waiting for 10s", c.clock.Now(), c.clock.Now().Sub(tick), rs)
		}
	}
	rs = c.waitRecords("child", before, 1)
	r := rs[0]
	if all := c.historyAfter("child", before); len(all) != 1 {
		t.Fatalf("child's history = %+v, want the skip to have replaced the pending record", all)
	}
	if len(rs) != 1 || r.Status != ledger.RunSkipped || !r.Tick.Equal(tick) || r.Attempt != 1 {
		t.Fatalf("child's history = %+v, want one skipped record of tick %v", rs, tick)
	}
	if r.End.Before(deadline) || r.End.After(deadline.Add(time.Second)) {
		t.Errorf("skipped at %v, want at the tick + Within, %v", r.End, deadline)
	}
	for _, want := range []string{"parents not done within 10s", "parent (last run failed, tick 2030-01-01T00:00:00Z)", "other (no run yet)"} {
		if !strings.Contains(r.Error, want) {
			t.Errorf("reason %q does not say %q", r.Error, want)
		}
	}
	if got := rec.times("child", tick, ""); got != 0 {
		t.Errorf("child ran %d times", got)
	}
}

// Parents on other schedules: child tick T runs when the parent has an ok
// run for a tick in (P, T], P being the child's previous tick; an ok run
// outside that span does not count.
func TestDepsParentOnOtherSchedule(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	at := func(m, s int) time.Time { return t0.Add(time.Duration(m)*time.Minute + time.Duration(s)*time.Second) }
	fail := map[time.Time]bool{
		at(0, 15): true,                                                    // in (t0-1m, t0+1m], with an ok one after it
		at(1, 15): true, at(1, 45): true, at(2, 15): true, at(2, 45): true, // all of (t0+1m, t0+3m]
	}
	parent := func(ctx context.Context, run Run) error {
		rec.note(run)
		if fail[run.Tick] {
			return errors.New("parent failed")
		}
		return nil
	}
	n := c.node("n1", 0, nil).add(t,
		Job{Name: "parent", Schedule: "15,45 * * * * *", Handler: parent},
		Job{Name: "child", Schedule: "0 1-59/2 * * * *", After: []string{"parent"}, Within: 20 * time.Second, Handler: rec.ok},
	).start(t)
	for _, s := range []int{15, 45, 60} { // parent fails, parent ok, child runs at once
		c.step(at(0, s).Sub(c.clock.Now()))
	}
	if rs := c.waitRecords("child", before, 1); rs[0].Status != ledger.RunOK || !rs[0].Tick.Equal(at(1, 0)) {
		t.Fatalf("child's history = %+v, want an ok run of t0+1m", rs)
	}
	for _, s := range []int{75, 105, 135, 165} { // the parent fails 4 times
		c.step(at(0, s).Sub(c.clock.Now()))
	}
	w := n.s.deps.waits.Load()
	c.advance(at(3, 0).Sub(c.clock.Now()))
	waitedAgain(t, n, w) // child t0+3m waits
	for i := 0; len(c.finalAfter("child", at(1, 0))) == 0; i++ {
		if i > 60 {
			t.Fatalf("child still waiting at %v", c.clock.Now())
		}
		w := n.s.deps.waits.Load()
		c.advance(500 * time.Millisecond)
		waitFor(t, "the child to wait again or give up", func() bool {
			return len(c.finalAfter("child", at(1, 0))) > 0 || n.s.deps.waits.Load() > w
		})
	}
	rs := c.waitRecords("child", at(1, 0), 1)
	if r := rs[0]; len(rs) != 1 || r.Status != ledger.RunSkipped || !r.Tick.Equal(at(3, 0)) ||
		!strings.Contains(r.Error, "parent (last run failed, tick 2030-01-01T00:02:45Z)") {
		t.Fatalf("child's history = %+v, want t0+3m skipped naming the parent's failed run of t0+2m45s", rs)
	}
	if got := rec.times("child", at(3, 0), ""); got != 0 {
		t.Errorf("child ran t0+3m %d times", got)
	}
	// The parent's ok run of t0+3m15s, after the child's tick, did not count.
	if got := rec.times("parent", at(3, 15), ""); got != 1 {
		t.Errorf("parent ran t0+3m15s %d times, want once (ok)", got)
	}
}

// A child whose parent runs on another node (a Scheduler that has not the
// child, the child's one not the parent) finds the parent's run by polling
// the ledger.
func TestDepsParentOnAnotherNode(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	parent := newDepGate(rec)
	c.node("a", 0, nil).add(t, Job{Name: "parent", Schedule: "0 * * * * *", Handler: parent.handler}).start(t)
	b := c.node("b", 0, nil).add(t, Job{Name: "child", Schedule: "0 * * * * *", After: []string{"parent"}, Handler: rec.ok}).start(t)
	tick := t0
	parent.wait(t)
	for range 3 {
		w := b.s.deps.waits.Load()
		c.advance(500 * time.Millisecond)
		waitedAgain(t, b, w)
	}
	if got := rec.times("child", tick, ""); got != 0 {
		t.Fatalf("child ran %d times while its parent was running on another node", got)
	}
	parent.release <- nil
	c.waitRecords("parent", before, 1)
	if got := rec.times("child", tick, ""); got != 0 {
		t.Fatalf("child ran before its node polled")
	}
	for i := 0; len(c.finalAfter("child", before)) == 0; i++ {
		if i > 10 {
			t.Fatal("child did not see its parent's run")
		}
		w := b.s.deps.waits.Load()
		c.advance(500 * time.Millisecond)
		waitFor(t, "the child to poll", func() bool {
			return len(c.finalAfter("child", before)) > 0 || b.s.deps.waits.Load() > w
		})
	}
	rs := c.waitRecords("child", before, 1)
	if len(rs) != 1 || rs[0].Status != ledger.RunOK || !rs[0].Tick.Equal(tick) || rs[0].Node != "b" {
		t.Fatalf("child's history = %+v, want an ok run of %v on b", rs, tick)
	}
}

// A trigger-now request of a child runs at once, without its parents.
func TestDepsTriggerDoesNotWait(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	n := c.node("n1", 0, nil).add(t,
		Job{Name: "child", Schedule: "0 30 * * * *", After: []string{"parent"}, Handler: rec.ok},
	).start(t)
	id, err := n.s.Trigger(context.Background(), "child")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the triggered run", func() bool { return len(rec.snapshot()) == 1 })
	if r := rec.snapshot()[0]; r.Trigger != id {
		t.Fatalf("ran %+v, want trigger %s", r.Run, id)
	}
}

// A backfill of a child's past tick runs at once too.
func TestDepsBackfillDoesNotWait(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	c.node("n1", 0, nil).add(t,
		Job{Name: "child", Schedule: "0 30 * * * *", After: []string{"parent"}, Handler: rec.ok},
	).start(t)
	tick := t0.Add(-30 * time.Minute)
	if _, err := RequestBackfill(context.Background(), c.ledger, "child", tick, tick, BackfillOptions{Now: c.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the backfilled run", func() bool {
		c.advance(100 * time.Millisecond) // to the next poll of the job states
		return rec.times("child", tick, "") == 1
	})
	if rs := c.waitRecords("child", tick.Add(-time.Second), 1); rs[0].Status != ledger.RunOK {
		t.Fatalf("child's history = %+v", rs)
	}
}

// Add refuses a job that closes a cycle among the known jobs, naming it,
// and checks After and Within.
func TestDepsAddRefuses(t *testing.T) {
	c := newCluster(t)
	n := c.node("n1", 0, nil)
	noop := func(context.Context, Run) error { return nil }
	n.add(t,
		Job{Name: "a", Schedule: "@hourly", After: []string{"b"}, Handler: noop},
		Job{Name: "b", Schedule: "@hourly", After: []string{"c", "x"}, Handler: noop},
	)
	for _, tc := range []struct {
		job   Job
		field string
		text  string
	}{
		{Job{Name: "c", After: []string{"a"}}, "Job.After", "cycle c -> a -> b -> c"},
		{Job{Name: "c", After: []string{"d", "c"}}, "Job.After", "cycle c -> c"},
		{Job{Name: "c", After: []string{"a", "a"}}, "Job.After[1]", `"a" is named twice`},
		{Job{Name: "c", After: []string{""}}, "Job.After[0]", "empty"},
		{Job{Name: "c", After: []string{"x", "a\u0085"}}, "Job.After[1]", "control character U+0085"},
		{Job{Name: "c", Within: time.Minute}, "Job.Within", "names no parent"},
		{Job{Name: "c", After: []string{"x"}, Within: -time.Second}, "Job.Within", "negative"},
		{Job{Name: "c", After: []string{"x"}, Within: 2 * time.Hour}, "Job.Within", "more than MisfireWindow 1h0m0s"},
	} {
		j := tc.job
		j.Schedule, j.Handler = "@hourly", noop
		err := n.s.Add(j)
		var oe *tasklock.OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || oe.Job != "c" || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("Add(%v) = %v, want an error for %s saying %q", j.After, err, tc.field, tc.text)
		}
	}
	// Unknown parents (another node's jobs) and a parent added later are
	// fine; a cycle through an unknown job is the fleet's to avoid.
	n.add(t, Job{Name: "c", Schedule: "@hourly", After: []string{"y"}, Handler: noop})
	now := t0.Add(5 * time.Minute)
	if d, how := waitDeadline(n.s.jobs["c"], t0, now); !d.Equal(t0.Add(time.Hour)) || !strings.Contains(how, "next tick") {
		t.Errorf("default wait until %v (%s), want the next tick %v", d, how, t0.Add(time.Hour))
	}
	n.add(t, Job{Name: "d", Schedule: "@hourly", After: []string{"y"}, MisfireWindow: 10 * time.Minute, Handler: noop})
	if d, _ := waitDeadline(n.s.jobs["d"], t0, now); !d.Equal(now.Add(10 * time.Minute)) {
		t.Errorf("default wait until %v, want MisfireWindow 10m after it was taken up, sooner than the next tick", d)
	}
}

func TestCycle(t *testing.T) {
	g := map[string][]string{"a": {"b"}, "b": {"c", "d"}, "d": {"e"}, "e": {"a"}}
	parents := func(n string) []string { return g[n] }
	if got := Cycle("a", g["a"], parents); !slices.Equal(got, []string{"a", "b", "d", "e", "a"}) {
		t.Errorf("Cycle(a) = %v", got)
	}
	if got := Cycle("c", []string{"x"}, parents); got != nil {
		t.Errorf("Cycle(c) = %v, want none", got)
	}
	if got := CycleText(Cycle("z", []string{"z"}, parents)); got != "z -> z" {
		t.Errorf("self cycle = %q", got)
	}
}

func TestPrevTick(t *testing.T) {
	for _, tc := range []struct {
		spec     string
		tick, at time.Time
	}{
		{"0 */2 * * * *", t0.Add(4 * time.Minute), t0.Add(2 * time.Minute)},
		{"@every 10s", t0.Add(time.Minute), t0.Add(50 * time.Second)},
		{"* * * * * *", t0, t0.Add(-time.Second)},
		{"0 0 29 2 *", time.Date(2032, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)},
	} {
		if got := prevTick(MustParse(tc.spec, time.UTC), tc.tick); !got.Equal(tc.at) {
			t.Errorf("prevTick(%q, %v) = %v, want %v", tc.spec, tc.tick, got, tc.at)
		}
	}
}

// A sharded parent is done for a tick only when every shard of it is ok.
func TestDepsShardedParent(t *testing.T) {
	c := newCluster(t)
	n := c.node("n1", 0, nil)
	tick := t0.Add(time.Minute)
	rec := func(shard int, st ledger.RunStatus) {
		t.Helper()
		r := ledger.RunRecord{Job: "p", Tick: tick, Shard: shard, Shards: 3, Attempt: 1, Node: "x", Start: tick, End: tick, Status: st}
		if err := c.ledger.RecordRuns(context.Background(), []ledger.RunRecord{r}); err != nil {
			t.Fatal(err)
		}
	}
	done := func() bool {
		t.Helper()
		ok, err := n.s.parentDone("p", t0, tick)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	rec(0, ledger.RunOK)
	rec(1, ledger.RunFailed)
	rec(2, ledger.RunOK)
	if done() {
		t.Fatal("done with shard 1 failed")
	}
	if ok, _ := n.s.parentDone("p", tick, tick.Add(time.Minute)); ok {
		t.Fatal("done for a span after the parent's tick")
	}
	r := ledger.RunRecord{Job: "p", Tick: tick, Shard: 1, Shards: 3, Attempt: 2, Node: "x", Start: tick, End: tick, Status: ledger.RunOK}
	if err := c.ledger.RecordRuns(context.Background(), []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	if !done() {
		t.Fatal("not done with every shard ok (shard 1 on its second attempt)")
	}
}

// A tick still waiting for its parents when Shutdown's grace period ends
// is recorded as skipped, and Shutdown returns.
func TestDepsShutdownWhileWaiting(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	n := c.node("n1", 0, &Config{ShutdownGrace: time.Second}).add(t,
		Job{Name: "child", Schedule: "0 * * * * *", After: []string{"elsewhere"}, Handler: rec.ok},
	).start(t)
	waitedAgain(t, n, 0)
	done := make(chan error, 1)
	go func() { done <- n.s.Shutdown(context.Background()) }()
	var err error
	waitFor(t, "Shutdown to return", func() bool {
		c.clock.Advance(200 * time.Millisecond) // to the end of the grace period, armed when Shutdown began
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	rs := c.history("child")
	if len(rs) != 1 || rs[0].Status != ledger.RunSkipped || !strings.Contains(rs[0].Error, "shut down while waiting for the job's parents elsewhere") {
		t.Fatalf("child's history = %+v, want its tick skipped for the shutdown", rs)
	}
	if rec.times("child", t0, "") != 0 {
		t.Fatal("child ran")
	}
}

// Without Within a tick waits for its parents until the job's next tick,
// which takes over the wait: a parent that keeps failing leaves one waiting
// tick per job, not one per tick of the hour.
func TestDepsDefaultWaitEndsAtNextTick(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	fail := func(context.Context, Run) error { return errors.New("boom") }
	n := c.node("n1", 0, nil).add(t,
		Job{Name: "parent", Schedule: "@every 1s", Handler: fail},
		Job{Name: "child", Schedule: "@every 1s", After: []string{"parent"}, Handler: rec.ok},
	).start(t)
	c.settle(false)
	waiting := func() int {
		n.s.deps.mu.Lock()
		defer n.s.deps.mu.Unlock()
		return len(n.s.deps.by["parent"])
	}
	most := 0
	for range 8 {
		c.advance(time.Second)
		c.settle(false)
		// Exactly one: the older tick gave up its wait, and the new one
		// (whose run goroutine may start after settle returns) waits.
		waitFor(t, "the older tick to give up its wait and the new one to wait", func() bool { return waiting() == 1 })
		most = max(most, waiting())
	}
	rs := c.waitRecords("child", t0, 6)
	for _, r := range rs[:6] {
		if r.Status != ledger.RunSkipped || !strings.Contains(r.Error, "parents not done by the job's next tick ("+r.Tick.Add(time.Second).Format(time.RFC3339)+")") {
			t.Errorf("child's tick %v: %s %q, want skipped at its next tick", r.Tick, r.Status, r.Error)
		}
	}
	if most != 1 {
		t.Errorf("%d ticks waited at once, want 1", most)
	}
	if calls := rec.snapshot(); len(calls) != 0 {
		t.Errorf("the child ran %d times with a failing parent", len(calls))
	}
}

package schedule

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
)

// noTick is a Schedule that cannot answer: Next never finds a tick.
type noTick struct{}

func (noTick) Next(time.Time) time.Time { return time.Time{} }
func (noTick) String() string           { return "never" }

// lastTick is a Schedule whose ticks are every 10 s up to a last one.
type lastTick struct{ last time.Time }

func (l lastTick) Next(t time.Time) time.Time {
	n := t.Truncate(10 * time.Second).Add(10 * time.Second)
	if n.After(l.last) {
		return time.Time{}
	}
	return n.UTC()
}
func (lastTick) String() string { return "until" }

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A job whose schedule cannot give a next tick is broken: an ERROR log and
// an EventBroken once, and Broken lists it; it is not dropped in silence.
// Before: nothing at all happened (the job left the heap).
func TestBrokenJob(t *testing.T) {
	c := newCluster(t)
	var evs eventLog
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	rec := newRecorder(c.clock)
	n := c.node("a", 0, &Config{OnEvent: evs.on, Logger: logger})
	n.add(t,
		Job{Name: "never", Schedule: "@every 10s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
		Job{Name: "ends", Schedule: "@every 10s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
		Job{Name: "fine", Schedule: "@every 10s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
	)
	n.s.mu.Lock()
	n.s.jobs["never"].sched = noTick{}
	n.s.jobs["ends"].sched = lastTick{t0.Add(20 * time.Second)}
	n.s.mu.Unlock()
	n.start(t)
	c.settle(true)
	for range 4 {
		c.step(10 * time.Second)
	}
	broken := n.s.Broken()
	if len(broken) != 2 || !strings.Contains(broken["never"], "no tick") || !strings.Contains(broken["ends"], "no tick") {
		t.Fatalf("Broken() = %v, want never and ends", broken)
	}
	count := map[string]int{}
	evs.mu.Lock()
	for _, e := range evs.evs {
		if e.Type == EventBroken {
			count[e.Job]++
			if e.Error == "" || e.Node != "a" {
				t.Errorf("broken event %+v", e)
			}
		}
	}
	evs.mu.Unlock()
	if count["never"] != 1 || count["ends"] != 1 || count["fine"] != 0 {
		t.Errorf("EventBroken per job: %v, want one for never and ends", count)
	}
	out := logs.String()
	if strings.Count(out, "level=ERROR") != 2 || strings.Count(out, "job=never") != 1 || strings.Count(out, "job=ends") != 1 {
		t.Errorf("logs, want one ERROR line per broken job:\n%s", out)
	}
	// ends ran its ticks up to its last one; fine runs on.
	if rec.times("ends", t0.Add(20*time.Second), "") != 1 || rec.times("fine", t0.Add(40*time.Second), "") != 1 {
		t.Errorf("runs: %v", rec.snapshot())
	}
	if EventBroken.String() != "broken" {
		t.Errorf("EventBroken.String() = %q", EventBroken.String())
	}

}

// A new job starts at its next tick: it records no missed ticks from before
// the fleet first ran it and runs no tick that was due before; a changed
// schedule starts again at its next tick; a known job still gets its
// misfire handling after a restart.
func TestNewJobStartsAtItsNextTick(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	// A minute into the fake time, so that the look-back covers ticks
	// before the job existed.
	c.step(time.Minute)
	added := c.clock.Now()
	job := Job{Name: "new", Schedule: "*/30 * * * * *", Handler: rec.ok, Misfire: MisfireCatchUp, CatchUpMax: 100, MisfireWindow: time.Hour}
	a := c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	c.step(15 * time.Second) // past the 00:01:00 tick... which is at the instant of the registration
	if rs := c.history("new"); len(rs) != 1 || rs[0].Status != ledger.RunOK || !rs[0].Tick.Equal(added) {
		t.Fatalf("a new job: %d records %v, want only its tick at %v, ok", len(rs), rs, added)
	}
	for _, cl := range rec.snapshot() {
		if cl.Tick.Before(added) {
			t.Errorf("a tick due before the job was added ran: %v", cl.Tick)
		}
	}
	// A job added to a running Scheduler (as a reload adds it) too.
	later := Job{Name: "later", Schedule: "*/30 * * * * *", Handler: rec.ok, Misfire: MisfireCatchUp, CatchUpMax: 100, MisfireWindow: time.Hour}
	if err := a.s.Add(later); err != nil {
		t.Fatal(err)
	}
	addedLater := c.clock.Now()
	c.step(20 * time.Second)
	if rs := c.history("later"); len(rs) != 1 || !rs[0].Tick.After(addedLater) {
		t.Fatalf("a job added while running: %d records %v, want one tick after %v", len(rs), rs, addedLater)
	}
	a.shutdown(t)

	// The fleet is down for five minutes; then a node comes back with the
	// same job and a changed one.
	c.step(5 * time.Minute)
	back := c.clock.Now()
	changed := later
	changed.Schedule = "*/20 * * * * *"
	b := c.node("b", 0, nil).add(t, job, changed).start(t)
	c.settle(true)
	// The known job's missed ticks go to its misfire policy: caught up.
	var caught int
	for _, r := range c.historyAfter("new", back.Add(-5*time.Minute)) {
		if !r.Tick.After(back) && r.Status == ledger.RunOK {
			caught++
		}
	}
	if caught != 10 {
		t.Errorf("the known job caught up %d ticks of its 5-minute outage, want 10", caught)
	}
	// The changed one starts at its next tick.
	if rs := c.historyAfter("later", back.Add(-10*time.Minute)); len(rs) != 1 {
		t.Errorf("the changed job has %d records after the restart, want only the one from before: %v", len(rs), rs)
	}
	c.step(20 * time.Second)
	rs := c.historyAfter("later", back)
	if len(rs) != 1 || rs[0].Status != ledger.RunOK || (rs[0].Tick.Second()%20) != 0 {
		t.Errorf("the changed job after its next tick: %v", rs)
	}
	st := jobState(t, c, "later")
	if st.Spec != "*/20 * * * * *" || !st.Since.Equal(back) {
		t.Errorf("the changed job's registration %+v, want Since %v", st, back)
	}
	if st := jobState(t, c, "new"); !st.Since.Equal(added) {
		t.Errorf("the known job's registration moved: %+v, want Since %v", st, added)
	}

	b.shutdown(t)
}

func jobState(t *testing.T, c *cluster, job string) ledger.JobState {
	t.Helper()
	sts, err := c.ledger.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Job == job {
			return st
		}
	}
	t.Fatalf("the ledger does not list %q", job)
	return ledger.JobState{}
}

// failingHistory is the cluster's ledger with RecordRuns failing, as when
// the store refuses writes.
type failingHistory struct{ ledger.Ledger }

func (failingHistory) RecordRuns(context.Context, []ledger.RunRecord) error {
	return errors.New("disk I/O error")
}

// Store errors log at ERROR (before: WARN).
func TestStoreErrorsLogAtError(t *testing.T) {
	c := newCluster(t)
	var logs syncBuffer
	lk, err := tasklock.New(c.locks, &tasklock.Config{Owner: "a", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	s, err := New(lk, failingHistory{c.ledger}, &Config{Node: "a", Clock: c.clock, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(Job{Name: "j", Schedule: "@every 10s", Handler: noop, MisfireWindow: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	waitFor(t, "the history error to be logged", func() bool { return strings.Contains(logs.String(), "recording history") })
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "recording history") && !strings.Contains(line, "level=ERROR") {
			t.Errorf("store error logged as %q, want level ERROR", line)
		}
	}
}

// An attempt writes a running record before its handler starts; when its
// node stops (its node lease ends) before recording the outcome, another
// node replaces the record with an interrupted one; if the first node
// records the outcome after all, that replaces it: one record throughout.
// A node that starts under the name of a stopped one settles that one's
// running records. Before: a killed node's run left no record at all.
func TestKilledNodeRunIsInterrupted(t *testing.T) {
	c := newCluster(t)
	var evs eventLog
	started := make(chan Run, 1)
	unblock := make(chan struct{})
	slow := func(ctx context.Context, run Run) error {
		started <- run
		<-unblock // like a process that is gone: it does not see its ctx end
		return nil
	}
	job := Job{Name: "long", Schedule: "@every 1h", Handler: slow}
	a := c.node("a", 0, nil).add(t, job).start(t)
	var run Run
	select {
	case run = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	rs := c.history("long")
	if len(rs) != 1 || rs[0].Status != ledger.RunRunning || rs[0].Node != "a" || rs[0].Attempt != 1 || !rs[0].Tick.Equal(run.Tick) {
		t.Fatalf("while the handler runs: %v, want one running record of node a", rs)
	}
	b := c.node("b", 0, &Config{OnEvent: evs.on}).add(t, job).start(t)
	c.settle(false)
	c.advance(4 * time.Second) // a sweep on b: a is alive
	c.settle(false)
	if rs := c.history("long"); len(rs) != 1 || rs[0].Status != ledger.RunRunning {
		t.Fatalf("a live node's run was settled: %v", rs)
	}

	// a dies: its node lease ends.
	_ = a.lk.Close()
	c.advance(4 * time.Second)
	waitFor(t, "b to settle a's run", func() bool {
		rs := c.history("long")
		return len(rs) == 1 && rs[0].Status == ledger.RunInterrupted
	})
	// The event follows the record's write: wait for it too.
	waitFor(t, "EventRunInterrupted", func() bool {
		evs.mu.Lock()
		defer evs.mu.Unlock()
		for _, e := range evs.evs {
			if e.Type == EventRunInterrupted {
				return true
			}
		}
		return false
	})
	rs = c.history("long")
	if r := rs[0]; r.Node != "a" || !strings.Contains(r.Error, `node "a" stopped`) || !strings.Contains(r.Error, `"b"`) || r.End.IsZero() || !r.Start.Equal(t0) {
		t.Errorf("interrupted record %+v", r)
	}
	count := 0
	evs.mu.Lock()
	for _, e := range evs.evs {
		if e.Type == EventRunInterrupted {
			count++
			if e.RanOn != "a" || e.Node != "b" || e.Job != "long" || e.Status != ledger.RunInterrupted {
				t.Errorf("interrupted event %+v", e)
			}
		}
	}
	evs.mu.Unlock()
	if count != 1 {
		t.Errorf("%d EventRunInterrupted, want 1", count)
	}
	// More sweeps change nothing.
	c.advance(4 * time.Second)
	c.settle(false)
	if rs := c.history("long"); len(rs) != 1 {
		t.Fatalf("after another sweep: %v", rs)
	}
	// The slow node records its outcome after all: it replaces the row.
	close(unblock)
	waitFor(t, "a's outcome", func() bool {
		rs := c.history("long")
		return len(rs) == 1 && rs[0].Status != ledger.RunInterrupted
	})
	b.shutdown(t)

	// A running record left by an earlier process of node "c".
	early := ledger.RunRecord{Job: "other", Tick: t0, Attempt: 1, Node: "c", Start: t0, Status: ledger.RunRunning}
	if err := c.ledger.RecordRuns(context.Background(), []ledger.RunRecord{early}); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Minute)
	c.node("c", 0, nil).start(t)
	waitFor(t, "c to settle its earlier process's run", func() bool {
		rs := c.history("other")
		return len(rs) == 1 && rs[0].Status == ledger.RunInterrupted
	})
	if r := c.history("other")[0]; !strings.Contains(r.Error, `earlier process of node "c"`) {
		t.Errorf("interrupted record %+v", r)
	}
}

// A node killed after claiming a tick but before its handler starts —
// here while the tick waits for its parent — leaves the tick's pending
// running record, which another node settles as interrupted. Before:
// such a tick was claimed and never recorded at all.
func TestKilledNodeWaitingTickIsInterrupted(t *testing.T) {
	c, a, rec := waitingChild(t)
	if r := c.history("child")[0]; r.Node != "a" || r.Attempt != 1 || !r.Tick.Equal(t0) {
		t.Fatalf("pending record %+v, want node a's attempt 1 of %v", r, t0)
	}
	c.node("b", 0, nil).start(t)
	_ = a.lk.Close() // a dies: its node lease ends, its tick still waits
	c.advance(4 * time.Second)
	waitFor(t, "b to settle a's waiting tick", func() bool {
		rs := c.history("child")
		return len(rs) == 1 && rs[0].Status == ledger.RunInterrupted
	})
	if r := c.history("child")[0]; !strings.Contains(r.Error, `node "a" stopped`) || len(rec.snapshot()) != 0 {
		t.Errorf("interrupted record %+v, handler calls %v", r, rec.snapshot())
	}
}

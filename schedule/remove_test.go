package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// held is a handler that runs until the test releases it (returning the
// error sent) or its context ends (sending the cause to causes).
type held struct {
	started chan Run
	release chan error
	causes  chan error
}

func newHeld() *held {
	return &held{started: make(chan Run, 8), release: make(chan error, 8), causes: make(chan error, 8)}
}

func (g *held) handler(ctx context.Context, run Run) error {
	g.started <- run
	select {
	case err := <-g.release:
		return err
	case <-ctx.Done():
		g.causes <- context.Cause(ctx)
		return ctx.Err()
	}
}

// Remove without Cancel lets the running attempt finish, makes no retry,
// and claims no later tick; the name can be added again.
func TestRemoveFinishesRunningRun(t *testing.T) {
	c := newCluster(t)
	g := newHeld()
	job := Job{Name: "rm", Schedule: "@every 10s", Retries: 3, RetryBackoff: time.Second, Handler: g.handler}
	n := c.node("a", 0, nil).add(t, job).start(t)
	run := recv(t, "the run", g.started) // tick t0: the job's first
	if err := n.s.Remove("rm", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	c.settle(false)
	select {
	case err := <-g.causes:
		t.Fatalf("Remove without Cancel cancelled the run: %v", err)
	default:
	}
	g.release <- errors.New("failed once") // would be retried, but the job is gone
	rs := c.waitRecords("rm", t0.Add(-time.Second), 1)
	if len(rs) != 1 || rs[0].Status != ledger.RunFailed || !rs[0].Tick.Equal(run.Tick) || rs[0].Attempt != 1 {
		t.Fatalf("records %+v", rs)
	}
	c.step(time.Second) // the backoff passes: no attempt 2
	c.step(30 * time.Second)
	select {
	case r := <-g.started:
		t.Fatalf("a removed job ran: %+v", r)
	default:
	}
	if rs := c.historyAfter("rm", t0.Add(-time.Second)); len(rs) != 1 {
		t.Fatalf("after Remove: %d records, want 1: %+v", len(rs), rs)
	}
	if err := n.s.Remove("rm", RemoveOptions{}); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("second Remove: %v, want ErrUnknownJob", err)
	}
	// Added again, it starts at its next tick: not the ticks it handled
	// before its removal (claimed with this Scheduler's token, a second
	// claim of them would succeed), nor those while it was removed.
	ran := make(chan Run, 16)
	job.Handler = func(_ context.Context, r Run) error { ran <- r; return nil }
	n.add(t, job)
	c.advance(10 * time.Second)
	recv(t, "a run of the job added again", ran)
	c.settle(true)
	for _, r := range c.historyAfter("rm", t0.Add(-time.Second)) {
		if r.Tick.Equal(t0) && (r.Attempt != 1 || r.Status != ledger.RunFailed) {
			t.Errorf("tick t0, handled before the removal, handled again: %+v", r)
		}
		if r.Status == ledger.RunMissed {
			t.Errorf("a tick while the job was removed is owed: %+v", r)
		}
	}
	for len(ran) > 0 {
		if r := <-ran; !r.Tick.After(t0) {
			t.Errorf("the job added again ran tick %v, handled before its removal", r.Tick)
		}
	}
}

// TestRemoveCancelRecordsCancelled: a job removed with Cancel while it
// runs (tasklock jobs delete --cancel) ends its attempt as a cancel
// request does: recorded cancelled, not failed, with an error naming the
// removal, even when the handler returns an error of its own (a command
// says it was sent SIGTERM), and with no retry although the job has some.
func TestRemoveCancelRecordsCancelled(t *testing.T) {
	c := newCluster(t)
	ended := make(chan Event, 16)
	cfg := &Config{OnEvent: func(e Event) {
		if e.Type == EventRunEnded || e.Type == EventTickEnded {
			ended <- e
		}
	}}
	started := make(chan Run, 8)
	job := Job{
		Name: "rm", Schedule: "@every 1h", Retries: 2, RetryBackoff: time.Second,
		Handler: func(ctx context.Context, run Run) error {
			started <- run
			<-ctx.Done()
			return fmt.Errorf("command stopped: sent SIGTERM (%w)", context.Cause(ctx))
		},
	}
	n := c.node("a", 0, cfg).add(t, job).start(t)
	run := recv(t, "the run", started) // tick t0: the job's first
	if err := n.s.Remove("rm", RemoveOptions{Cancel: true}); err != nil {
		t.Fatal(err)
	}
	rs := c.waitRecords("rm", t0.Add(-time.Second), 1)
	c.settle(true)
	if r := rs[0]; len(rs) != 1 || r.Status != ledger.RunCancelled || r.Attempt != 1 || !r.Tick.Equal(run.Tick) ||
		!strings.Contains(r.Error, ErrRemoved.Error()) {
		t.Fatalf("records %+v, want attempt 1 cancelled with %q", rs, ErrRemoved)
	}
	for _, want := range []EventType{EventRunEnded, EventTickEnded} {
		if e := recv(t, "the run's end", ended); e.Type != want || e.Status != ledger.RunCancelled {
			t.Fatalf("event %v %s (%s), want %v cancelled", e.Type, e.Status, e.Error, want)
		}
	}
	c.step(time.Second) // the backoff passes: no attempt 2
	c.step(time.Hour)
	select {
	case r := <-started:
		t.Fatalf("the cancelled run was retried, or the removed job ran: %+v", r)
	default:
	}
	if rs := c.historyAfter("rm", t0.Add(-time.Second)); len(rs) != 1 {
		t.Fatalf("after Remove: %d records, want 1: %+v", len(rs), rs)
	}
}

// Remove with Cancel ends the running run with ErrRemoved, recorded cancelled;
// the lock is released, so the job added again runs at its next tick.
func TestRemoveCancelsRunningRun(t *testing.T) {
	c := newCluster(t)
	g := newHeld()
	job := Job{Name: "rm", Schedule: "@every 10s", Retries: 3, RetryBackoff: time.Second, Handler: g.handler}
	n := c.node("a", 0, nil).add(t, job).start(t)
	other := Job{Name: "other", Schedule: "@every 10s", Handler: func(context.Context, Run) error { return nil }}
	n.add(t, other)
	recv(t, "the run", g.started) // tick t0: the job's first
	if err := n.s.Remove("rm", RemoveOptions{Cancel: true}); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, "the cancellation", g.causes); !errors.Is(err, ErrRemoved) {
		t.Fatalf("cause %v, want ErrRemoved", err)
	}
	rs := c.waitRecords("rm", t0.Add(-time.Second), 1)
	c.settle(true)
	if len(rs) != 1 || rs[0].Status != ledger.RunCancelled || !strings.Contains(rs[0].Error, ErrRemoved.Error()) {
		t.Fatalf("records %+v", rs)
	}
	c.step(10 * time.Second)
	if got := len(c.historyAfter("rm", t0.Add(-time.Second))); got != 1 {
		t.Fatalf("%d records of the removed job, want 1", got)
	}
	if got := len(c.historyAfter("other", t0.Add(-time.Second))); got != 2 {
		t.Fatalf("the other job has %d records, want 2: Remove touched it", got)
	}
	ran := make(chan Run, 16)
	job.Handler = func(_ context.Context, r Run) error { ran <- r; return nil }
	n.add(t, job)
	c.advance(10 * time.Second)
	recv(t, "a run of the job added again", ran)
	c.settle(true)
	rs = c.historyAfter("rm", t0)
	if len(rs) == 0 || rs[len(rs)-1].Status != ledger.RunOK {
		t.Fatalf("the job added again: %+v", rs)
	}
}

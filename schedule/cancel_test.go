package schedule

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// TestCancelRun: a cancel request made through the ledger reaches the node
// running the run (not the one asking) at its next poll; the handler's
// context ends with ErrCancelled, the attempt is recorded cancelled, no
// retry follows, and the request is removed. Cancelling it again, or a run
// the ledger does not hold, changes nothing and says why.
func TestCancelRun(t *testing.T) {
	c := newCluster(t)
	started := make(chan Run, 4)
	causes := make(chan error, 4)
	job := Job{
		Name: "slow", Schedule: "@every 1h", Retries: 2, RetryBackoff: time.Second,
		Handler: func(ctx context.Context, run Run) error {
			started <- run
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		},
	}
	a := c.node("a", 0, nil).add(t, job).start(t)
	c.node("b", 0, nil).add(t, job).start(t)
	c.advance(time.Second)
	var run Run
	select {
	case run = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start")
	}
	waitFor(t, "the running record", func() bool {
		rs := c.history("slow")
		return len(rs) == 1 && rs[0].Status == ledger.RunRunning
	})
	ctx := context.Background()
	key := ledger.RunKey{Job: "slow", Tick: run.Tick, Shard: run.Shard}
	id, last, err := RequestCancel(ctx, c.ledger, key)
	if err != nil || last.Node != run.Node || last.Attempt != 1 {
		t.Fatalf("RequestCancel = %q, %+v, %v; want the running attempt 1 on %s", id, last, err, run.Node)
	}
	// The owning node takes it at its next poll of the job states.
	c.advance(a.s.poll)
	select {
	case cause := <-causes:
		if !errors.Is(cause, ErrCancelled) {
			t.Fatalf("the handler's context ended with %v, want ErrCancelled", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not cancelled")
	}
	var rs []ledger.RunRecord
	waitFor(t, "the cancelled record", func() bool {
		rs = c.history("slow")
		return len(rs) > 0 && rs[0].Status.Final()
	})
	if len(rs) != 1 || rs[0].Status != ledger.RunCancelled || rs[0].Attempt != 1 || rs[0].Node != run.Node {
		t.Fatalf("records %+v, want attempt 1 cancelled on %s", rs, run.Node)
	}
	waitFor(t, "the request to be removed", func() bool {
		sts, err := c.ledger.JobStates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.Job == "slow" && len(st.Triggers) > 0 {
				return false
			}
		}
		return true
	})
	// No retry: past the backoff, the tick still has one attempt.
	c.step(2 * time.Second)
	if rs := c.history("slow"); len(rs) != 1 {
		t.Fatalf("records after the backoff %+v, want only the cancelled attempt", rs)
	}
	select {
	case r := <-started:
		t.Fatalf("a run started after the cancel: %+v", r)
	default:
	}

	if _, _, err := RequestCancel(ctx, c.ledger, key); !errors.Is(err, ErrRunEnded) {
		t.Fatalf("cancelling an ended run: %v, want ErrRunEnded", err)
	}
	if _, _, err := RequestCancel(ctx, c.ledger, ledger.RunKey{Job: "slow", Tick: run.Tick.Add(time.Hour)}); !errors.Is(err, ErrNoRun) {
		t.Fatalf("cancelling an unknown run: %v, want ErrNoRun", err)
	}
	if _, _, err := RequestCancel(ctx, c.ledger, ledger.RunKey{Job: "slow", Tick: run.Tick, Shard: 1}); !errors.Is(err, ErrNoRun) {
		t.Fatalf("cancelling another shard: %v, want ErrNoRun", err)
	}
	sts, err := c.ledger.JobStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Job == "slow" && len(st.Triggers) > 0 {
			t.Fatalf("refused cancels left requests: %+v", st.Triggers)
		}
	}
}

// TestCancelTriggeredRun: a trigger-now run is named by its trigger ID, and
// a cancel request is never taken for a run.
func TestCancelTriggeredRun(t *testing.T) {
	c := newCluster(t)
	started := make(chan Run, 4)
	job := Job{
		Name: "manual", Schedule: "0 0 1 7 *", // once a year, not now: only the trigger runs
		Handler: func(ctx context.Context, run Run) error {
			started <- run
			<-ctx.Done()
			return context.Cause(ctx)
		},
	}
	a := c.node("a", 0, nil).add(t, job).start(t)
	ctx := context.Background()
	if _, err := a.s.Trigger(ctx, "manual"); err != nil {
		t.Fatal(err)
	}
	c.advance(a.s.poll)
	var run Run
	select {
	case run = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the triggered run did not start")
	}
	if run.Trigger == "" {
		t.Fatalf("a scheduled run started: %+v", run)
	}
	waitFor(t, "the running record", func() bool {
		rs := c.history("manual")
		return len(rs) == 1 && rs[0].Status == ledger.RunRunning
	})
	if _, _, err := RequestCancel(ctx, c.ledger, ledger.RunKey{Job: "manual", Tick: run.Tick, Trigger: run.Trigger}); err != nil {
		t.Fatal(err)
	}
	c.advance(a.s.poll)
	waitFor(t, "the cancelled record", func() bool {
		rs := c.history("manual")
		return len(rs) == 1 && rs[0].Status == ledger.RunCancelled && rs[0].Trigger == run.Trigger
	})
	c.step(a.s.poll)
	c.step(a.s.poll)
	select {
	case r := <-started:
		t.Fatalf("the cancel request started a run: %+v", r)
	default:
	}
	if rs := c.history("manual"); len(rs) != 1 {
		t.Fatalf("records %+v, want only the cancelled run", rs)
	}
}

// A tick waiting for its parents shows as running (its pending record)
// and can be cancelled: the node takes the request at its next poll and
// records the tick skipped, saying why, without running it and without
// waiting out Within.
func TestCancelWaitingTick(t *testing.T) {
	c, a, rec := waitingChild(t)
	ctx := context.Background()
	if _, _, err := RequestCancel(ctx, c.ledger, ledger.RunKey{Job: "child", Tick: t0}); err != nil {
		t.Fatalf("RequestCancel of the waiting tick: %v", err)
	}
	c.advance(a.s.poll)
	rs := c.waitRecords("child", before, 1)
	if r := rs[0]; len(rs) != 1 || r.Status != ledger.RunSkipped || r.Attempt != 1 || !strings.Contains(r.Error, ErrCancelled.Error()) ||
		!strings.Contains(r.Error, "while waiting for the job's parents parent") {
		t.Fatalf("child's records %+v, want attempt 1 skipped: cancelled while waiting for its parent", rs)
	}
	if n := len(rec.snapshot()); n != 0 {
		t.Errorf("the cancelled tick's handler ran %d times", n)
	}
}

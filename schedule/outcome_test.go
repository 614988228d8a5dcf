package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// A tick that fails, is retried and fails again emits one EventTickEnded,
// after its last attempt, with that attempt's status: what the tick's
// outcome is, for a notification.
func TestTickEndedOnceAfterRetries(t *testing.T) {
	c := newCluster(t)
	var log eventLog
	job := Job{
		Name: "flaky", Schedule: at3am, Retries: 1, RetryBackoff: 10 * time.Second,
		Handler: func(ctx context.Context, run Run) error { return errors.New("down") },
	}
	n := c.node("a", 0, &Config{OnEvent: log.on}).add(t, job).start(t)
	c.settle(true)
	if _, err := n.s.Trigger(context.Background(), "flaky"); err != nil {
		t.Fatal(err)
	}
	c.waitRecords("flaky", t0.Add(-time.Hour), 1)
	waitFor(t, "the backoff timer", func() bool { return c.clock.armed() == 2 })
	c.advance(10 * time.Second)
	rs := c.waitRecords("flaky", t0.Add(-time.Hour), 2)
	c.settle(true)
	var ended []Event
	waitFor(t, "tick_ended", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		ended = ended[:0]
		for _, e := range log.evs {
			if e.Type == EventTickEnded {
				ended = append(ended, e)
			}
		}
		return len(ended) > 0
	})
	if len(ended) != 1 {
		t.Fatalf("tick_ended events %+v, want one", ended)
	}
	e := ended[0]
	if e.Attempt != 2 || e.Status != ledger.RunFailed || e.Error != "down" || e.Tick != rs[0].Tick || e.Trigger != rs[0].Trigger || e.Node != "a" {
		t.Fatalf("tick_ended %+v, want attempt 2 failed, as recorded %+v", e, rs[0])
	}
}

package schedule

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// pollingRequester is the ledger a backfill is asked for through: after
// every each-th request it lets the nodes poll (advance and settle), as
// nodes do while a paced backfill writes its requests, so that they take
// the requests in several passes. Test goroutine only.
type pollingRequester struct {
	ledger.Ledger
	c     *cluster
	each  int
	count int
}

func (p *pollingRequester) SetJobState(ctx context.Context, q ledger.JobStateParams) (ledger.JobState, error) {
	st, err := p.Ledger.SetJobState(ctx, q)
	if p.count++; err == nil && p.count%p.each == 0 {
		p.c.advance(DefaultPollInterval)
		p.c.settle(false)
	}
	return st, err
}

// requestedStarts returns the ticks whose runs were started for backfills
// and re-runs (EventRunStarted with Requested), in the order they started.
func (l *eventLog) requestedStarts() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ticks []time.Time
	for _, e := range l.evs {
		if e.Type == EventRunStarted && e.Requested {
			ticks = append(ticks, e.Tick)
		}
	}
	return ticks
}

// TestBackfillStartsInTickOrder: a node starts the runs of one backfill's
// ticks in tick order, oldest first, although it takes the requests in
// several passes while the first tick runs: run one at a time under the
// job's lock (overlap skip), with the job's one MaxConcurrent permit, and
// without the lock (overlap allow), when runs of several passes run at
// once. Before, each pass's requests ran in a goroutine of their own, one
// after another; the goroutines of several passes waited for the job's lock
// side by side, which went to whichever asked first (or, without it, ran
// at once): a later pass's oldest tick started before an earlier pass's
// other ticks.
func TestBackfillStartsInTickOrder(t *testing.T) {
	for _, tc := range []struct {
		name          string
		overlap       Overlap // the backfill's
		maxConcurrent int     // the job's
	}{
		{"skip", OverlapSkip, 0},
		{"max-concurrent", OverlapSkip, 1},
		{"allow", OverlapAllow, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			var log eventLog
			c.onEvent = log.on
			gate := make(chan struct{})
			first := make(chan struct{})
			var once sync.Once
			handler := func(ctx context.Context, run Run) error {
				once.Do(func() {
					close(first)
					<-gate // the first tick runs while the node takes the other requests
				})
				return nil
			}
			// The node starts an hour after the ticks, between two ticks of
			// its own: none of the backfilled ticks ran.
			c.clock.Advance(time.Hour + 10*time.Second)
			job := Job{Name: "j", Schedule: "@every 1m", Handler: handler, MaxConcurrent: tc.maxConcurrent}
			c.node("a", 0, nil).add(t, job).start(t)
			c.settle(true)
			req := &pollingRequester{Ledger: c.ledger, c: c, each: 3}
			ticks, err := RequestBackfill(context.Background(), req, "j", t0, t0.Add(9*time.Minute), BackfillOptions{Now: c.clock.Now(), Overlap: tc.overlap})
			if err != nil {
				t.Fatal(err)
			}
			if len(ticks) != 10 {
				t.Fatalf("requested %d ticks, want 10", len(ticks))
			}
			c.advance(DefaultPollInterval) // the last request
			c.settle(false)
			recv(t, "the first tick's run", first)
			close(gate)
			waitFor(t, "the backfill's runs", func() bool { return len(log.requestedStarts()) >= len(ticks) })
			c.settle(true)
			if got := log.requestedStarts(); fmt.Sprint(got) != fmt.Sprint(ticks) {
				t.Fatalf("runs started in the order\n%v\nwant the ticks' order\n%v", got, ticks)
			}
			for _, r := range c.history("j") {
				if r.Attempt != 1 || r.Status != ledger.RunOK {
					t.Errorf("tick %v: attempt %d %s, want attempt 1 ok", r.Tick, r.Attempt, r.Status)
				}
			}
			if n := len(c.history("j")); n != len(ticks) {
				t.Errorf("%d records, want %d", n, len(ticks))
			}
		})
	}
}

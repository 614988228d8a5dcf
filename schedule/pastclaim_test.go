package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// A backfill or re-run that a node takes before the fleet has handled the
// tick on schedule (the requester's clock ahead of the fleet's, a tick
// handled late) is the tick's run: the schedule does not run it again.
func TestPastRunBeforeTheSchedule(t *testing.T) {
	for _, rerun := range []bool{false, true} {
		t.Run(fmt.Sprintf("rerun=%v", rerun), func(t *testing.T) {
			c := newCluster(t)
			rec := newRecorder(c.clock)
			job := Job{Name: "j", Schedule: "@every 1m", Handler: rec.ok}
			c.node("a", 0, nil).add(t, job).start(t)
			c.node("b", 0, nil).add(t, job).start(t)
			c.settle(true)
			c.step(time.Minute - 3*time.Second) // 3 s before the tick t0+1m
			tick := t0.Add(time.Minute)
			// Asked for by a host whose clock is 4 s ahead of the fleet's.
			o := BackfillOptions{Now: tick.Add(time.Second), Rerun: rerun}
			ctx := context.Background()
			if rerun {
				if _, err := RequestRerun(ctx, c.ledger, "j", tick, o); err != nil {
					t.Fatal(err)
				}
			} else if _, err := RequestBackfill(ctx, c.ledger, "j", tick, tick, o); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the request to run", func() bool {
				c.step(250 * time.Millisecond)
				return rec.times("j", tick, "") == 1
			})
			c.step(5 * time.Second) // past the tick, on every node's clock
			c.step(time.Second)
			if n := rec.times("j", tick, ""); n != 1 {
				t.Fatalf("the tick ran %d times, want once", n)
			}
			var got []string
			for _, r := range c.history("j") {
				if r.Tick.Equal(tick) {
					got = append(got, fmt.Sprintf("%d:%s", r.Attempt, r.Status))
				}
			}
			if fmt.Sprint(got) != "[1:ok]" {
				t.Fatalf("records of the tick: %v, want [1:ok]", got)
			}
		})
	}
}

// claimedElsewhere is a cluster with one node, a, not started, whose job
// "j" (@every 1m) has its tick a minute after t0 claimed by node b, as a
// run on schedule claims it: the setting of a backfill or re-run beside
// that run.
func claimedElsewhere(t *testing.T) (*cluster, *node, *job, time.Time) {
	t.Helper()
	c := newCluster(t)
	rec := newRecorder(c.clock)
	n := c.node("a", 0, nil).add(t, Job{Name: "j", Schedule: "@every 1m", Handler: rec.ok})
	tick := t0.Add(time.Minute)
	other := ledger.ClaimParams{Job: "j", Tick: tick, Node: "b", Token: "b's token", Retain: time.Hour}
	res, err := c.ledger.Claim(context.Background(), []ledger.ClaimParams{other})
	if err != nil || res[0] != nil {
		t.Fatalf("claiming the tick as node b: %v %v", err, res)
	}
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	return c, n, n.s.jobs["j"], tick
}

// A re-run of a tick the schedule has claimed but not yet recorded (its
// run is taking the job's lock) numbers its attempt after the schedule's
// first: the two never both record attempt 1. A re-run of a tick claimed
// while paused is its attempt 1.
func TestRerunBesideAClaimedTick(t *testing.T) {
	c, n, j, tick := claimedElsewhere(t)
	w := requestWork(ledger.TriggerRequest{ID: withBase(rerunSkip, 0) + "x", Tick: tick, Rerun: true})
	first, err := n.s.startPast(j, w)
	if err != nil || first != 2 {
		t.Fatalf("startPast = %d, %v; want attempt 2 (the schedule's run is attempt 1)", first, err)
	}
	// An older tick claimed and never recorded (while the job was paused)
	// has no attempt 1 to come: a re-run is its attempt 1.
	c.advance(time.Minute + DefaultMisfireAfter + scheduledRecordWait + time.Second)
	w = requestWork(ledger.TriggerRequest{ID: withBase(rerunSkip, 0) + "y", Tick: tick, Rerun: true})
	if first, err := n.s.startPast(j, w); err != nil || first != 1 {
		t.Fatalf("startPast of an old claimed tick = %d, %v; want attempt 1", first, err)
	}
}

// A backfill of a tick the schedule has claimed but not yet recorded (its
// run is taking the job's lock) waits for that run's record: a run means
// the tick ran, and the backfill does not run it again; a skip, or no
// record within scheduledRecordWait (the claim's node stopped), means it
// runs the tick, as attempt 2, never over the schedule's attempt 1. The
// claim of a tick older than that (made while the job was paused) is no
// run's: the backfill runs it at once, as attempt 1.
func TestBackfillBesideAClaimedTick(t *testing.T) {
	for _, tc := range []struct {
		record ledger.RunStatus // the schedule run's record, "" for none
		old    bool             // the tick is 11 s old
		want   int              // the backfill's first attempt, 0 for none
	}{
		{ledger.RunOK, false, 0},
		{ledger.RunRunning, false, 0},
		{ledger.RunSkipped, false, 2},
		{"", false, 2},
		{"", true, 1},
	} {
		t.Run(fmt.Sprintf("record=%q,old=%v", tc.record, tc.old), func(t *testing.T) {
			c, n, j, tick := claimedElsewhere(t)
			w := requestWork(ledger.TriggerRequest{ID: withBase(backfillSkip, 0) + "x", Tick: tick})
			if tc.old {
				c.advance(time.Minute + DefaultMisfireAfter + scheduledRecordWait + time.Second)
				if first, err := n.s.startPast(j, w); err != nil || first != tc.want {
					t.Fatalf("startPast = %d, %v; want %d at once", first, err, tc.want)
				}
				return
			}
			done := make(chan struct{})
			var first int
			var err error
			go func() {
				defer close(done)
				first, err = n.s.startPast(j, w)
			}()
			if tc.record != "" {
				select {
				case <-done:
					t.Fatalf("startPast = %d, %v before the schedule's run recorded the tick; want it to wait", first, err)
				case <-time.After(50 * time.Millisecond): // a check that it waits, not a synchronisation
				}
				r := ledger.RunRecord{Job: "j", Tick: tick, Attempt: 1, Node: "b", Status: tc.record, Start: tick, End: tick}
				if tc.record == ledger.RunRunning {
					r.End = time.Time{}
				}
				if err := c.ledger.RecordRuns(context.Background(), []ledger.RunRecord{r}); err != nil {
					t.Fatal(err)
				}
			}
			start := c.clock.Now()
			c.advanceUntil("the backfill to decide", done)
			if err != nil || first != tc.want {
				t.Fatalf("startPast = %d, %v; want %d", first, err, tc.want)
			}
			if tc.record == "" && c.clock.Now().Sub(start) < scheduledRecordWait {
				t.Fatalf("decided after %v without a record, want it to wait %v", c.clock.Now().Sub(start), scheduledRecordWait)
			}
		})
	}
}

// Two re-runs of one tick that one node starts at once (taken in
// different passes, each in its run goroutine) number their attempts apart:
// each request claims with a token of its own.
func TestRerunsOnOneNodeNumberApart(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	job := Job{Name: "j", Schedule: "@every 1m", Handler: rec.ok}
	n := c.node("a", 0, nil).add(t, job)
	n.s.mu.Lock()
	j := n.s.jobs["j"]
	n.s.mu.Unlock()
	tick := t0.Add(time.Minute)
	firsts := map[int]bool{}
	for i := range 2 {
		w := requestWork(ledger.TriggerRequest{ID: withBase(rerunAllow, 3) + fmt.Sprint(i), Tick: tick, Rerun: true})
		first, err := n.s.startPast(j, w)
		if err != nil || first == 0 {
			t.Fatalf("re-run %d: startPast = %d, %v", i, first, err)
		}
		firsts[first] = true
	}
	if !firsts[4] || !firsts[5] {
		t.Fatalf("two re-runs on one node started as attempts %v, want 4 and 5", firsts)
	}
}

// failingRuns fails Ledger.Runs calls while fail is above zero, counting
// it down.
type failingRuns struct {
	ledger.Ledger
	fail atomic.Int32
}

func (f *failingRuns) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if f.fail.Add(-1) >= 0 {
		return nil, errors.New("connection reset")
	}
	return f.Ledger.Runs(ctx, q)
}

// A node whose ledger fails as it starts a re-run it claimed tries again:
// the other nodes took the request for done as its claim won, so it is
// the only one that will run it.
func TestPastRunRetriesALedgerError(t *testing.T) {
	c := newCluster(t)
	flaky := map[string]*failingRuns{}
	c.wrapLedger = func(node string, l ledger.Ledger) ledger.Ledger {
		flaky[node] = &failingRuns{Ledger: l}
		return flaky[node]
	}
	rec := newRecorder(c.clock)
	job := Job{Name: "j", Schedule: "@every 1m", Handler: rec.ok}
	c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	c.step(time.Minute)
	tick := t0.Add(time.Minute)
	if n := rec.times("j", tick, ""); n != 1 {
		t.Fatalf("the tick ran %d times, want once", n)
	}
	flaky["a"].fail.Store(3)
	if _, err := RequestRerun(context.Background(), c.ledger, "j", tick, BackfillOptions{Now: c.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the re-run", func() bool {
		c.advance(250 * time.Millisecond) // the run waits out its backoff: no settling
		c.settle(false)
		return rec.times("j", tick, "") == 2
	})
	if n := flaky["a"].fail.Load(); n > 0 {
		t.Fatalf("%d of the ledger's failures left: the re-run did not meet them", n)
	}
}

// TestShardsBackfillBeforeTheTick: a backfill of a sharded job's tick that
// the fleet runs before the tick comes (asked for from a host whose clock
// is ahead) is the tick's run, shard by shard: the schedule runs none of
// its shards again. And when the node running two of its shards stops,
// each is taken over once — by the backfill's watch, not also by the
// tick's.
func TestShardsBackfillBeforeTheTick(t *testing.T) {
	const shards = 6
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the job's first tick is t0+1h
	tick := t0.Add(time.Hour)
	log := newShardLog()
	ka := c.killableNodes(t, Job{Name: "sb", Schedule: "@every 1h", Shards: shards}, log, func(Run) bool { return true })
	c.advance(59*time.Minute - 3*time.Second)
	c.settle(true)
	o := BackfillOptions{Now: tick.Add(time.Second)}
	if _, err := RequestBackfill(context.Background(), c.ledger, "sb", tick, tick, o); err != nil {
		t.Fatal(err)
	}
	c.waitStarted("the backfill's 6 shard-runs to start", log, shards)
	onA := log.startedOn("a")
	if !slices.Equal(onA, []int{0, 3}) {
		t.Fatalf("node a runs shards %v, want [0 3] (rank 0 of 3)", onA)
	}
	ka.dead.Store(true)
	c.checkTakenOver(t, "sb", tick, shards, log, onA, 1, func() bool {
		return c.clock.Now().After(tick.Add(5 * time.Second)) // and the tick has come
	})
}

// A pause stops a backfill or re-run in progress: the run under way ends,
// and each tick whose turn comes while the job is paused is recorded
// skipped. New requests are refused meanwhile; once resumed, a backfill
// of the range runs the skipped ticks (and those only).
func TestPauseStopsBackfills(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	first, last := t0.Add(2*time.Minute), t0.Add(6*time.Minute)
	job := Job{Name: "j", Schedule: "@every 1m", Misfire: MisfireSkip, Handler: func(ctx context.Context, run Run) error {
		if run.Tick.Equal(first) && rec.times("j", first, "") == 0 {
			entered <- struct{}{}
			<-gate
		}
		return rec.ok(ctx, run)
	}}
	a := c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	c.step(time.Minute) // t0+1m runs
	a.shutdown(t)
	c.advance(5*time.Minute + 30*time.Second)
	n := c.node("b", 0, nil).add(t, job).start(t)
	c.settle(true) // t0+2m .. t0+6m are recorded missed
	ctx := context.Background()
	backfill := func() error {
		_, err := RequestBackfill(ctx, c.ledger, "j", first, last, BackfillOptions{Now: c.clock.Now()})
		return err
	}
	if err := backfill(); err != nil {
		t.Fatal(err)
	}
	c.advanceUntil("the first backfilled tick to start", entered)
	if err := n.s.Pause(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node to see the pause", func() bool {
		c.advance(250 * time.Millisecond)
		c.settle(false)
		return n.s.paused("j")
	})
	rerun := func() error {
		_, err := RequestRerun(ctx, c.ledger, "j", first, BackfillOptions{Now: c.clock.Now()})
		return err
	}
	for _, req := range []func() error{backfill, rerun} {
		if err := req(); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "paused") {
			t.Errorf("a request while paused: %v, want ErrBadRequest saying the job is paused", err)
		}
	}
	close(gate)
	c.settle(true)
	records := func() string {
		var got []string
		for _, r := range c.historyAfter("j", first.Add(-time.Second)) {
			if r.Status != ledger.RunMissed {
				got = append(got, fmt.Sprintf("%s:%d:%s", r.Tick.Sub(t0), r.Attempt, r.Status))
				if r.Status == ledger.RunSkipped && r.Error != pausedPast {
					t.Errorf("tick %v skipped for %q", r.Tick, r.Error)
				}
			}
		}
		return fmt.Sprint(got)
	}
	if got, want := records(), "[2m0s:1:ok 3m0s:1:skipped 4m0s:1:skipped 5m0s:1:skipped 6m0s:1:skipped]"; got != want {
		t.Fatalf("the backfill's records: %s, want %s", got, want)
	}
	if err := n.s.Resume(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	// Another node takes the next backfill: not the one whose claims of
	// the first it could make again.
	n.shutdown(t)
	c.node("c", 0, nil).add(t, job).start(t)
	c.settle(true)
	// Backfilled again, twice: the skipped ticks run once each, the one
	// that ran does not run again.
	for range 2 {
		if err := backfill(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the skipped ticks to run", func() bool {
		c.step(250 * time.Millisecond)
		return rec.times("j", last, "") == 1
	})
	for range 4 {
		c.step(250 * time.Millisecond)
	}
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatalf("ran twice: %v", d)
	}
	if got, want := records(), "[2m0s:1:ok 3m0s:2:ok 3m0s:1:skipped 4m0s:2:ok 4m0s:1:skipped 5m0s:2:ok 5m0s:1:skipped 6m0s:2:ok 6m0s:1:skipped]"; got != want {
		t.Fatalf("the records after the second backfill: %s, want %s", got, want)
	}
}

// A backfill of a sharded tick whose shards did not all run (one skipped,
// one ok) runs the skipped shard only, and the fleet then takes the
// request for done.
func TestShardsBackfillRunsWhatDidNotRun(t *testing.T) {
	c := newCluster(t)
	var calls atomic.Int32
	var shard0 atomic.Int32
	job := Job{Name: "sh", Schedule: "@every 1h", Shards: 2, Handler: func(_ context.Context, run Run) error {
		calls.Add(1)
		if run.Shard == 0 {
			shard0.Add(1)
		}
		return nil
	}}
	cfg := &Config{NodeLister: c.locks, PollInterval: 100 * time.Millisecond}
	c.clock.Advance(time.Minute) // past the tick at t0: the job's first tick is t0+1h
	c.node("a", 0, cfg).add(t, job).start(t)
	c.node("b", 0, cfg).add(t, job).start(t)
	c.settle(true)
	tick := t0
	rec := func(shard int, st ledger.RunStatus) ledger.RunRecord {
		return ledger.RunRecord{Job: "sh", Tick: tick, Shard: shard, Shards: 2, Attempt: 1, Node: "a", Start: tick, End: tick, Status: st}
	}
	ctx := context.Background()
	if err := c.ledger.RecordRuns(ctx, []ledger.RunRecord{rec(0, ledger.RunSkipped), rec(1, ledger.RunOK)}); err != nil {
		t.Fatal(err)
	}
	if _, err := RequestBackfill(ctx, c.ledger, "sh", tick, tick, BackfillOptions{Now: c.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request to be done", func() bool {
		c.step(100 * time.Millisecond)
		return !c.requestsPending("sh")
	})
	if n, n0 := calls.Load(), shard0.Load(); n != 1 || n0 != 1 {
		t.Fatalf("%d shard-runs, %d of shard 0; want shard 0 once, shard 1 (it ran) not", n, n0)
	}
}

// A node that stops with requests it claimed still queued (here behind a
// re-run that outlasts its shutdown's grace period) leaves them pending,
// and another node takes them over once its node lease has ended: nothing
// asked for is dropped.
func TestRequestsTakenOverFromAStoppedNode(t *testing.T) {
	for _, listed := range []bool{false, true} { // the node leases looked up one by one, or listed (Config.NodeLister)
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) {
			c := newCluster(t)
			rec := newRecorder(c.clock)
			entered := make(chan struct{}, 1)
			first := t0.Add(time.Minute)
			job := Job{Name: "j", Schedule: "@every 1m", Handler: func(ctx context.Context, run Run) error {
				if run.Tick.Equal(first) && run.Attempt == 2 {
					entered <- struct{}{}
					<-ctx.Done() // until the shutdown's grace period ends
					return ctx.Err()
				}
				return rec.ok(ctx, run)
			}}
			cfg := &Config{NodeLeaseTTL: time.Second} // a's lease, not released, ends a second after its shutdown
			if listed {
				cfg.NodeLister = c.locks
			}
			a := c.node("a", 0, cfg).add(t, job).start(t)
			c.settle(true)
			for range 3 {
				c.step(time.Minute)
			}
			ctx := context.Background()
			third := t0.Add(3 * time.Minute)
			if _, err := RequestBackfill(ctx, c.ledger, "j", first, third, BackfillOptions{Now: c.clock.Now(), Rerun: true}); err != nil {
				t.Fatal(err)
			}
			c.advanceUntil("the first re-run to start", entered)
			grace, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			if err := a.s.Shutdown(grace); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown = %v, want the grace period to end", err)
			}
			a.lk.Close() // as the process exits: nothing renews its node lease
			c.node("b", 0, cfg).add(t, job).start(t)
			waitFor(t, "the queued re-runs to run on b", func() bool {
				c.step(time.Second)
				return rec.times("j", first.Add(time.Minute), "") == 2 && rec.times("j", third, "") == 2
			})
			waitFor(t, "the requests to be done", func() bool {
				c.step(time.Second)
				return !c.requestsPending("j")
			})
			// The second and third ticks ran twice, on schedule and re-run (the
			// first tick's re-run was cut short by the shutdown).
			if d, want := fmt.Sprint(rec.duplicates()), "[j@2030-01-01T00:02:00Z# ran 2 times j@2030-01-01T00:03:00Z# ran 2 times]"; d != want {
				t.Fatalf("runs of a tick more than once: %s, want %s", d, want)
			}
			// Taken over as they were asked for: oldest tick first.
			var order []time.Duration
			for _, call := range rec.snapshot() {
				if call.Attempt == 2 {
					order = append(order, call.Tick.Sub(t0))
				}
			}
			if fmt.Sprint(order) != "[2m0s 3m0s]" {
				t.Fatalf("re-runs taken over in the order of their ticks %v, want [2m0s 3m0s]", order)
			}
		})
	}
}

// advanceUntil moves the clock a quarter second at a time, without waiting
// for runs to end, until ch receives.
func (c *cluster) advanceUntil(what string, ch <-chan struct{}) {
	c.t.Helper()
	waitFor(c.t, what, func() bool {
		c.advance(250 * time.Millisecond)
		c.settle(false)
		select {
		case <-ch:
			return true
		default:
			return false
		}
	})
}

// requestsPending reports whether job has trigger requests pending in the
// ledger.
func (c *cluster) requestsPending(job string) bool {
	c.t.Helper()
	sts, err := c.ledger.JobStates(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	for _, st := range sts {
		if st.Job == job && len(st.Triggers) > 0 {
			return true
		}
	}
	return false
}

// A sharded job's trigger-now request whose node stops mid-run is taken
// over shard by shard by the tick's watch only: each shard completes once
// (the other nodes keep no plain request to take over as well).
func TestShardsTriggerTakeover(t *testing.T) {
	const shards = 6
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the job's first tick is t0+1h
	log := newShardLog()
	ka := c.killableNodes(t, Job{Name: "st", Schedule: "@every 1h", Shards: shards}, log, func(run Run) bool { return run.Trigger != "" })
	if _, err := c.nodes[1].s.Trigger(context.Background(), "st"); err != nil {
		t.Fatal(err)
	}
	c.waitStarted("the trigger's 6 shard-runs to start", log, shards)
	ka.dead.Store(true)
	waitFor(t, "every shard to complete", func() bool {
		c.advance(100 * time.Millisecond)
		_, done := log.count()
		return done >= shards && !c.requestsPending("st")
	})
	for range 20 { // long enough for a second takeover, were there one
		c.advance(100 * time.Millisecond)
		c.settle(false)
	}
	log.checkOnce(t, shards)
}

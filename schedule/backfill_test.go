package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
)

// A backfill runs each tick of the range once across the fleet, however
// many times it is asked for, and leaves alone the ticks that already ran;
// a re-run runs one tick again as its next attempt.
func TestBackfillRunsEachTickOnce(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	job := Job{Name: "hourly", Schedule: "@every 1m", Handler: rec.ok, Misfire: MisfireSkip, MisfireWindow: 30 * time.Minute}
	nodes := []*node{
		c.node("a", 0, nil).add(t, job).start(t),
		c.node("b", 0, nil).add(t, job).start(t),
		c.node("c", 0, nil).add(t, job).start(t),
	}
	c.settle(true)
	c.step(time.Minute) // t0+1m runs
	ranTick := c.clock.Now()
	for _, n := range nodes {
		n.shutdown(t)
	}
	c.advance(10*time.Minute + 30*time.Second)
	b := c.node("b2", 0, nil).add(t, job).start(t)
	c2 := c.node("c2", 0, nil).add(t, job).start(t)
	c.settle(true)
	// Ticks t0+2m .. t0+11m were missed (skip policy).
	missed := 0
	for _, r := range c.historyAfter("hourly", ranTick) {
		if r.Status == ledger.RunMissed {
			missed++
		}
	}
	if missed != 10 {
		t.Fatalf("%d missed records, want 10", missed)
	}
	ctx := context.Background()
	opts := BackfillOptions{Now: c.clock.Now()}
	// The range covers the tick that ran and the ten that were missed; it
	// is asked for twice, through two nodes' ledgers at once.
	from, to := ranTick, ranTick.Add(10*time.Minute)
	var ticks []time.Time
	for range 2 {
		ts, err := RequestBackfill(ctx, c.ledger, "hourly", from, to, opts)
		if err != nil {
			t.Fatal(err)
		}
		ticks = ts
	}
	if len(ticks) != 11 || !ticks[0].Equal(ranTick) || !ticks[10].Equal(to) {
		t.Fatalf("requested ticks %v, want the 11 from %v to %v", ticks, from, to)
	}
	for range 4 {
		c.step(250 * time.Millisecond)
	}
	waitFor(t, "the requests to be taken", func() bool {
		sts, err := c.ledger.JobStates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.Job == "hourly" && len(st.Triggers) > 0 {
				c.step(250 * time.Millisecond)
				return false
			}
		}
		return true
	})
	c.settle(true)
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatalf("ran twice: %v", d)
	}
	for i, tick := range ticks {
		if n := rec.times("hourly", tick, ""); n != 1 {
			t.Errorf("tick %d (%v) ran %d times, want 1", i, tick, n)
		}
	}
	// Every missed tick now has attempt 1, ok; the tick that ran has only
	// its first attempt.
	attempts := map[time.Time][]string{}
	for _, r := range c.historyAfter("hourly", ranTick.Add(-time.Second)) {
		if !r.Tick.After(to) {
			attempts[r.Tick] = append(attempts[r.Tick], fmt.Sprintf("%d:%s", r.Attempt, r.Status))
		}
	}
	for _, tick := range ticks {
		want := "[1:ok 0:missed]"
		if tick.Equal(ranTick) {
			want = "[1:ok]"
		}
		if got := fmt.Sprint(attempts[tick]); got != want {
			t.Errorf("tick %v: records %s, want %s", tick, got, want)
		}
	}

	// rerun asks for n re-runs of ranTick with o, waits until the tick has
	// run runs times in all, and returns its records, attempt:status.
	rerun := func(o BackfillOptions, n, runs int) []string {
		t.Helper()
		for range n {
			if _, err := RequestRerun(ctx, c.ledger, "hourly", ranTick, o); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the re-runs", func() bool {
			c.step(250 * time.Millisecond)
			return rec.times("hourly", ranTick, "") == runs
		})
		c.settle(true)
		var got []string
		for _, r := range c.historyAfter("hourly", ranTick.Add(-time.Second)) {
			if r.Tick.Equal(ranTick) {
				got = append(got, fmt.Sprintf("%d:%s", r.Attempt, r.Status))
			}
		}
		return got
	}

	// A re-run of the tick that ran is its attempt 2.
	if got := rerun(opts, 1, 2); fmt.Sprint(got) != "[2:ok 1:ok]" {
		t.Fatalf("records of the re-run tick: %v, want [2:ok 1:ok]", got)
	}

	// Two re-runs asked for before either runs, without the job's lock,
	// so that they may run at once on two nodes: attempts 3 and 4, never
	// both 3 (their requests carry the same base, 2).
	allow := opts
	allow.Overlap = OverlapAllow
	if got := rerun(allow, 2, 4); fmt.Sprint(got) != "[4:ok 3:ok 2:ok 1:ok]" {
		t.Fatalf("records of the tick re-run twice more: %v, want [4:ok 3:ok 2:ok 1:ok]", got)
	}

	// The same race made certain: two nodes start re-runs of one tick,
	// with the same base, before either records anything. They number
	// them 5 and 6 (both 5 before attempt numbers were claimed).
	firsts := map[int]bool{}
	for i, n := range []*node{b, c2} {
		w := requestWork(ledger.TriggerRequest{ID: withBase(rerunAllow, 4) + fmt.Sprint(i), Tick: ranTick, Rerun: true})
		n.s.mu.Lock()
		j := n.s.jobs["hourly"]
		n.s.mu.Unlock()
		first, err := n.s.startPast(j, w)
		if err != nil || first == 0 {
			t.Fatalf("node %s: startPast = %d, %v", n.name, first, err)
		}
		firsts[first] = true
	}
	if !firsts[5] || !firsts[6] {
		t.Fatalf("two re-runs started as attempts %v, want 5 and 6", firsts)
	}
}

func TestBackfillRefusesBadRanges(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	job := Job{Name: "m", Schedule: "@every 1m", Handler: rec.ok}
	c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	ctx := context.Background()
	now := c.clock.Now().Add(time.Hour)
	opts := BackfillOptions{Now: now}
	for _, tc := range []struct {
		name     string
		job      string
		from, to time.Time
		o        BackfillOptions
		want     string
	}{
		{"reversed", "m", now.Add(-time.Minute), now.Add(-time.Hour), opts, "ends"},
		{"future", "m", now.Add(-time.Minute), now.Add(time.Minute), opts, "future"},
		{"too many", "m", now.Add(-time.Hour), now, BackfillOptions{Now: now, Max: 10}, "61 ticks, more than the most one request takes (BackfillOptions.Max 10)"},
		{"unregistered", "nope", now.Add(-time.Hour), now, opts, "no node has registered"},
		{"no tick", "m", now.Add(-30 * time.Second), now.Add(-20 * time.Second), opts, "no tick"},
	} {
		_, err := RequestBackfill(ctx, c.ledger, tc.job, tc.from, tc.to, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	_, err := RequestBackfill(ctx, c.ledger, "m", now.Add(-time.Hour), now, BackfillOptions{Now: now, Max: 10})
	var tooMany *TooManyTicksError
	if !errors.As(err, &tooMany) || *tooMany != (TooManyTicksError{Job: "m", Ticks: 61, Max: 10}) || !errors.Is(err, ErrBadRequest) {
		t.Errorf("too many: %#v, want a *TooManyTicksError{m, 61, 10} matching ErrBadRequest", err)
	}
	if _, err := RequestBackfill(ctx, c.ledger, "nope", now.Add(-time.Hour), now, opts); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("unregistered: %v, want ErrNotRegistered", err)
	}
	if _, err := RequestRerun(ctx, c.ledger, "m", now.Add(-90*time.Second), opts); err == nil || !strings.Contains(err.Error(), "not a tick") {
		t.Errorf("re-run of a time that is no tick: %v", err)
	}
	if _, err := RequestRerun(ctx, c.ledger, "m", now.Add(time.Minute), opts); err == nil || !strings.Contains(err.Error(), "future") {
		t.Errorf("re-run of a future tick: %v", err)
	}
}

// Catch-up after a long outage has no cliff: the newest CatchUpMax ticks
// run, the rest of the backlog is recorded missed one by one, and the
// ticks before the backlog are counted in one record; the job goes on.
func TestCatchUpHasNoCliff(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	job := Job{Name: "sec", Schedule: "@every 1s", Handler: rec.ok, Misfire: MisfireCatchUp, CatchUpMax: 3, MisfireAfter: 500 * time.Millisecond, MisfireWindow: 30 * time.Minute}
	a := c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	c.step(time.Second)
	last := c.clock.Now()
	a.shutdown(t)
	c.advance(20 * time.Minute) // 1200 ticks
	before := len(rec.snapshot())
	c.node("b", 0, nil).add(t, job).start(t)
	c.settle(true)
	if ran := len(rec.snapshot()) - before; ran != 3+1 { // and the tick on time
		for _, cl := range rec.snapshot()[before:] {
			t.Logf("%+v", cl.Run)
		}
		t.Fatalf("%d runs, want 3 catch-up runs and the tick on time", ran)
	}
	var missed, summaries int
	var summary ledger.RunRecord
	for _, r := range c.historyAfter("sec", last) {
		if r.Status != ledger.RunMissed {
			continue
		}
		missed++
		if strings.Contains(r.Error, "ticks missed from") {
			summaries++
			summary = r
		}
	}
	if missed != MaxBacklog-4+1 || summaries != 1 {
		t.Fatalf("%d missed records (%d summaries), want %d and 1", missed, summaries, MaxBacklog-4+1)
	}
	want := fmt.Sprintf("%d ticks missed from %s to %s", 1200-MaxBacklog, last.Add(time.Second).Format(time.RFC3339), last.Add(time.Duration(1200-MaxBacklog)*time.Second).Format(time.RFC3339))
	if !strings.Contains(summary.Error, want) || !summary.Tick.Equal(last.Add(time.Duration(1200-MaxBacklog)*time.Second)) {
		t.Fatalf("summary %q at %v, want %q at its newest tick", summary.Error, summary.Tick, want)
	}
	c.step(time.Second)
	if n := rec.times("sec", c.clock.Now().Truncate(time.Second), ""); n != 1 {
		t.Fatalf("the tick after the catch-up ran %d times", n)
	}
}

// A backfill whose context ends half way returns, with the error, the
// ticks it requested: those requests stay in the ledger.
func TestBackfillReturnsTicksRequestedBeforeAnError(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	c.node("a", 0, nil).add(t, Job{Name: "m", Schedule: "@every 1m", Handler: rec.ok}).start(t)
	c.settle(true)
	now := c.clock.Now().Add(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &ledgertest.CancelAfter{Ledger: c.ledger, N: 3, Cancel: cancel}
	ticks, err := RequestBackfill(ctx, l, "m", now.Add(-10*time.Minute), now, BackfillOptions{Now: now})
	if !errors.Is(err, context.Canceled) || len(ticks) != 3 || ticks[0].Before(now.Add(-10*time.Minute)) {
		t.Fatalf("RequestBackfill = %v, %v; want the 3 ticks requested and the context's error", ticks, err)
	}
	sts, err := c.ledger.JobStates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pending := 0
	for _, st := range sts {
		if st.Job == "m" {
			pending = len(st.Triggers)
		}
	}
	if pending != 3 {
		t.Errorf("%d requests in the ledger, want the 3 returned", pending)
	}
}

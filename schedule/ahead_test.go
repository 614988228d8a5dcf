package schedule

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// With Config.ClaimAhead a plain job's tick is claimed, its lock taken and
// its running record written ClaimAhead before the tick, and its handler
// starts at the tick, once across the nodes; a job that is not plain is
// claimed at the tick.
func TestClaimAhead(t *testing.T) {
	const ahead = 300 * time.Millisecond
	c := newCluster(t)
	rec := newRecorder(c.clock)
	log := &eventLog{}
	jobs := []Job{
		{Name: "plain", Schedule: "@every 1s", Handler: rec.ok, MisfireWindow: 5 * time.Second},
		// LeaderOnly asks the leader at the tick: not plain.
		{Name: "watched", Schedule: "@every 1s", Handler: rec.ok, MisfireWindow: 5 * time.Second, LeaderOnly: true},
	}
	leads := func() bool { return true }
	for i := range 3 {
		c.node(fmt.Sprintf("node-%d", i), 0, &Config{ClaimAhead: ahead, OnEvent: log.on, IsLeader: leads}).add(t, jobs...).start(t)
	}
	c.settle(true)

	const seconds = 20
	for i := 1; i <= seconds; i++ {
		tick := t0.Add(time.Duration(i) * time.Second)
		c.advance(time.Second - ahead)
		c.settle(false)
		// ClaimAhead before the tick: the plain job's tick is claimed,
		// on one node, with its lock and its running record; it has not
		// run; the other job's tick is not claimed yet.
		waitFor(t, "the plain tick's claim, lock and running record", func() bool {
			return len(log.claimsOf("plain", tick)) == 3 && lockHeld(t, c, "plain") && pendingOf(c, "plain", tick) != nil
		})
		// The running record says what the run will be: started at the
		// tick, under the lock's fence.
		if r := pendingOf(c, "plain", tick); !r.Start.Equal(tick) || r.Fence == 0 {
			t.Fatalf("%v before the tick: running record %+v, want it starting at the tick, with a fence", tick, *r)
		}
		// The run's timer for the tick, beside the loops': armed before
		// the clock moves on.
		waitFor(t, "the run's timer", func() bool { return c.clock.armed() == len(c.nodes)+1 })
		claimed := 0
		for _, ty := range log.claimsOf("plain", tick) {
			if ty == EventClaimed {
				claimed++
			}
		}
		if claimed != 1 || rec.times("plain", tick, "") != 0 || len(log.claimsOf("watched", tick)) != 0 {
			t.Fatalf("%v before the tick: %d claims won, %d runs of plain, watched claimed by %v: want 1, 0, none",
				tick, claimed, rec.times("plain", tick, ""), log.claimsOf("watched", tick))
		}
		c.advance(ahead)
		c.settle(true)
	}
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatalf("ticks ran more than once:\n%s", strings.Join(d, "\n"))
	}
	// Every tick ran once, at its tick by the shared clock (never before).
	for _, cl := range rec.snapshot() {
		if cl.Tick.After(t0) && !cl.at.Equal(cl.Tick) {
			t.Errorf("%s %v started at %v", cl.Job, cl.Tick, cl.at)
		}
	}
	var fence uint64
	for i := 1; i <= seconds; i++ {
		tick := t0.Add(time.Duration(i) * time.Second)
		for _, job := range []string{"plain", "watched"} {
			if n := rec.times(job, tick, ""); n != 1 {
				t.Errorf("%s %v ran %d times, want 1", job, tick, n)
			}
		}
		rs := c.finalAfter("plain", tick.Add(-time.Nanosecond))
		if len(rs) == 0 || !rs[0].Tick.Equal(tick) {
			t.Fatalf("no record of plain %v", tick)
		}
		r := rs[0]
		if r.Status != ledger.RunOK || !r.Start.Equal(tick) || r.Fence <= fence {
			t.Errorf("plain %v: record %+v after fence %d: want ok, started at the tick, a higher fence", tick, r, fence)
		}
		fence = r.Fence
	}
}

// A lock still held when the tick is claimed ahead (the previous run's)
// is asked for again at the tick: a run that ends in between does not make
// the next tick skip, and one that goes on past the tick does.
func TestClaimAheadRetriesTheLockAtTheTick(t *testing.T) {
	const ahead = 300 * time.Millisecond
	c := newCluster(t)
	g := newGate()
	job := Job{Name: "slow", Schedule: "@every 1s", Handler: g.handler, MisfireWindow: 5 * time.Second}
	c.node("a", 0, &Config{ClaimAhead: ahead}).add(t, job).start(t)
	c.node("b", 0, &Config{ClaimAhead: ahead}).add(t, job).start(t)
	first := g.wait(t) // the start's tick, t0, still running
	if !first.Tick.Equal(t0) {
		t.Fatalf("first run %+v", first)
	}
	// The next tick is claimed while the first run holds the lock.
	c.advance(time.Second - ahead)
	c.settle(false)
	next := t0.Add(time.Second)
	waitFor(t, "the next tick's running record", func() bool { return pendingOf(c, "slow", next) != nil })
	waitFor(t, "the run's timer", func() bool { return c.clock.armed() == 3 }) // two loops' and the run's
	g.release <- struct{}{}                                                    // the first run ends before the tick
	c.waitRecords("slow", t0.Add(-time.Nanosecond), 1)
	// The record is written before the lock's release (runTick's defer):
	// at the tick the lock must be free, or the tick is skipped.
	waitFor(t, "the first run's lock released", func() bool { return !lockHeld(t, c, "slow") })
	c.advance(ahead)
	second := g.wait(t)
	if !second.Tick.Equal(next) || second.Fence <= first.Fence {
		t.Fatalf("second run %+v after %+v: want the next tick, with a higher fence", second, first)
	}
	// This time the run goes on past the next tick: that tick is skipped.
	c.advance(time.Second)
	rs := c.waitRecords("slow", next, 1)
	if rs[0].Status != ledger.RunSkipped || !strings.Contains(rs[0].Error, "still in progress") {
		t.Fatalf("tick during a run: %+v, want skipped", rs[0])
	}
	close(g.release)
	c.settle(true)
	if g.peak.Load() != 1 {
		t.Fatalf("%d runs at once, want 1", g.peak.Load())
	}
}

// lockHeld reports whether job's lock is held.
func lockHeld(t *testing.T, c *cluster, job string) bool {
	t.Helper()
	ls, err := c.locks.Leases(context.Background(), DefaultKeyPrefix+job)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Key == DefaultKeyPrefix+job {
			return true
		}
	}
	return false
}

// pendingOf returns job's tick's running record, or nil.
func pendingOf(c *cluster, job string, tick time.Time) *ledger.RunRecord {
	for _, r := range c.historyAfter(job, tick.Add(-time.Nanosecond)) {
		if r.Tick.Equal(tick) && r.Status == ledger.RunRunning {
			return &r
		}
	}
	return nil
}

// Nodes whose clocks disagree by up to a second, all claiming ahead, run
// every tick once, with an ok record and a rising fence.
func TestClaimAheadSkewedClocks(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	jobs := []Job{
		{Name: "every-second", Schedule: "@every 1s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
		{Name: "cron-3s", Schedule: "*/3 * * * * *", Handler: rec.ok, MisfireWindow: 10 * time.Second},
	}
	for i, skew := range []time.Duration{-400 * time.Millisecond, 0, 650 * time.Millisecond} {
		c.node(fmt.Sprintf("node-%d", i), skew, &Config{ClaimAhead: 400 * time.Millisecond}).add(t, jobs...).start(t)
	}
	c.settle(false)
	const seconds = 30
	for range seconds * 10 {
		// Runs wait for their ticks meanwhile: only the loops settle.
		c.advance(100 * time.Millisecond)
		c.settle(false)
	}
	// Some run always waits for a tick to come: stop the nodes, and move
	// the clock on until their last runs have run.
	stopped := make(chan error, len(c.nodes))
	for _, n := range c.nodes {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stopped <- n.s.Shutdown(ctx)
		}()
	}
	waitFor(t, "the loops to stop", func() bool {
		for _, n := range c.nodes {
			n.s.mu.Lock()
			ok := n.s.loopStopped
			n.s.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	})
	for left, deadline := len(c.nodes), time.Now().Add(15*time.Second); left > 0; {
		c.advance(time.Second)
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
			left--
		case <-time.After(20 * time.Millisecond): // move the clock on again
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d nodes still stopping", left)
		}
	}
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatalf("ticks ran more than once:\n%s", strings.Join(d, "\n"))
	}
	from, to := t0.Add(2*time.Second), t0.Add(seconds*time.Second)
	for _, job := range []string{"every-second", "cron-3s"} {
		var fence uint64
		every := time.Second
		if job == "cron-3s" {
			every = 3 * time.Second
		}
		for tick := from.Truncate(every).Add(every); !tick.After(to); tick = tick.Add(every) {
			if n := rec.times(job, tick, ""); n != 1 {
				t.Errorf("%s %v ran %d times, want 1", job, tick, n)
			}
			rs := c.finalAfter(job, tick.Add(-time.Nanosecond))
			if len(rs) == 0 || !rs[0].Tick.Equal(tick) || rs[0].Status != ledger.RunOK || rs[0].Fence <= fence {
				t.Fatalf("%s %v: records %v after fence %d: want one ok, with a higher fence", job, tick, rs, fence)
			}
			fence = rs[0].Fence
		}
	}
}

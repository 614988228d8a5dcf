package schedule

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
)

// gatedLocks is a lock store whose nth Acquire of key (the first when n is
// 0) waits until gate closes.
// It is a driver.Store only, not a Batcher, so that the Locker sends every
// acquire as a call of its own and a later one can overtake the first.
type gatedLocks struct {
	driver.Store
	key     string
	n       int
	mu      sync.Mutex
	seen    int
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedLocks) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	g.mu.Lock()
	if p.Key == g.key {
		g.seen++
	}
	held := g.seen == max(g.n, 1) && p.Key == g.key
	g.mu.Unlock()
	if held {
		close(g.entered)
		<-g.gate
	}
	return g.Store.Acquire(ctx, p)
}

// TestOlderTickDoesNotRunAfterNewer: a node whose run goroutine for a tick
// is slow to take the job's lock (a busy machine) while the next pass's
// goroutine for the next tick takes it, runs and releases it, must not then
// run the older tick after the newer one — with a lower tick, a higher fence
// — but record it skipped, saying which tick went first. Before, the older
// tick ran second.
func TestOlderTickDoesNotRunAfterNewer(t *testing.T) {
	c := newCluster(t)
	g := &gatedLocks{Store: c.locks, key: DefaultKeyPrefix + "j", entered: make(chan struct{}), gate: make(chan struct{})}
	c.lockStore = g
	rec := newRecorder(c.clock)
	older := c.clock.Now() // the job's first tick, claimed as the node starts
	c.node("a", 0, nil).add(t, Job{Name: "j", Schedule: "@every 1s", Handler: rec.ok, MisfireAfter: time.Minute}).start(t)
	recv(t, "the older tick's lock attempt", g.entered)
	c.advance(time.Second)
	checkOvertaken(t, c, g, rec, older, older.Add(time.Second))
}

// TestOlderTickClaimedAheadDoesNotRunAfterNewer is the same with
// Config.ClaimAhead, the older tick's lock taken ahead: its acquire, held
// past the tick, returns after the newer tick claimed ahead has run.
func TestOlderTickClaimedAheadDoesNotRunAfterNewer(t *testing.T) {
	c := newCluster(t)
	// The first acquire is the first tick's, at the start; the second the
	// next tick's, 500 ms ahead of it.
	g := &gatedLocks{Store: c.locks, key: DefaultKeyPrefix + "j", n: 2, entered: make(chan struct{}), gate: make(chan struct{})}
	c.lockStore = g
	rec := newRecorder(c.clock)
	c.node("a", 0, &Config{ClaimAhead: 500 * time.Millisecond}).add(t, Job{Name: "j", Schedule: "@every 1s", Handler: rec.ok, MisfireAfter: time.Minute}).start(t)
	older := t0.Add(time.Second)
	waitFor(t, "the first tick's run", func() bool { return rec.times("j", t0, "") == 1 })
	// Its run ends, the lock released, before the next ticks are claimed:
	// on a busy machine it may still hold the lock when the newer tick
	// asks for it, which would then be skipped.
	c.settle(true)
	c.advance(500 * time.Millisecond)
	recv(t, "the older tick's lock attempt, ahead", g.entered)
	c.settle(false)
	c.advance(time.Second) // the newer tick is claimed ahead
	c.settle(false)
	// The newer tick's run waits for its tick on a timer armed from the
	// clock it read: moving the clock before the timer is armed would arm
	// it 500 ms late, and the tick would never come.
	newer := older.Add(time.Second)
	waitFor(t, "the newer tick's running record and timer", func() bool {
		return pendingOf(c, "j", newer) != nil && c.clock.armed() == len(c.nodes)+1
	})
	c.advance(500 * time.Millisecond)
	checkOvertaken(t, c, g, rec, older, newer)
}

// checkOvertaken waits for the newer tick's run to end, lets the older
// tick's held acquire through, and checks that the older tick did not run
// but was recorded skipped, naming the newer.
func checkOvertaken(t *testing.T, c *cluster, g *gatedLocks, rec *recorder, older, newer time.Time) {
	t.Helper()
	defer func() { // on failure, what the ledger and the clock say
		if t.Failed() {
			for _, r := range c.history("j") {
				t.Logf("record: tick t0+%v %s attempt %d on %s %q", r.Tick.Sub(t0), r.Status, r.Attempt, r.Node, r.Error)
			}
			next, _ := c.clock.Next()
			t.Logf("clock at t0+%v, %d timers armed, the next at t0+%v", c.clock.Now().Sub(t0), c.clock.armed(), next.Sub(t0))
		}
	}()
	waitFor(t, "the newer tick's record", func() bool {
		rs := c.finalAfter("j", older)
		return len(rs) == 1 && rs[0].Status == ledger.RunOK
	})
	// The record is written before the lock's release.
	waitFor(t, "the newer tick's lock to be released", func() bool { return !lockHeld(t, c, "j") })
	close(g.gate)
	c.settle(true)

	if n := rec.times("j", newer, ""); n != 1 {
		t.Errorf("the newer tick ran %d times; want 1", n)
	}
	if n := rec.times("j", older, ""); n != 0 {
		t.Errorf("the older tick ran %d times after the newer one had run; want 0", n)
	}
	var got *ledger.RunRecord
	for _, r := range c.history("j") {
		if r.Tick.Equal(older) {
			got = &r
		}
	}
	switch {
	case got == nil:
		t.Fatal("the older tick has no record")
	case got.Status != ledger.RunSkipped || !strings.Contains(got.Error, newer.UTC().Format(time.RFC3339)):
		t.Errorf("the older tick's record: %s %q; want skipped, naming the newer tick (%s)", got.Status, got.Error, newer.UTC().Format(time.RFC3339))
	}
}

package schedule

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
)

// A LeaderOnly job runs only on the node whose IsLeader reports true; when
// the leadership moves, the new leader takes the job's ticks from the next
// poll on, every tick still runs once, and a job that is not LeaderOnly
// keeps running on whichever node claims it.
func TestLeaderOnly(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	var leader atomic.Int32 // index of the leading node; -1: none
	jobs := []Job{
		{Name: "leader-job", Schedule: "@every 1s", Handler: rec.ok, LeaderOnly: true, MisfireWindow: 10 * time.Second},
		{Name: "any-job", Schedule: "@every 1s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
	}
	for i := range 3 {
		cfg := &Config{IsLeader: func() bool { return leader.Load() == int32(i) }}
		c.node(fmt.Sprintf("node-%d", i), 0, cfg).add(t, jobs...).start(t)
	}
	c.settle(true)
	// phases: who leads, for how many seconds
	phases := []struct {
		leader  int32
		seconds int
	}{{0, 10}, {2, 10}, {-1, 5}, {1, 10}}
	type span struct {
		from, to time.Time
		node     string
	}
	var spans []span
	for _, ph := range phases {
		leader.Store(ph.leader)
		from := c.clock.Now()
		for range ph.seconds {
			c.step(time.Second)
		}
		name := ""
		if ph.leader >= 0 {
			name = fmt.Sprintf("node-%d", ph.leader)
		}
		spans = append(spans, span{from, c.clock.Now(), name})
	}
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatalf("ticks ran more than once: %v", d)
	}
	for _, cl := range rec.snapshot() {
		if cl.Job != "leader-job" {
			continue
		}
		for _, sp := range spans {
			// A call made a whole second into a span is that span's
			// leader's (a handover may take one poll).
			if cl.at.After(sp.from.Add(time.Second)) && !cl.at.After(sp.to) && cl.Node != sp.node {
				t.Errorf("leader-job tick %v ran on %s at %v, while %q led", cl.Tick, cl.Node, cl.at, sp.node)
			}
		}
	}
	// Every tick up to the leaderless phase and within the last phase ran
	// once; the leaderless ticks were owed and handled by the Misfire
	// policy (MisfireOnce: the newest runs, the others are recorded
	// missed), so none is silently lost.
	from, to := t0.Add(2*time.Second), spans[len(spans)-1].to.Add(-time.Second)
	for tick := from; !tick.After(to); tick = tick.Add(time.Second) {
		if n := rec.times("any-job", tick, ""); n != 1 {
			t.Errorf("any-job %v ran %d times", tick, n)
		}
	}
	for tick := from; !tick.After(spans[1].to.Add(-time.Second)); tick = tick.Add(time.Second) {
		if n := rec.times("leader-job", tick, ""); n != 1 {
			t.Errorf("leader-job %v ran %d times", tick, n)
		}
	}
	seen := map[time.Time]bool{}
	for _, r := range c.historyAfter("leader-job", spans[2].from) {
		seen[r.Tick] = true
	}
	for tick := spans[2].from.Add(time.Second); !tick.After(to); tick = tick.Add(time.Second) {
		if !seen[tick] {
			t.Errorf("leader-job tick %v has no record: the leaderless ticks must be owed", tick)
		}
	}
}

// LeaderOnly without Config.IsLeader is refused, naming the field.
func TestLeaderOnlyNeedsIsLeader(t *testing.T) {
	c := newCluster(t)
	n := c.node("n", 0, nil)
	err := n.s.Add(Job{Name: "j", Schedule: "@every 1s", Handler: newRecorder(c.clock).ok, LeaderOnly: true})
	var oe *tasklock.OptionError
	if !errors.As(err, &oe) || oe.Field != "Job.LeaderOnly" {
		t.Fatalf("Add = %v, want an OptionError naming Job.LeaderOnly", err)
	}
}

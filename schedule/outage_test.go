package schedule

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
)

// outageLedger is a flakyLedger whose next JobStates call can also be held
// (hold), as a store coming back slowly would hold it, while the test
// moves the clock.
type outageLedger struct {
	flakyLedger
	mu      sync.Mutex
	hold    chan struct{} // non-nil: the next JobStates call waits for it to close
	entered chan struct{} // closed as that call begins to wait
}

// holdStates makes the next JobStates call wait until release is called;
// entered is closed once it waits.
func (o *outageLedger) holdStates() (entered <-chan struct{}, release func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	hold, in := make(chan struct{}), make(chan struct{})
	o.hold, o.entered = hold, in
	return in, func() { close(hold) }
}

func (o *outageLedger) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	o.mu.Lock()
	hold, entered := o.hold, o.entered
	o.hold, o.entered = nil, nil
	o.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	return o.flakyLedger.JobStates(ctx)
}

// TestOutageTicksGoToTheMisfirePolicy takes the store down across three
// ticks of an @every 30s job (MisfireAfter 5s, MisfireOnce) and brings it
// back: every tick gets exactly one record, at most one tick runs as a
// catch-up run, and no tick that is not a catch-up run starts more than
// MisfireAfter after it was due — not when the store answers slowly as it
// comes back, nor when the tick waits behind the catch-up run.
func TestOutageTicksGoToTheMisfirePolicy(t *testing.T) {
	const every = 30 * time.Second
	for _, tc := range []struct {
		name    string
		overlap Overlap
		// slow: the store answers the first poll after the outage only
		// once the clock has moved on 10s, so the pass that follows
		// handles the ticks 11s after the newest was due.
		slow bool
		// long: the catch-up run of the newest missed tick lasts 20s.
		long bool
		// wantRan is the ticks that run (seconds after t0),
		// wantCatchUp those of them that run as catch-up runs,
		// wantSkipped the ticks recorded skipped; the others of 30 to
		// 120 are recorded missed.
		wantRan, wantCatchUp, wantSkipped []int
	}{
		{name: "slow store", slow: true,
			wantRan: []int{120}, wantCatchUp: []int{120}},
		{name: "long catch-up, overlap skip", long: true,
			wantRan: []int{90}, wantCatchUp: []int{90}, wantSkipped: []int{120}},
		{name: "long catch-up, overlap allow", overlap: OverlapAllow, long: true,
			wantRan: []int{90, 120}, wantCatchUp: []int{90}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			rec := newRecorder(c.clock)
			blocked, unblock := make(chan Run, 1), make(chan struct{})
			handler := func(ctx context.Context, run Run) error {
				rec.note(run)
				if tc.long && run.CatchUp {
					blocked <- run
					<-unblock
				}
				return nil
			}
			store := &outageLedger{flakyLedger: flakyLedger{Ledger: c.ledger}}
			lk, err := tasklock.New(c.locks, &tasklock.Config{Owner: "a", Logger: discardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			clock := &skewClock{c.clock, 0}
			s, err := New(lk, store, &Config{Node: "a", Clock: clock, Logger: discardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			c.nodes = append(c.nodes, &node{name: "a", clock: clock, lk: lk, s: s})
			job := Job{Name: "j", Schedule: fmt.Sprintf("@every %v", every), Handler: handler, Overlap: tc.overlap, MisfireWindow: 10 * time.Minute}
			if err := s.Add(job); err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			c.settle(true) // tick t0 runs

			// The store goes down across the ticks at 30s, 60s and 90s.
			store.failClaims.Store(true)
			store.failStates.Store(true)
			for c.clock.Now().Before(t0.Add(95 * time.Second)) {
				c.step(5 * time.Second)
			}
			if calls := rec.snapshot(); len(calls) != 1 {
				t.Fatalf("%d runs while the store was down, want only tick t0's", len(calls))
			}
			// It comes back; the node's next pass is at 121s, 1s after
			// the tick at 120s.
			store.failClaims.Store(false)
			store.failStates.Store(false)
			if tc.slow {
				entered, release := store.holdStates()
				c.advance(26 * time.Second)
				<-entered
				c.clock.Advance(10 * time.Second)
				release()
				c.advance(0)
			} else {
				c.advance(26 * time.Second)
			}
			if tc.long {
				r := waitRun(t, blocked)
				if tc.overlap == OverlapAllow {
					// The on-time tick starts at once, beside the
					// catch-up run, before the clock moves on.
					waitFor(t, "the on-time tick's run", func() bool { return rec.times("j", t0.Add(4*every), "") == 1 })
				}
				// The catch-up run lasts 20s: the on-time tick's grace
				// passes meanwhile.
				c.advance(20 * time.Second)
				c.settle(false)
				if !r.CatchUp {
					t.Errorf("blocked run %+v is not a catch-up run", r)
				}
				close(unblock)
			}
			c.settle(true)

			var ran, catchUp []int
			for _, cl := range rec.snapshot()[1:] {
				sec := int(cl.Tick.Sub(t0) / time.Second)
				ran = append(ran, sec)
				if cl.CatchUp {
					catchUp = append(catchUp, sec)
				}
				if late := cl.at.Sub(cl.Tick); late > DefaultMisfireAfter && !cl.CatchUp {
					t.Errorf("tick %ds started %v late, past MisfireAfter, and not as a catch-up run", sec, late)
				}
			}
			if d := rec.duplicates(); len(d) > 0 {
				t.Errorf("ticks ran more than once: %v", d)
			}
			var missed, skipped []int
			n := make(map[int]int)
			for _, r := range c.finalAfter("j", t0) {
				sec := int(r.Tick.Sub(t0) / time.Second)
				n[sec]++
				switch r.Status {
				case ledger.RunMissed:
					missed = append(missed, sec)
				case ledger.RunSkipped:
					skipped = append(skipped, sec)
					if !strings.Contains(r.Error, "still in progress") {
						t.Errorf("tick %ds skipped for %q, want the previous run still in progress", sec, r.Error)
					}
				case ledger.RunOK:
				default:
					t.Errorf("record %+v", r)
				}
			}
			var wantMissed []int
			for sec := 30; sec <= 120; sec += 30 {
				if n[sec] != 1 {
					t.Errorf("tick %ds has %d records, want 1", sec, n[sec])
				}
				if !slices.Contains(tc.wantRan, sec) && !slices.Contains(tc.wantSkipped, sec) {
					wantMissed = append(wantMissed, sec)
				}
			}
			slices.Sort(ran) // with OverlapAllow the on-time tick starts beside the catch-up run
			got := fmt.Sprintf("ran %v, catch-up %v, missed %v, skipped %v", ran, catchUp, missed, skipped)
			want := fmt.Sprintf("ran %v, catch-up %v, missed %v, skipped %v", tc.wantRan, tc.wantCatchUp, wantMissed, tc.wantSkipped)
			if got != want {
				t.Errorf("%s\nwant %s", got, want)
			}

			// The next tick is on time again.
			c.step(c.clock.Now().Truncate(every).Add(every).Sub(c.clock.Now()))
			if calls := rec.snapshot(); len(calls) == 0 || calls[len(calls)-1].CatchUp || calls[len(calls)-1].at.Sub(calls[len(calls)-1].Tick) != 0 {
				t.Errorf("the first tick after the outage did not run on time: %+v", calls[len(calls)-1])
			}
		})
	}
}

func waitRun(t *testing.T, ch <-chan Run) Run {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
		return Run{}
	}
}

// slowLocks holds the next Acquire of a key, as a store slow to answer
// would, while the test moves the clock.
type slowLocks struct {
	driver.Store
	mu      sync.Mutex
	key     string
	hold    chan struct{}
	entered chan struct{}
}

func (l *slowLocks) holdKey(key string) (entered <-chan struct{}, release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	hold, in := make(chan struct{}), make(chan struct{})
	l.key, l.hold, l.entered = key, hold, in
	return in, func() { close(hold) }
}

func (l *slowLocks) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	l.mu.Lock()
	var hold, entered chan struct{}
	if p.Key == l.key {
		hold, entered = l.hold, l.entered
		l.key, l.hold, l.entered = "", nil, nil
	}
	l.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	return l.Store.Acquire(ctx, p)
}

// TestSlowLockMakesTheTickLate holds the job lock's store call at a tick
// for 10s, past MisfireAfter: the tick was handled late, so it goes to the
// misfire policy — run as a catch-up run (MisfireOnce), or recorded missed
// (MisfireSkip) — and never starts late as an on-time run.
func TestSlowLockMakesTheTickLate(t *testing.T) {
	for _, policy := range []Misfire{MisfireOnce, MisfireSkip} {
		t.Run(policy.String(), func(t *testing.T) {
			c := newCluster(t)
			rec := newRecorder(c.clock)
			locks := &slowLocks{Store: c.locks}
			lk, err := tasklock.New(locks, &tasklock.Config{Owner: "a", Logger: discardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			clock := &skewClock{c.clock, 0}
			s, err := New(lk, c.ledger, &Config{Node: "a", Clock: clock, Logger: discardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			c.nodes = append(c.nodes, &node{name: "a", clock: clock, lk: lk, s: s})
			if err := s.Add(Job{Name: "j", Schedule: "@every 30s", Handler: rec.ok, Misfire: policy}); err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			c.settle(true) // tick t0 runs
			entered, release := locks.holdKey(DefaultKeyPrefix + "j")
			c.advance(30 * time.Second)
			<-entered
			c.advance(10 * time.Second)
			c.settle(false)
			release()
			c.settle(true)

			tick := t0.Add(30 * time.Second)
			calls := rec.snapshot()[1:]
			rs := c.finalAfter("j", tick.Add(-time.Nanosecond))
			if len(rs) != 1 {
				t.Fatalf("records %+v, want one", rs)
			}
			switch policy {
			case MisfireOnce:
				if len(calls) != 1 || !calls[0].CatchUp || rs[0].Status != ledger.RunOK {
					t.Fatalf("runs %+v, record %+v: want one catch-up run", calls, rs[0])
				}
			case MisfireSkip:
				if len(calls) != 0 || rs[0].Status != ledger.RunMissed || rs[0].Attempt != 0 {
					t.Fatalf("runs %+v, record %+v: want the tick missed", calls, rs[0])
				}
			}
		})
	}
}

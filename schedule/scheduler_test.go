package schedule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

var noop = func(context.Context, Run) error { return nil }

// at3am is a schedule whose first tick is hours after t0 (midnight): jobs
// on it run only when triggered.
const at3am = "0 0 3 * * *"

// Three nodes, clocks up to 3 s apart or all equal, 120 s of a per-second
// job and a cron job with seconds: every tick runs exactly once.
func TestNoDuplicateTicks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		skews []time.Duration
	}{
		{"skewed ±3s", []time.Duration{-3 * time.Second, 0, 3 * time.Second}},
		{"skewed unevenly", []time.Duration{-2500 * time.Millisecond, 700 * time.Millisecond, 2 * time.Second}},
		{"same clock", []time.Duration{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			rec := newRecorder(c.clock)
			jobs := []Job{
				{Name: "every-second", Schedule: "@every 1s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
				{Name: "cron-5s", Schedule: "*/5 * * * * *", Handler: rec.ok, MisfireWindow: 10 * time.Second},
			}
			for i, skew := range tc.skews {
				c.node(fmt.Sprintf("node-%d", i), skew, nil).add(t, jobs...).start(t)
			}
			c.settle(true)
			const seconds = 120
			for range seconds {
				c.step(time.Second)
			}
			if d := rec.duplicates(); len(d) > 0 {
				t.Fatalf("ticks ran more than once:\n%s", strings.Join(d, "\n"))
			}
			byNode := map[string]int{}
			for _, cl := range rec.snapshot() {
				byNode[cl.Node]++
			}
			// Every tick every node has passed ran exactly once, and has one
			// ok record.
			from, to := t0.Add(4*time.Second), t0.Add((seconds-3)*time.Second)
			for tick := from; !tick.After(to); tick = tick.Add(time.Second) {
				if n := rec.times("every-second", tick, ""); n != 1 {
					t.Errorf("every-second %v ran %d times", tick, n)
				}
				if tick.Second()%5 == 0 {
					if n := rec.times("cron-5s", tick, ""); n != 1 {
						t.Errorf("cron-5s %v ran %d times", tick, n)
					}
				} else if n := rec.times("cron-5s", tick, ""); n != 0 {
					t.Errorf("cron-5s ran at %v", tick)
				}
			}
			for _, job := range []string{"every-second", "cron-5s"} {
				seen := map[time.Time]bool{}
				for _, r := range c.historyAfter(job, from.Add(-time.Nanosecond)) {
					if r.Tick.After(to) {
						continue
					}
					if r.Status != ledger.RunOK || seen[r.Tick] || r.Attempt != 1 || r.Fence == 0 {
						t.Errorf("%s: record %+v (seen before: %v)", job, r, seen[r.Tick])
					}
					seen[r.Tick] = true
				}
			}
			t.Logf("runs by node: %v", byNode)
		})
	}
}

// A node that starts late, looking back over the default hour, finds the
// ticks the others ran claimed and runs none of them again.
func TestLateNodeDoesNotRerunClaimedTicks(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	jobs := []Job{
		{Name: "fast", Schedule: "@every 1s", Handler: rec.ok},
		{Name: "slow", Schedule: "@every 10s", Handler: rec.ok},
	}
	c.node("a", -time.Second, nil).add(t, jobs...).start(t)
	c.node("b", time.Second, nil).add(t, jobs...).start(t)
	c.settle(true)
	for range 30 {
		c.step(time.Second)
	}
	before := len(rec.snapshot())
	missed := len(c.historyAfter("fast", t0.Add(-2*time.Hour))) + len(c.historyAfter("slow", t0.Add(-2*time.Hour)))
	lateStart := c.clock.Now()

	late := c.node("late", 2*time.Second, nil).add(t, jobs...).start(t)
	c.settle(true)
	for _, cl := range rec.snapshot()[before:] {
		if !cl.Tick.After(lateStart) {
			t.Errorf("the late node re-ran %s %v (claimed before it started)", cl.Job, cl.Tick)
		}
	}
	records := len(c.historyAfter("fast", t0.Add(-2*time.Hour))) + len(c.historyAfter("slow", t0.Add(-2*time.Hour)))
	if added := records - (len(rec.snapshot()) - before); added != missed {
		t.Errorf("the late node recorded %d records for old ticks", added-missed)
	}
	for range 20 {
		c.step(time.Second)
	}
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatalf("ticks ran more than once:\n%s", strings.Join(d, "\n"))
	}
	ranLate := 0
	for _, cl := range rec.snapshot() {
		if cl.Node == late.name {
			ranLate++
		}
	}
	if ranLate == 0 {
		t.Error("the late node never ran a tick after it joined")
	}
}

// gate is a handler that blocks until released or its ctx ends.
type gate struct {
	started chan Run
	release chan struct{}
	running atomic.Int32
	peak    atomic.Int32
}

func newGate() *gate { return &gate{started: make(chan Run, 100), release: make(chan struct{})} }

func (g *gate) handler(ctx context.Context, run Run) error {
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	g.started <- run
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (g *gate) wait(t *testing.T) Run {
	t.Helper()
	select {
	case r := <-g.started:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
		return Run{}
	}
}

func TestOverlap(t *testing.T) {
	t.Run("skip", func(t *testing.T) {
		c := newCluster(t)
		g := newGate()
		job := Job{Name: "long", Schedule: "@every 10s", Handler: g.handler, MisfireWindow: 10 * time.Second}
		a := c.node("a", 0, nil).add(t, job).start(t)
		c.node("b", 0, nil).add(t, job).start(t)
		first := g.wait(t) // tick t0, still running
		if !first.Tick.Equal(t0) || first.Fence == 0 {
			t.Fatalf("first run %+v", first)
		}
		c.advance(10 * time.Second)
		rs := c.waitRecords("long", t0, 1)
		if rs[0].Status != ledger.RunSkipped || !rs[0].Tick.Equal(t0.Add(10*time.Second)) || !strings.Contains(rs[0].Error, "still in progress") {
			t.Fatalf("tick during a run: %+v, want skipped", rs[0])
		}
		if !strings.Contains(rs[0].Error, first.Node) {
			t.Errorf("skip reason %q does not name the holder %s", rs[0].Error, first.Node)
		}
		close(g.release)
		rs = c.waitRecords("long", t0.Add(-time.Second), 2)
		if rs[0].Status != ledger.RunOK || !rs[0].Tick.Equal(t0) {
			t.Fatalf("first run's record %+v", rs[0])
		}
		c.settle(true)
		c.step(10 * time.Second)
		third := g.wait(t)
		if !third.Tick.Equal(t0.Add(20*time.Second)) || third.Fence <= first.Fence {
			t.Fatalf("third run %+v after %+v", third, first)
		}
		c.settle(true)
		if g.peak.Load() != 1 {
			t.Fatalf("%d runs at once, want 1", g.peak.Load())
		}
		_ = a
	})
	// A run whose lock release failed leaves the lock held until its lease
	// ends: the next tick is skipped, and its reason says that the lock
	// may have outlived the run (a stranger read "the previous run is
	// still in progress" after a failover, with no run in progress).
	t.Run("release failed", func(t *testing.T) {
		c := newCluster(t)
		c.lockStore = releaseFails{c.locks}
		var ran atomic.Int32
		job := Job{Name: "short", Schedule: "@every 10s", MisfireWindow: 10 * time.Second, Handler: func(context.Context, Run) error {
			ran.Add(1)
			return nil
		}}
		c.node("a", 0, nil).add(t, job).start(t)
		rs := c.waitRecords("short", t0.Add(-time.Second), 1)
		if rs[0].Status != ledger.RunOK {
			t.Fatalf("first run's record %+v", rs[0])
		}
		c.settle(true)
		c.step(10 * time.Second)
		rs = c.waitRecords("short", t0, 1)
		if rs[0].Status != ledger.RunSkipped || !strings.Contains(rs[0].Error, "or its lock outlived it (a release that failed") {
			t.Fatalf("tick after a failed release: %+v, want skipped, the lock's outliving the run named", rs[0])
		}
		if ran.Load() != 1 {
			t.Errorf("%d runs, want 1", ran.Load())
		}
	})
	t.Run("allow", func(t *testing.T) {
		c := newCluster(t)
		g := newGate()
		job := Job{Name: "long", Schedule: "@every 10s", Handler: g.handler, Overlap: OverlapAllow, MisfireWindow: 10 * time.Second}
		c.node("a", 0, nil).add(t, job).start(t)
		c.node("b", 0, nil).add(t, job).start(t)
		first := g.wait(t)
		c.advance(10 * time.Second)
		second := g.wait(t)
		if g.peak.Load() != 2 || first.Fence != 0 || second.Fence != 0 {
			t.Fatalf("peak %d, fences %d %d: want two runs at once without a lock", g.peak.Load(), first.Fence, second.Fence)
		}
		close(g.release)
		rs := c.waitRecords("long", t0.Add(-time.Second), 2)
		for _, r := range rs {
			if r.Status != ledger.RunOK {
				t.Fatalf("record %+v", r)
			}
		}
		c.settle(true)
	})
}

// releaseFails is a lock store whose releases fail, as a store that does
// not answer them: the lease stays until its TTL.
type releaseFails struct{ driver.Store }

func (releaseFails) Release(context.Context, driver.ReleaseParams) error {
	return errors.New("connection refused")
}

// MinHold keeps the job's lock after a short run, so ticks within it are
// skipped (ShedLock's lockAtLeastFor).
func TestMinHoldSkipsTicksWithin(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	job := Job{Name: "spaced", Schedule: "@every 10s", Handler: rec.ok, Lock: tasklock.ObtainOptions{MinHold: time.Hour}, MisfireWindow: 10 * time.Second}
	c.node("a", 0, nil).add(t, job).start(t)
	c.node("b", 0, nil).add(t, job).start(t)
	c.settle(true)
	c.step(10 * time.Second)
	rs := c.historyAfter("spaced", t0.Add(-time.Second))
	if len(rs) != 2 || rs[0].Status != ledger.RunOK || rs[1].Status != ledger.RunSkipped || !strings.Contains(rs[1].Error, "held by") {
		t.Fatalf("history %v, want the first tick ok and the second skipped", ticks(rs))
	}
	if n := len(rec.snapshot()); n != 1 {
		t.Fatalf("%d runs within MinHold, want 1", n)
	}
}

// Jitter delays the run, not the claim.
func TestJitterDelaysTheRun(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	job := Job{Name: "spread", Schedule: at3am, Jitter: 10 * time.Second, Handler: rec.ok}
	n := c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	if _, err := n.s.Trigger(context.Background(), "spread"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the jitter timer", func() bool { return c.clock.armed() == 2 })
	if len(rec.snapshot()) != 0 {
		t.Fatal("ran before its jitter")
	}
	c.advance(10 * time.Second)
	rs := c.waitRecords("spread", t0.Add(-time.Hour), 1)
	if d := rs[0].Start.Sub(rs[0].Tick); rs[0].Status != ledger.RunOK || d < 0 || d > 10*time.Second {
		t.Fatalf("record %+v: started %v after its tick", rs[0], d)
	}
	c.settle(true)
}

// After downtime of the whole cluster, the misfire policy decides what
// happens to the ticks nobody ran.
func TestMisfirePolicies(t *testing.T) {
	type want struct {
		ran    []int // minutes after the shutdown tick that ran, in order
		missed []int
	}
	for _, tc := range []struct {
		name string
		job  Job
		want want
	}{
		{"skip", Job{Misfire: MisfireSkip, MisfireWindow: 30 * time.Minute},
			want{nil, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}},
		{"once", Job{Misfire: MisfireOnce, MisfireWindow: 30 * time.Minute},
			want{[]int{10}, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}}},
		{"catch_up", Job{Misfire: MisfireCatchUp, MisfireWindow: 5 * time.Minute, CatchUpMax: 3},
			want{[]int{8, 9, 10}, []int{6, 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			rec := newRecorder(c.clock)
			job := tc.job
			job.Name, job.Schedule, job.Handler = "minutely", "@every 1m", rec.ok
			a := c.node("a", 0, nil).add(t, job).start(t)
			c.settle(true)
			for range 3 {
				c.step(time.Minute)
			}
			a.shutdown(t)
			last := c.clock.Now() // t0+3m: its tick ran
			c.advance(10*time.Minute + 30*time.Second)

			before := len(rec.snapshot())
			c.node("b", 0, nil).add(t, job).start(t)
			c.settle(true)
			var ran []int
			for _, cl := range rec.snapshot()[before:] {
				ran = append(ran, int(cl.Tick.Sub(last)/time.Minute))
				if !cl.CatchUp || cl.Node != "b" {
					t.Errorf("catch-up run %+v", cl.Run)
				}
			}
			var missed []int
			for _, r := range c.historyAfter("minutely", last) {
				m := int(r.Tick.Sub(last) / time.Minute)
				switch r.Status {
				case ledger.RunMissed:
					missed = append(missed, m)
					if r.Attempt != 0 || !r.Start.IsZero() || !strings.Contains(r.Error, "missed") {
						t.Errorf("missed record %+v", r)
					}
				case ledger.RunOK:
				default:
					t.Errorf("record %+v", r)
				}
			}
			if fmt.Sprint(ran) != fmt.Sprint(tc.want.ran) || fmt.Sprint(missed) != fmt.Sprint(tc.want.missed) {
				t.Fatalf("ran %v, missed %v; want ran %v, missed %v", ran, missed, tc.want.ran, tc.want.missed)
			}
			// The next tick is on time again.
			c.step(30 * time.Second)
			if n := rec.times("minutely", last.Add(11*time.Minute), ""); n != 1 {
				t.Fatalf("the first tick after the restart ran %d times", n)
			}
		})
	}
}

// A failing handler is retried within its tick, with doubling backoff and
// under the same lock.
func TestRetriesWithBackoff(t *testing.T) {
	c := newCluster(t)
	var calls atomic.Int32
	job := Job{
		Name: "flaky", Schedule: at3am, Retries: 3, RetryBackoff: 10 * time.Second,
		Handler: func(ctx context.Context, run Run) error {
			if calls.Add(1) < 3 {
				fmt.Fprintf(run.Output, "attempt %d failing\n", run.Attempt)
				return errors.New("upstream unavailable")
			}
			return nil
		},
	}
	n := c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	id, err := n.s.Trigger(context.Background(), "flaky")
	if err != nil {
		t.Fatal(err)
	}
	// The triggering node sees its own request at once: attempt 1 runs at t0.
	c.waitRecords("flaky", t0.Add(-time.Hour), 1)
	waitFor(t, "the backoff timer", func() bool { return c.clock.armed() == 2 }) // the loop's and the backoff's
	c.advance(9 * time.Second)
	c.settle(false)
	if len(c.history("flaky")) != 1 {
		t.Fatal("retried before the backoff passed")
	}
	c.advance(time.Second)
	c.waitRecords("flaky", t0.Add(-time.Hour), 2)
	waitFor(t, "the backoff timer", func() bool { return c.clock.armed() == 2 })
	c.advance(20 * time.Second)
	rs := c.waitRecords("flaky", t0.Add(-time.Hour), 3)
	c.settle(true)
	// Newest first: attempt 3, 2, 1.
	if rs[0].Attempt != 3 || rs[0].Status != ledger.RunOK || rs[1].Status != ledger.RunFailed || rs[2].Status != ledger.RunFailed {
		t.Fatalf("records %+v", rs)
	}
	if rs[2].Error != "upstream unavailable" || rs[2].Output != "attempt 1 failing\n" {
		t.Fatalf("attempt 1: error %q, output %q", rs[2].Error, rs[2].Output)
	}
	if d := rs[1].Start.Sub(rs[2].End); d != 10*time.Second {
		t.Errorf("first backoff %v, want 10s", d)
	}
	if d := rs[0].Start.Sub(rs[1].End); d != 20*time.Second {
		t.Errorf("second backoff %v, want 20s", d)
	}
	for _, r := range rs {
		if r.Trigger != id || r.Fence != rs[0].Fence || r.Fence == 0 {
			t.Errorf("record %+v: want trigger %s and one fence for all attempts", r, id)
		}
	}
}

// hung is a handler that runs until its ctx ends, and reports when it
// started and why it ended.
type hung struct {
	started chan Run
	causes  chan error
}

func newHung() *hung { return &hung{started: make(chan Run, 8), causes: make(chan error, 8)} }

func (h *hung) handler(ctx context.Context, run Run) error {
	h.started <- run
	<-ctx.Done()
	h.causes <- context.Cause(ctx)
	return ctx.Err()
}

// recv receives from ch, failing the test after 10 seconds.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// Timeout ends a handler that hangs, by the scheduler's clock; the attempt
// is retried and then given up.
func TestTimeoutEndsHungHandler(t *testing.T) {
	c := newCluster(t)
	h := newHung()
	job := Job{Name: "hung", Schedule: at3am, Timeout: 30 * time.Second, Retries: 1, RetryBackoff: time.Second, Handler: h.handler}
	n := c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	if _, err := n.s.Trigger(context.Background(), "hung"); err != nil {
		t.Fatal(err)
	}
	recv(t, "attempt 1", h.started) // the triggering node sees its request at once
	c.advance(29 * time.Second)
	c.settle(false)
	select {
	case err := <-h.causes:
		t.Fatalf("ended before the timeout: %v", err)
	default:
	}
	c.advance(time.Second)
	if err := recv(t, "the timeout", h.causes); !errors.Is(err, ErrTimeout) {
		t.Fatalf("cause %v, want ErrTimeout", err)
	}
	c.waitRecords("hung", t0.Add(-time.Hour), 1)
	waitFor(t, "the backoff timer", func() bool { return c.clock.armed() == 2 })
	c.advance(time.Second)
	recv(t, "attempt 2", h.started)
	c.advance(30 * time.Second)
	if err := recv(t, "the second timeout", h.causes); !errors.Is(err, ErrTimeout) {
		t.Fatalf("cause %v, want ErrTimeout", err)
	}
	rs := c.waitRecords("hung", t0.Add(-time.Hour), 2)
	c.settle(true)
	for _, r := range rs {
		if r.Status != ledger.RunTimeout || !strings.Contains(r.Error, "timed out") || r.End.Sub(r.Start) != 30*time.Second {
			t.Fatalf("record %+v", r)
		}
	}
}

// MaxHold ends a hung handler through the job's lock (the Locker's clock),
// or by the node's clock when there is no lock.
func TestMaxHoldEndsHungHandler(t *testing.T) {
	t.Run("lock", func(t *testing.T) {
		c := newCluster(t)
		h := newHung()
		// The Locker runs on the real clock: a lease of a second, renewed
		// every third of it, outlives a starved renewal on a loaded
		// machine (200 ms did not: lost before MaxHold came).
		job := Job{Name: "hung", Schedule: at3am, Lock: tasklock.ObtainOptions{TTL: time.Second, MaxHold: 1500 * time.Millisecond}, Retries: 2, Handler: h.handler}
		n := c.node("a", 0, nil).add(t, job).start(t)
		c.settle(true)
		if _, err := n.s.Trigger(context.Background(), "hung"); err != nil {
			t.Fatal(err)
		}
		if err := recv(t, "MaxHold", h.causes); !errors.Is(err, tasklock.ErrMaxHold) {
			t.Fatalf("cause %v, want ErrMaxHold", err)
		}
		rs := c.waitRecords("hung", t0.Add(-time.Hour), 1)
		c.settle(true)
		if len(rs) != 1 || rs[0].Status != ledger.RunTimeout || !strings.Contains(rs[0].Error, "max hold") {
			t.Fatalf("records %+v: want one timeout, no retry after MaxHold", rs)
		}
	})
	t.Run("no lock", func(t *testing.T) {
		c := newCluster(t)
		h := newHung()
		job := Job{Name: "hung", Schedule: at3am, Overlap: OverlapAllow, Lock: tasklock.ObtainOptions{MaxHold: time.Minute}, Handler: h.handler}
		n := c.node("a", 0, nil).add(t, job).start(t)
		c.settle(true)
		if _, err := n.s.Trigger(context.Background(), "hung"); err != nil {
			t.Fatal(err)
		}
		recv(t, "the run", h.started)
		c.advance(59 * time.Second)
		c.settle(false)
		select {
		case err := <-h.causes:
			t.Fatalf("ended before MaxHold: %v", err)
		default:
		}
		c.advance(time.Second)
		if err := recv(t, "MaxHold", h.causes); !errors.Is(err, tasklock.ErrMaxHold) {
			t.Fatalf("cause %v, want ErrMaxHold", err)
		}
		rs := c.waitRecords("hung", t0.Add(-time.Hour), 1)
		if rs[0].Status != ledger.RunTimeout {
			t.Fatalf("record %+v", rs[0])
		}
	})
}

// A run whose lock is taken away is told, and recorded as lost.
func TestLostLockIsRecorded(t *testing.T) {
	c := newCluster(t)
	causes := make(chan error, 1)
	started := make(chan struct{})
	job := Job{Name: "victim", Schedule: at3am, Lock: tasklock.ObtainOptions{TTL: 300 * time.Millisecond}, Handler: func(ctx context.Context, run Run) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil // claims success: the lost lock must still show
	}}
	n := c.node("a", 0, &Config{KeyPrefix: "jobs/"}).add(t, job).start(t)
	c.settle(true)
	if _, err := n.s.Trigger(context.Background(), "victim"); err != nil {
		t.Fatal(err)
	}
	recv(t, "the run", started)
	if err := c.locks.ForceRelease(context.Background(), "jobs/victim"); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, "the loss", causes); !errors.Is(err, tasklock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", err)
	}
	rs := c.waitRecords("victim", t0.Add(-time.Hour), 1)
	if rs[0].Status != ledger.RunLost || !strings.Contains(rs[0].Error, "lock lost") {
		t.Fatalf("record %+v", rs[0])
	}
}

// Pause, resume and trigger-now, made through any node, are obeyed by every
// node within a second.
func TestPauseResumeTriggerAcrossNodes(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	jobs := []Job{
		{Name: "ticker", Schedule: "@every 1s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
		{Name: "nightly", Schedule: "0 0 3 * * *", Handler: rec.ok, MisfireWindow: 10 * time.Second},
	}
	nodes := []*node{
		c.node("a", -3*time.Second, nil).add(t, jobs...).start(t),
		c.node("b", 0, nil).add(t, jobs...).start(t),
		c.node("c", 3*time.Second, nil).add(t, jobs...).start(t),
	}
	c.settle(true)
	for range 5 {
		c.step(time.Second)
	}
	ctx := context.Background()

	// Pause through a.
	if err := nodes[0].s.Pause(ctx, "ticker"); err != nil {
		t.Fatal(err)
	}
	paused := c.clock.Now()
	for range 40 {
		c.step(250 * time.Millisecond)
	}
	for _, cl := range rec.snapshot() {
		if cl.Job == "ticker" && cl.at.After(paused.Add(time.Second)) {
			t.Errorf("%s ran tick %v at %v, more than 1s after the pause at %v", cl.Node, cl.Tick, cl.at, paused)
		}
	}

	// Resume through c.
	if err := nodes[2].s.Resume(ctx, "ticker"); err != nil {
		t.Fatal(err)
	}
	resumed := c.clock.Now()
	for range 4 {
		c.step(250 * time.Millisecond)
	}
	ranSince := func(job string, since time.Time) (n int) {
		for _, cl := range rec.snapshot() {
			if cl.Job == job && cl.at.After(since) {
				n++
			}
		}
		return n
	}
	if ranSince("ticker", resumed) == 0 {
		t.Fatal("no node ran the job within 1s of Resume")
	}
	for range 20 {
		c.step(250 * time.Millisecond)
	}
	// Every tick from 4 s after the resume runs (the slowest clock is 3 s
	// behind), and the paused ticks were neither run nor recorded.
	for tick := resumed.Add(4 * time.Second).Truncate(time.Second); tick.Before(c.clock.Now().Add(-3 * time.Second)); tick = tick.Add(time.Second) {
		if n := rec.times("ticker", tick, ""); n != 1 {
			t.Errorf("tick %v after the resume ran %d times", tick, n)
		}
	}
	// Node c, 3 s ahead, may have run ticks up to 3 s past the pause
	// before it, and up to a second after it.
	for _, r := range c.historyAfter("ticker", paused.Add(4*time.Second)) {
		if r.Tick.Before(resumed.Add(-3*time.Second)) || r.Status != ledger.RunOK {
			t.Errorf("record for a paused tick, or not ok: %+v", r)
		}
	}

	// Trigger through b, on a job whose next tick is hours away.
	id, err := nodes[1].s.Trigger(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	triggered := c.clock.Now()
	for range 4 {
		c.step(250 * time.Millisecond)
	}
	var runs []call
	for _, cl := range rec.snapshot() {
		if cl.Job == "nightly" && cl.Trigger == id {
			runs = append(runs, cl)
		}
	}
	if len(runs) != 1 || runs[0].at.After(triggered.Add(time.Second)) {
		t.Fatalf("triggered runs %+v, want one within 1s of %v", runs, triggered)
	}
	for range 8 {
		c.step(250 * time.Millisecond)
	}
	if n := rec.times("nightly", runs[0].Tick, id); n != 1 {
		t.Fatalf("the trigger ran %d times", n)
	}
	sts, err := c.ledger.JobStates(ctx)
	if err != nil || len(sts) != 0 {
		t.Fatalf("job states after: %+v, %v; want nothing pending", sts, err)
	}
	if _, err := nodes[1].s.Trigger(ctx, "nope"); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("Trigger(unknown) = %v", err)
	}
}

func TestGracefulShutdown(t *testing.T) {
	t.Run("lets the run finish", func(t *testing.T) {
		c := newCluster(t)
		g := newGate()
		job := Job{Name: "work", Schedule: "@every 10s", Handler: g.handler, MisfireWindow: 10 * time.Second}
		n := c.node("a", 0, &Config{ShutdownGrace: time.Hour}).add(t, job).start(t)
		g.wait(t)
		done := make(chan error, 1)
		go func() { done <- n.s.Shutdown(context.Background()) }()
		waitFor(t, "the loop to stop claiming", func() bool {
			n.s.mu.Lock()
			defer n.s.mu.Unlock()
			return n.s.loopStopped
		})
		for range 3 {
			c.advance(10 * time.Second) // ticks come, and are not claimed
		}
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned %v while a run was in progress", err)
		case r := <-g.started:
			t.Fatalf("a tick was run during shutdown: %+v", r)
		default:
		}
		close(g.release)
		if err := recv(t, "Shutdown", done); err != nil {
			t.Fatal(err)
		}
		rs := c.history("work")
		if len(rs) != 1 || rs[0].Status != ledger.RunOK || !rs[0].Tick.Equal(t0) {
			t.Fatalf("history %+v, want the one run", rs)
		}
		// The lock was released, and nothing more happens.
		other, _ := tasklock.New(c.locks, nil)
		defer other.Close()
		l, err := other.TryObtain(context.Background(), DefaultKeyPrefix+"work", nil)
		if err != nil {
			t.Fatalf("job lock still held after Shutdown: %v", err)
		}
		_ = l.Release(context.Background())
		if err := n.s.Add(Job{Name: "x", Schedule: "@daily", Handler: noop}); !errors.Is(err, ErrShutdown) {
			t.Fatalf("Add after Shutdown = %v", err)
		}
		if err := n.s.Start(context.Background()); !errors.Is(err, ErrShutdown) {
			t.Fatalf("Start after Shutdown = %v", err)
		}
		// A shut-down Scheduler runs nothing more: a trigger (or pause)
		// through it is refused, not an ID for a run that may never come.
		if id, err := n.s.Trigger(context.Background(), "work"); !errors.Is(err, ErrShutdown) {
			t.Fatalf("Trigger after Shutdown = %q, %v", id, err)
		}
		if err := n.s.Pause(context.Background(), "work"); !errors.Is(err, ErrShutdown) {
			t.Fatalf("Pause after Shutdown = %v", err)
		}
		if err := n.s.Resume(context.Background(), "work"); !errors.Is(err, ErrShutdown) {
			t.Fatalf("Resume after Shutdown = %v", err)
		}
	})
	t.Run("cancels after the grace period", func(t *testing.T) {
		c := newCluster(t)
		g := newGate()
		job := Job{Name: "work", Schedule: "@every 10s", Handler: g.handler, MisfireWindow: 10 * time.Second}
		n := c.node("a", 0, &Config{ShutdownGrace: time.Minute}).add(t, job).start(t)
		g.wait(t)
		done := make(chan error, 1)
		go func() { done <- n.s.Shutdown(context.Background()) }()
		waitFor(t, "the grace timer", func() bool { return c.clock.armed() == 2 })
		c.advance(59 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned %v before the grace period ended", err)
		default:
		}
		c.advance(time.Second)
		if err := recv(t, "Shutdown", done); err != nil {
			t.Fatal(err)
		}
		rs := c.history("work")
		if len(rs) != 1 || rs[0].Status != ledger.RunInterrupted || !strings.Contains(rs[0].Error, ErrShutdown.Error()) {
			t.Fatalf("history %+v, want the run interrupted by shutdown", rs)
		}
	})
	t.Run("returns when ctx ends", func(t *testing.T) {
		c := newCluster(t)
		g := newGate()
		job := Job{Name: "work", Schedule: "@every 10s", Handler: g.handler, MisfireWindow: 10 * time.Second}
		n := c.node("a", 0, nil).add(t, job).start(t)
		g.wait(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := n.s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown = %v, want context.Canceled", err)
		}
		c.waitRecords("work", t0.Add(-time.Hour), 1) // the run was cancelled and recorded
		c.settle(true)
	})
	t.Run("before start", func(t *testing.T) {
		c := newCluster(t)
		n := c.node("a", 0, nil)
		if err := n.s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// Every outcome is recorded with its details, and queries select by job,
// time range and status.
func TestHistoryRecorded(t *testing.T) {
	c := newCluster(t)
	var n atomic.Int32
	job := Job{Name: "report", Schedule: "@every 1m", MisfireWindow: 10 * time.Second, Handler: func(ctx context.Context, run Run) error {
		for i := range 20 {
			fmt.Fprintf(run.Output, "line %d of tick %s\n", i, run.Tick.Format("15:04"))
		}
		if n.Add(1)%2 == 0 {
			return errors.New("disk full")
		}
		return nil
	}}
	other := Job{Name: "other", Schedule: "@every 1m", Handler: noop, MisfireWindow: 10 * time.Second}
	c.node("a", 0, &Config{OutputMax: 64}).add(t, job, other).start(t)
	c.settle(true)
	for range 4 {
		c.step(time.Minute)
	}
	all := c.history("report")
	if len(all) != 5 {
		t.Fatalf("%d records, want 5", len(all))
	}
	for i, r := range all { // newest first: t0+4m ... t0
		tick := t0.Add(time.Duration(4-i) * time.Minute)
		wantStatus := ledger.RunOK
		if i%2 == 1 {
			wantStatus = ledger.RunFailed
		}
		if !r.Tick.Equal(tick) || r.Status != wantStatus || r.Node != "a" || r.Attempt != 1 || r.Fence == 0 ||
			!r.Start.Equal(tick) || !r.End.Equal(tick) || r.Recorded.IsZero() {
			t.Errorf("record %d: %+v", i, r)
		}
		if head, tail, ok := strings.Cut(r.Output, "\n"+CutMarker(10*21+10*22-64)+"\n"); !ok ||
			head != "line 0 of tick "+tick.Format("15:04")+"\nline 1 of t" || !strings.HasSuffix(tail, fmt.Sprintf("line 19 of tick %s\n", tick.Format("15:04"))) || len(tail) != 32 {
			t.Errorf("record %d output %q, want its first 32 bytes, a cut marker and its last 32", i, r.Output)
		}
		if (wantStatus == ledger.RunFailed) != (r.Error == "disk full") {
			t.Errorf("record %d error %q", i, r.Error)
		}
	}
	ctx := context.Background()
	s := c.nodes[0].s
	rs, err := s.Runs(ctx, ledger.RunQuery{Job: "report", From: t0.Add(time.Minute), To: t0.Add(3 * time.Minute)})
	if err != nil || len(rs) != 2 || !rs[0].Tick.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("range query: %+v, %v", rs, err)
	}
	rs, err = s.Runs(ctx, ledger.RunQuery{Job: "report", Status: ledger.RunFailed})
	if err != nil || len(rs) != 2 {
		t.Fatalf("status query: %+v, %v", rs, err)
	}
	rs, err = s.Runs(ctx, ledger.RunQuery{From: t0.Add(4 * time.Minute)})
	if err != nil || len(rs) != 2 || rs[0].Job != "other" || rs[1].Job != "report" {
		t.Fatalf("all jobs: %+v, %v", rs, err)
	}
	if _, err := s.Runs(ctx, ledger.RunQuery{Limit: -1}); err == nil {
		t.Fatal("negative Limit accepted")
	}
}

func TestHistoryRetention(t *testing.T) {
	c := newCluster(t)
	job := Job{Name: "frequent", Schedule: "@every 1m", Handler: noop, MisfireWindow: 10 * time.Second}
	c.node("a", 0, &Config{HistoryKeep: 3, HistoryMaxAge: time.Hour, PruneInterval: 10 * time.Minute}).add(t, job).start(t)
	c.settle(true)
	for range 9 {
		c.step(time.Minute)
	}
	if n := len(c.history("frequent")); n != 10 {
		t.Fatalf("%d records before pruning, want 10", n)
	}
	c.step(time.Minute) // the prune at t0+10m keeps 3, then tick t0+10m runs
	rs := c.history("frequent")
	if len(rs) != 4 || !rs[0].Tick.Equal(t0.Add(10*time.Minute)) || !rs[3].Tick.Equal(t0.Add(7*time.Minute)) {
		t.Fatalf("after pruning by count: %v", ticks(rs))
	}

	// By age: a job that stopped running loses its records after an hour.
	c2 := newCluster(t)
	c2.node("a", 0, &Config{HistoryMaxAge: time.Hour, PruneInterval: 10 * time.Minute}).
		add(t, Job{Name: "once", Schedule: "0 0 0 * * *", Handler: noop, MisfireWindow: 10 * time.Second}).start(t)
	c2.settle(true)
	if len(c2.history("once")) != 1 {
		t.Fatal("the midnight run was not recorded")
	}
	for range 6 {
		c2.step(10 * time.Minute)
	}
	if n := len(c2.history("once")); n != 1 {
		t.Fatalf("pruned at %v, before an hour passed", c2.clock.Now())
	}
	c2.step(10 * time.Minute)
	if n := len(c2.history("once")); n != 0 {
		t.Fatalf("%d records older than HistoryMaxAge kept", n)
	}
}

func ticks(rs []ledger.RunRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Tick.Format("15:04:05") + " " + string(r.Status)
	}
	return out
}

// An idle job costs no goroutine: only the timing loop runs.
func TestNoGoroutinePerIdleJob(t *testing.T) {
	c := newCluster(t)
	n := c.node("a", 0, nil)
	for i := range 500 {
		n.add(t, Job{Name: fmt.Sprintf("job-%d", i), Schedule: "0 0 3 * * *", Handler: noop, MisfireWindow: 10 * time.Second})
	}
	before := runtime.NumGoroutine()
	n.start(t)
	c.settle(true)
	if d := runtime.NumGoroutine() - before; d > 1 {
		t.Fatalf("%d goroutines for 500 idle jobs, want 1", d)
	}
}

func TestAddValidates(t *testing.T) {
	c := newCluster(t)
	s := c.node("a", 0, nil).s
	ok := Job{Name: "j", Schedule: "@daily", Handler: noop}
	cases := []struct {
		mod   func(j *Job)
		field string
		text  string
	}{
		{func(j *Job) { j.Name = "" }, "Job.Name", "empty"},
		{func(j *Job) { j.Name = "a\nb" }, "Job.Name", "control character"},
		{func(j *Job) { j.Name = "a\u009bb" }, "Job.Name", "control character U+009B"},
		{func(j *Job) { j.Name = strings.Repeat("x", MaxJobName+1) }, "Job.Name", "maximum"},
		{func(j *Job) { j.Handler = nil }, "Job.Handler", "nil"},
		{func(j *Job) { j.Schedule = "61 * * * *" }, "Job.Schedule", `invalid minute field "61"`},
		{func(j *Job) { j.Schedule = "" }, "Job.Schedule", "empty"},
		{func(j *Job) { j.TimeZone = "Nowhere/City" }, "Job.TimeZone", "Nowhere/City"},
		{func(j *Job) { j.TimeZone, j.Schedule = "UTC", "CRON_TZ=UTC @daily" }, "Job.TimeZone", "CRON_TZ"},
		{func(j *Job) { j.Overlap = 7 }, "Job.Overlap", "unknown"},
		{func(j *Job) { j.Misfire = 7 }, "Job.Misfire", "unknown"},
		{func(j *Job) { j.MisfireWindow = time.Second }, "Job.MisfireWindow", "less than MisfireAfter"},
		{func(j *Job) { j.MisfireWindow = 13 * time.Hour }, "Job.MisfireWindow", "ClaimRetention"},
		{func(j *Job) { j.CatchUpMax = MaxBacklog + 1 }, "Job.CatchUpMax", "not within"},
		{func(j *Job) { j.Timeout = -1 }, "Job.Timeout", "negative"},
		{func(j *Job) { j.Retries = -1 }, "Job.Retries", "not within"},
		{func(j *Job) { j.RetryBackoff, j.RetryBackoffMax = time.Minute, time.Second }, "Job.RetryBackoffMax", "less than"},
		{func(j *Job) { j.Jitter = -1 }, "Job.Jitter", "negative"},
		{func(j *Job) { j.Jitter = 2 * time.Hour }, "Job.Jitter", "more than MisfireWindow 1h0m0s"},
		{func(j *Job) { j.Jitter, j.MisfireWindow = 11*time.Minute, 10*time.Minute }, "Job.Jitter", "more than MisfireWindow 10m0s"},
		{func(j *Job) { j.Schedule, j.Jitter = "@every 10s", 10*time.Second }, "Job.Jitter", `not less than the 10s between two ticks of "@every 10s"`},
		{func(j *Job) { j.Schedule, j.Jitter = "0,1 3 * * *", 2*time.Minute }, "Job.Jitter", `not less than the 1m0s between two ticks of "0,1 3 * * *"`},
		{func(j *Job) { j.Lock.TTL = time.Millisecond }, "Job.Lock.TTL", "minimum"},
		{func(j *Job) { j.Lock.TTL = tasklock.MaxTTL + 1 }, "Job.Lock.TTL", "maximum"},
		{func(j *Job) { j.Lock.MinHold = time.Second; j.Overlap = OverlapAllow }, "Job.Lock.MinHold", "Overlap is allow"},
		{func(j *Job) { j.Lock.MinHold, j.Lock.MaxHold = time.Minute, time.Second }, "Job.Lock.MinHold", "greater than MaxHold"},
		{func(j *Job) { j.Lock.MaxHold = -1 }, "Job.Lock.MaxHold", "negative"},
		{func(j *Job) { j.Lock.Grace = -1 }, "Job.Lock.Grace", "negative"},
		{func(j *Job) { j.Lock.TTL, j.Lock.Grace = 2*time.Second, time.Second }, "Job.Lock.Grace", "half the TTL"},
		{func(j *Job) { j.Lock.MaxHold, j.Lock.Grace = time.Second, time.Second }, "Job.Lock.Grace", "less than MaxHold"},
		{func(j *Job) { j.Lock.Owner = "me" }, "Job.Lock.Owner", "set by the scheduler"},
		{func(j *Job) { j.Lock.Wait = time.Second }, "Job.Lock.Wait", "set by the scheduler"},
		{func(j *Job) { j.Lock.NoRenew = true }, "Job.Lock.NoRenew", "set by the scheduler"},
		{func(j *Job) { j.Lock.ProgressTimeout = time.Second }, "Job.Lock.ProgressTimeout", "Heartbeat"},
		{func(j *Job) { j.Lock.Fair = true }, "Job.Lock.Fair", "set by the scheduler"},
		{func(j *Job) { j.Lock.Fair, j.MaxConcurrent = true, 2 }, "Job.Lock.Fair", "set by the scheduler"},
	}
	for _, tc := range cases {
		j := ok
		tc.mod(&j)
		err := s.Add(j)
		prefix := fmt.Sprintf("schedule: job %q: invalid %s", j.Name, tc.field)
		if j.Name == "" {
			prefix = "schedule: invalid " + tc.field // no job to name
		}
		var oe *tasklock.OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || oe.Job != j.Name || !strings.Contains(err.Error(), tc.text) ||
			!strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("Add(%s) = %v, want a *tasklock.OptionError for %s mentioning %q", tc.field, err, tc.field, tc.text)
		}
	}
	var pe *ParseError
	if err := s.Add(Job{Name: "p", Schedule: "@every 0.5s", Handler: noop}); !errors.As(err, &pe) || pe.Field != "@every" {
		t.Errorf("Add with a bad @every = %v, want the *ParseError inside", err)
	}
	if err := s.Add(ok); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ok); err == nil || !strings.Contains(err.Error(), "added before") {
		t.Fatalf("duplicate Add = %v", err)
	}
	if err := s.Pause(context.Background(), "nope"); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("Pause(unknown) = %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	lk, err := tasklock.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	store := memstore.New(nil)
	for _, tc := range []struct {
		cfg   *Config
		field string
	}{
		{&Config{PollInterval: time.Millisecond}, "Config.PollInterval"},
		{&Config{ShutdownGrace: -1}, "Config.ShutdownGrace"},
		{&Config{ClaimRetention: time.Minute}, "Config.ClaimRetention"},
		{&Config{PruneInterval: time.Millisecond}, "Config.PruneInterval"},
		{&Config{Node: strings.Repeat("n", 300)}, "Config.Node"},
		{&Config{Node: "web-1\x00"}, "Config.Node"},
		{&Config{Node: "web-1\nforged"}, "Config.Node"},
		{&Config{Node: "web-\xff"}, "Config.Node"},
		{&Config{ClaimAhead: -time.Millisecond}, "Config.ClaimAhead"},
		{&Config{ClaimAhead: 2 * time.Second}, "Config.ClaimAhead"},
		{&Config{ClaimAhead: time.Millisecond, PreferredNodes: true}, "Config.ClaimAhead"},
	} {
		_, err := New(lk, store, tc.cfg)
		var oe *tasklock.OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || !strings.HasPrefix(err.Error(), "schedule: invalid "+tc.field+": ") {
			t.Errorf("New(%+v) = %v, want a *tasklock.OptionError for %s", tc.cfg, err, tc.field)
		}
	}
	var oe *tasklock.OptionError
	if _, err := New(nil, store, nil); !errors.As(err, &oe) || oe.Field != "locker" {
		t.Errorf("New(nil locker) = %v, want a *tasklock.OptionError for locker", err)
	}
	if _, err := New(lk, nil, nil); !errors.As(err, &oe) || oe.Field != "ledger" {
		t.Errorf("New(nil ledger) = %v, want a *tasklock.OptionError for ledger", err)
	}
	s, err := New(lk, store, nil)
	if err != nil || s.Node() != lk.Owner() {
		t.Fatalf("New with defaults: node %q, %v", s.Node(), err)
	}
}

func TestPanicIsRecordedAsFailure(t *testing.T) {
	c := newCluster(t)
	job := Job{Name: "boom", Schedule: at3am, Handler: func(context.Context, Run) error { panic("nil map") }}
	n := c.node("a", 0, &Config{Logger: discardLogger()}).add(t, job).start(t)
	c.settle(true)
	if _, err := n.s.Trigger(context.Background(), "boom"); err != nil {
		t.Fatal(err)
	}
	c.step(500 * time.Millisecond)
	rs := c.history("boom")
	if len(rs) != 1 || rs[0].Status != ledger.RunFailed || !strings.Contains(rs[0].Error, "panicked: nil map") {
		t.Fatalf("history %+v", rs)
	}
}

// When the ledger cannot be reached, ticks are claimed late rather than
// lost, with the same token so that claims the failed call made count.
func TestClaimRetriesAfterLedgerErrors(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	flaky := &flakyLedger{Ledger: c.ledger}
	lk, err := tasklock.New(c.locks, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	s, err := New(lk, flaky, &Config{Node: "a", Clock: &skewClock{c.clock, 0}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, &node{name: "a", clock: &skewClock{c.clock, 0}, lk: lk, s: s})
	if err := s.Add(Job{Name: "j", Schedule: "@every 1s", Handler: rec.ok, MisfireWindow: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.settle(true)
	flaky.failClaims.Store(true)
	c.step(time.Second)
	c.step(time.Second)
	if n := rec.times("j", t0.Add(time.Second), ""); n != 0 {
		t.Fatalf("a tick ran while claims failed")
	}
	flaky.failClaims.Store(false)
	c.step(time.Second) // the retry backoff has passed
	for _, sec := range []int{1, 2, 3} {
		if n := rec.times("j", t0.Add(time.Duration(sec)*time.Second), ""); n != 1 {
			t.Errorf("tick +%ds ran %d times after the ledger came back", sec, n)
		}
	}
}

// A store that stays down is logged once, then once a minute while it
// stays down, and once more when it answers again: not at every poll.
func TestStoreDownLoggedOnceAMinute(t *testing.T) {
	c := newCluster(t)
	flaky := &flakyLedger{Ledger: c.ledger}
	lk, err := tasklock.New(c.locks, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	var buf syncBuffer
	clock := &skewClock{c.clock, 0}
	s, err := New(lk, flaky, &Config{Node: "a", Clock: clock, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, &node{name: "a", clock: clock, lk: lk, s: s})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.settle(true)
	flaky.failStates.Store(true)
	const down = 150 * time.Second
	for end := c.clock.Now().Add(down); c.clock.Now().Before(end); {
		c.step(DefaultPollInterval)
	}
	failed := `msg="schedule: reading job states" node=a err="store down"`
	if n := strings.Count(buf.String(), failed); n != 3 {
		t.Fatalf("%d lines for a store down %v, want 3 (at once, then once a minute):\n%s", n, down, buf.String())
	}
	if !strings.Contains(buf.String(), fmt.Sprintf("not_logged=%d", time.Minute/DefaultPollInterval-1)) {
		t.Errorf("the repeated lines do not say how many failures they stand for:\n%s", buf.String())
	}
	flaky.failStates.Store(false)
	c.step(DefaultPollInterval)
	if !strings.Contains(buf.String(), fmt.Sprintf(`msg="schedule: reading job states again" node=a failures=%d`, down/DefaultPollInterval)) {
		t.Errorf("no line says the store answers again:\n%s", buf.String())
	}
}

// flakyLedger fails Claim calls on demand, after making the claims, as a
// store whose answer was lost would, and JobStates calls.
type flakyLedger struct {
	ledger.Ledger
	failClaims, failStates atomic.Bool
}

func (f *flakyLedger) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	if f.failStates.Load() {
		return nil, errors.New("store down")
	}
	return f.Ledger.JobStates(ctx)
}

func (f *flakyLedger) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	res, err := f.Ledger.Claim(ctx, ps)
	if f.failClaims.Load() {
		return nil, errors.New("connection reset")
	}
	return res, err
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// gatedLedger holds its first RecordRuns call until gate closes, and
// counts the calls and the records they carried.
type gatedLedger struct {
	ledger.Ledger
	gate    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	calls   []int
}

func (g *gatedLedger) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	g.mu.Lock()
	first := len(g.calls) == 0
	g.calls = append(g.calls, len(rs))
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.gate
	}
	return g.Ledger.RecordRuns(ctx, rs)
}

// newGatedScheduler returns a Scheduler on a memstore whose ledger is
// gated (gatedLedger); it is not started.
func newGatedScheduler(t *testing.T) (*memstore.Store, *gatedLedger, *Scheduler) {
	t.Helper()
	store := memstore.New(nil)
	g := &gatedLedger{Ledger: store, gate: make(chan struct{}), entered: make(chan struct{})}
	lk, err := tasklock.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	s, err := New(lk, g, &Config{Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	return store, g, s
}

// TestHistoryWritesShareARoundTrip records from 20 goroutines while the
// first write is under way: the other 19 records go out in one more call,
// and every record is stored.
func TestHistoryWritesShareARoundTrip(t *testing.T) {
	store, g, s := newGatedScheduler(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(i int) ledger.RunRecord {
		return ledger.RunRecord{Job: fmt.Sprint("job", i), Tick: tick, Attempt: 1, Node: "n", Status: ledger.RunOK, Start: tick, End: tick}
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.record(rec(0)) })
	<-g.entered
	for i := 1; i < 20; i++ {
		wg.Go(func() { s.record(rec(i)) })
	}
	waitFor(t, "19 records queued behind the first write", func() bool {
		s.hist.mu.Lock()
		defer s.hist.mu.Unlock()
		return len(s.hist.pending) == 19
	})
	close(g.gate)
	wg.Wait()
	g.mu.Lock()
	calls := slices.Clone(g.calls)
	g.mu.Unlock()
	if len(calls) != 2 || calls[0] != 1 || calls[1] != 19 {
		t.Fatalf("RecordRuns calls carried %v records, want [1 19]", calls)
	}
	runs, err := store.Runs(context.Background(), ledger.RunQuery{})
	if err != nil || len(runs) != 20 {
		t.Fatalf("%d runs stored (%v), want 20", len(runs), err)
	}
}

// Config.Redact rewrites the output tail and the error of every record
// before the ledger sees them.
func TestRedactOutputAndError(t *testing.T) {
	c := newCluster(t)
	job := Job{
		Name: "leaky", Schedule: at3am,
		Handler: func(ctx context.Context, run Run) error {
			fmt.Fprintln(run.Output, "password=s3cret-pw")
			return errors.New("login with s3cret-pw refused")
		},
	}
	var calls atomic.Int32
	redact := func(s string) string {
		calls.Add(1)
		return strings.ReplaceAll(s, "s3cret-pw", "xxxxx")
	}
	n := c.node("a", 0, &Config{Redact: redact}).add(t, job).start(t)
	c.settle(true)
	if _, err := n.s.Trigger(context.Background(), "leaky"); err != nil {
		t.Fatal(err)
	}
	rs := c.waitRecords("leaky", t0.Add(-time.Hour), 1)
	c.settle(true)
	if rs[0].Output != "password=xxxxx\n" || rs[0].Error != "login with xxxxx refused" {
		t.Fatalf("recorded output %q, error %q; want the secret redacted", rs[0].Output, rs[0].Error)
	}
	if calls.Load() != 2 {
		t.Errorf("Redact called %d times, want 2 (output and error)", calls.Load())
	}
}

// A running record queued behind a write under way is replaced by its
// run's outcome when that comes before the next write: the ledger gets one
// record, never "running" after the outcome. One queued alone (its run
// still going) is written by the writer that finds it, though no goroutine
// waits for it.
func TestHistoryRunningRecordReplaced(t *testing.T) {
	store, g, s := newGatedScheduler(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := func(job string, st ledger.RunStatus) ledger.RunRecord {
		return ledger.RunRecord{Job: job, Tick: tick, Attempt: 1, Node: "n", Status: st, Start: tick, End: tick}
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.record(rec("first", ledger.RunOK)) })
	<-g.entered
	s.recordStart(rec("short", ledger.RunRunning)) // returns at once: a write is under way
	s.recordStart(rec("long", ledger.RunRunning))
	wg.Go(func() { s.record(rec("short", ledger.RunOK)) })
	waitFor(t, "the outcome queued", func() bool {
		s.hist.mu.Lock()
		defer s.hist.mu.Unlock()
		return len(s.hist.pending) == 3
	})
	close(g.gate)
	wg.Wait()
	g.mu.Lock()
	calls := slices.Clone(g.calls)
	g.mu.Unlock()
	if len(calls) != 2 || calls[0] != 1 || calls[1] != 2 {
		t.Fatalf("RecordRuns calls carried %v records, want [1 2]: the short run's running record written", calls)
	}
	got := map[string]ledger.RunStatus{}
	runs, err := store.Runs(context.Background(), ledger.RunQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		got[r.Job] = r.Status
	}
	want := map[string]ledger.RunStatus{"first": ledger.RunOK, "short": ledger.RunOK, "long": ledger.RunRunning}
	if !maps.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}

	// Only a queued running record left behind a write: the writer writes
	// it before it returns.
	g2 := &gatedLedger{Ledger: store, gate: make(chan struct{}), entered: make(chan struct{})}
	s.ledger = g2
	wg.Go(func() { s.record(rec("first2", ledger.RunOK)) })
	<-g2.entered
	s.recordStart(rec("alone", ledger.RunRunning))
	close(g2.gate)
	wg.Wait()
	if rs, _ := store.Runs(context.Background(), ledger.RunQuery{Job: "alone"}); len(rs) != 1 || rs[0].Status != ledger.RunRunning {
		t.Fatalf("the queued running record: %+v", rs)
	}
	s.hist.mu.Lock()
	defer s.hist.mu.Unlock()
	if s.hist.busy || len(s.hist.pending) != 0 {
		t.Fatalf("history busy %v with %d pending after every write", s.hist.busy, len(s.hist.pending))
	}
}

package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// valve is a handler whose runs each wait for their own release, and
// that counts the runs in progress at once across every node.
type valve struct {
	mu      sync.Mutex
	running int
	peak    int
	started chan Run
	open    map[string]chan struct{} // by runKey
}

func newValve() *valve {
	return &valve{started: make(chan Run, 100), open: make(map[string]chan struct{})}
}

func (v *valve) gate(run Run) chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := runKey(run.Job, run.Tick, run.Trigger)
	ch := v.open[k]
	if ch == nil {
		ch = make(chan struct{})
		v.open[k] = ch
	}
	return ch
}

func (v *valve) handler(ctx context.Context, run Run) error {
	ch := v.gate(run)
	v.mu.Lock()
	v.running++
	v.peak = max(v.peak, v.running)
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		v.running--
		v.mu.Unlock()
	}()
	v.started <- run
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// release lets run end.
func (v *valve) release(run Run) { close(v.gate(run)) }

func (v *valve) wait(t *testing.T) Run {
	t.Helper()
	select {
	case r := <-v.started:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no run started")
		return Run{}
	}
}

func (v *valve) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-v.started:
		t.Fatalf("run %s@%v started on %s, want none", r.Job, r.Tick, r.Node)
	default:
	}
}

func (v *valve) peakRuns() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.peak
}

// MaxConcurrent 2 on three nodes: a job whose runs outlast its period runs
// two at a time across the fleet, and the ticks that find both permits
// held are skipped, naming the limit.
func TestMaxConcurrent(t *testing.T) {
	c := newCluster(t)
	v := newValve()
	job := Job{Name: "slow", Schedule: "@every 10s", Handler: v.handler, MaxConcurrent: 2, MisfireWindow: 10 * time.Second}
	for i := range 3 {
		c.node(fmt.Sprintf("n%d", i), 0, nil).add(t, job).start(t)
	}
	first := v.wait(t) // t0
	c.advance(10 * time.Second)
	second := v.wait(t)
	if first.Fence == 0 || second.Fence == 0 || first.Fence == second.Fence {
		t.Fatalf("fences %d and %d: want the permits' own, distinct", first.Fence, second.Fence)
	}
	for range 4 { // four more ticks while both run: skipped
		c.advance(10 * time.Second)
		c.settle(false)
	}
	rs := c.waitRecords("slow", t0.Add(10*time.Second), 4)
	for _, r := range rs {
		if r.Status != ledger.RunSkipped || !strings.Contains(r.Error, "2 runs of the job are in progress already") {
			t.Fatalf("tick while two ran: %+v, want skipped saying two are in progress", r)
		}
	}
	v.none(t)
	v.release(first)
	waitFor(t, "the first run's record", func() bool {
		rs := c.historyAfter("slow", t0.Add(-time.Second))
		return len(rs) > 0 && rs[0].Status == ledger.RunOK
	})
	c.advance(10 * time.Second)
	third := v.wait(t)
	if want := t0.Add(60 * time.Second); !third.Tick.Equal(want) {
		t.Fatalf("third run's tick %v, want %v", third.Tick, want)
	}
	v.release(second)
	v.release(third)
	c.settle(true)
	if p := v.peakRuns(); p != 2 {
		t.Fatalf("%d runs at once, want 2", p)
	}
	var ok int
	for _, r := range c.history("slow") {
		if r.Status == ledger.RunOK {
			ok++
		}
	}
	if ok != 3 {
		t.Fatalf("%d runs ok, want 3: %+v", ok, c.history("slow"))
	}
}

// A pool of 1 shared by two jobs on two nodes: their runs never overlap;
// a run that finds the permit held waits for it, and when PoolWait passes
// first its tick is skipped with a reason naming the pool.
func TestPoolSharedByTwoJobs(t *testing.T) {
	c := newCluster(t)
	v := newValve()
	cfg := &Config{Pools: map[string]int{"reports": 1}}
	jobs := []Job{
		{Name: "sales", Schedule: "@every 10s", Handler: v.handler, Pool: "reports", PoolWait: 5 * time.Second, MisfireWindow: 10 * time.Second},
		{Name: "stock", Schedule: "@every 10s", Handler: v.handler, Pool: "reports", PoolWait: 5 * time.Second, MisfireWindow: 10 * time.Second},
	}
	nodes := []*node{c.node("a", 0, cfg).add(t, jobs...), c.node("b", 0, cfg).add(t, jobs...)}
	for _, n := range nodes {
		n.start(t)
	}
	waiting := func() {
		t.Helper()
		waitFor(t, "a run to wait for the pool", func() bool {
			for _, n := range nodes {
				n.s.mu.Lock()
				d := len(n.s.deadlines)
				n.s.mu.Unlock()
				if d > 0 {
					return true
				}
			}
			return false
		})
	}

	// t0: both due; one runs, the other waits, and runs once it ends.
	first := v.wait(t)
	waiting()
	v.none(t)
	v.release(first)
	second := v.wait(t)
	if second.Job == first.Job || !second.Tick.Equal(t0) {
		t.Fatalf("after %s@%v: %s@%v, want the other job's tick t0", first.Job, first.Tick, second.Job, second.Tick)
	}
	v.release(second)
	c.settle(true)

	// t0+10s: one runs past the other's PoolWait: the other is skipped.
	c.advance(10 * time.Second)
	third := v.wait(t)
	waiting()
	c.advance(5 * time.Second)
	other := "sales"
	if third.Job == "sales" {
		other = "stock"
	}
	rs := c.waitRecords(other, t0, 1)
	if r := rs[0]; r.Status != ledger.RunSkipped || !strings.Contains(r.Error, `pool "reports"`) || !strings.Contains(r.Error, "no permit free within 5s") {
		t.Fatalf("%s's tick after the wait: %+v, want skipped naming the pool", other, r)
	}
	v.none(t)
	v.release(third)
	c.settle(true)
	if p := v.peakRuns(); p != 1 {
		t.Fatalf("%d runs of the pool at once, want 1", p)
	}
}

// A pool's wait defaults to the job's next tick: a run waits across
// seconds of the clock, and is skipped when its job's next tick comes.
func TestPoolWaitDefaultsToNextTick(t *testing.T) {
	c := newCluster(t)
	v := newValve()
	cfg := &Config{Pools: map[string]int{"one": 1}}
	hog := Job{Name: "hog", Schedule: "@every 1h", Handler: v.handler, Pool: "one", MisfireWindow: 10 * time.Second}
	short := Job{Name: "short", Schedule: "5/10 * * * * *", Handler: v.handler, Pool: "one", Overlap: OverlapAllow, MisfireWindow: 10 * time.Second}
	n := c.node("a", 0, cfg).add(t, hog, short).start(t)
	h := v.wait(t)
	if h.Job != "hog" {
		t.Fatalf("first run %s", h.Job)
	}
	waiting := func(k int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d runs to wait for the pool", k), func() bool {
			n.s.mu.Lock()
			defer n.s.mu.Unlock()
			return len(n.s.deadlines) >= k
		})
	}
	c.advance(5 * time.Second) // t0+5s: short's tick waits
	waiting(1)
	c.advance(9 * time.Second)
	c.settle(false)
	v.none(t)
	if rs := c.finalAfter("short", t0); len(rs) != 0 {
		t.Fatalf("short recorded %+v while waiting 9s of its 10s", rs)
	}
	c.advance(time.Second) // t0+15s: its next tick; that one waits in turn
	rs := c.waitRecords("short", t0, 1)
	if rs[0].Status != ledger.RunSkipped || !rs[0].Tick.Equal(t0.Add(5*time.Second)) || !strings.Contains(rs[0].Error, "within 10s") {
		t.Fatalf("short's first tick: %+v, want skipped after waiting 10s", rs[0])
	}
	waiting(1)
	v.release(h)
	r := v.wait(t) // the t0+15s run gets the permit once hog ends
	if r.Job != "short" || !r.Tick.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("after hog: %s@%v", r.Job, r.Tick)
	}
	v.release(r)
	c.settle(true)
}

// Node labels: a job runs only on the nodes that carry every label it
// names, its scheduled ticks and its trigger-now requests alike.
func TestNodeLabels(t *testing.T) {
	c := newCluster(t)
	rec := newRecorder(c.clock)
	jobs := []Job{
		{Name: "train", Schedule: "@every 1s", Handler: rec.ok, Nodes: []string{"gpu", "zone=eu"}, MisfireWindow: 10 * time.Second},
		{Name: "render", Schedule: "@every 1s", Handler: rec.ok, Nodes: []string{"gpu"}, MisfireWindow: 10 * time.Second},
		{Name: "any", Schedule: "@every 1s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
	}
	labels := map[string][]string{"a": {"gpu", "zone=eu"}, "b": {"gpu"}, "c": {"zone=eu"}, "d": nil}
	for _, name := range []string{"a", "b", "c", "d"} {
		c.node(name, 0, &Config{Labels: labels[name]}).add(t, jobs...).start(t)
	}
	c.settle(true)
	for range 20 {
		c.step(time.Second)
	}
	if _, err := c.nodes[3].s.Trigger(context.Background(), "train"); err != nil { // asked on d, run on a
		t.Fatal(err)
	}
	waitFor(t, "the trigger-now run", func() bool {
		for _, cl := range rec.snapshot() {
			if cl.Trigger != "" {
				return true
			}
		}
		c.step(100 * time.Millisecond)
		return false
	})
	c.settle(true)
	allowed := map[string]map[string]bool{
		"train":  {"a": true},
		"render": {"a": true, "b": true},
		"any":    {"a": true, "b": true, "c": true, "d": true},
	}
	ran := map[string]map[string]int{}
	for _, cl := range rec.snapshot() {
		if !allowed[cl.Job][cl.Node] {
			t.Errorf("%s (tick %v, trigger %q) ran on %s, whose labels are %v", cl.Job, cl.Tick, cl.Trigger, cl.Node, labels[cl.Node])
		}
		if ran[cl.Job] == nil {
			ran[cl.Job] = map[string]int{}
		}
		ran[cl.Job][cl.Node]++
	}
	if d := rec.duplicates(); len(d) > 0 {
		t.Fatalf("ran twice: %v", d)
	}
	for _, j := range []string{"train", "render", "any"} {
		n := 0
		for _, k := range ran[j] {
			n += k
		}
		if n < 21 {
			t.Errorf("%s ran %d times (%v), want every one of its 21 ticks", j, n, ran[j])
		}
	}
	if len(ran["any"]) < 2 {
		t.Logf("any ran on %v only", ran["any"]) // spread is not promised; the labels are
	}
}

func TestLimitsValidate(t *testing.T) {
	c := newCluster(t)
	s := c.node("a", 0, &Config{Pools: map[string]int{"reports": 2, "etl": 1}}).s
	ok := Job{Name: "j", Schedule: "@daily", Handler: noop}
	for _, tc := range []struct {
		mod   func(j *Job)
		field string
		text  string
	}{
		{func(j *Job) { j.MaxConcurrent = -1 }, "Job.MaxConcurrent", "not within [0, 10000]"},
		{func(j *Job) { j.MaxConcurrent = tasklock.MaxPermits + 1 }, "Job.MaxConcurrent", "not within"},
		{func(j *Job) { j.Pool = "nightly" }, "Job.Pool", `unknown pool "nightly" (Config.Pools has etl, reports)`},
		{func(j *Job) { j.PoolWait = time.Second }, "Job.PoolWait", "Job.Pool is not"},
		{func(j *Job) { j.Pool, j.PoolWait = "etl", -1 }, "Job.PoolWait", "negative"},
		{func(j *Job) { j.Nodes = []string{"gpu", ""} }, "Job.Nodes", "empty"},
		{func(j *Job) { j.Nodes = []string{"g pu"} }, "Job.Nodes", "want ASCII letters"},
		{func(j *Job) { j.Nodes = []string{"-x"} }, "Job.Nodes", "starting with a letter or digit"},
		{func(j *Job) { j.Nodes = []string{strings.Repeat("x", MaxLabelLen+1)} }, "Job.Nodes", "maximum is 63"},
		{func(j *Job) { j.Nodes = []string{"a", "a"} }, "Job.Nodes", "twice"},
	} {
		j := ok
		tc.mod(&j)
		err := s.Add(j)
		var oe *tasklock.OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || oe.Job != "j" || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("Add(%s) = %v, want a *tasklock.OptionError for %s mentioning %q", tc.field, err, tc.field, tc.text)
		}
	}
	if err := s.Add(Job{Name: "p", Schedule: "@daily", Handler: noop, Pool: "etl", MaxConcurrent: 3, Nodes: []string{"gpu", "zone=eu"}}); err != nil {
		t.Fatal(err)
	}

	lk, err := tasklock.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	for _, tc := range []struct {
		cfg  *Config
		text string
	}{
		{&Config{Pools: map[string]int{"r": 0}}, `Config.Pools: pool "r": size 0 is not within [1, 10000]`},
		{&Config{Pools: map[string]int{"r e": 1}}, "Config.Pools: pool name"},
		{&Config{Labels: []string{"ok", ""}}, "Config.Labels: label empty"},
	} {
		_, err := New(lk, memstore.New(nil), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.text)
		}
	}
}

// Shutdown ends a run's wait for a pool permit at once (the handler never
// started, so the grace period is not for it): the tick is skipped.
func TestPoolWaitEndsAtShutdown(t *testing.T) {
	c := newCluster(t)
	v := newValve()
	cfg := &Config{Pools: map[string]int{"one": 1}}
	a := c.node("a", 0, cfg).add(t, Job{Name: "hog", Schedule: "@every 1h", Handler: v.handler, Pool: "one", MisfireWindow: 10 * time.Second}).start(t)
	b := c.node("b", 0, cfg).add(t, Job{Name: "waiter", Schedule: "@every 1h", Handler: v.handler, Pool: "one", MisfireWindow: 10 * time.Second}).start(t)
	first := v.wait(t)
	waiter := b
	if first.Job == "waiter" {
		waiter = a
	}
	waitFor(t, "a run to wait for the pool", func() bool {
		waiter.s.mu.Lock()
		defer waiter.s.mu.Unlock()
		return len(waiter.s.deadlines) > 0
	})
	waiter.shutdown(t) // the fake clock stands still: only the end of the wait lets it return
	other := map[string]string{"hog": "waiter", "waiter": "hog"}[first.Job]
	rs := c.waitRecords(other, t0.Add(-time.Second), 1)
	if rs[0].Status != ledger.RunSkipped || !strings.Contains(rs[0].Error, `pool "one": waiting for a permit: schedule: shut down`) {
		t.Fatalf("%s's tick: %+v, want skipped by the shutdown", other, rs[0])
	}
	v.none(t)
	v.release(first)
	c.settle(true)
}

// A run whose MaxConcurrent or pool permit is lost while it runs ends,
// recorded as lost, like a run that loses the job's lock.
func TestLostPermitIsRecorded(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		job       Job
	}{
		{"max_concurrent", "jobs/victim/running", Job{MaxConcurrent: 2}},
		{"pool", "jobs/pool/one", Job{Pool: "one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			causes := make(chan error, 1)
			started := make(chan Run, 1)
			job := tc.job
			job.Name, job.Schedule, job.Lock = "victim", at3am, tasklock.ObtainOptions{TTL: 300 * time.Millisecond}
			job.Handler = func(ctx context.Context, run Run) error {
				started <- run
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil // claims success: the loss must still show
			}
			n := c.node("a", 0, &Config{KeyPrefix: "jobs/", Pools: map[string]int{"one": 1}}).add(t, job).start(t)
			c.settle(true)
			if _, err := n.s.Trigger(context.Background(), "victim"); err != nil {
				t.Fatal(err)
			}
			run := recv(t, "the run", started)
			if run.Fence == 0 {
				t.Errorf("fence 0: want the MaxConcurrent permit's, or the job lock's")
			}
			if err := c.locks.ForceRelease(context.Background(), tc.key); err != nil {
				t.Fatal(err)
			}
			if err := recv(t, "the loss", causes); !errors.Is(err, tasklock.ErrLockLost) {
				t.Fatalf("cause %v, want ErrLockLost", err)
			}
			rs := c.waitRecords("victim", t0.Add(-time.Hour), 1)
			if rs[0].Status != ledger.RunLost || !strings.Contains(rs[0].Error, "lock lost") {
				t.Fatalf("record %+v, want lost", rs[0])
			}
		})
	}
}

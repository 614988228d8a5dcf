package schedule

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
)

// shardLog notes shard-runs per node: which started, which completed.
type shardLog struct {
	mu        sync.Mutex
	started   map[string][]int // node -> shards started there
	completed map[int]int      // shard -> completions
	shards    []int            // Run.Shards seen
}

func newShardLog() *shardLog {
	return &shardLog{started: map[string][]int{}, completed: map[int]int{}}
}

func (l *shardLog) start(run Run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started[run.Node] = append(l.started[run.Node], run.Shard)
	l.shards = append(l.shards, run.Shards)
}

// startedOn returns the shards node started, in order.
func (l *shardLog) startedOn(node string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.started[node]))
}

// waitStarted moves the clock 50 ms at a time, without waiting for runs to
// end, until n shard-runs have started.
func (c *cluster) waitStarted(what string, log *shardLog, n int) {
	c.t.Helper()
	waitFor(c.t, what, func() bool {
		c.advance(50 * time.Millisecond)
		c.settle(false)
		s, _ := log.count()
		return s == n
	})
}

func (l *shardLog) done(run Run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.completed[run.Shard]++
}

func (l *shardLog) count() (started, completed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ks := range l.started {
		started += len(ks)
	}
	for _, n := range l.completed {
		completed += n
	}
	return started, completed
}

// checkOnce fails unless each of n shards completed exactly once.
func (l *shardLog) checkOnce(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range n {
		if l.completed[k] != 1 {
			t.Errorf("shard %d completed %d times, want 1 (all: %v)", k, l.completed[k], l.completed)
		}
	}
	if len(l.completed) != n {
		t.Errorf("completions %v, want shards 0..%d", l.completed, n-1)
	}
	for _, s := range l.shards {
		if s != n {
			t.Errorf("Run.Shards %d, want %d", s, n)
		}
	}
}

// tickRecords waits until the tick has a final ok outcome for each of n
// shards, and returns the tick's records.
func (c *cluster) tickRecords(job string, tick time.Time, n int, advance time.Duration) []ledger.RunRecord {
	c.t.Helper()
	var rs []ledger.RunRecord
	waitFor(c.t, fmt.Sprintf("%d shards of %s to end ok", n, job), func() bool {
		if advance > 0 {
			c.advance(advance)
		}
		var err error
		rs, err = c.ledger.Runs(context.Background(), ledger.RunQuery{Job: job, From: tick, To: tick.Add(time.Second)})
		if err != nil {
			c.t.Fatal(err)
		}
		return TickStatus(rs) == ledger.RunOK
	})
	return rs
}

func TestShardsSpread(t *testing.T) {
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the jobs' first tick is t0+1h
	log := newShardLog()
	release := make(chan struct{})
	job := Job{Name: "spread", Schedule: "@every 1h", Shards: 8, Handler: func(ctx context.Context, run Run) error {
		log.start(run)
		<-release
		log.done(run)
		return nil
	}}
	var claims sync.Map // node -> *atomic.Int32
	for _, name := range []string{"a", "b", "c"} {
		n := new(atomic.Int32)
		claims.Store(name, n)
		onEvent := func(e Event) {
			if e.Type == EventClaimed {
				n.Add(1)
			}
		}
		c.node(name, 0, &Config{NodeLister: c.locks, OnEvent: onEvent}).add(t, job).start(t)
	}
	c.settle(true)
	c.advance(59 * time.Minute)
	waitFor(t, "8 shard-runs to start", func() bool { s, _ := log.count(); return s == 8 })
	c.settle(false)
	log.mu.Lock()
	var all []int
	for node, ks := range log.started {
		if len(ks) > 3 {
			t.Errorf("node %s started shards %v at the tick, want at most 3 (ceil(8/3))", node, ks)
		}
		all = append(all, ks...)
	}
	log.mu.Unlock()
	slices.Sort(all)
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(all, want) {
		t.Errorf("shards started %v, want %v", all, want)
	}
	claims.Range(func(k, v any) bool {
		if n := v.(*atomic.Int32).Load(); n > 3 {
			t.Errorf("node %s claimed %d shards, want at most 3", k, n)
		}
		return true
	})
	close(release)
	c.settle(true)
	rs := c.tickRecords("spread", t0.Add(time.Hour), 8, 0)
	log.checkOnce(t, 8)
	if len(rs) != 8 {
		t.Fatalf("records %v, want one per shard", rs)
	}
	for i, r := range rs {
		if r.Shard != i || r.Shards != 8 || r.Attempt != 1 || r.Status != ledger.RunOK {
			t.Errorf("record %d: shard %d/%d attempt %d status %s, want shard %d/8 attempt 1 ok", i, r.Shard, r.Shards, r.Attempt, r.Status, i)
		}
	}
	// Every node stops watching the tick once all its shards are done.
	c.step(time.Second)
	for _, n := range c.nodes {
		n.s.mu.Lock()
		w, b := len(n.s.shards.watch), len(n.s.shards.busy)
		n.s.mu.Unlock()
		if w != 0 || b != 0 {
			t.Errorf("node %s still watches %d ticks, %d jobs busy", n.name, w, b)
		}
	}
}

// TestShardsRest: a node the others count as live has not the job, so its
// shards are not claimed at the tick; a poll later the free nodes take
// them, one at a time each.
func TestShardsRest(t *testing.T) {
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the jobs' first tick is t0+1h
	log := newShardLog()
	job := Job{Name: "rest", Schedule: "@every 1h", Shards: 8, Handler: func(ctx context.Context, run Run) error {
		log.start(run)
		log.done(run)
		return nil
	}}
	cfg := &Config{NodeLister: c.locks, PollInterval: 100 * time.Millisecond}
	c.node("a", 0, cfg).add(t, job).start(t)
	c.node("b", 0, cfg).add(t, job).start(t)
	c.node("c", 0, cfg).start(t) // alive, without the job
	c.settle(true)
	c.advance(59 * time.Minute)
	c.settle(true)
	if s, _ := log.count(); s != 6 {
		t.Fatalf("%d shard-runs at the tick, want 6 (shards 2 and 5 are c's)", s)
	}
	c.tickRecords("rest", t0.Add(time.Hour), 8, 100*time.Millisecond)
	c.settle(true)
	log.checkOnce(t, 8)
}

// killable is a lock store that fails every call once killed, as a node
// that stopped without releasing anything: its leases expire.
type killable struct {
	driver.Store
	dead atomic.Bool
}

var errKilled = errors.New("killed")

func (k *killable) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if k.dead.Load() {
		return driver.Grant{}, errKilled
	}
	return k.Store.Acquire(ctx, p)
}

func (k *killable) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	if k.dead.Load() {
		return nil, errKilled
	}
	return k.Store.Renew(ctx, ps)
}

func (k *killable) Release(ctx context.Context, p driver.ReleaseParams) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Store.Release(ctx, p)
}

// killableNodes starts nodes a, b and c running j with a lock TTL of a
// second, a's Locker through a store that can be killed, which it returns.
// j's handler notes the runs that logged selects in log, and on a never
// returns from them: a stopped process.
func (c *cluster) killableNodes(t *testing.T, j Job, log *shardLog, logged func(Run) bool) *killable {
	t.Helper()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	job := func(node string) Job {
		j := j
		j.Lock.TTL = time.Second
		j.Handler = func(ctx context.Context, run Run) error {
			if !logged(run) {
				return nil
			}
			log.start(run)
			if node == "a" {
				<-hang
				return nil
			}
			log.done(run)
			return nil
		}
		return j
	}
	cfg := Config{NodeLister: c.locks, PollInterval: 100 * time.Millisecond, NodeLeaseTTL: time.Second}
	ka := &killable{Store: c.locks}
	lk, err := tasklock.New(ka, &tasklock.Config{Owner: "a", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cfgA := cfg
	cfgA.Node, cfgA.Clock, cfgA.Logger = "a", &skewClock{c.clock, 0}, discardLogger()
	sa, err := New(lk, c.ledger, &cfgA)
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, &node{name: "a", clock: cfgA.Clock.(*skewClock), lk: lk, s: sa})
	if err := sa.Add(job("a")); err != nil {
		t.Fatal(err)
	}
	if err := sa.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.node("b", 0, &cfg).add(t, job("b")).start(t)
	c.node("c", 0, &cfg).add(t, job("c")).start(t)
	c.settle(true)
	return ka
}

// TestShardsTakeover: a node stops mid-tick without releasing its node
// lease or its shard locks; once they expire the other nodes take its
// shards over, and no shard completes twice. Each shard-run a node claims,
// retakes included, has one EventRunStarted marked First, so that a
// node's metrics count it started as they count it due.
func TestShardsTakeover(t *testing.T) {
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the jobs' first tick is t0+1h
	var evMu sync.Mutex
	claimed, first := map[string]int{}, map[string]int{}
	c.onEvent = func(e Event) {
		evMu.Lock()
		defer evMu.Unlock()
		switch {
		case e.Type == EventClaimed && !e.Paused:
			claimed[e.Node]++
		case e.Type == EventRunStarted && e.First:
			first[e.Node]++
		}
	}
	log := newShardLog()
	ka := c.killableNodes(t, Job{Name: "take", Schedule: "@every 1h", Shards: 8}, log, func(Run) bool { return true })
	c.advance(59 * time.Minute)
	waitFor(t, "8 shard-runs to start", func() bool { s, _ := log.count(); return s == 8 })
	log.mu.Lock()
	onA := slices.Clone(log.started["a"])
	log.mu.Unlock()
	slices.Sort(onA)
	if !slices.Equal(onA, []int{0, 3, 6}) {
		t.Fatalf("node a runs shards %v, want [0 3 6] (rank 0 of 3)", onA)
	}
	ka.dead.Store(true)

	rs := c.tickRecords("take", t0.Add(time.Hour), 8, 50*time.Millisecond)
	c.settle(false)
	log.checkOnce(t, 8)
	latest := latestShards(rs, t0.Add(time.Hour), "")
	for _, k := range onA {
		r := latest[k]
		if r.Attempt != 2 || r.Node == "a" || r.Status != ledger.RunOK {
			t.Errorf("shard %d: latest record attempt %d on %s %s, want attempt 2 ok on b or c", k, r.Attempt, r.Node, r.Status)
		}
	}
	// a's runs are settled interrupted by the retake itself, before the
	// retaken run ends: the history never shows them running beside it.
	for _, r := range rs {
		if r.Node == "a" && r.Attempt == 1 && r.Status != ledger.RunInterrupted {
			t.Errorf("a's record %+v, want interrupted", r)
		}
	}
	evMu.Lock()
	if claimed["b"]+claimed["c"] != 8 || !maps.Equal(claimed, first) {
		t.Errorf("b and c claimed %v shard-runs, and started %v first attempts; want the same, 8 in all", claimed, first)
	}
	evMu.Unlock()
	// The retake claims are on the chain's key.
	res, err := c.ledger.Claim(context.Background(), []ledger.ClaimParams{{Job: "take", Tick: t0.Add(time.Hour), Trigger: "~a", Shard: 0, Node: "x", Token: "x", Retain: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	var ce *ledger.ClaimedError
	if !errors.As(res[0], &ce) || (ce.Node != "b" && ce.Node != "c") {
		t.Errorf("retake claim of shard 0: %v, want held by b or c", res[0])
	}
}

func TestShardsValidate(t *testing.T) {
	c := newCluster(t)
	n := c.node("a", 0, nil)
	ok := func(context.Context, Run) error { return nil }
	for _, tc := range []struct {
		job  Job
		want string
	}{
		{Job{Name: "neg", Schedule: "@every 1m", Handler: ok, Shards: -1}, "Job.Shards"},
		{Job{Name: "big", Schedule: "@every 1m", Handler: ok, Shards: ledger.MaxShards + 1}, "Job.Shards"},
		{Job{Name: "lead", Schedule: "@every 1m", Handler: ok, Shards: 2, LeaderOnly: true}, "LeaderOnly"},
	} {
		err := n.s.Add(tc.job)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%s): %v, want an error naming %s", tc.job.Name, err, tc.want)
		}
	}
	if err := n.s.Add(Job{Name: "max", Schedule: "@every 1m", Handler: ok, Shards: ledger.MaxShards}); err != nil {
		t.Errorf("Add with Shards = MaxShards: %v", err)
	}
}

func TestTickStatus(t *testing.T) {
	rec := func(shard, attempt int, st ledger.RunStatus) ledger.RunRecord {
		return ledger.RunRecord{Job: "j", Shard: shard, Shards: 3, Attempt: attempt, Status: st}
	}
	for _, tc := range []struct {
		name string
		rs   []ledger.RunRecord
		want ledger.RunStatus
	}{
		{"none", nil, ""},
		{"unsharded", []ledger.RunRecord{{Attempt: 2, Status: ledger.RunOK}, {Attempt: 1, Status: ledger.RunFailed}}, ledger.RunOK},
		{"all ok", []ledger.RunRecord{rec(0, 1, ledger.RunOK), rec(1, 1, ledger.RunOK), rec(2, 1, ledger.RunOK)}, ledger.RunOK},
		{"one missing", []ledger.RunRecord{rec(0, 1, ledger.RunOK), rec(2, 1, ledger.RunOK)}, ledger.RunRunning},
		{"one running", []ledger.RunRecord{rec(0, 1, ledger.RunFailed), rec(1, 1, ledger.RunRunning), rec(2, 1, ledger.RunOK)}, ledger.RunRunning},
		{"worst", []ledger.RunRecord{rec(0, 1, ledger.RunSkipped), rec(1, 1, ledger.RunTimeout), rec(2, 1, ledger.RunInterrupted)}, ledger.RunTimeout},
		{"retaken", []ledger.RunRecord{rec(0, 2, ledger.RunOK), rec(0, 1, ledger.RunInterrupted), rec(1, 1, ledger.RunOK), rec(2, 1, ledger.RunOK)}, ledger.RunOK},
		{"failed", []ledger.RunRecord{rec(0, 1, ledger.RunOK), rec(1, 1, ledger.RunFailed), rec(2, 1, ledger.RunMissed)}, ledger.RunFailed},
	} {
		if got := TickStatus(tc.rs); got != tc.want {
			t.Errorf("%s: TickStatus = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestShardsTrigger: a trigger-now request of a sharded job runs every
// shard once, under the request's ID.
func TestShardsTrigger(t *testing.T) {
	c := newCluster(t)
	c.clock.Advance(time.Minute)
	log := newShardLog()
	job := Job{Name: "trig", Schedule: "@every 24h", Shards: 5, Handler: func(ctx context.Context, run Run) error {
		if run.Trigger == "" {
			return errors.New("a scheduled tick ran")
		}
		log.start(run)
		log.done(run)
		return nil
	}}
	cfg := &Config{NodeLister: c.locks, PollInterval: 100 * time.Millisecond}
	a := c.node("a", 0, cfg).add(t, job).start(t)
	c.node("b", 0, cfg).add(t, job).start(t)
	c.settle(true)
	id, err := a.s.Trigger(context.Background(), "trig")
	if err != nil {
		t.Fatal(err)
	}
	var rs []ledger.RunRecord
	waitFor(t, "5 shard-runs of the trigger to end ok", func() bool {
		c.advance(100 * time.Millisecond)
		rs, err = c.ledger.Runs(context.Background(), ledger.RunQuery{Job: "trig"})
		if err != nil {
			t.Fatal(err)
		}
		return len(rs) == 5 && TickStatus(rs) == ledger.RunOK
	})
	c.settle(true)
	log.checkOnce(t, 5)
	for _, r := range rs {
		if r.Trigger != id || r.Shards != 5 {
			t.Errorf("record %+v, want trigger %s of 5 shards", r, id)
		}
	}
}

// TestShardsBackfill: a backfill of a sharded job's missed tick runs every
// shard once, each shard's attempts counted on its own.
func TestShardsBackfill(t *testing.T) {
	c := newCluster(t)
	c.clock.Advance(30 * time.Second)
	log := newShardLog()
	job := Job{Name: "bf", Schedule: "@every 1m", Shards: 4, Misfire: MisfireSkip, MisfireWindow: 30 * time.Minute,
		Handler: func(ctx context.Context, run Run) error {
			if run.Tick.Equal(t0.Add(2 * time.Minute)) {
				log.start(run)
				log.done(run)
			}
			return nil
		}}
	cfg := &Config{NodeLister: c.locks, PollInterval: 100 * time.Millisecond}
	a := c.node("a", 0, cfg).add(t, job).start(t)
	c.settle(true)
	a.shutdown(t)
	c.advance(3 * time.Minute) // ticks t0+1m .. t0+3m missed
	c.node("b", 0, cfg).add(t, job).start(t)
	c.node("c", 0, cfg).add(t, job).start(t)
	missed := t0.Add(2 * time.Minute)
	c.tickRecordsWith(t, "bf", missed, func(rs []ledger.RunRecord) bool { return TickStatus(rs) == ledger.RunMissed })
	if _, err := RequestBackfill(context.Background(), c.ledger, "bf", missed, missed, BackfillOptions{Now: c.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	rs := c.tickRecordsWith(t, "bf", missed, func(rs []ledger.RunRecord) bool { return TickStatus(rs) == ledger.RunOK })
	c.settle(true)
	log.checkOnce(t, 4)
	for k, r := range latestShards(rs, missed, "") {
		if r.Attempt != 1 || r.Status != ledger.RunOK {
			t.Errorf("shard %d: latest attempt %d %s, want 1 ok", k, r.Attempt, r.Status)
		}
	}
}

// tickRecordsWith advances the clock a poll at a time until the tick's
// records satisfy ok, and returns them.
func (c *cluster) tickRecordsWith(t *testing.T, job string, tick time.Time, ok func([]ledger.RunRecord) bool) []ledger.RunRecord {
	t.Helper()
	var rs []ledger.RunRecord
	defer func() {
		if t.Failed() {
			for _, r := range rs {
				t.Logf("record %+v", r)
			}
		}
	}()
	waitFor(t, "the tick's records", func() bool {
		c.advance(100 * time.Millisecond)
		var err error
		rs, err = c.ledger.Runs(context.Background(), ledger.RunQuery{Job: job, From: tick, To: tick.Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return ok(rs)
	})
	return rs
}

// TestShardsRerun: a re-run of a sharded tick, asked for once with
// RequestRerun and once through RequestBackfill's Rerun, runs every shard
// of the tick exactly once more, as its next attempt, spread over the
// nodes as the tick itself was; the request is removed once every shard
// is done.
func TestShardsRerun(t *testing.T) {
	const shards = 6
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the job's first tick is t0+1h
	tick := t0.Add(time.Hour)
	var mu sync.Mutex
	runs := map[int][]string{} // attempt -> "node/shard" of each handler call at the tick
	job := Job{Name: "rr", Schedule: "@every 1h", Shards: shards, Handler: func(ctx context.Context, run Run) error {
		if run.Tick.Equal(tick) {
			mu.Lock()
			runs[run.Attempt] = append(runs[run.Attempt], fmt.Sprintf("%s/%d", run.Node, run.Shard))
			mu.Unlock()
		}
		return nil
	}}
	cfg := &Config{NodeLister: c.locks, PollInterval: 100 * time.Millisecond}
	for _, name := range []string{"a", "b", "c"} {
		c.node(name, 0, cfg).add(t, job).start(t)
	}
	c.settle(true)
	c.advance(59 * time.Minute)
	c.tickRecords("rr", tick, shards, 100*time.Millisecond)
	c.settle(true)

	ctx := context.Background()
	rerun := func() error {
		_, err := RequestRerun(ctx, c.ledger, "rr", tick, BackfillOptions{Now: c.clock.Now()})
		return err
	}
	for i, step := range []struct {
		what    string
		request func() error
		want    []string // sorted "node/shard" of the re-run's runs; "?" for any node but d
	}{
		// Ranks: a 0, b 1, c 2 of 3 live nodes, shard k on rank k mod 3.
		{"RequestRerun", rerun, []string{"a/0", "a/3", "b/1", "b/4", "c/2", "c/5"}},
		{"RequestBackfill with Rerun", func() error {
			_, err := RequestBackfill(ctx, c.ledger, "rr", tick, tick, BackfillOptions{Now: c.clock.Now(), Rerun: true})
			return err
		}, []string{"a/0", "a/3", "b/1", "b/4", "c/2", "c/5"}},
		// Node d, live without the job, has rank 3 of 4 once the others
		// list the node leases again (they rank on a listing up to a
		// third of the node lease TTL old): its shard 3 is taken by a
		// free node once the others are done.
		{"RequestRerun with a node that has not the job", func() error {
			c.node("d", 0, cfg).start(t)
			c.settle(true)
			c.step(tasklock.DefaultTTL / 3)
			return rerun()
		}, []string{"?/3", "a/0", "a/4", "b/1", "b/5", "c/2"}},
	} {
		attempt := i + 2
		if err := step.request(); err != nil {
			t.Fatal(err)
		}
		for range 4 { // every node sees the request and claims its shards
			c.step(50 * time.Millisecond)
		}
		c.tickRecordsWith(t, "rr", tick, func(rs []ledger.RunRecord) bool {
			latest := latestShards(rs, tick, "")
			for k := range shards {
				if r := latest[k]; r.Attempt != attempt || r.Status != ledger.RunOK {
					return false
				}
			}
			return len(jobState(t, c, "rr").Triggers) == 0
		})
		c.settle(true)
		mu.Lock()
		got := slices.Clone(runs[attempt])
		mu.Unlock()
		for i, run := range got {
			if run != "d/3" && strings.HasSuffix(run, "/3") && slices.Contains(step.want, "?/3") {
				got[i] = "?/3"
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, step.want) {
			t.Errorf("%s: attempt %d ran %v, want each shard once: %v", step.what, attempt, runs[attempt], step.want)
		}
	}
	if len(runs) != 4 {
		t.Errorf("attempts run: %v, want 1 to 4", runs)
	}
	// Every node stops watching the tick.
	c.step(time.Second)
	for _, n := range c.nodes {
		n.s.mu.Lock()
		w := len(n.s.shards.watch)
		n.s.mu.Unlock()
		if w != 0 {
			t.Errorf("node %s still watches %d ticks", n.name, w)
		}
	}
}

// TestShardsRerunTakeover: a node stops in the middle of a re-run of a
// sharded tick; the others take its shards over, as at a scheduled tick,
// and every shard completes the re-run exactly once, a taken-over one as
// the attempt after the stopped node's.
func TestShardsRerunTakeover(t *testing.T) {
	const shards = 6
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the job's first tick is t0+1h
	tick := t0.Add(time.Hour)
	log := newShardLog()
	ka := c.killableNodes(t, Job{Name: "rrt", Schedule: "@every 1h", Shards: shards}, log, func(run Run) bool { return run.Attempt > 1 })
	c.advance(59 * time.Minute)
	c.tickRecords("rrt", tick, shards, 100*time.Millisecond)
	c.settle(true)

	if _, err := RequestRerun(context.Background(), c.ledger, "rrt", tick, BackfillOptions{Now: c.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	for range 4 { // every node sees the request and claims its shards (a's never end)
		c.advance(50 * time.Millisecond)
		c.settle(false)
	}
	waitFor(t, "the re-run's 6 shard-runs to start", func() bool { s, _ := log.count(); return s == shards })
	onA := log.startedOn("a")
	if !slices.Equal(onA, []int{0, 3}) {
		t.Fatalf("node a re-runs shards %v, want [0 3] (rank 0 of 3)", onA)
	}
	ka.dead.Store(true)
	c.checkRerunTakenOver(t, "rrt", tick, shards, log, onA)
}

// checkRerunTakenOver waits until every shard of a re-run of job's tick
// (its base attempt 1) has ended ok, and checks that each completed once:
// as attempt 2, or as attempt 3 on b or c for the shards of stopped node a.
func (c *cluster) checkRerunTakenOver(t *testing.T, job string, tick time.Time, shards int, log *shardLog, onA []int) {
	t.Helper()
	c.checkTakenOver(t, job, tick, shards, log, onA, 2, func() bool { return true })
}

// checkTakenOver waits until every shard of job's tick has ended ok with
// an attempt from first on, and until also holds, and checks that each
// completed once: as attempt first, or as the next on b or c for the
// shards of stopped node a.
func (c *cluster) checkTakenOver(t *testing.T, job string, tick time.Time, shards int, log *shardLog, onA []int, first int, also func() bool) {
	t.Helper()
	rs := c.tickRecordsWith(t, job, tick, func(rs []ledger.RunRecord) bool {
		latest := latestShards(rs, tick, "")
		for k := range shards {
			if r := latest[k]; r.Attempt < first || r.Status != ledger.RunOK {
				return false
			}
		}
		return also()
	})
	c.settle(false)
	log.checkOnce(t, shards)
	for k, r := range latestShards(rs, tick, "") {
		want := first
		if slices.Contains(onA, k) {
			want = first + 1
		}
		if r.Attempt != want || (want > first && r.Node == "a") {
			t.Errorf("shard %d: latest record attempt %d on %s, want attempt %d on b or c", k, r.Attempt, r.Node, want)
		}
	}
}

// TestShardsRerunTakeoverBesideTheTick: a node still watches the
// scheduled tick (one of its shards runs long) when a re-run of it starts,
// and the re-run's records share the tick's key. When the node running
// two of the re-run's shards stops, the tick's watch must leave them to
// the re-run's: each is taken over once, not once by each watch.
func TestShardsRerunTakeoverBesideTheTick(t *testing.T) {
	const shards = 6
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the job's first tick is t0+1h
	tick := t0.Add(time.Hour)
	log := newShardLog()
	slow := make(chan struct{}) // holds b's scheduled run of shard 1
	ka := c.killableNodes(t, Job{Name: "rrb", Schedule: "@every 1h", Shards: shards}, log, func(run Run) bool {
		if run.Node == "b" && run.Shard == 1 && run.Attempt == 1 {
			<-slow
		}
		return run.Attempt > 1
	})
	c.advance(59 * time.Minute)
	waitFor(t, "5 of the tick's shards to end", func() bool {
		rs := c.history("rrb")
		n := 0
		for _, r := range rs {
			if r.Status == ledger.RunOK {
				n++
			}
		}
		return n == shards-1
	})
	if _, err := RequestRerun(context.Background(), c.ledger, "rrb", tick, BackfillOptions{Now: c.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	// Every node handles each instant before the clock moves on: were
	// the clock to run ahead of a busy node a, a free node's poll, a
	// poll interval after it saw the request, would claim a's shards
	// first.
	for range 4 {
		c.advance(50 * time.Millisecond)
		c.settle(false)
	}
	waitFor(t, "node a to start its shards of the re-run", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.started["a"]) == 2
	})
	ka.dead.Store(true)
	close(slow)
	c.checkRerunTakenOver(t, "rrb", tick, shards, log, []int{0, 3}) // node a's, rank 0 of 3
}

// countingLister counts the listings of the node leases.
type countingLister struct {
	driver.Lister
	n atomic.Int32
}

func (l *countingLister) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	l.n.Add(1)
	return l.Lister.Leases(ctx, prefix)
}

// TestShardsReuseNodeListing: a node ranks every tick's shards on a
// listing of the node leases up to NodeLeaseTTL/3 old, not on a listing
// per pass (on Redis each is a scan of every key).
func TestShardsReuseNodeListing(t *testing.T) {
	c := newCluster(t)
	lister := &countingLister{Lister: c.locks}
	var ran atomic.Int32
	job := Job{Name: "listed", Schedule: "@every 1s", Shards: 4, Handler: func(context.Context, Run) error {
		ran.Add(1)
		return nil
	}}
	cfg := &Config{NodeLister: lister, NodeLeaseTTL: 30 * time.Second} // a listing serves 10 s
	c.node("a", 0, cfg).add(t, job).start(t)
	c.settle(true)
	before := ran.Load()
	for range 6 {
		c.step(time.Second)
	}
	if got := ran.Load() - before; got < 6*4 {
		t.Fatalf("%d shard-runs in 6 ticks of 4 shards, want at least 24", got)
	}
	if n := lister.n.Load(); n > 2 {
		t.Errorf("%d listings of the node leases over 6 ticks, want at most 2 (one per 10 s, NodeLeaseTTL/3)", n)
	}
}

// TestShardsListingEndsWithLease: a node listed alive counts as alive from
// a reused listing only until its lease, as listed, could end; then a
// fresh listing is read, and a node that stopped meanwhile is found
// stopped then, not a whole sweep interval (NodeLeaseTTL/3) later. That
// bounds a killed node's shard retake by its lease's end and a poll.
func TestShardsListingEndsWithLease(t *testing.T) {
	c := newCluster(t)
	lister := &countingLister{Lister: c.locks}
	// Listings are reused up to 100 s; b's lease is a minute long, read
	// off the store's real clock, so no stall of this machine ends it.
	n := c.node("a", 0, &Config{NodeLister: lister, NodeLeaseTTL: 5 * time.Minute})
	other, err := tasklock.New(c.locks, &tasklock.Config{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	b, err := other.TryObtain(ctx, n.s.nodePrefix+"b", &tasklock.ObtainOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !n.s.shardAlive()(ctx, "b") {
		t.Fatal("b not alive while it holds its lease")
	}
	c.clock.Advance(30 * time.Second)
	if !n.s.shardAlive()(ctx, "b") || lister.n.Load() != 1 {
		t.Fatalf("30 s after the listing: b alive, from it (listings %d, want 1)", lister.n.Load())
	}
	if err := b.Release(ctx); err != nil { // b stops
		t.Fatal(err)
	}
	c.clock.Advance(31 * time.Second) // past b's lease as listed, well within 100 s
	if n.s.shardAlive()(ctx, "b") {
		t.Fatal("b alive 61 s after a listing that gave its lease at most 1m: a reused listing outlived the lease")
	}
	if got := lister.n.Load(); got != 2 {
		t.Errorf("%d listings, want 2: the second read once b's listed lease ended", got)
	}
}

// TestShardsRetakeByLateNodeRuns: a node that started after a tick sees it
// late, past the misfire grace; when it retakes a shard-run a stopped node
// began in time, it runs it (attempt 2), instead of recording it missed as
// its first look at the tick said. Before, which of the live nodes won
// the retake decided whether the shard-run ran at all.
func TestShardsRetakeByLateNodeRuns(t *testing.T) {
	c := newCluster(t)
	c.clock.Advance(time.Minute) // the jobs' first tick is t0+1h
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	started := make(chan Run, 4)
	var ranOnD atomic.Int32
	job := func(node string) Job {
		return Job{Name: "late", Schedule: "@every 1h", Shards: 2, Misfire: MisfireSkip, Lock: tasklock.ObtainOptions{TTL: time.Second},
			Handler: func(ctx context.Context, run Run) error {
				if node == "a" {
					started <- run
					<-hang // a process that is gone
					return nil
				}
				ranOnD.Add(1)
				return nil
			}}
	}
	cfg := &Config{NodeLister: c.locks, PollInterval: 100 * time.Millisecond, NodeLeaseTTL: time.Second}
	a := c.node("a", 0, cfg).add(t, job("a")).start(t)
	c.advance(59 * time.Minute)
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("a's shard-runs did not start")
		}
	}
	_ = a.lk.Close() // a dies: its node lease ends
	c.advance(DefaultMisfireAfter + time.Second)
	c.node("d", 0, cfg).add(t, job("d")).start(t)
	rs := c.tickRecords("late", t0.Add(time.Hour), 2, 100*time.Millisecond)
	latest := latestShards(rs, t0.Add(time.Hour), "")
	for k := range 2 {
		if r := latest[k]; r.Attempt != 2 || r.Node != "d" || r.Status != ledger.RunOK {
			t.Errorf("shard %d: latest record attempt %d on %s %s, want attempt 2 ok on d (the retake runs)", k, r.Attempt, r.Node, r.Status)
		}
	}
	if n := ranOnD.Load(); n != 2 {
		t.Errorf("d ran %d shard-runs, want 2", n)
	}
}

// TestShardsShutdownRetaken: a node that shuts down stops its shard-runs
// once its grace period is over (here at once); they are recorded
// interrupted, and the other nodes run those shards again, so that every
// shard of the tick completes once. Before, they were recorded failed and
// left so.
func TestShardsShutdownRetaken(t *testing.T) {
	c := newCluster(t)
	c.clock.Advance(time.Minute) // past the tick at t0: the jobs' first tick is t0+1h
	log := newShardLog()
	job := func(node string) Job {
		j := Job{Name: "sd", Schedule: "@every 1h", Shards: 6, Handler: func(ctx context.Context, run Run) error {
			log.start(run)
			if node == "a" {
				<-ctx.Done()
				return context.Cause(ctx)
			}
			log.done(run)
			return nil
		}}
		j.Lock.TTL = time.Second
		return j
	}
	cfg := Config{NodeLister: c.locks, PollInterval: 100 * time.Millisecond, NodeLeaseTTL: time.Second}
	a := c.node("a", 0, &cfg).add(t, job("a")).start(t)
	c.node("b", 0, &cfg).add(t, job("b")).start(t)
	c.node("c", 0, &cfg).add(t, job("c")).start(t)
	c.settle(true)
	c.advance(59 * time.Minute)
	waitFor(t, "6 shard-runs to start", func() bool { s, _ := log.count(); return s == 6 })
	log.mu.Lock()
	onA := slices.Clone(log.started["a"])
	log.mu.Unlock()
	if len(onA) == 0 {
		t.Fatal("node a runs no shard")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: a's runs are stopped at once
	if err := a.s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	a.shutdown(t) // as serve does: wait for the stopped runs to end
	tick := t0.Add(time.Hour)
	rs := c.tickRecordsWith(t, "sd", tick, func(rs []ledger.RunRecord) bool { return TickStatus(rs) == ledger.RunOK })
	log.checkOnce(t, 6)
	latest := latestShards(rs, tick, "")
	for _, k := range onA {
		if r := latest[k]; r.Attempt != 2 || r.Node == "a" || r.Status != ledger.RunOK {
			t.Errorf("shard %d: latest record attempt %d on %s %s, want attempt 2 ok on b or c", k, r.Attempt, r.Node, r.Status)
		}
	}
	for _, r := range rs {
		if r.Node == "a" && (r.Status != ledger.RunInterrupted || !strings.Contains(r.Error, ErrShutdown.Error())) {
			t.Errorf("a's record %+v, want interrupted by its shutdown", r)
		}
	}
}

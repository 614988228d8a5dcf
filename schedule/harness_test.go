package schedule

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/fakeclock"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// fakeClock is a tasklock.Clock whose time moves only when the test
// advances it (Advance); timers fire then.
type fakeClock struct{ *fakeclock.Clock }

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{fakeclock.At(t)} }

func (c *fakeClock) NewTimer(d time.Duration) tasklock.Timer { return c.Clock.NewTimer(d) }

// armed returns how many timers wait to fire.
func (c *fakeClock) armed() int { return c.Clock.Armed() }

// skewClock is a node's view of a fakeClock: the same time plus a skew.
type skewClock struct {
	*fakeClock
	skew time.Duration
}

func (c *skewClock) Now() time.Time { return c.fakeClock.Now().Add(c.skew) }

// t0 is where the fake clocks start: a whole minute, far from the real now.
var t0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// cluster is a set of nodes sharing one ledger (a memstore on the fake
// clock) and one lock store (a memstore on the real clock, as are the
// Lockers, so that lease renewal never depends on how the test moves
// time).
type cluster struct {
	t      *testing.T
	clock  *fakeClock
	ledger *memstore.Store
	locks  *memstore.Store
	// lockStore, when set, is the nodes' lock store instead of locks.
	lockStore driver.Store
	nodes     []*node
	// marks turns Config.PreferredNodes on (the ledger keeps claim
	// marks: ledger.Marker): each plain tick is claimed at the tick by its
	// preferred node only. Off, as by default, every node claims every
	// tick at the tick, although the ledger keeps marks.
	marks bool
	// onEvent is the Config.OnEvent of the nodes node starts, unless
	// their Config has one.
	onEvent func(Event)
	// wrapLedger, when set, gives a node its view of the shared ledger.
	wrapLedger func(node string, l ledger.Ledger) ledger.Ledger
}

type node struct {
	name    string
	clock   *skewClock
	lk      *tasklock.Locker
	s       *Scheduler
	started bool
}

func newCluster(t *testing.T) *cluster {
	fc := newFakeClock(t0)
	c := &cluster{t: t, clock: fc, ledger: memstore.New(fc), locks: memstore.New(nil)}
	t.Cleanup(c.close)
	return c
}

func (c *cluster) node(name string, skew time.Duration, cfg *Config) *node {
	c.t.Helper()
	var store driver.Store = c.locks
	if c.lockStore != nil {
		store = c.lockStore
	}
	lk, err := tasklock.New(store, &tasklock.Config{Owner: name, Logger: discardLogger()})
	if err != nil {
		c.t.Fatal(err)
	}
	var conf Config
	if cfg != nil {
		conf = *cfg
	}
	conf.Node = name
	conf.PreferredNodes = c.marks
	if conf.OnEvent == nil {
		conf.OnEvent = c.onEvent
	}
	conf.Clock = &skewClock{c.clock, skew}
	if conf.Logger == nil {
		conf.Logger = discardLogger()
	}
	var l ledger.Ledger = c.ledger
	if c.wrapLedger != nil {
		l = c.wrapLedger(name, l)
	}
	s, err := New(lk, l, &conf)
	if err != nil {
		c.t.Fatal(err)
	}
	n := &node{name: name, clock: conf.Clock.(*skewClock), lk: lk, s: s}
	c.nodes = append(c.nodes, n)
	return n
}

func (n *node) add(t *testing.T, jobs ...Job) *node {
	t.Helper()
	for _, j := range jobs {
		if err := n.s.Add(j); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func (n *node) start(t *testing.T) *node {
	t.Helper()
	if err := n.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.started = true
	return n
}

func (n *node) shutdown(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown(%s): %v", n.name, err)
	}
}

func (c *cluster) close() {
	for _, n := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = n.s.Shutdown(ctx)
		cancel()
		_ = n.lk.Close()
	}
}

// advance moves the fake clock and wakes every node's loop.
func (c *cluster) advance(d time.Duration) {
	c.clock.Advance(d)
	for _, n := range c.nodes {
		n.s.poke()
	}
}

// step advances and waits until every node has handled the new time and
// every run has ended.
func (c *cluster) step(d time.Duration) {
	c.t.Helper()
	c.advance(d)
	c.settle(true)
}

// settle waits until every running node's loop has handled its clock's
// present and, with runs, no run goroutine is left.
func (c *cluster) settle(runs bool) {
	c.t.Helper()
	waitFor(c.t, "the nodes to settle", func() bool {
		for _, n := range c.nodes {
			s := n.s
			s.mu.Lock()
			ok := !s.loopStarted || s.loopStopped || s.stepped.Equal(n.clock.Now())
			if runs {
				ok = ok && s.active == 0
			}
			s.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for wait := 50 * time.Microsecond; !cond(); wait = min(2*wait, 2*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(wait) // polling interval, backing off so as not to load a busy machine
	}
}

func (c *cluster) history(job string) []ledger.RunRecord {
	c.t.Helper()
	rs, err := c.ledger.Runs(context.Background(), ledger.RunQuery{Job: job})
	if err != nil {
		c.t.Fatal(err)
	}
	return rs
}

// historyAfter returns job's records for ticks after from, oldest first.
func (c *cluster) historyAfter(job string, from time.Time) []ledger.RunRecord {
	c.t.Helper()
	rs, err := c.ledger.Runs(context.Background(), ledger.RunQuery{Job: job, From: from.Add(time.Nanosecond)})
	if err != nil {
		c.t.Fatal(err)
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Tick.Before(rs[j].Tick) })
	return rs
}

// finalAfter is historyAfter without the running records: a tick that
// waits (for its parents, a pool) has its pending record meanwhile.
func (c *cluster) finalAfter(job string, from time.Time) []ledger.RunRecord {
	c.t.Helper()
	var out []ledger.RunRecord
	for _, r := range c.historyAfter(job, from) {
		if r.Status.Final() {
			out = append(out, r)
		}
	}
	return out
}

// waitRecords waits until job has n final records for ticks after from
// and returns them; running records (a later tick's pending one, say) are
// left out.
func (c *cluster) waitRecords(job string, from time.Time, n int) []ledger.RunRecord {
	c.t.Helper()
	var rs []ledger.RunRecord
	waitFor(c.t, fmt.Sprintf("%d final records of %s", n, job), func() bool {
		rs = c.finalAfter(job, from)
		return len(rs) >= n
	})
	return rs
}

// recorder counts handler calls per (job, tick, trigger) and notes which
// node made each and when, by the shared clock.
type recorder struct {
	clock *fakeClock
	mu    sync.Mutex
	calls []call
	count map[string]int
}

type call struct {
	Run
	at time.Time // the cluster's time
}

func newRecorder(clock *fakeClock) *recorder {
	return &recorder{clock: clock, count: make(map[string]int)}
}

func runKey(job string, tick time.Time, trigger string) string {
	return fmt.Sprintf("%s@%s#%s", job, tick.UTC().Format(time.RFC3339), trigger)
}

func (r *recorder) note(run Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{Run: run, at: r.clock.Now()})
	r.count[runKey(run.Job, run.Tick, run.Trigger)]++
}

// ok is a handler that records the call and succeeds.
func (r *recorder) ok(ctx context.Context, run Run) error {
	r.note(run)
	return nil
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recorder) times(job string, tick time.Time, trigger string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[runKey(job, tick, trigger)]
}

func (r *recorder) duplicates() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []string
	for k, n := range r.count {
		if n > 1 {
			d = append(d, fmt.Sprintf("%s ran %d times", k, n))
		}
	}
	sort.Strings(d)
	return d
}

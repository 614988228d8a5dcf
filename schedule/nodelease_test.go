package schedule

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
)

// After a store outage longer than the node leases, a node whose lease its
// caller took again (tasklock serve's node-name lock) before any listing
// could see it gone judges no other node stopped for a lease: the others
// lost their leases alike and take them back within one. It used to take
// the first listing after the outage that showed its own lease for proof
// that the store had been fine, and settled a live node's running record
// interrupted (seen with two serves and an 18 s Redis pause: 3.8 s after
// the store came back, before the other serve retook its lease).
func TestRetakenNodeLeaseJudgesNobodyForALease(t *testing.T) {
	c := newCluster(t)
	holder, err := tasklock.New(c.locks, &tasklock.Config{Owner: "caller", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx := context.Background()
	prefix := DefaultKeyPrefix + "node/"
	obtain := func(node string) *tasklock.Lock {
		t.Helper()
		l, err := holder.TryObtain(ctx, prefix+node, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first := obtain("a")
	obtain("b")
	// b runs a tick: its running record, written before the outage.
	running := ledger.RunRecord{Job: "elsewhere", Tick: t0, Attempt: 1, Node: "b", Start: t0, Status: ledger.RunRunning}
	if err := c.ledger.RecordRuns(ctx, []ledger.RunRecord{running}); err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second // a sweep every second
	cfg := &Config{NodeLister: c.locks, NodeLeaseTTL: ttl, NodeLeaseTaken: c.clock.Now()}
	c.node("a", 0, cfg).add(t, Job{Name: "x", Schedule: "@every 1h", Handler: func(context.Context, Run) error { return nil }}).start(t)
	state := func() ledger.RunStatus {
		t.Helper()
		rs := c.history("elsewhere")
		if len(rs) != 1 {
			t.Fatalf("records of b's run: %v, want one", rs)
		}
		return rs[0].Status
	}
	c.step(time.Second) // a sweep lists both leases: b is alive
	if s := state(); s != ledger.RunRunning {
		t.Fatalf("b's run is %s while b holds its lease, want running", s)
	}

	// The outage: both leases end at the store; a's caller takes a's
	// again at once, b has not yet.
	for _, n := range []string{"a", "b"} {
		if err := c.locks.ForceRelease(ctx, prefix+n); err != nil {
			t.Fatal(err)
		}
	}
	if again := obtain("a"); again.Fence() == first.Fence() {
		t.Fatalf("a's lease taken again with the same fence %d", again.Fence())
	}
	c.step(time.Second) // a sweep lists a's new lease, and no b
	if s := state(); s != ledger.RunRunning {
		t.Fatalf("b's run is %s at the first sweep after the outage, want running: b may not have taken its lease back yet", s)
	}
	c.step(ttl - time.Second)
	if s := state(); s != ledger.RunRunning {
		t.Fatalf("b's run is %s within a lease of the outage, want running", s)
	}
	// b never comes back: a lease after the outage it is judged stopped.
	c.step(time.Second)
	waitFor(t, "b's run to be settled interrupted", func() bool { return state() == ledger.RunInterrupted })
}

// downLedger and downLister fail every call while down is set, as a store
// that does not answer would.
type downLedger struct {
	ledger.Ledger
	down *atomic.Bool
}

var errDown = errors.New("store down")

func (d downLedger) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	if d.down.Load() {
		return nil, errDown
	}
	return d.Ledger.JobStates(ctx)
}

func (d downLedger) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if d.down.Load() {
		return nil, errDown
	}
	return d.Ledger.Runs(ctx, q)
}

func (d downLedger) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	if d.down.Load() {
		return nil, errDown
	}
	return d.Ledger.Claim(ctx, ps)
}

type downLister struct {
	driver.Lister
	down *atomic.Bool
}

func (d downLister) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	if d.down.Load() {
		return nil, errDown
	}
	return d.Lister.Leases(ctx, prefix)
}

// After a store outage in which another node's lease lapsed while this
// node's own outlived it at the store (a lease ends at its holder's last
// renewal, and the store keeps it a little past the time its holder stops
// trusting it), this node judges no other node stopped for a lease: that
// node takes its lease back within one. It used to see its own lease listed
// with its old fence, take the store for fine, and find the other node
// stopped at once: two serves, Redis killed for longer than their leases,
// then restarted; the first to look took the other's shard-run for
// stopped and ran it again though it had ended ok during the outage
// (TestServeNoRetakeAfterStoreOutage, twice in full test runs). The same
// with no NodeLister, where the node asks for each lease.
func TestStoreOutageJudgesNobodyForALease(t *testing.T) {
	t.Run("lister", func(t *testing.T) { testStoreOutageJudgesNobody(t, true) })
	t.Run("no lister", func(t *testing.T) { testStoreOutageJudgesNobody(t, false) })
}

func testStoreOutageJudgesNobody(t *testing.T, lister bool) {
	c := newCluster(t)
	holder, err := tasklock.New(c.locks, &tasklock.Config{Owner: "caller", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx := context.Background()
	prefix := DefaultKeyPrefix + "node/"
	for _, n := range []string{"a", "b"} {
		if _, err := holder.TryObtain(ctx, prefix+n, nil); err != nil {
			t.Fatal(err)
		}
	}
	running := ledger.RunRecord{Job: "elsewhere", Tick: t0, Attempt: 1, Node: "b", Start: t0, Status: ledger.RunRunning}
	if err := c.ledger.RecordRuns(ctx, []ledger.RunRecord{running}); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	c.wrapLedger = func(_ string, l ledger.Ledger) ledger.Ledger { return downLedger{l, &down} }
	const ttl = 3 * time.Second // a sweep every second
	cfg := &Config{NodeLeaseTTL: ttl, NodeLeaseTaken: c.clock.Now()}
	if lister {
		cfg.NodeLister = downLister{c.locks, &down}
	}
	c.node("a", 0, cfg).add(t, Job{Name: "x", Schedule: "@every 1h", Handler: func(context.Context, Run) error { return nil }}).start(t)
	state := func() ledger.RunStatus {
		t.Helper()
		rs := c.history("elsewhere")
		if len(rs) != 1 {
			t.Fatalf("records of b's run: %v, want one", rs)
		}
		return rs[0].Status
	}
	c.step(time.Second) // a sweep lists both leases: b is alive
	if s := state(); s != ledger.RunRunning {
		t.Fatalf("b's run is %s while b holds its lease, want running", s)
	}

	// The outage, two sweeps long: b's lease ends at the store, a's
	// outlives it with its fence.
	down.Store(true)
	if err := c.locks.ForceRelease(ctx, prefix+"b"); err != nil {
		t.Fatal(err)
	}
	c.step(time.Second)
	c.step(time.Second)
	down.Store(false)
	c.step(time.Second) // the store is back: a lists its own lease and no b
	if s := state(); s != ledger.RunRunning {
		t.Fatalf("b's run is %s at the first sweep after the outage, want running: b may not have taken its lease back yet", s)
	}
	c.step(ttl - time.Second)
	if s := state(); s != ledger.RunRunning {
		t.Fatalf("b's run is %s within a lease of the outage, want running", s)
	}
	// b never comes back: a lease after the store came back it is judged
	// stopped.
	c.step(time.Second)
	waitFor(t, "b's run to be settled interrupted", func() bool { return state() == ledger.RunInterrupted })
}

// A store call that fails now and then, for less than a sweep interval,
// does not stop a node from judging the others: a dead node's run is
// settled a lease after it stopped, however often the store blinks.
func TestStoreBlinksStillJudge(t *testing.T) {
	c := newCluster(t)
	holder, err := tasklock.New(c.locks, &tasklock.Config{Owner: "caller", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx := context.Background()
	prefix := DefaultKeyPrefix + "node/"
	if _, err := holder.TryObtain(ctx, prefix+"a", nil); err != nil {
		t.Fatal(err)
	}
	running := ledger.RunRecord{Job: "elsewhere", Tick: t0, Attempt: 1, Node: "b", Start: t0, Status: ledger.RunRunning}
	if err := c.ledger.RecordRuns(ctx, []ledger.RunRecord{running}); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	c.wrapLedger = func(_ string, l ledger.Ledger) ledger.Ledger { return downLedger{l, &down} }
	const ttl = 3 * time.Second
	cfg := &Config{NodeLister: downLister{c.locks, &down}, NodeLeaseTTL: ttl, NodeLeaseTaken: c.clock.Now()}
	c.node("a", 0, cfg).add(t, Job{Name: "x", Schedule: "@every 1h", Handler: func(context.Context, Run) error { return nil }}).start(t)
	// Every other half-second step fails: each spell is one poll long.
	for i := 0; i < 8; i++ {
		down.Store(i%2 == 0)
		c.step(500 * time.Millisecond)
	}
	down.Store(false)
	c.step(time.Second)
	waitFor(t, "b's run to be settled interrupted", func() bool {
		rs := c.history("elsewhere")
		return len(rs) == 1 && rs[0].Status == ledger.RunInterrupted
	})
}

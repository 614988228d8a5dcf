package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
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

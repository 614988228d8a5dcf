package memstore_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
	"github.com/tasklock/tasklock/memstore"
)

func TestLedgerConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger { return memstore.New(nil) })
}

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// The ledger decides with the store's Clock: claim retention, record ages
// and trigger times follow it, not the wall clock.
func TestLedgerUsesStoreClock(t *testing.T) {
	clk := &manualClock{now: time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)}
	s := memstore.New(clk)
	ctx := context.Background()
	tick := time.Date(2031, 5, 1, 11, 0, 0, 0, time.UTC)
	p := ledger.ClaimParams{Job: "j", Tick: tick, Node: "a", Token: "ta", Retain: time.Hour}
	if res, err := s.Claim(ctx, []ledger.ClaimParams{p}); err != nil || res[0] != nil {
		t.Fatal(res, err)
	}
	q := p
	q.Node, q.Token = "b", "tb"
	clk.advance(time.Hour - time.Nanosecond)
	res, err := s.Claim(ctx, []ledger.ClaimParams{q})
	var ce *ledger.ClaimedError
	if err != nil || !errors.As(res[0], &ce) || ce.Node != "a" || !ce.At.Equal(clk.now.Add(-time.Hour+time.Nanosecond)) {
		t.Fatalf("within retention: %v, %v", res, err)
	}
	clk.advance(time.Nanosecond)
	if res, err := s.Claim(ctx, []ledger.ClaimParams{q}); err != nil || res[0] != nil {
		t.Fatalf("after retention: %v, %v", res, err)
	}

	if err := s.RecordRuns(ctx, []ledger.RunRecord{{Job: "j", Tick: tick, Attempt: 1, Status: ledger.RunOK}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "j", Op: ledger.JobTrigger, Trigger: "x"})
	if err != nil || !st.Triggers[0].At.Equal(clk.Now()) {
		t.Fatalf("trigger At = %v, want the store clock's %v (%v)", st.Triggers, clk.Now(), err)
	}
	rs, _ := s.Runs(ctx, ledger.RunQuery{})
	if len(rs) != 1 || !rs[0].Recorded.Equal(clk.Now()) {
		t.Fatalf("Recorded = %+v, want %v", rs, clk.Now())
	}
	clk.advance(48 * time.Hour)
	res2, err := s.Prune(ctx, ledger.PruneParams{RunsOlderThan: 24 * time.Hour, TriggersOlderThan: 24 * time.Hour})
	if err != nil || res2 != (ledger.PruneResult{Claims: 1, Runs: 1, Triggers: 1}) {
		t.Fatalf("Prune = %+v, %v; want one of each", res2, err)
	}
}

// Each Store has its own ledger, and it goes when the Store does.
func TestLedgerPerStore(t *testing.T) {
	ctx := context.Background()
	a, b := memstore.New(nil), memstore.New(nil)
	p := []ledger.ClaimParams{{Job: "j", Tick: time.Unix(1e9, 0), Token: "t", Retain: time.Hour}}
	ra, _ := a.Claim(ctx, p)
	p[0].Token = "u"
	rb, _ := b.Claim(ctx, p)
	if ra[0] != nil || rb[0] != nil {
		t.Fatalf("a claim in one store held in another: %v %v", ra, rb)
	}
	collected := make(chan struct{})
	runtime.AddCleanup(a, func(ch chan struct{}) { close(ch) }, collected)
	a = nil
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		select {
		case <-collected:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("a Store with a ledger was never collected")
		}
		time.Sleep(10 * time.Millisecond) // give the cleanup goroutine a turn
	}
}

package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

var electionTests = []struct {
	name string
	fn   func(t *testing.T, s driver.Store)
}{
	{"ElectionOneLeaderRisingTerms", testElectionOneLeader},
	{"ElectionObserve", testElectionObserve},
}

// testElectionOneLeader: three candidates on three Lockers campaign in a
// loop, each leading briefly and resigning. An oracle counts leaders
// inside their terms: never two at once; every term is greater than the
// one before; every candidate leads at least once.
func testElectionOneLeader(t *testing.T, s driver.Store) {
	ctx := ctxT(t, 60*time.Second)
	const rounds = 6
	var (
		inTerm   atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		terms    []uint64
		led      = map[string]int{}
		wg       sync.WaitGroup
	)
	for _, name := range []string{"a", "b", "c"} {
		e := newLocker(t, s, name, nil).Election("leader", &tasklock.ObtainOptions{TTL: 2 * time.Second})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(terms) >= 3*rounds
				mu.Unlock()
				if done {
					return
				}
				l, err := e.Campaign(ctx)
				if err != nil {
					t.Errorf("%s: Campaign: %v", name, err)
					return
				}
				if inTerm.Add(1) != 1 {
					overlaps.Add(1)
				}
				if e.Leader() != l {
					t.Errorf("%s: Leader() is not the leadership Campaign returned", name)
				}
				mu.Lock()
				terms = append(terms, l.Fence())
				led[name]++
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // the term's work; not synchronisation
				inTerm.Add(-1)
				if err := e.Resign(ctx); err != nil {
					t.Errorf("%s: Resign: %v", name, err)
					return
				}
				if e.Leader() != nil {
					t.Errorf("%s: Leader() after Resign is not nil", name)
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times two leaders at once", n)
	}
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			t.Fatalf("term %d after %d: terms must rise (%v)", terms[i], terms[i-1], terms)
		}
	}
	if len(led) < 2 {
		t.Fatalf("only %v ever led in %d terms; resigning must hand the leadership on", led, len(terms))
	}
}

// testElectionObserve: an observer on another Locker sees no leader, then
// the leader with its term, then (after the leader's Locker closes, which
// releases the lease) the next leader with a greater term; and the
// deposed leader's Context ends with ErrClosed.
func testElectionObserve(t *testing.T, s driver.Store) {
	ctx := ctxT(t, 30*time.Second)
	opts := &tasklock.ObtainOptions{TTL: 2 * time.Second}
	obs := newLocker(t, s, "observer", nil).Election("observed", opts)
	if _, ok := s.(driver.Lister); !ok {
		if _, open := <-obs.Observe(ctx); open {
			t.Fatal("Observe on a store that cannot list leases sent a value")
		}
		t.Skip("store is not a driver.Lister: Observe closes at once")
	}
	seen := obs.Observe(ctx)
	next := func(what string, ok func(tasklock.LeaderInfo) bool) tasklock.LeaderInfo {
		t.Helper()
		for {
			select {
			case info, open := <-seen:
				if !open {
					t.Fatalf("Observe closed while waiting for %s", what)
				}
				if ok(info) {
					return info
				}
			case <-ctx.Done():
				t.Fatalf("Observe did not show %s", what)
			}
		}
	}
	next("no leader", func(i tasklock.LeaderInfo) bool { return i.Owner == "" && i.Term == 0 })

	first := newLocker(t, s, "first", nil)
	l1, err := first.Election("observed", opts).Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i1 := next("the first leader", func(i tasklock.LeaderInfo) bool { return i.Owner == "first" })
	if i1.Term != l1.Fence() || i1.Since.IsZero() {
		t.Fatalf("observed %+v, want term %d and a Since", i1, l1.Fence())
	}

	second := newLocker(t, s, "second", nil).Election("observed", opts)
	won := make(chan *tasklock.Lock, 1)
	go func() {
		l, err := second.Campaign(ctx)
		if err != nil {
			t.Errorf("second Campaign: %v", err)
		}
		won <- l
	}()
	_ = first.Close() // the leader goes: its lease is released
	waitDone(t, l1, 5*time.Second)
	var l2 *tasklock.Lock
	select {
	case l2 = <-won:
	case <-ctx.Done():
		t.Fatal("the follower was not elected after the leader's Locker closed")
	}
	if l2 == nil {
		return
	}
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("second term %d, want above %d", l2.Fence(), l1.Fence())
	}
	i2 := next("the second leader", func(i tasklock.LeaderInfo) bool { return i.Owner == "second" })
	if i2.Term != l2.Fence() {
		t.Fatalf("observed term %d, want %d", i2.Term, l2.Fence())
	}
	if err := second.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
}

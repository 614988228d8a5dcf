package faulttest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/memstore"
)

// The harness's own tests. The holder process keeps its hold in a memstore
// of its own (nothing crosses processes here: the protocol, the section
// log and the signals' bookkeeping are under test, not a store).

var writes atomic.Int64

// TestKindHolderProcess is the holder process of these tests.
func TestKindHolderProcess(t *testing.T) {
	KindHolderMain(t, func(time.Duration) (driver.Store, WriteFunc, error) {
		return memstore.New(nil), func(ctx context.Context, fence uint64) (bool, error) {
			return writes.Add(1)%2 == 0, nil // every other write refused
		}, nil
	})
}

func TestKindHolderPausedAndResumed(t *testing.T) {
	const ttl = 500 * time.Millisecond
	h := StartKindHolder(t, "TestKindHolderProcess", "k", tasklock.ModePermit, 2, ttl)
	if h.Fence == 0 || h.Mode != tasklock.ModePermit {
		t.Fatalf("holder: %v fence %d", h.Mode, h.Fence)
	}
	h.WaitLine(t, "LEAVE ", 5*time.Second) // a second section
	h.Stop(t)
	stopped := time.Now()
	time.Sleep(time.Until(stopped.Add(2 * ttl))) // the pause itself, not synchronisation
	h.CheckResumed(t, "")
	secs := h.Sections()
	if len(secs) < 2 {
		t.Fatalf("%d sections, want at least 2", len(secs))
	}
	for _, s := range secs {
		if s.Holder != HelperOwner || s.Mode != tasklock.ModePermit || s.Fence != h.Fence || s.Leave < s.Enter {
			t.Errorf("section %+v", s)
		}
		if s.Interrupted != (s.Enter < stopped.UnixNano() && s.Leave > stopped.UnixNano()) {
			t.Errorf("section %v: Interrupted %v, stopped at %d", s, s.Interrupted, stopped.UnixNano())
		}
	}
	accepted, refused := h.Writes()
	if accepted+refused != len(secs) || accepted == 0 || refused == 0 {
		t.Errorf("writes: %d accepted, %d refused, in %d sections", accepted, refused, len(secs))
	}
	if most := CheckSections(t, 1, secs); most != 1 {
		t.Errorf("one holder's sections: most %d open at once, want 1", most)
	}
}

func TestKindHolderKilled(t *testing.T) {
	h := StartKindHolder(t, "TestKindHolderProcess", "k", tasklock.ModeRead, 0, 5*time.Second)
	h.WaitLine(t, "ENTER ", 5*time.Second)
	h.Kill(t)
	killed := time.Now().UnixNano()
	secs := h.Sections()
	if len(secs) == 0 {
		t.Fatal("no sections")
	}
	for _, s := range secs {
		if s.Leave > killed || s.Interrupted {
			t.Errorf("section %v after the kill at %d", s, killed)
		}
	}
}

// recorder is a testing.TB that keeps what CheckSections reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Logf(string, ...any)          {}
func (r *recorder) Errorf(f string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(f, args...)) }

func TestCheckSections(t *testing.T) {
	sec := func(holder string, m tasklock.Mode, enter, leave int64) Section {
		return Section{Holder: holder, Mode: m, Fence: 1, Enter: enter, Leave: leave}
	}
	w, r, p := tasklock.ModeWrite, tasklock.ModeRead, tasklock.ModePermit
	cases := []struct {
		name    string
		permits int
		secs    []Section
		most    int
		errs    int
	}{
		{"readers share", 0, []Section{sec("a", r, 0, 10), sec("b", r, 5, 15), sec("c", r, 8, 9)}, 3, 0},
		{"writers in turn", 0, []Section{sec("a", w, 0, 10), sec("b", w, 10, 20), sec("c", r, 20, 30)}, 1, 0},
		{"two writers", 0, []Section{sec("a", w, 0, 10), sec("b", w, 9, 20)}, 2, 1},
		{"writer beside a reader", 0, []Section{sec("a", r, 0, 10), sec("b", w, 5, 6)}, 2, 1},
		{"reader beside a writer", 0, []Section{sec("a", w, 0, 10), sec("b", r, 5, 6)}, 2, 1},
		{"permits within", 2, []Section{sec("a", p, 0, 10), sec("b", p, 5, 15), sec("c", p, 10, 20)}, 2, 0},
		{"permits beyond", 2, []Section{sec("a", p, 0, 10), sec("b", p, 5, 15), sec("c", p, 9, 20)}, 3, 1},
		{"interrupted not counted", 1, []Section{sec("a", p, 0, 10), {Holder: "b", Mode: p, Enter: 5, Leave: 15, Interrupted: true}}, 1, 0},
		{"backwards", 1, []Section{sec("a", p, 10, 0)}, 0, 1},
	}
	for _, c := range cases {
		rec := &recorder{TB: t}
		// Split across two logs: the holder process's and the test's own.
		most := CheckSections(rec, c.permits, c.secs[:1], c.secs[1:])
		if most != c.most || len(rec.errs) != c.errs {
			t.Errorf("%s: most %d, errors %q; want %d and %d errors", c.name, most, rec.errs, c.most, c.errs)
		}
		for _, e := range rec.errs {
			if c.errs > 0 && !strings.Contains(e, "overlap") && !strings.Contains(e, "ends before") {
				t.Errorf("%s: %q", c.name, e)
			}
		}
	}
	var log Sections
	lk, err := tasklock.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.RWMutex("k").TryLock(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	if !log.Do("me", l, func() { ran++ }) || ran != 1 {
		t.Fatal("Do did not run the section of a held lock")
	}
	stop := log.Loop("me", l, nil)
	for deadline := time.Now().Add(10 * time.Second); len(log.List()) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d sections within 10s of Loop", len(log.List()))
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
	_ = l.Release(context.Background())
	stop() // the loop ended with the lock
	n := len(log.List())
	if log.Do("me", l, func() { ran++ }) || ran != 1 || len(log.List()) != n {
		t.Fatal("Do ran a section of a released lock")
	}
	for _, s := range log.List() {
		if s.Mode != tasklock.ModeWrite || s.Holder != "me" || s.Fence != l.Fence() {
			t.Fatalf("section %+v", s)
		}
	}
}

// Both's sections overlap, however fast the machine: CheckSections counts
// two open at once, and a lock that ended runs no section.
func TestSectionsBoth(t *testing.T) {
	lk, err := tasklock.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	ctx := context.Background()
	var held [2]*tasklock.Lock
	for i := range held {
		if held[i], err = lk.Semaphore("pool", 2).TryAcquire(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	var log Sections
	if !log.Both("a", held[0], "b", held[1]) {
		t.Fatal("Both did not run the sections of two held permits")
	}
	if most := CheckSections(t, 2, log.List()); most != 2 {
		t.Fatalf("at most %d sections at once after Both, want 2", most)
	}
	_ = held[1].Release(ctx)
	if log.Both("a", held[0], "b", held[1]) {
		t.Fatal("Both reported a section of a released permit")
	}
	if n := len(log.List()); n != 3 {
		t.Fatalf("%d sections, want 3: Both's two, then a's alone", n)
	}
	_ = held[0].Release(ctx)
}

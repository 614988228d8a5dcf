package alarm

import (
	"sync"
	"testing"
	"time"
)

// owner is what the stores do: a mutex around the alarm, and a firing that
// records what it saw.
type owner struct {
	mu    sync.Mutex
	a     Alarm
	fired chan time.Time
}

func newOwner() *owner {
	o := &owner{fired: make(chan time.Time, 8)}
	o.a.Fire = func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !o.a.BeginLocked() {
			return
		}
		o.a.EndLocked()
		o.fired <- time.Now()
	}
	return o
}

func (o *owner) arm(t time.Time) {
	o.mu.Lock()
	o.a.ArmLocked(t)
	o.mu.Unlock()
}

func TestEarliestDeadlineWins(t *testing.T) {
	o := newOwner()
	start := time.Now()
	o.arm(start.Add(time.Hour))
	o.arm(start.Add(20 * time.Millisecond)) // earlier: moves the timer
	o.arm(start.Add(time.Hour))             // later: ignored
	select {
	case at := <-o.fired:
		if at.Sub(start) < 20*time.Millisecond {
			t.Fatalf("fired after %v, before the deadline", at.Sub(start))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the earliest deadline never fired")
	}
}

func TestArmIgnoredDuringFiringAndAfterStop(t *testing.T) {
	o := newOwner()
	o.mu.Lock()
	if !o.a.BeginLocked() {
		t.Fatal("BeginLocked refused a first firing")
	}
	if o.a.BeginLocked() {
		t.Fatal("BeginLocked allowed a second firing under way")
	}
	o.a.ArmLocked(time.Now()) // under way: the firing re-arms itself
	if o.a.timer != nil {
		t.Fatal("ArmLocked set a timer during a firing")
	}
	o.a.EndLocked()
	o.a.StopLocked()
	o.a.ArmLocked(time.Now())
	if o.a.timer != nil || o.a.BeginLocked() {
		t.Fatal("a stopped alarm was armed or began a firing")
	}
	o.mu.Unlock()
}

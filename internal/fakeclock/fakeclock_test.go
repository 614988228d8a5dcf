package fakeclock

import (
	"testing"
	"time"
)

func fired(t *Timer) bool {
	select {
	case <-t.C():
		return true
	default:
		return false
	}
}

func TestTimersFireWhenAdvancedPast(t *testing.T) {
	c := New()
	start := c.Now()
	a, b := c.NewTimer(10*time.Millisecond), c.NewTimer(20*time.Millisecond)
	if next, ok := c.Next(); !ok || next != start.Add(10*time.Millisecond) {
		t.Fatalf("Next = %v, %v; want start+10ms", next.Sub(start), ok)
	}
	c.Advance(9 * time.Millisecond)
	if fired(a) || fired(b) {
		t.Fatal("a timer fired early")
	}
	c.Advance(time.Millisecond)
	if !fired(a) || fired(b) {
		t.Fatal("want exactly the 10 ms timer fired at +10ms")
	}
	if b.Stop() != true || b.Stop() != false {
		t.Fatal("Stop should report armed once")
	}
	c.Advance(time.Hour)
	if fired(b) {
		t.Fatal("a stopped timer fired")
	}
	a.Reset(0)
	if !fired(a) {
		t.Fatal("Reset(0) did not fire at once")
	}
	if _, ok := c.Next(); ok {
		t.Fatal("Next reports an armed timer, want none")
	}
	if c.Now().Sub(start) != time.Hour+10*time.Millisecond {
		t.Fatalf("Now moved %v, want 1h10ms", c.Now().Sub(start))
	}
	if c.Resets() != 3 {
		t.Fatalf("Resets = %d, want 3", c.Resets())
	}
}

// Package fakeclock is a clock for tests whose time moves only when the
// test says: Advance moves it and fires the timers that fall due. It has
// the methods of tasklock.Clock except that NewTimer returns the concrete
// *Timer (this package cannot name tasklock.Timer: the root package's own
// tests use it), so a test adapts it in one line:
//
//	type clock struct{ *fakeclock.Clock }
//
//	func (c clock) NewTimer(d time.Duration) tasklock.Timer { return c.Clock.NewTimer(d) }
//
// Times of a Clock from New carry a monotonic reading, as tasklock.Clock
// requires; At makes one at a given time, for tests of wall-clock ticks.
// Frozen makes a clock that never moves, whose timers never fire: code
// driven by it can only be woken by something else.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a fake time source. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*Timer]struct{} // armed
	resets int                 // Reset calls so far, for tests that wait on them
}

// New returns a Clock at the current time (with its monotonic reading),
// which moves only by Advance.
func New() *Clock { return At(time.Now()) }

// At returns a Clock at t, which moves only by Advance. Its times carry a
// monotonic reading only when t does.
func At(t time.Time) *Clock { return &Clock{now: t, timers: make(map[*Timer]struct{})} }

// Frozen returns a Clock that is never advanced: Now never changes and no
// timer ever fires.
func Frozen() *Clock { return New() }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires d from the clock's now.
func (c *Clock) NewTimer(d time.Duration) *Timer {
	t := &Timer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock by d and fires every timer whose time has come.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.at.After(c.now) {
			delete(c.timers, t)
			select {
			case t.ch <- c.now:
			default:
			}
		}
	}
}

// Next returns the earliest time an armed timer fires, and false when none
// is armed.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for t := range c.timers {
		if next.IsZero() || t.at.Before(next) {
			next = t.at
		}
	}
	return next, !next.IsZero()
}

// Armed returns how many timers wait to fire.
func (c *Clock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Resets returns how many times a timer of this clock was made or reset.
func (c *Clock) Resets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resets
}

// Timer is a timer of a Clock: it has the methods of tasklock.Timer.
type Timer struct {
	c  *Clock
	ch chan time.Time
	at time.Time
}

// C returns the channel the timer delivers on.
func (t *Timer) C() <-chan time.Time { return t.ch }

// Reset stops the timer and makes it fire d from the clock's now. A value
// not yet received is dropped, as time.Timer does since Go 1.23.
func (t *Timer) Reset(d time.Duration) {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resets++
	select {
	case <-t.ch:
	default:
	}
	t.at = c.now.Add(d)
	if d <= 0 {
		delete(c.timers, t)
		t.ch <- c.now
		return
	}
	c.timers[t] = struct{}{}
}

// Stop stops the timer and reports whether it was armed.
func (t *Timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	delete(t.c.timers, t)
	return armed
}

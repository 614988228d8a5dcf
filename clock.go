package tasklock

import "time"

// Clock is the source of time for a Locker. Every clock read of the lock
// core goes through it, so tests can inject a fake one. Times returned by Now
// must carry a monotonic reading (as time.Now does) for deadlines to be
// immune to wall-clock steps.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the core uses.
type Timer interface {
	C() <-chan time.Time
	// Reset stops the timer and makes it fire after d. The caller has
	// drained C or knows it is empty.
	Reset(d time.Duration)
	Stop() bool
}

// SystemClock is the Clock backed by package time.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a Timer backed by time.NewTimer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time   { return s.t.C }
func (s sysTimer) Reset(d time.Duration) { s.t.Reset(d) }
func (s sysTimer) Stop() bool            { return s.t.Stop() }

// Package alarm is one timer armed at the earliest of many deadlines, for
// work a store does in bursts at deadlines it keeps itself (the etcd and
// ZooKeeper stores' reapers): one time.AfterFunc, and no goroutine runs
// between firings.
//
// An Alarm has no lock of its own: its owner guards it with its own mutex,
// held around every method (hence the Locked suffixes). The function it
// calls takes that mutex, brackets its work with BeginLocked and EndLocked,
// and arms the alarm again for what is left; arming while a firing is under
// way is ignored, since the firing re-arms when it ends.
package alarm

import "time"

// Alarm calls Fire at the earliest time it was armed for. The zero value,
// with Fire set, is ready to use.
type Alarm struct {
	// Fire is called on the timer's goroutine when the alarm goes off.
	Fire func()

	timer   *time.Timer
	at      time.Time // when the timer fires; zero when it is not set
	running bool      // a firing is under way
	stopped bool
}

// ArmLocked makes the alarm go off no later than t.
func (a *Alarm) ArmLocked(t time.Time) {
	if a.stopped || a.running || (!a.at.IsZero() && !t.Before(a.at)) {
		return
	}
	a.at = t
	d := time.Until(t)
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.Fire)
		return
	}
	a.timer.Reset(d)
}

// BeginLocked starts a firing and reports whether Fire should go on: not
// when the alarm was stopped or another firing is under way.
func (a *Alarm) BeginLocked() bool {
	if a.stopped || a.running {
		return false
	}
	a.running, a.at = true, time.Time{}
	return true
}

// EndLocked ends a firing; the caller then arms the alarm for the next
// deadline, if any.
func (a *Alarm) EndLocked() { a.running = false }

// StopLocked stops the alarm for good.
func (a *Alarm) StopLocked() {
	a.stopped = true
	if a.timer != nil {
		a.timer.Stop()
	}
}

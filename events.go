package tasklock

import "time"

// EventType tells what happened to a lock.
type EventType uint8

// The event types, in the order a lock meets them.
const (
	EventObtained    EventType = iota + 1 // a lock was granted (TryObtain or Obtain); Wait says how long Obtain waited
	EventNotObtained                      // an attempt found the key held; Err says why
	EventRenewed                          // a lease was renewed
	EventRenewFailed                      // a renewal call failed and will be retried; Err says why (after EventLost for a call that hung past the lease)
	EventLost                             // a lock ended other than by Release; Err is the cause
	EventReleased                         // Release ended a lock; Err is set when the store could not delete its lease
	EventQueued                           // Obtain joined the store's queue for the key (driver.Queuer)
)

var eventNames = [...]string{"", "obtained", "not_obtained", "renewed", "renew_failed", "lost", "released", "queued"}

// String returns the event's name in snake case, as used in metrics labels.
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "unknown"
}

// Event is passed to Config.OnEvent.
type Event struct {
	Type  EventType
	Key   string
	Owner string
	Mode  Mode // the kind of hold: a mutex, a reader or writer, a permit
	Fence uint64
	Wait  time.Duration // EventObtained: time spent waiting in Obtain
	Err   error         // EventNotObtained, EventRenewFailed, EventLost; EventReleased when the store failed
	// ValidUntil is, for EventObtained and EventRenewed, the end of the
	// lease's local validity after that grant or renewal: when Done closes
	// unless a renewal moves it later (ObtainOptions.Grace ahead of the
	// lease's own end, sent time + TTL − drift). It carries a monotonic
	// reading: compare it with time.Now in the same process only.
	ValidUntil time.Time
}

func (lk *Locker) emit(e Event) {
	if lk.onEvent != nil {
		lk.onEvent(e)
	}
}

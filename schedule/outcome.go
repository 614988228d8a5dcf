package schedule

import "github.com/tasklock/tasklock/ledger"

// tickEnded emits EventTickEnded for the last attempt runTick recorded, if
// it recorded one: the tick's outcome on this node, after its retries (or
// once a retry cannot follow: the lock was lost, the node shuts down).
// runTick defers it, so that every way out of the attempts loop emits it
// once.
func (s *Scheduler) tickEnded(last *ledger.RunRecord, catchUp bool) {
	if last.Status == "" || s.onEvent == nil {
		return
	}
	s.emit(runEvent(EventTickEnded, last, catchUp))
}

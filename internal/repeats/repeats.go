// Package repeats keeps the log of a failure that recurs on every poll
// readable: its first occurrence is logged, then one line every Every while
// it goes on, and one line when it stops. A store down for an hour then
// costs a few dozen lines, not one per poll.
package repeats

import (
	"log/slog"
	"sync"
	"time"
)

// Every is how often a failure that goes on is logged again.
const Every = time.Minute

// Failure tracks one recurring failure, such as a poll of the store. Its
// zero value is ready for use; it is safe for concurrent use.
type Failure struct {
	mu       sync.Mutex
	since    time.Time // the first failure of this spell; zero when none
	total    int       // failures in this spell
	quiet    int       // failures not logged since the last line
	loggedAt time.Time // when the last line was logged
}

// Failed notes a failure at now. It reports whether to log it and, for a
// failure that goes on, the attributes to add to the line: "failing_since"
// and "not_logged", the failures left out since the last line.
func (f *Failure) Failed(now time.Time) (log bool, attrs []any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total++
	if f.since.IsZero() {
		f.since, f.loggedAt, f.quiet = now, now, 0
		return true, nil
	}
	if now.Sub(f.loggedAt) < Every {
		f.quiet++
		return false, nil
	}
	attrs = []any{"failing_since", f.since.UTC(), "not_logged", f.quiet}
	f.loggedAt, f.quiet = now, 0
	return true, attrs
}

// Recovered notes a success at now. It reports whether it ends a spell of
// failures and, if so, the attributes to log with that: "failures" and
// "failing_for".
func (f *Failure) Recovered(now time.Time) (ended bool, attrs []any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		return false, nil
	}
	attrs = []any{"failures", f.total, "failing_for", now.Sub(f.since).Round(time.Millisecond)}
	f.since, f.total, f.quiet, f.loggedAt = time.Time{}, 0, 0, time.Time{}
	return true, attrs
}

// Log logs the outcome of one try at now by the rules of Failed and
// Recovered: err at ERROR as failed, or the end of a spell of failures at
// INFO as recovered. Each line has args first, then "err" (for a failure)
// and Failed's or Recovered's attributes.
func (f *Failure) Log(log *slog.Logger, now time.Time, err error, failed, recovered string, args ...any) {
	if err != nil {
		if ok, attrs := f.Failed(now); ok {
			log.Error(failed, append(append(args, "err", err), attrs...)...)
		}
		return
	}
	if ended, attrs := f.Recovered(now); ended {
		log.Info(recovered, append(args, attrs...)...)
	}
}

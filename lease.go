package tasklock

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Lease arithmetic: every calculation of how long a lease may be trusted,
// how long to ask for, and when the engine must look at it next. These are
// functions of durations and times only, so that a table can test them; the
// engine (engine.go) keeps the state they are applied to.
//
// All times are readings of the Locker's Clock, with their monotonic part.
// sentAt is when the request that started or renewed a lease was sent: the
// store's TTL began no earlier, so local validity counted from sentAt errs
// on the safe side.

// drift is the margin by which local validity ends before the lease can end
// at the store: max(2 ms, 1% of TTL).
func drift(ttl time.Duration) time.Duration {
	return max(2*time.Millisecond, ttl/100)
}

// validity is how long after sentAt a lease of ttl may be trusted, less the
// holder's grace.
func validity(ttl, grace time.Duration) time.Duration {
	return ttl - drift(ttl) - grace
}

// validUntil is the end of the local validity of a lease of ttl asked for at
// sentAt: sentAt + TTL − drift − grace. The holder never believes it holds
// the lock past it.
func validUntil(sentAt time.Time, ttl, grace time.Duration) time.Time {
	return sentAt.Add(validity(ttl, grace))
}

// leaseLength is the lease to ask the store for after held of the lock's
// hold: ttl, or what is left of maxHold (zero: unbounded) when that is no
// longer, and then final: no renewal follows it.
func leaseLength(ttl, maxHold, held time.Duration) (lease time.Duration, final bool) {
	if maxHold <= 0 {
		return ttl, false
	}
	if rest := maxHold - held; rest <= ttl {
		return rest, true
	}
	return ttl, false
}

// firstLease is the lease of a grant: leaseLength at the start of the hold.
func firstLease(ttl, maxHold time.Duration) (lease time.Duration, final bool) {
	return leaseLength(ttl, maxHold, 0)
}

// maxHoldReached reports whether, after held of the hold, what is left of
// maxHold (zero: unbounded) is too short to be trusted as a lease: renewal
// then stops, and the lease ends at the store at acquisition + MaxHold.
func maxHoldReached(maxHold, held, grace time.Duration) bool {
	return maxHold > 0 && validity(maxHold-held, grace) <= 0
}

// keepFor is how long a lease released after held of the hold must stay
// at the store to honour minHold (zero: none): minHold − held, zero or
// negative when nothing is left to keep.
func keepFor(minHold, held time.Duration) time.Duration {
	if minHold <= 0 {
		return 0
	}
	return minHold - held
}

// renewalAt is when a lease of ttl asked for at sentAt is next renewed:
// after a third of its TTL, which leaves two more thirds for retries.
func renewalAt(sentAt time.Time, ttl time.Duration) time.Time {
	return sentAt.Add(ttl / 3)
}

// renewWindow is how far ahead of its time a renewal of a lease of ttl may
// be made so that it joins a renewal call starting now: leases due within
// it are renewed together.
func renewWindow(ttl time.Duration) time.Duration {
	return ttl / 6
}

// renewDue reports whether a renewal planned for renewAt (zero: none
// planned) joins a call starting at now. A renewal due within window joins
// the call; a retry after a failed call waits out its backoff.
func renewDue(now, renewAt time.Time, retry bool, window time.Duration) bool {
	if renewAt.IsZero() {
		return false
	}
	if retry {
		window = 0
	}
	return !renewAt.After(now.Add(window))
}

// stallAt is when a lock with a progress timeout stalls unless Heartbeat is
// called: the last heartbeat (beat after acquiredAt; zero: none yet) plus
// progress. It reports false when the lock has no progress timeout, or when
// it is not being renewed any more (nothing to stop).
func stallAt(acquiredAt time.Time, beat, progress time.Duration, renewing bool) (time.Time, bool) {
	if progress <= 0 || !renewing {
		return time.Time{}, false
	}
	return acquiredAt.Add(beat + progress), true
}

// due is when the engine must next look at a lock: the earliest of the end
// of its validity (valid), its next renewal (zero: none planned) and its stall
// deadline (zero: none).
func due(valid, renewAt, stall time.Time) time.Time {
	t := valid
	if !renewAt.IsZero() && renewAt.Before(t) {
		t = renewAt
	}
	if !stall.IsZero() && stall.Before(t) {
		t = stall
	}
	return t
}

// expiryCause is why a lock ends when its local validity passes unrenewed:
// endCause when its last lease was meant to end it (ErrMaxHold), else an
// ErrLockLost naming the last renewal error (nil: none), saying that
// renewal was off, that the store did not answer the renewal under way
// (inFlight), or that no renewal was sent although one was due overdue
// ago: this process (or its renewal goroutine) did not run meanwhile, as
// when it was paused (SIGSTOP, a VM or GC stall).
func expiryCause(endCause, lastErr error, renew, inFlight bool, overdue time.Duration) error {
	switch {
	case endCause != nil:
		return endCause
	case lastErr != nil:
		return fmt.Errorf("%w: not renewed within its validity: %w", ErrLockLost, lastErr)
	case !renew:
		return fmt.Errorf("%w: lease expired (renewal off)", ErrLockLost)
	case inFlight:
		return fmt.Errorf("%w: not renewed within its validity: the store did not answer the renewal in time", ErrLockLost)
	case overdue > 0:
		return fmt.Errorf("%w: lease expired unrenewed: its renewal, due %v before, was never sent (was this process paused or starved?)",
			ErrLockLost, overdue.Round(time.Millisecond))
	}
	return fmt.Errorf("%w: not renewed within its validity", ErrLockLost)
}

// retryDelay is the jittered backoff before renewal attempt n+1 after n
// failures of a lease of ttl: 25 ms doubling, at most a tenth of the TTL
// (at least 1 ms), jittered over [d/2, d].
func retryDelay(n int, ttl time.Duration) time.Duration {
	d := min(25*time.Millisecond<<min(n-1, 10), max(ttl/10, time.Millisecond))
	return d/2 + rand.N(d/2+1)
}

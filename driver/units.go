package driver

import "time"

// Units returns d in whole units of unit, rounded up, and 0 for d <= 0. A
// store converts every lease length (TTL, KeepFor) with it into the unit its
// server takes, so that a lease at the store is never shorter than the
// Locker asked for: the Locker's local validity (TTL minus drift) assumes
// the store keeps the lease at least that long.
func Units(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(d / unit)
	if d%unit != 0 {
		n++
	}
	return n
}

package memstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Kinder = (*Store)(nil)

// kindKey is one key of the second namespace (driver.Mode): a read-write
// lock's or a semaphore's entries, one per token and mode. The key's fence
// counter lives apart, in Store.kindFences, and outlives it.
type kindKey struct {
	limit   int // the semaphore's permits; 0 for a read-write lock
	entries map[entryID]*entry
}

type entryID struct {
	token string
	mode  driver.Mode
}

type entry struct {
	owner   string
	fence   uint64
	expires time.Time
	waiting bool // a writer's claim to be next (ModeWrite), not a hold
}

// Kinds implements driver.Kinder: a Store keeps read-write locks and
// semaphores.
func (s *Store) Kinds(m driver.Mode) error {
	if m > driver.ModePermit {
		return fmt.Errorf("memstore: %w: %v", driver.ErrUnsupported, m)
	}
	return nil
}

// liveKind returns key's entries after dropping the expired ones (nil when
// none is left), and reports whether it dropped any. Callers hold s.mu.
func (s *Store) liveKind(key string, now time.Time) (k *kindKey, pruned bool) {
	k = s.kinds[key]
	if k == nil {
		return nil, false
	}
	for id, e := range k.entries {
		if !now.Before(e.expires) {
			delete(k.entries, id)
			pruned = true
		}
	}
	if len(k.entries) == 0 {
		delete(s.kinds, key)
		return nil, pruned
	}
	return k, pruned
}

// describe names the kind of lock a key with this limit is.
func describe(limit int) string {
	if limit == 0 {
		return "a read-write lock"
	}
	return fmt.Sprintf("a semaphore of %d permits", limit)
}

// checkKind refuses parameters no Locker sends.
func checkKind(mode driver.Mode, limit int) error {
	switch {
	case mode > driver.ModePermit:
		return fmt.Errorf("memstore: %w: %v", driver.ErrUnsupported, mode)
	case mode == driver.ModePermit && limit < 1:
		return fmt.Errorf("memstore: %w: a semaphore of %d permits", driver.ErrUnsupported, limit)
	case mode != driver.ModePermit && limit != 0:
		return fmt.Errorf("memstore: %w: Limit %d for a %v hold", driver.ErrUnsupported, limit, mode)
	}
	return nil
}

// acquireKind is Acquire for a read, write or permit hold, by the rules of
// driver.Mode. It reports whether it dropped expired entries, which the
// caller announces. Callers hold s.mu.
func (s *Store) acquireKind(p driver.AcquireParams, now time.Time) (driver.Grant, bool, error) {
	if err := checkKind(p.Mode, p.Limit); err != nil {
		return driver.Grant{}, false, err
	}
	k, pruned := s.liveKind(p.Key, now)
	switch {
	case k == nil:
		k = &kindKey{limit: p.Limit, entries: make(map[entryID]*entry)}
		s.kinds[p.Key] = k
	case k.limit != p.Limit:
		return driver.Grant{}, pruned, fmt.Errorf("memstore: %q is %s, asked as %s: %w", p.Key, describe(k.limit), describe(p.Limit), driver.ErrKindMismatch)
	}
	id := entryID{p.Token, p.Mode}
	if e := k.entries[id]; e != nil && !e.waiting {
		// An earlier attempt of this token was granted: its answer was lost.
		e.expires = now.Add(p.TTL)
		return driver.Grant{Fence: e.fence}, pruned, nil
	}
	var fence uint64
	switch p.Mode {
	case driver.ModeRead:
		if w := k.writer(); w != nil {
			he := &driver.HeldError{Owner: w.owner}
			if !w.waiting {
				he.TTL = w.expires.Sub(now)
			}
			return driver.Grant{}, pruned, he
		}
		fence = s.kindFences[p.Key] // the last writer's
	case driver.ModeWrite:
		if h := k.firstToEnd(); h != nil {
			// Claim the next turn: new readers are refused while it lasts.
			if e := k.entries[id]; e != nil {
				e.expires = now.Add(p.TTL)
			} else {
				k.entries[id] = &entry{owner: p.Owner, expires: now.Add(p.TTL), waiting: true}
			}
			return driver.Grant{}, pruned, &driver.HeldError{Owner: h.owner, TTL: h.expires.Sub(now)}
		}
		fence = s.kindFences[p.Key] + 1
		s.kindFences[p.Key] = fence
	case driver.ModePermit:
		if k.holds() >= k.limit {
			h := k.firstToEnd()
			return driver.Grant{}, pruned, &driver.HeldError{Owner: h.owner, TTL: h.expires.Sub(now)}
		}
		fence = s.kindFences[p.Key] + 1
		s.kindFences[p.Key] = fence
	}
	// A waiting writer's claim, if any, becomes the hold.
	k.entries[id] = &entry{owner: p.Owner, fence: fence, expires: now.Add(p.TTL)}
	return driver.Grant{Fence: fence}, pruned, nil
}

// writer returns k's writer, or else one of its waiting writers, or nil.
func (k *kindKey) writer() *entry {
	var waiting *entry
	for id, e := range k.entries {
		if id.mode != driver.ModeWrite {
			continue
		}
		if !e.waiting {
			return e
		}
		waiting = e
	}
	return waiting
}

// firstToEnd returns the hold (not a waiting claim) of k that ends first,
// or nil when k has none.
func (k *kindKey) firstToEnd() *entry {
	var first *entry
	for _, e := range k.entries {
		if !e.waiting && (first == nil || e.expires.Before(first.expires)) {
			first = e
		}
	}
	return first
}

// holds counts k's holds, waiting claims aside.
func (k *kindKey) holds() int {
	n := 0
	for _, e := range k.entries {
		if !e.waiting {
			n++
		}
	}
	return n
}

// held returns the hold of p's token and mode, or nil (a waiting claim is
// no hold). Callers hold s.mu.
func (s *Store) held(key, token string, mode driver.Mode, now time.Time) *entry {
	k, _ := s.liveKind(key, now)
	if k == nil {
		return nil
	}
	if e := k.entries[entryID{token, mode}]; e != nil && !e.waiting {
		return e
	}
	return nil
}

// releaseKind is Release for a read, write or permit hold. It reports
// whether an entry went, which the caller announces. Callers hold s.mu.
func (s *Store) releaseKind(p driver.ReleaseParams, now time.Time) (bool, error) {
	k, pruned := s.liveKind(p.Key, now)
	if k == nil {
		return pruned, driver.ErrNotHeld
	}
	id := entryID{p.Token, p.Mode}
	e := k.entries[id]
	switch {
	case e == nil:
		return pruned, driver.ErrNotHeld
	case p.KeepFor > 0 && !e.waiting:
		e.expires = now.Add(p.KeepFor)
		return pruned, nil
	}
	delete(k.entries, id)
	if len(k.entries) == 0 {
		delete(s.kinds, p.Key)
	}
	if e.waiting {
		// A writer that stops waiting takes its claim back; it held nothing.
		return true, driver.ErrNotHeld
	}
	return true, nil
}

// kindLeases appends the live entries of keys starting with prefix to out.
// Callers hold s.mu.
func (s *Store) kindLeases(out []driver.Lease, prefix string, now time.Time) []driver.Lease {
	for key := range s.kinds {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		k, _ := s.liveKind(key, now)
		if k == nil {
			continue
		}
		for id, e := range k.entries {
			out = append(out, driver.Lease{
				Key: key, Owner: e.owner, Fence: e.fence, TTL: e.expires.Sub(now),
				Mode: id.mode, Limit: k.limit, Waiting: e.waiting,
			})
		}
	}
	return out
}

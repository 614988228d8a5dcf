package zkstore

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/internal/alarm"
)

// Reaper backoff after a failed delete.
const (
	reapRetryMin = 50 * time.Millisecond
	reapRetryMax = 2 * time.Second
)

// orphan is a node the Store must delete although no call waits for it: a
// lease's node at its deadline, a queue entry whose Leave failed, or a node
// a call that failed midway may have created.
type orphan struct {
	parent   string
	name     string    // the node's name, or with prefix every child whose name starts with it
	prefix   bool      // a create whose outcome is unknown: its sequence number is not known
	session  int64     // the session the node lives on, 0 when unknown
	next     time.Time // when to try (again)
	attempts int
}

// reaper ends what ZooKeeper cannot end by itself. Every lock node is
// ephemeral: it lives as long as the Conn's session, which go-zookeeper
// keeps alive with pings. A lock that is not renewed by its deadline
// (NoRenew, MaxHold, a stalled holder, a Lock lost and never released)
// must still end after its own TTL although the session lives on, so the
// reaper deletes its node at its deadline: the Store's send time of the
// grant or of the last renewal plus the TTL, on the monotonic clock, which
// is never before the Locker's own validity ends (it starts earlier and
// subtracts a drift margin). It also deletes the orphans: queue entries
// whose Leave could not be confirmed, and nodes of calls that failed
// midway.
//
// It is one timer (time.AfterFunc) set to the earliest deadline: no
// goroutine runs between firings. A failed delete is retried with backoff
// (50 ms doubling to 2 s) for as long as the node could still be there,
// however long that is: while its session is the Conn's and the client
// has not been told it expired (a node whose session is unknown, of a
// create whose outcome is unknown, is retried until it is gone). No bound
// in time is safe: while the server is down, no session expires, and a
// restarted server restores every session with a fresh timeout, so a
// client that reconnects within it revives its session and every node on
// it, those of locks it lost long ago included; a node the reaper had
// given up on would then block its key until the Conn is closed. Once the
// Conn runs another session (or was told its session expired: the id is
// then 0), the old session's nodes are gone at the server, and the reaper
// drops them. Store.Close stops the timer for good, after waiting for a
// firing under way; go-zookeeper tells the Store nothing of a closed Conn.
// If the process dies, the session's expiry deletes everything instead.
type reaper struct {
	s     *Store
	alarm alarm.Alarm    // fires at the earliest deadline
	wg    sync.WaitGroup // fire calls under way
}

// armLocked makes the reaper run no later than t. Callers hold s.mu.
func (r *reaper) armLocked(t time.Time) { r.alarm.ArmLocked(t) }

// stopLocked stops the reaper for good. Callers hold s.mu.
func (r *reaper) stopLocked() { r.alarm.StopLocked() }

// wait waits for a fire under way to finish.
func (r *reaper) wait() { r.wg.Wait() }

// addOrphan hands a node to the reaper, which tries to delete it at once.
func (s *Store) addOrphan(parent, name string, prefix bool, session int64) {
	now := time.Now()
	s.mu.Lock()
	s.orphans = append(s.orphans, &orphan{parent: parent, name: name, prefix: prefix, session: session, next: now})
	s.reap.armLocked(now)
	s.mu.Unlock()
}

// fire deletes the nodes of leases past their deadline and the orphans
// that are due, then sets the timer for the next deadline.
func (r *reaper) fire() {
	s := r.s
	s.mu.Lock()
	if !r.alarm.BeginLocked() {
		s.mu.Unlock()
		return
	}
	r.wg.Add(1)
	defer r.wg.Done()
	now := time.Now()
	current := s.conn.SessionID()
	expired := s.conn.State() == zk.StateExpired
	for tok, l := range s.leases {
		switch {
		case expired || l.session != current:
			delete(s.leases, tok) // its node went with its session
		case !now.Before(s.base.Add(l.until)):
			delete(s.leases, tok)
			parent, name := s.nodeOf(tok, l)
			s.orphans = append(s.orphans, &orphan{parent: parent, name: name, session: l.session, next: now})
		}
	}
	var due []*orphan
	rest := s.orphans[:0]
	for _, o := range s.orphans {
		switch {
		case o.session != 0 && (expired || o.session != current):
			// gone with its session
		case !now.Before(o.next):
			due = append(due, o)
		default:
			rest = append(rest, o)
		}
	}
	clear(s.orphans[len(rest):])
	s.orphans = rest
	s.mu.Unlock()

	failed := make([]bool, len(due))
	parallel(len(due), func(i int) { failed[i] = !s.deleteOrphan(due[i]) })

	s.mu.Lock()
	defer s.mu.Unlock()
	now = time.Now()
	for i, o := range due {
		if !failed[i] {
			continue
		}
		o.attempts = min(o.attempts+1, 10)
		o.next = now.Add(min(reapRetryMin<<(o.attempts-1), reapRetryMax))
		s.orphans = append(s.orphans, o)
	}
	r.alarm.EndLocked()
	var next time.Time
	for _, l := range s.leases {
		if t := s.base.Add(l.until); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, o := range s.orphans {
		if next.IsZero() || o.next.Before(next) {
			next = o.next
		}
	}
	if !next.IsZero() {
		r.armLocked(next)
	}
}

// deleteOrphan deletes o's node (or nodes) and reports whether none is
// left. Each lock node's name holds its token, so whatever is found is
// o's: it is deleted whatever its version.
func (s *Store) deleteOrphan(o *orphan) bool {
	if !o.prefix {
		err := s.conn.Delete(o.parent+"/"+o.name, -1)
		return err == nil || errors.Is(err, zk.ErrNoNode)
	}
	kids, _, err := s.conn.Children(o.parent)
	if errors.Is(err, zk.ErrNoNode) {
		return true
	}
	if err != nil {
		return false
	}
	ok := true
	for _, k := range kids {
		if strings.HasPrefix(k, o.name) {
			if err := s.conn.Delete(o.parent+"/"+k, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				ok = false
			}
		}
	}
	return ok
}

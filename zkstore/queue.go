package zkstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
)

// Enqueue implements driver.Queuer: it creates the entry's lock node, as
// Acquire does (one multi), and leaves it there. The node is ephemeral and
// not counted against any deadline while it waits: it lives as long as the
// Conn's session, so a wait may last any time. Since the lowest lock node
// holds the key, the entry is served after every node created before it,
// and before every later one, Acquire's included.
func (s *Store) Enqueue(ctx context.Context, p driver.AcquireParams) (driver.Ticket, error) {
	if p.TTL > s.session {
		return nil, fmt.Errorf("zkstore: enqueue %q: %w (%v > %v)", p.Key, ErrTTL, p.TTL, s.session)
	}
	if p.Mode != driver.ModeMutex {
		return nil, fmt.Errorf("zkstore: enqueue %q: %w: only a mutex queues, not a %v hold", p.Key, driver.ErrUnsupported, p.Mode)
	}
	kp := s.keyPath(p.Key)
	c, err := call(ctx, func() (created, error) { return s.createNode(kp, p.Token, p.Owner, p.TTL) },
		func(c created, err error) {
			if err == nil {
				s.removeNode(kp, c.name, c.session) // queued after the caller gave up
			}
		})
	if err != nil {
		return nil, fmt.Errorf("zkstore: enqueue %q: %w", p.Key, err)
	}
	return &ticket{s: s, p: p, c: c}, nil
}

var _ driver.StartedTicket = (*ticket)(nil)

// ticket is one entry of a key's queue: a lock node that waits.
type ticket struct {
	s *Store
	p driver.AcquireParams
	c created

	mu      sync.Mutex
	holder  *driver.HeldError // the holder seen last
	seen    string            // the node holder describes
	granted bool
	started time.Time // set when the granting Wait started the lease (Started)
	left    bool
}

// holderReadEvery is how often at most a Store's waiters behind others read
// the holder's node of a key for Holder: under contention the holder
// changes on every handoff, and a read each time was one request in seven.
const holderReadEvery = 250 * time.Millisecond

// heldRead is the key whose holder a Store's waiter read last, and when.
type heldRead struct {
	kp string
	at time.Time
}

// mayReadHolder reports whether a waiter on kp may read its holder now
// (see holderReadEvery), and if so counts the read.
func (s *Store) mayReadHolder(kp string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.heldRead.kp == kp && now.Sub(s.heldRead.at) < holderReadEvery {
		return false
	}
	s.heldRead = heldRead{kp, now}
	return true
}

// Wait implements driver.Ticket. It lists the key's children: the entry is
// granted when no lock node with a lower sequence number and no live
// MinHold node is left. Otherwise it sets a data watch (getData) on its
// predecessor only — the lock node just below its own, never the holder or
// the key's children — and sleeps until that watch fires: each release
// wakes one waiter, its successor, and a waiter that leaves wakes only the
// one behind it. The holder (the lowest node) is read only when it is not
// the predecessor and has changed since the last look, for Holder. Behind
// a live MinHold node only, it reads the server's time (by touching the
// key node), deletes expired MinHold nodes (version-checked), and sleeps
// until the live one expires or is deleted.
//
// Round trips per wake-up: two (the children, then the predecessor's data
// and watch, with the holder's data alongside when needed); at the head,
// one. None when Enqueue's multi found the entry alone under the key (the
// key node's number of children, in its answer) and Wait comes within a
// third of the TTL from the create: the entry is granted at once.
//
// A grant starts the entry's lease itself (see Started), so that the
// Locker sends no Renew. Within a third of the TTL of its creation, the
// create proves the lease as an Acquire's does: a write the leader answered
// on the entry's session, sent before it, and the node is in the granting
// listing, so no force release took it. Later, a wake-up (a look after the
// first, nearly always the grant: a waiter's predecessor goes when it is
// done holding) reads the children with Renew's check of the force-release
// marker alongside (pipelined, one round trip), and the lease counts from
// when both were sent.
//
// The whole wait runs on one goroutine of its own (go-zookeeper's calls
// take no context), not one per request: when ctx ends first, Wait
// returns at once and that goroutine stops after the request under way,
// granting nothing once ctx has ended or Leave was called.
func (t *ticket) Wait(ctx context.Context) (driver.Grant, error) {
	var g driver.Grant
	var err error
	if alone := t.c.alone && t.fresh(time.Now()); alone {
		g, err = t.wait(ctx, true) // granted with no request: no goroutine either
	} else {
		g, err = call(ctx, func() (driver.Grant, error) { return t.wait(ctx, false) }, nil)
	}
	if err != nil && !errors.Is(err, driver.ErrNotHeld) && ctx.Err() == nil {
		return g, fmt.Errorf("zkstore: wait for %q: %w", t.p.Key, err)
	}
	return g, err
}

// wait is Wait's loop. alone: Enqueue's multi found the entry alone under
// the key, within a third of the TTL from now; the first look then sends
// no request (so it grants, or ends, at once).
func (t *ticket) wait(ctx context.Context, alone bool) (driver.Grant, error) {
	s, name := t.s, t.c.name
	woken := false // a look after the first
	for {
		t.mu.Lock()
		left, granted := t.left, t.granted
		t.mu.Unlock()
		switch {
		case left:
			return driver.Grant{}, driver.ErrNotHeld
		case granted:
			return driver.Grant{Fence: t.c.fence}, nil
		case s.conn.State() == zk.StateExpired || s.conn.SessionID() != t.c.session:
			return driver.Grant{}, driver.ErrNotHeld // the entry went with its session
		case ctx.Err() != nil:
			return driver.Grant{}, ctx.Err() // the caller is gone: stop here
		}
		var lo look
		var err error
		if !woken && alone {
			// The multi that created the entry found it alone under the
			// key, on the entry's session: a listing with no blocker.
			lo = look{kids: []string{name}, sent: t.c.sent, same: true}
		} else {
			lo, err = t.look(woken && !t.fresh(time.Now()))
		}
		kids := lo.kids
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return driver.Grant{}, driver.ErrNotHeld
		case err != nil:
			return driver.Grant{}, err
		case !slices.Contains(kids, name):
			return driver.Grant{}, driver.ErrNotHeld // force-released
		}
		preds, keeps := blockersOf(kids, name, t.c.seq)
		if len(preds) == 0 && len(keeps) == 0 {
			c := t.c
			var started time.Time
			switch {
			case lo.same && t.fresh(lo.sent):
				started = c.sent // the create's
			case lo.proved && int64(c.fence) >= lo.mark.zxid:
				// As Renew's check, unless the node is older than the
				// marker state checked: then Renew reads it first.
				started = lo.sent
			}
			c.sent = started
			if started.IsZero() {
				c.sent = time.Now() // the Locker's Renew starts the lease
			}
			// Under t.mu, so that Leave, which sets left under it, either
			// comes first (nothing is granted) or finds the grant and
			// releases it.
			t.mu.Lock()
			defer t.mu.Unlock()
			switch {
			case t.left:
				return driver.Grant{}, driver.ErrNotHeld
			case ctx.Err() != nil:
				return driver.Grant{}, ctx.Err() // Wait returned: grant nothing
			}
			if err := s.record(t.p.Key, t.p.Owner, t.p.Token, c, t.p.TTL); err != nil {
				return driver.Grant{}, err // closed: the entry stays until Leave
			}
			t.granted, t.started = true, started
			return driver.Grant{Fence: t.c.fence}, nil
		}
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, err // the caller is gone: set no watch
		}
		woken = true
		var ch <-chan zk.Event
		var timeout time.Duration
		if len(preds) > 0 {
			ch, err = t.watchPredecessor(preds)
		} else {
			ch, timeout, err = t.watchKeep(keeps)
		}
		if err != nil {
			return driver.Grant{}, err
		}
		if ch == nil && timeout == 0 {
			continue // what it would watch is gone: look again
		}
		if !sleep(ctx, ch, timeout) {
			return driver.Grant{}, ctx.Err()
		}
	}
}

// look is one reading of an entry's key: its children, whether they were
// answered on the entry's session, and whether the force-release marker
// check sent with them (when asked) proved the session alive after sent,
// with no force release since mark.
type look struct {
	kids   []string
	sent   time.Time
	same   bool
	proved bool
	mark   markerState
}

// fresh reports whether at is within a third of the entry's TTL from when
// its create was sent: a lease counted from the create still has most of
// its time.
func (t *ticket) fresh(at time.Time) bool { return at.Sub(t.c.sent) < t.p.TTL/3 }

// look reads the key's children and, when prove is set and the Store knows
// the marker, sends Renew's check of the marker alongside: a write, which
// the leader answers only while the session lives (see Renew). A failed
// check proves nothing and is not an error: Renew then does the work.
func (t *ticket) look(prove bool) (look, error) {
	s := t.s
	var lo look
	if prove {
		s.mu.Lock()
		lo.mark = s.mark
		s.mu.Unlock()
		prove = lo.mark.zxid != 0
	}
	lo.sent = time.Now()
	var err error
	parallel(1+btoi(prove), func(i int) {
		if i == 0 {
			lo.kids, _, err = s.conn.Children(t.c.kp)
			return
		}
		resp, cerr := s.conn.Multi(&zk.CheckVersionRequest{Path: s.marker, Version: lo.mark.version})
		lo.proved = cerr == nil && len(resp) == 1 && resp[0].Error == nil
	})
	// Sent on the entry's session (wait checked it) and answered on it.
	lo.same = s.conn.SessionID() == t.c.session
	lo.proved = lo.proved && lo.same
	return lo, err
}

// Started implements driver.StartedTicket: whether the granting Wait
// started the lease, from the create or from the marker check read with
// the children (see Wait), and the send time it counts from.
func (t *ticket) Started() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.started, !t.started.IsZero() // set only by a grant
}

// watchPredecessor sets a data watch on the last of preds (the lock nodes
// before the entry, lowest first) and reads the first (the holder) when it
// is another node that changed since the last look, unless a waiter of the
// Store read it less than holderReadEvery ago. It returns a nil
// channel when the predecessor is gone already.
func (t *ticket) watchPredecessor(preds []string) (<-chan zk.Event, error) {
	s, kp := t.s, t.c.kp
	pred, lowest := preds[len(preds)-1], preds[0]
	t.mu.Lock()
	readHolder := lowest != pred && lowest != t.seen
	t.mu.Unlock()
	readHolder = readHolder && s.mayReadHolder(kp)
	var w struct {
		ch     <-chan zk.Event
		pred   *node
		holder *node
	}
	parallel(1+btoi(readHolder), func(i int) {
		if i == 1 {
			w.holder = s.readNodes(kp, []string{lowest})[0]
			return
		}
		n := &node{name: pred}
		var b []byte
		b, n.stat, w.ch, n.err = s.conn.GetW(kp + "/" + pred)
		n.decode(b)
		w.pred = n
	})
	if w.pred.err != nil {
		if errors.Is(w.pred.err, zk.ErrNoNode) {
			return nil, nil // GetW sets no watch on a missing node
		}
		return nil, w.pred.err
	}
	switch {
	case lowest == pred:
		t.setHolder(lowest, &driver.HeldError{Owner: w.pred.data.Owner, TTL: w.pred.ttl()})
	case w.holder != nil && w.holder.err == nil:
		t.setHolder(lowest, &driver.HeldError{Owner: w.holder.data.Owner, TTL: w.holder.ttl()})
	case t.Holder() == nil:
		t.setHolder("", &driver.HeldError{}) // held, by an owner not read
	}
	return w.ch, nil
}

// watchKeep handles MinHold nodes standing before an entry at the head: it
// reads the server's time by touching the key node, deletes the expired
// ones (version-checked), and returns a watch on a live one with how long
// it has left, or nothing when none is live.
func (t *ticket) watchKeep(keeps []string) (<-chan zk.Event, time.Duration, error) {
	s, kp := t.s, t.c.kp
	st, err := s.conn.Set(kp, nil, -1)
	if err != nil {
		return nil, 0, err
	}
	live, expired, err := s.readKeeps(kp, keeps, st.Mtime)
	if err != nil {
		return nil, 0, err
	}
	s.deleteNodes(kp, expired)
	if live == nil {
		return nil, 0, nil
	}
	t.setHolder(live.name, &driver.HeldError{Owner: live.data.Owner, TTL: live.remaining(st.Mtime)})
	_, _, ch, err := s.conn.GetW(kp + "/" + live.name)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, nil
	}
	// Wake a little after it expires by the server's clock (the client's
	// clock only measures the interval).
	return ch, live.remaining(st.Mtime) + 5*time.Millisecond, err
}

func (t *ticket) setHolder(name string, h *driver.HeldError) {
	t.mu.Lock()
	t.seen, t.holder = name, h
	t.mu.Unlock()
}

// Holder implements driver.Ticket.
func (t *ticket) Holder() *driver.HeldError {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holder == nil {
		return nil
	}
	h := *t.holder
	return &h
}

// Leave implements driver.Ticket: it deletes the entry's node, which wakes
// the entry behind it (one request). When the delete cannot be confirmed,
// or ctx ended before it was sent, the node is handed to the reaper, which
// retries until it is gone; the session's end removes it at the latest.
// Leave after a granted Wait releases the lock.
func (t *ticket) Leave(ctx context.Context) error {
	s := t.s
	t.mu.Lock()
	granted := t.granted
	t.left = true
	t.mu.Unlock()
	if granted {
		err := s.Release(ctx, driver.ReleaseParams{Key: t.p.Key, Token: t.p.Token})
		if errors.Is(err, driver.ErrNotHeld) {
			return nil
		}
		return err
	}
	kp, name, session := t.c.kp, t.c.name, t.c.session
	if err := ctx.Err(); err != nil {
		s.addOrphan(kp, name, false, session)
		return err
	}
	orphaned := func(err error) bool {
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			s.addOrphan(kp, name, false, session)
			return true
		}
		return false
	}
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(kp+"/"+name, -1) },
		func(_ struct{}, err error) { orphaned(err) })
	if ctx.Err() != nil && err == ctx.Err() {
		return err // the delete goes on; a failure is handed to the reaper
	}
	if orphaned(err) {
		return fmt.Errorf("zkstore: leave the queue of %q: %w", t.p.Key, err)
	}
	return nil
}

// sleep waits until ch delivers (the watched node was deleted, or the
// watch was lost) or timeout (if positive) passes, and reports false when
// ctx ended first.
func sleep(ctx context.Context, ch <-chan zk.Event, timeout time.Duration) bool {
	var timer <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		timer = tm.C
	}
	select {
	case <-ch:
	case <-timer:
	case <-ctx.Done():
		return false
	}
	return true
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

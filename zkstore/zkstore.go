package zkstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
)

// DefaultRoot is the root node when Options.Root is empty.
const DefaultRoot = "/tasklock"

// ErrTTL is wrapped by the error Acquire returns, and Renew reports for a
// lease, when the lock's TTL is longer than Options.SessionTimeout. Every
// lock of a Store lives on its Conn's session: a holder cut off from
// ZooKeeper must stop before that session can expire at the server and its
// nodes vanish, so no lock may outlast the session timeout. Shorten the
// lock's TTL or connect with a longer session timeout.
var ErrTTL = fmt.Errorf("zkstore: lock TTL longer than Options.SessionTimeout: %w", driver.ErrUnsupported)

// ErrClosed is returned by Acquire, Enqueue, Wait and Renew after Close.
var ErrClosed = errors.New("zkstore: store closed")

// Options configures a Store. A nil *Options is invalid: SessionTimeout has
// no default. New never writes into it. Every Store, CLI and dashboard that
// works on the same locks must use the same Root.
type Options struct {
	// Root is the node under which the Store keeps its locks, one child
	// node per key: an absolute ZooKeeper path, not "/" and not under
	// /zookeeper. It and its parents are created (persistent) on first
	// use. Default: DefaultRoot.
	Root string
	// SessionTimeout is the session timeout the Conn was created with (the
	// sessionTimeout argument of zk.Connect). Required. The server
	// negotiates it into [minSessionTimeout, maxSessionTimeout] (by default
	// 2 and 20 ticks, 4 s and 40 s): when it asks for more than the
	// server's maximum, pass that maximum instead. Lock TTLs may not exceed
	// it (ErrTTL): that is what makes a lock's local validity end before
	// its session can expire at the server.
	SessionTimeout time.Duration
	// ACL is given to every node the Store creates. Nil:
	// zk.WorldACL(zk.PermAll). Every Store on the same Root needs read,
	// write, create and delete rights on all of them.
	ACL []zk.ACL
}

// Store keeps tasklock leases in ZooKeeper through the caller's *zk.Conn.
// It implements driver.Store, driver.Queuer, driver.Kinder,
// driver.Notifier, driver.Lister, driver.ForceReleaser and ledger.Ledger,
// and is safe for concurrent use. It never closes the Conn and never logs.
// Close it before the Conn: see Close.
type Store struct {
	conn    *zk.Conn
	root    string
	marker  string // Root/%force-released: see Renew
	session time.Duration
	acl     []zk.ACL

	ttlNodes atomic.Int32 // 0 unknown, 1 the server has TTL nodes, -1 it has not
	base     time.Time    // origin of lease.until, on the monotonic clock
	entrySeq atomic.Int64 // numbers the kinds entries the Store creates (kinds.go)
	rotateAt int32        // the guard version from which decisions replace the guard (kinds.go)
	note     notifier     // subscriptions, and the watches set for them (notify.go)
	turns    turnstile    // one kinds Acquire per key at a time (kinds.go)

	mu       sync.Mutex
	leases   map[string]*lease // by token: the locks granted through this Store
	orphans  []*orphan         // nodes to delete, retried by the reaper
	mark     markerState       // the force-release marker as last adopted (renew.go)
	heldRead heldRead          // the last read of a holder by a waiter (queue.go)
	reap     reaper            // ends leases at their deadline, deletes orphans (reaper.go)
	closed   bool              // Close was called: no new leases, the reaper is stopped
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Queuer        = (*Store)(nil)
	_ driver.Kinder        = (*Store)(nil)
	_ driver.Notifier      = (*Store)(nil)
	_ driver.Lister        = (*Store)(nil)
	_ driver.ForceReleaser = (*Store)(nil)
	_ ledger.Ledger        = (*Store)(nil)
)

// lease is a lock granted through this Store — a mutex's lock node, or an
// entry of a read-write lock or semaphore (kinds.go) — kept small (about
// 170 bytes with its map entry; the strings are the caller's): its node's
// path is built again from the key, the token, the mode and seq when
// needed (nodeOf). Guarded by Store.mu.
type lease struct {
	key     string
	owner   string
	fence   uint64        // the grant's fence: a mutex's is its node's czxid
	zxid    int64         // the node's czxid
	seq     int64         // the number that ends the node's name
	session int64         // the session the node lives on
	ttl     time.Duration // the lease length of the last grant or renewal
	until   time.Duration // end, since Store.base: send time of the last grant or renewal + ttl
	check   int64         // nonzero: the node must be read before the next renewal (renew.go)
	mode    driver.Mode   // ModeMutex: a lock node; else a kinds entry
	waiting bool          // a writer's claim (ModeWrite), not a hold
	limit   int32         // a permit's semaphore's number of permits
}

// badOption returns the error for an invalid argument or option: a
// *driver.OptionError (tasklock.OptionError) naming field, with the
// offending value when value is not empty.
func badOption(field, value, format string, args ...any) error {
	return &driver.OptionError{Pkg: "zkstore", Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// New returns a Store that keeps its locks under opts.Root through conn. It
// validates opts and returns a *driver.OptionError naming the offending field;
// it does not talk to ZooKeeper. The caller keeps ownership of conn: the Store
// never closes it, and closing it ends the session and so every lock of the
// Store.
func New(conn *zk.Conn, opts *Options) (*Store, error) {
	if conn == nil {
		return nil, badOption("conn", "", "nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if err := checkRoot(o.Root); err != nil {
		return nil, &driver.OptionError{Pkg: "zkstore", Field: "Options.Root", Value: o.Root, Err: err}
	}
	switch {
	case o.SessionTimeout == 0:
		return nil, badOption("Options.SessionTimeout", "", "required: the session timeout the Conn was created with (zk.Connect's sessionTimeout)")
	case o.SessionTimeout < time.Millisecond:
		return nil, badOption("Options.SessionTimeout", "", "%v is below the minimum 1ms", o.SessionTimeout)
	}
	acl := zk.WorldACL(zk.PermAll)
	if o.ACL != nil {
		if len(o.ACL) == 0 {
			return nil, badOption("Options.ACL", "", "empty (nil means world:anyone with all permissions)")
		}
		acl = append([]zk.ACL(nil), o.ACL...)
	}
	s := &Store{
		conn: conn, root: o.Root, marker: o.Root + "/" + markerName, session: o.SessionTimeout, acl: acl,
		base: time.Now(), leases: make(map[string]*lease), rotateAt: rotateVersion,
	}
	s.reap.s = s
	s.reap.alarm.Fire = s.reap.fire
	return s, nil
}

// Root returns the root node the Store keeps its locks under.
func (s *Store) Root() string { return s.root }

// Close stops the Store's timer for good (the reaper: see reaper.go), after
// waiting for a deletion under way, which go-zookeeper answers or gives up
// within about the session timeout. Later Acquire, Enqueue, Wait and Renew
// calls return ErrClosed; Release, Leave, ForceRelease, Leases and the
// ledger go on working while the Conn is open. Close deletes nothing and
// never closes the Conn: the nodes the Store still has (of leases not
// released, and those whose deletion was still being retried) stay until
// the Conn's session ends. So close the Lockers on top first (they release
// their locks), then the Store, then the Conn.
//
// A Store whose Conn is closed while it still has nodes to delete retries
// them every 2 s until Close: go-zookeeper does not tell a closed Conn
// from one waiting for its server. Close may be called more than once; it
// always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.reap.stopLocked()
	s.mu.Unlock()
	s.reap.wait()
	return nil
}

// keyPath is the node of key: Root + "/" + the escaped key.
func (s *Store) keyPath(key string) string { return s.root + "/" + escapeName(key) }

// lockName is the name of token's lock node with sequence number seq, as
// the server makes it (%010d).
func lockName(token string, seq int64) string {
	if seq < 0 {
		return fmt.Sprintf("%s%s%010d", escapeName(token), lockInfix, seq)
	}
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], seq, 10)
	name := escapeName(token)
	b := make([]byte, 0, len(name)+len(lockInfix)+max(10, len(d)))
	b = append(append(b, name...), lockInfix...)
	for range 10 - len(d) {
		b = append(b, '0')
	}
	return string(append(b, d...))
}

// nodeOf returns the parent and the name of the node of l, granted to
// token: a lock node, or a kinds entry.
func (s *Store) nodeOf(token string, l *lease) (parent, name string) {
	if l.mode == driver.ModeMutex {
		return s.keyPath(l.key), lockName(token, l.seq)
	}
	return s.kindsPath(l.key), entryName(token, l.mode, l.waiting, int(l.limit), l.seq)
}

// nodePath is the path of the node of l, granted to token.
func (s *Store) nodePath(token string, l *lease) string {
	parent, name := s.nodeOf(token, l)
	return parent + "/" + name
}

// since returns t as a duration since s.base.
func (s *Store) since(t time.Time) time.Duration { return t.Sub(s.base) }

// answered reports whether err came from the server (the request reached
// it), as opposed to the client giving the request up.
func answered(err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrSessionExpired),
		errors.Is(err, zk.ErrSessionMoved), errors.Is(err, zk.ErrInvalidPath):
		return false
	}
	return true
}

// call runs fn on a goroutine of its own and waits for it or for ctx.
// go-zookeeper's calls take no context: they return when the server answers
// or when the client gives the request up (it notices a silent connection
// within two thirds of the session timeout). When ctx ends first, call
// returns ctx's error at once, and fn's result, when it comes, goes to
// abandon (if not nil), which undoes what the caller will never learn of.
func call[T any](ctx context.Context, fn func() (T, error), abandon func(T, error)) (T, error) {
	var zero T
	if ctx.Done() == nil {
		return fn()
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	var state atomic.Int32 // 0 running, 1 answered, 2 abandoned
	go func() {
		v, err := fn()
		if state.CompareAndSwap(0, 1) {
			ch <- result{v, err}
			return
		}
		if abandon != nil {
			abandon(v, err)
		}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			return zero, ctx.Err()
		}
		r := <-ch
		return r.v, r.err
	}
}

// Acquire implements driver.Store: one attempt, in one round trip when
// the key is free. This is a mutex's; for a read-write lock or a
// semaphore (p.Mode), see the package documentation.
//
// It creates an ephemeral sequential node Root/<key>/<token>-lock-NNNNNNNNNN
// holding the owner and the TTL, in a multi that also touches the key node
// so that the answer carries the new node's zxid (the fence), the server's
// time and the key node's number of children right after the create. When
// that number is one, the new node is the key's only child: the token
// holds the key, and nothing more is sent. Otherwise it lists the key's
// children: the token holds the key when no lock node with a lower sequence number (a holder, or a waiter
// queued by Enqueue: Acquire never overtakes the queue) and no live MinHold
// node is there. Otherwise it deletes its node again and returns a
// *driver.HeldError naming the lowest lock node's owner (read alongside the
// delete), or the MinHold node's. Expired MinHold nodes in the way are
// deleted, version-checked, and the list read again. When the lowest node
// is gone by the time it is read, the key is still held when another lock
// node stood before ours (a HeldError with no owner: under contention the
// key changes hands while we look, and another round would cost four
// requests for the same answer); when ours would have been next, the
// attempt starts afresh, at most three times: a key whose holder keeps
// changing that fast gets an error wrapping driver.ErrTryAgain, which the
// Locker retries (Obtain then queues), as it does when MinHold nodes keep
// changing.
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if p.TTL > s.session {
		return driver.Grant{}, fmt.Errorf("zkstore: acquire %q: %w (%v > %v)", p.Key, ErrTTL, p.TTL, s.session)
	}
	g, err := call(ctx, func() (driver.Grant, error) {
		if p.Mode != driver.ModeMutex {
			return s.acquireKind(ctx, p)
		}
		return s.acquire(p)
	},
		func(_ driver.Grant, err error) {
			var he *driver.HeldError
			switch {
			case err == nil:
				s.drop(p.Token) // granted after the caller gave up
			case p.Mode == driver.ModeWrite && errors.As(err, &he):
				s.drop(p.Token) // the claim of a writer that gave up
			}
		})
	if err != nil {
		var he *driver.HeldError
		if errors.As(err, &he) {
			return driver.Grant{}, he
		}
		return driver.Grant{}, fmt.Errorf("zkstore: acquire %q: %w", p.Key, err)
	}
	return g, nil
}

// resetSeq is the sequence number from which Release deletes the key node
// when it is left empty, so that its child version (which numbers the lock
// nodes, and counts both creations and deletions) never reaches 2^31.
const resetSeq = 1 << 30

// lockInfix and keepSuffix end the names of lock nodes (before the
// sequence number) and MinHold nodes.
const (
	lockInfix  = "-lock-"
	keepSuffix = "-keep"
)

// created is a lock node made by createNode.
type created struct {
	kp, name string
	seq      int64
	fence    uint64    // its czxid
	now      int64     // the server's time of its creation (ms)
	session  int64     // the session it lives on
	sent     time.Time // when the create was sent
	// alone: right after the create the key node had no other child (the
	// multi's setData answers with the key node's stat, in the same
	// transaction), so the node stood first in the key's queue, with no
	// MinHold node before it: a listing would grant it.
	alone bool
}

// createNode creates token's ephemeral sequential lock node under the key
// node kp, creating the key node (and Root) when missing. The Store's
// first call reads the force-release marker (creating it when missing). When its outcome
// is unknown the node is handed to the reaper, which deletes it.
func (s *Store) createNode(kp, token, owner string, ttl time.Duration) (created, error) {
	s.mu.Lock()
	known, closed := s.mark.zxid != 0, s.closed
	s.mu.Unlock()
	if closed {
		return created{}, ErrClosed
	}
	if !known {
		// The Store's first node: read the force-release marker first,
		// so that only force releases after this grant make Renew check
		// it (see Renew).
		if _, err := s.adoptMarker(); err != nil {
			return created{}, err
		}
	}
	prefix := escapeName(token) + lockInfix
	ops := []any{
		&zk.CreateRequest{Path: kp + "/" + prefix, Data: encodeData(owner, ttl, 0), Acl: s.acl, Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: kp, Version: -1},
	}
	before := s.conn.SessionID()
	sent := time.Now()
	resp, err := s.conn.Multi(ops...)
	// The key node is missing: first use, or the server removed the empty
	// container (it may do so again right after we create it).
	for try := 0; errors.Is(err, zk.ErrNoNode) && try < 3; try++ {
		if err := s.ensureKey(kp); err != nil {
			return created{}, err
		}
		before = s.conn.SessionID()
		sent = time.Now()
		resp, err = s.conn.Multi(ops...)
	}
	if err != nil {
		if !answered(err) {
			// The create may have been applied, on this session or (if it
			// was sent after a reconnection) the next one.
			s.addOrphan(kp, prefix, true, 0)
		}
		return created{}, err
	}
	if len(resp) != 2 || resp[1].Stat == nil {
		return created{}, fmt.Errorf("unexpected multi response (%d results)", len(resp))
	}
	path := resp[0].String
	c := created{kp: kp, name: path[strings.LastIndexByte(path, '/')+1:], sent: sent, session: before,
		fence: uint64(resp[1].Stat.Mzxid), now: resp[1].Stat.Mtime, alone: resp[1].Stat.NumChildren == 1}
	seq, ok := lockSeq(c.name)
	if !ok || c.name != lockName(token, seq) {
		s.removeNode(kp, c.name, before)
		return created{}, fmt.Errorf("created node %q, not named as expected", path)
	}
	c.seq = seq
	if s.conn.SessionID() != before {
		// Which session holds the node is unknown: if the old one, it is
		// gone with it.
		s.removeNode(kp, c.name, 0)
		return created{}, errors.New("the session changed while the lock node was created")
	}
	return c, nil
}

func (s *Store) acquire(p driver.AcquireParams) (driver.Grant, error) {
	c, err := s.createNode(s.keyPath(p.Key), p.Token, p.Owner, p.TTL)
	if err != nil {
		return driver.Grant{}, err
	}
	kp := c.kp
	for round := 0; ; round++ {
		var preds, keeps []string
		if !c.alone {
			kids, _, err := s.conn.Children(kp)
			if err != nil {
				s.removeNode(kp, c.name, c.session)
				return driver.Grant{}, err
			}
			preds, keeps = blockersOf(kids, c.name, c.seq)
		}
		if len(preds) == 0 && len(keeps) == 0 {
			if err := s.record(p.Key, p.Owner, p.Token, c, p.TTL); err != nil {
				s.removeNode(kp, c.name, c.session)
				return driver.Grant{}, err
			}
			return driver.Grant{Fence: c.fence}, nil
		}
		if len(preds) > 0 {
			// The holder (or the first waiter) is the lowest lock node:
			// read it while our node is deleted.
			var n *node
			parallel(2, func(i int) {
				if i == 0 {
					n = s.readNodes(kp, preds[:1])[0]
				} else {
					s.removeNode(kp, c.name, c.session)
				}
			})
			switch {
			case n.err == nil:
				return driver.Grant{}, &driver.HeldError{Owner: n.data.Owner, TTL: n.ttl()}
			case errors.Is(n.err, zk.ErrNoNode) && len(preds) > 1:
				// It went meanwhile, but the next lock node still stands
				// before ours (the key changes hands under contention):
				// held, by an owner not read.
				return driver.Grant{}, &driver.HeldError{}
			case errors.Is(n.err, zk.ErrNoNode) && round < 3:
				// It went meanwhile: our node is gone too, so try afresh.
				if c, err = s.createNode(kp, p.Token, p.Owner, p.TTL); err != nil {
					return driver.Grant{}, err
				}
				continue
			case errors.Is(n.err, zk.ErrNoNode):
				// Three holders went while we looked: a lost race, which
				// the Locker retries (Obtain queues next).
				return driver.Grant{}, fmt.Errorf("the holder kept changing: %w", driver.ErrTryAgain)
			}
			return driver.Grant{}, n.err
		}
		live, expired, err := s.readKeeps(kp, keeps, c.now)
		if err != nil {
			s.removeNode(kp, c.name, c.session)
			return driver.Grant{}, err
		}
		if live != nil {
			s.removeNode(kp, c.name, c.session)
			return driver.Grant{}, &driver.HeldError{Owner: live.data.Owner, TTL: live.remaining(c.now)}
		}
		if round == 3 {
			s.removeNode(kp, c.name, c.session)
			return driver.Grant{}, fmt.Errorf("MinHold nodes kept changing: %w", driver.ErrTryAgain)
		}
		s.deleteNodes(kp, expired)
	}
}

// readKeeps reads the MinHold nodes names of kp and sorts them out by the
// server's time now (ms): the live one that ends last, and the expired
// ones. Nodes gone meanwhile are left out.
func (s *Store) readKeeps(kp string, names []string, now int64) (live *node, expired []*node, err error) {
	for _, n := range s.readNodes(kp, names) {
		switch {
		case errors.Is(n.err, zk.ErrNoNode):
		case n.err != nil:
			return nil, nil, n.err
		case n.expired(now):
			expired = append(expired, n)
		case live == nil || n.remaining(now) > live.remaining(now):
			live = n
		}
	}
	return live, expired, nil
}

// record keeps the lease of a lock node just granted to token: its
// deadline is TTL after the node's creation was sent, when the reaper
// deletes it unless it is renewed or released first. After Close, which
// stopped the reaper, it keeps nothing and returns ErrClosed: Acquire then
// deletes the node, and a Ticket's Wait leaves it queued for Leave.
func (s *Store) record(key, owner, token string, c created, ttl time.Duration) error {
	l := &lease{
		key: key, owner: owner, fence: c.fence, zxid: int64(c.fence), seq: c.seq, session: c.session,
		ttl: ttl, until: s.since(c.sent) + ttl,
	}
	return s.addLease(token, l)
}

// addLease keeps l, granted to token, until its deadline, when the reaper
// deletes its node unless it is renewed or released first; after Close it
// keeps nothing and returns ErrClosed (see record).
func (s *Store) addLease(token string, l *lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.mark.zxid != 0 && l.zxid < s.mark.zxid {
		// Created before the last force release this Store knows of,
		// which may have deleted it: read it before trusting a renewal.
		l.check = s.mark.zxid
	}
	s.leases[token] = l
	s.reap.armLocked(s.base.Add(l.until))
	return nil
}

// ensureKey creates the key node as a container (the server deletes it
// once its last child is gone), creating Root first when it is missing.
func (s *Store) ensureKey(kp string) error {
	_, err := s.conn.CreateContainer(kp, nil, zk.FlagContainer, s.acl)
	if errors.Is(err, zk.ErrNoNode) {
		if err := s.ensureRoot(); err != nil {
			return err
		}
		_, err = s.conn.CreateContainer(kp, nil, zk.FlagContainer, s.acl)
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", kp, err)
	}
	return nil
}

// ensureRoot creates Root and its parents as persistent nodes.
func (s *Store) ensureRoot() error {
	for i := 1; i <= len(s.root); i++ {
		if i < len(s.root) && s.root[i] != '/' {
			continue
		}
		_, err := s.conn.Create(s.root[:i], nil, zk.FlagPersistent, s.acl)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", s.root[:i], err)
		}
	}
	return nil
}

// removeNode deletes kp/name, whatever its version; when the outcome is
// unknown it is handed to the reaper. session is the session the node
// lives on (0: unknown).
func (s *Store) removeNode(kp, name string, session int64) {
	err := s.conn.Delete(kp+"/"+name, -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		s.addOrphan(kp, name, false, session)
	}
}

// drop forgets the lease of token and deletes its node: for a grant nobody
// will use, or the claim of a writer that stopped waiting.
func (s *Store) drop(token string) {
	s.mu.Lock()
	l := s.leases[token]
	delete(s.leases, token)
	s.mu.Unlock()
	if l != nil {
		parent, name := s.nodeOf(token, l)
		s.removeNode(parent, name, l.session)
		if l.mode != driver.ModeMutex {
			s.note.announce(l.key)
		}
	}
}

// lookupLocked returns the lease of token if it is a hold of key in mode
// m (not a writer's claim), else nil. Callers hold s.mu.
func (s *Store) lookupLocked(key, token string, m driver.Mode) *lease {
	l := s.leases[token]
	if l == nil || l.key != key || l.mode != m || l.waiting {
		return nil
	}
	return l
}

// sessionEnded reports whether l's node has certainly gone with its
// session: the client was told the session expired, or runs another one
// now. (A session that may have expired at the server while the client was
// cut off needs no check of its own: it cannot have expired before the
// lease's deadline, see Renew.)
func (s *Store) sessionEnded(l *lease, current int64) bool {
	return s.conn.State() == zk.StateExpired || l.session != current
}

// Release implements driver.Store. Without KeepFor it deletes the token's
// lock node, which fires the watches of waiters. With KeepFor (MinHold) it
// first creates a MinHold node Root/<key>/<token>-keep holding the owner,
// the fence and KeepFor, then deletes the lock node: the MinHold node
// blocks every grant until it is KeepFor old by the server's clock, even if
// this client dies meanwhile. It is a TTL node where the server has
// extendedTypesEnabled (the server then also deletes it, up to
// znode.container.checkIntervalMs after it expired); elsewhere a persistent
// node, created in a multi with the lock node's deletion, which the next
// Acquire or Leases deletes once expired.
//
// A lease whose local deadline has passed, or whose session is gone, is
// ErrNotHeld (its node is still deleted if it is there). That is a
// mutex's Release; a read-write lock's or semaphore's (p.Mode) deletes
// its entry, see the package documentation.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	_, err := call(ctx, func() (struct{}, error) {
		if p.Mode != driver.ModeMutex {
			return struct{}{}, s.releaseKind(p)
		}
		return struct{}{}, s.release(p)
	}, nil)
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return fmt.Errorf("zkstore: release %q: %w", p.Key, err)
	}
	return err
}

func (s *Store) release(p driver.ReleaseParams) error {
	now := time.Now()
	current := s.conn.SessionID()
	s.mu.Lock()
	l := s.lookupLocked(p.Key, p.Token, driver.ModeMutex)
	var path, owner string
	var fence uint64
	var gone, late bool
	if l != nil {
		path, owner, fence = s.nodePath(p.Token, l), l.owner, l.fence
		gone, late = s.sessionEnded(l, current), s.since(now) >= l.until
	}
	s.mu.Unlock()
	switch {
	case l == nil:
		return driver.ErrNotHeld
	case gone:
		s.forget(p.Token, l)
		return driver.ErrNotHeld
	case late:
		s.forget(p.Token, l)
		i := strings.LastIndexByte(path, '/')
		s.removeNode(path[:i], path[i+1:], l.session)
		return driver.ErrNotHeld
	}
	var err error
	if keep := time.Duration(driver.Units(p.KeepFor, time.Millisecond)) * time.Millisecond; keep > 0 {
		err = s.keep(path, owner, fence, p.Token, keep)
	} else {
		err = s.conn.Delete(path, -1)
	}
	switch {
	case err == nil:
		s.forget(p.Token, l)
		if seq, _ := lockSeq(path[strings.LastIndexByte(path, '/')+1:]); seq > resetSeq {
			// Start the key's sequence counter afresh before it overflows:
			// delete the key node if nobody else has a node in it.
			_ = s.conn.Delete(path[:strings.LastIndexByte(path, '/')], -1)
		}
		return nil
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, driver.ErrNotHeld):
		s.forget(p.Token, l)
		return driver.ErrNotHeld
	}
	return err
}

// forget removes l from the leases if it is still token's.
func (s *Store) forget(token string, l *lease) {
	s.mu.Lock()
	if s.leases[token] == l {
		delete(s.leases, token)
	}
	s.mu.Unlock()
}

// keep replaces the lock node at path by a MinHold node that expires keep
// from the server's now.
func (s *Store) keep(path, owner string, fence uint64, token string, keep time.Duration) error {
	kp := path[:strings.LastIndexByte(path, '/')]
	kpath := kp + "/" + escapeName(token) + keepSuffix
	data := encodeData(owner, keep, fence)
	if s.ttlNodes.Load() >= 0 {
		_, err := s.conn.CreateTTL(kpath, data, zk.FlagTTL, s.acl, keep)
		switch {
		case err == nil || errors.Is(err, zk.ErrNodeExists):
			s.ttlNodes.Store(1)
			err := s.conn.Delete(path, -1)
			if errors.Is(err, zk.ErrNoNode) {
				// The lease was gone already: take the MinHold node back.
				s.removeNode(kp, kpath[len(kp)+1:], 0)
				return driver.ErrNotHeld
			}
			return err
		case isUnimplemented(err):
			s.ttlNodes.Store(-1) // extendedTypesEnabled is off
		default:
			return err
		}
	}
	resp, err := s.conn.Multi(
		&zk.CheckVersionRequest{Path: path, Version: -1},
		&zk.CreateRequest{Path: kpath, Data: data, Acl: s.acl, Flags: zk.FlagPersistent},
		&zk.DeleteRequest{Path: path, Version: -1},
	)
	if err != nil && len(resp) > 0 && errors.Is(resp[0].Error, zk.ErrNoNode) {
		return driver.ErrNotHeld
	}
	return err
}

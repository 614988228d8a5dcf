package zkstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
)

// DefaultRoot is the root node when Options.Root is empty.
const DefaultRoot = "/tasklock"

// renewChunk bounds the bytes of one renewal multi, well inside the
// server's default jute.maxbuffer (1 MiB) and the client's send buffer.
const renewChunk = 512 << 10

// renewRounds bounds how many multis one Renew sends per chunk when some of
// its leases are gone: each failed multi names one lost lease.
const renewRounds = 8

// ErrTTL is wrapped by the error Acquire returns, and Renew reports for a
// lease, when the lock's TTL is longer than Options.SessionTimeout. Every
// lock of a Store lives on its Conn's session: a holder cut off from
// ZooKeeper must stop before that session can expire at the server and its
// nodes vanish, so no lock may outlast the session timeout. Shorten the
// lock's TTL or connect with a longer session timeout.
var ErrTTL = fmt.Errorf("zkstore: lock TTL longer than Options.SessionTimeout: %w", driver.ErrUnsupported)

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
// It implements driver.Store, driver.Notifier, driver.Lister and
// driver.ForceReleaser, and is safe for concurrent use. It never closes the
// Conn and never logs.
type Store struct {
	conn    *zk.Conn
	root    string
	session time.Duration
	acl     []zk.ACL

	ttlNodes atomic.Int32 // 0 unknown, 1 the server has TTL nodes, -1 it has not
	base     time.Time    // origin of lease.until, on the monotonic clock

	mu        sync.Mutex
	leases    map[string]*lease // by token: the locks granted through this Store
	orphans   []orphan          // nodes a failed call may have left behind
	lastSweep time.Time

	notify notifier
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Notifier      = (*Store)(nil)
	_ driver.Lister        = (*Store)(nil)
	_ driver.ForceReleaser = (*Store)(nil)
)

// lease is a lock granted through this Store, kept small (about 150 bytes
// with its map entry; the strings are the caller's): its node's path is
// built again from the key, the token and seq when needed. Guarded by
// Store.mu.
type lease struct {
	key     string
	owner   string
	fence   uint64
	seq     int64         // the lock node's sequence number
	session int64         // the session the node was created on, 0 if unknown
	ttl     time.Duration // the lease length of the last grant or renewal
	until   time.Duration // local end, since Store.base: send time of the last grant or renewal + ttl
}

// orphan names nodes that a call which failed midway may have created:
// every child of parent whose name starts with prefix. They are deleted by
// the next call that gets that far.
type orphan struct{ parent, prefix string }

// New returns a Store that keeps its locks under opts.Root through conn.
// It validates opts and returns an error naming the offending field; it does
// not talk to ZooKeeper. The caller keeps ownership of conn: the Store never
// closes it, and closing it ends the session and so every lock of the
// Store.
func New(conn *zk.Conn, opts *Options) (*Store, error) {
	if conn == nil {
		return nil, errors.New("zkstore: conn is nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if err := checkRoot(o.Root); err != nil {
		return nil, fmt.Errorf("zkstore: invalid Options.Root %q: %w", o.Root, err)
	}
	switch {
	case o.SessionTimeout == 0:
		return nil, errors.New("zkstore: invalid Options.SessionTimeout: required: the session timeout the Conn was created with (zk.Connect's sessionTimeout)")
	case o.SessionTimeout < time.Millisecond:
		return nil, fmt.Errorf("zkstore: invalid Options.SessionTimeout: %v is below the minimum 1ms", o.SessionTimeout)
	}
	acl := zk.WorldACL(zk.PermAll)
	if o.ACL != nil {
		if len(o.ACL) == 0 {
			return nil, errors.New("zkstore: invalid Options.ACL: empty (nil means world:anyone with all permissions)")
		}
		acl = append([]zk.ACL(nil), o.ACL...)
	}
	s := &Store{
		conn: conn, root: o.Root, session: o.SessionTimeout, acl: acl,
		base: time.Now(), leases: make(map[string]*lease),
	}
	s.notify.s = s
	return s, nil
}

// Root returns the root node the Store keeps its locks under.
func (s *Store) Root() string { return s.root }

// keyPath is the node of key: Root + "/" + the escaped key.
func (s *Store) keyPath(key string) string { return s.root + "/" + escapeName(key) }

// lockName is the name of token's lock node with sequence number seq, as
// the server makes it (%010d).
func lockName(token string, seq int64) string {
	return fmt.Sprintf("%s%s%010d", escapeName(token), lockInfix, seq)
}

// lockPath is the path of the lock node of l, granted to token.
func (s *Store) lockPath(token string, l *lease) string {
	return s.keyPath(l.key) + "/" + lockName(token, l.seq)
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

// Acquire implements driver.Store: one attempt, in two round trips when
// the key is free.
//
// It creates an ephemeral sequential node Root/<key>/<token>-lock-NNNNNNNNNN
// holding the owner and the TTL, in a multi that also touches the key node
// so that the answer carries the new node's zxid (the fence) and the
// server's time. It then lists the key's children: the token holds the key
// when no lock node with a lower sequence number and no MinHold node is
// left. Blockers whose lease has expired by the server's clock (modified
// longer than their TTL ago) are deleted, version-checked, and the list is
// read again. When a live blocker remains, the new node is deleted again and
// Acquire returns a *driver.HeldError with the blocker's owner and remaining
// lease, and, when a subscription is active, sets a watch on it.
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if p.TTL > s.session {
		return driver.Grant{}, fmt.Errorf("zkstore: acquire %q: %w (%v > %v)", p.Key, ErrTTL, p.TTL, s.session)
	}
	g, err := call(ctx, func() (driver.Grant, error) { return s.acquire(p) },
		func(_ driver.Grant, err error) {
			if err == nil {
				s.drop(p.Token) // granted after the caller gave up
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

func (s *Store) acquire(p driver.AcquireParams) (driver.Grant, error) {
	s.cleanOrphans()
	kp := s.keyPath(p.Key)
	prefix := escapeName(p.Token) + lockInfix
	data := encodeData(p.Owner, p.TTL, 0)
	ops := []any{
		&zk.CreateRequest{Path: kp + "/" + prefix, Data: data, Acl: s.acl, Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: kp, Version: -1},
	}
	before := s.conn.SessionID()
	sent := time.Now()
	resp, err := s.conn.Multi(ops...)
	// The key node is missing: first use, or the server removed the empty
	// container (it may do so again right after we create it).
	for try := 0; errors.Is(err, zk.ErrNoNode) && try < 3; try++ {
		if err := s.ensureKey(kp); err != nil {
			return driver.Grant{}, err
		}
		sent = time.Now()
		resp, err = s.conn.Multi(ops...)
	}
	if err != nil {
		if !answered(err) {
			s.addOrphan(kp, prefix) // the create may have been applied
		}
		return driver.Grant{}, err
	}
	if len(resp) != 2 || resp[1].Stat == nil {
		return driver.Grant{}, fmt.Errorf("zkstore: unexpected multi response (%d results)", len(resp))
	}
	path := resp[0].String
	name := path[strings.LastIndexByte(path, '/')+1:]
	fence, now := uint64(resp[1].Stat.Mzxid), resp[1].Stat.Mtime
	seq, ok := lockSeq(name)
	if !ok || name != lockName(p.Token, seq) {
		s.removeNode(kp, name)
		return driver.Grant{}, fmt.Errorf("zkstore: created node %q, not named as expected", path)
	}
	session := s.conn.SessionID()
	if session != before {
		session = 0 // it changed meanwhile: which one holds the node is unknown
	}

	for round := 0; ; round++ {
		kids, _, err := s.conn.Children(kp)
		if err != nil {
			s.removeNode(kp, name)
			return driver.Grant{}, err
		}
		blockers := blockersOf(kids, name, seq)
		if len(blockers) == 0 {
			s.mu.Lock()
			s.leases[p.Token] = &lease{
				key: p.Key, owner: p.Owner, fence: fence, seq: seq, session: session,
				ttl: p.TTL, until: s.since(sent) + p.TTL,
			}
			s.mu.Unlock()
			return driver.Grant{Fence: fence}, nil
		}
		nodes := s.readNodes(kp, blockers)
		var holder *node
		var expired []*node
		var rerr error
		for _, n := range nodes {
			switch {
			case errors.Is(n.err, zk.ErrNoNode):
			case n.err != nil:
				rerr = n.err
			case n.expired(now):
				expired = append(expired, n)
			case holder == nil || n.before(holder):
				holder = n
			}
		}
		switch {
		case holder != nil:
			s.removeNode(kp, name)
			if !holder.keep {
				s.notify.watch(p.Key, kp+"/"+holder.name)
			}
			return driver.Grant{}, &driver.HeldError{Owner: holder.data.Owner, TTL: holder.remaining(now)}
		case rerr != nil:
			s.removeNode(kp, name)
			return driver.Grant{}, rerr
		case round == 3:
			s.removeNode(kp, name)
			return driver.Grant{}, errors.New("zkstore: blockers keep changing; giving this attempt up")
		}
		s.deleteNodes(kp, expired)
	}
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
// unknown it is left for cleanOrphans.
func (s *Store) removeNode(kp, name string) {
	err := s.conn.Delete(kp+"/"+name, -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		s.addOrphan(kp, name)
	}
}

func (s *Store) addOrphan(parent, prefix string) {
	s.mu.Lock()
	if len(s.orphans) < 1024 {
		s.orphans = append(s.orphans, orphan{parent, prefix})
	}
	s.mu.Unlock()
}

// cleanOrphans deletes the nodes failed calls may have left behind. They
// would block their keys only until their lease expires (or the session
// ends), but a waiter should not have to wait that long.
func (s *Store) cleanOrphans() {
	s.mu.Lock()
	os := s.orphans
	s.orphans = nil
	s.mu.Unlock()
	for i, o := range os {
		kids, _, err := s.conn.Children(o.parent)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			s.mu.Lock()
			s.orphans = append(s.orphans, os[i:]...)
			s.mu.Unlock()
			return
		}
		for _, k := range kids {
			if strings.HasPrefix(k, o.prefix) {
				s.removeNode(o.parent, k)
			}
		}
	}
}

// drop forgets the lease of token and deletes its node: for a grant nobody
// will use.
func (s *Store) drop(token string) {
	s.mu.Lock()
	l := s.leases[token]
	delete(s.leases, token)
	s.mu.Unlock()
	if l != nil {
		s.removeNode(s.keyPath(l.key), lockName(token, l.seq))
	}
}

// lookupLocked returns the lease of token if it is one of key's, else nil.
// Callers hold s.mu.
func (s *Store) lookupLocked(key, token string) *lease {
	l := s.leases[token]
	if l == nil || l.key != key {
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
	return s.conn.State() == zk.StateExpired || (l.session != 0 && l.session != current)
}

// Renew implements driver.Store: every lease of the batch is renewed by one
// setData on its node (version -1: the node's name holds the token, so a
// node that exists is ours), all in one multi per 512 KiB of requests: one
// round trip for thousands of leases. The multi also proves that the
// session is alive at the server, and moves each node's modification time,
// from which other clients count its TTL, to the server's now.
//
// A lease whose node is gone is ErrNotHeld. A multi fails as a whole, naming
// the first operation that failed; that lease is ErrNotHeld and the rest are
// sent again.
//
// Before sending anything, two kinds of leases are ErrNotHeld at once:
// those of a session the client was told has expired (or that it replaced
// with another), and those past their deadline, the send time of their last
// successful grant or renewal plus their TTL, when other clients may take
// them over (their nodes are deleted by the Store's next Acquire). The
// deadline also covers a session that may have expired at the server while
// the client was cut off: the server heard from the session when it
// answered that grant or renewal, so the session cannot expire before
// SessionTimeout ≥ TTL after its send.
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	res, err := call(ctx, func() ([]error, error) { return s.renew(ps) }, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: renew %d leases: %w", len(ps), err)
	}
	return res, nil
}

// renewOp is one lease of a renewal multi.
type renewOp struct {
	i   int // index in the batch
	l   *lease
	ttl time.Duration
	req *zk.SetDataRequest
}

func (s *Store) renew(ps []driver.RenewParams) ([]error, error) {
	res := make([]error, len(ps))
	now := time.Now()
	current := s.conn.SessionID()
	ops := make([]renewOp, 0, len(ps))
	s.mu.Lock()
	for i, p := range ps {
		l := s.lookupLocked(p.Key, p.Token)
		switch {
		case l == nil:
			res[i] = driver.ErrNotHeld
			continue
		case s.sessionEnded(l, current):
			res[i] = driver.ErrNotHeld
			delete(s.leases, p.Token)
			continue
		case s.since(now) >= l.until:
			// Its lease ended by now: other clients may take the key
			// (deleting the node) at any moment, so it is not renewed.
			res[i] = driver.ErrNotHeld
			delete(s.leases, p.Token)
			if len(s.orphans) < 1024 {
				s.orphans = append(s.orphans, orphan{s.keyPath(l.key), lockName(p.Token, l.seq)})
			}
			continue
		case p.TTL > s.session:
			res[i] = fmt.Errorf("%w (%v > %v)", ErrTTL, p.TTL, s.session)
			continue
		}
		ops = append(ops, renewOp{i: i, l: l, ttl: p.TTL})
	}
	s.sweepLocked(now)
	s.mu.Unlock()

	// A lease's key, owner and sequence number never change: the requests
	// are built outside the lock.
	var chunks [][]renewOp
	start, size := 0, 0
	for j := range ops {
		op := &ops[j]
		op.req = &zk.SetDataRequest{Path: s.lockPath(ps[op.i].Token, op.l), Data: encodeData(op.l.owner, op.ttl, 0), Version: -1}
		n := len(op.req.Path) + len(op.req.Data) + 32
		if size+n > renewChunk && j > start {
			chunks, start, size = append(chunks, ops[start:j]), j, 0
		}
		size += n
	}
	if start < len(ops) {
		chunks = append(chunks, ops[start:])
	}
	if len(chunks) == 0 {
		return res, nil
	}
	if len(chunks) == 1 {
		return res, s.renewChunk(chunks[0], ps, res)
	}
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	for ci, c := range chunks { // pipelined on the one connection
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[ci] = s.renewChunk(c, ps, res)
		}()
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// renewChunk renews ops in one multi, dropping the leases it finds gone
// and sending the rest again. It writes res[op.i] for every op it settles;
// it returns an error when the call as a whole failed.
func (s *Store) renewChunk(ops []renewOp, ps []driver.RenewParams, res []error) error {
	for round := 0; len(ops) > 0; round++ {
		if round == renewRounds {
			err := fmt.Errorf("%d leases still unsettled after %d multis", len(ops), renewRounds)
			for _, op := range ops {
				res[op.i] = err
			}
			return nil
		}
		reqs := make([]any, len(ops))
		for j, op := range ops {
			reqs[j] = op.req
		}
		sent := time.Now()
		resp, err := s.conn.Multi(reqs...)
		if err == nil {
			s.mu.Lock()
			for _, op := range ops {
				op.l.ttl, op.l.until = op.ttl, s.since(sent)+op.ttl
			}
			s.mu.Unlock()
			return nil
		}
		failed := -1
		for j, r := range resp {
			if r.Error != nil {
				failed = j
				break
			}
		}
		if failed < 0 || !errors.Is(resp[failed].Error, zk.ErrNoNode) {
			return err
		}
		op := ops[failed]
		res[op.i] = driver.ErrNotHeld
		s.mu.Lock()
		if s.leases[ps[op.i].Token] == op.l {
			delete(s.leases, ps[op.i].Token)
		}
		s.mu.Unlock()
		ops = append(ops[:failed:failed], ops[failed+1:]...)
	}
	return nil
}

// sweepLocked forgets, at most once a second, leases that ended at least a
// second ago by their local deadline: their Lock lost them (and the
// Locker renews them no more), and nobody released them. Their nodes are
// left to expire by their TTL at the other clients or with the session.
// Callers hold s.mu.
func (s *Store) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Second {
		return
	}
	s.lastSweep = now
	for tok, l := range s.leases {
		if s.since(now)-l.until > time.Second {
			delete(s.leases, tok)
		}
	}
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
// ErrNotHeld (its node is still deleted if it is there).
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.release(p) }, nil)
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return fmt.Errorf("zkstore: release %q: %w", p.Key, err)
	}
	return err
}

func (s *Store) release(p driver.ReleaseParams) error {
	now := time.Now()
	current := s.conn.SessionID()
	s.mu.Lock()
	l := s.lookupLocked(p.Key, p.Token)
	var path, owner string
	var fence uint64
	var gone, late bool
	if l != nil {
		path, owner, fence = s.lockPath(p.Token, l), l.owner, l.fence
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
		s.removeNode(path[:i], path[i+1:])
		return driver.ErrNotHeld
	}
	var err error
	if keep := p.KeepFor.Truncate(time.Millisecond); keep > 0 {
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
				s.removeNode(kp, kpath[len(kp)+1:])
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

package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/driver"
)

// Defaults of Options.
const (
	DefaultPrefix = "/tasklock/"
	// DefaultSessionTTL is tasklock's default lock TTL (10 s) plus one
	// second of slack: a keepalive sent for an earlier grant or renewal
	// covers a new one for that long, so a steady stream of grants sends
	// about two keepalives a second, ahead of need, and none of them waits
	// for one (with a SessionTTL equal to the lock TTL each waits for a
	// keepalive sent after it began).
	DefaultSessionTTL = 11 * time.Second
)

// maxPrefix bounds Options.Prefix (etcd keys may be long, but a prefix this
// long is a mistake).
const maxPrefix = 512

// ErrClosed is returned by every call on a Store after Close.
var ErrClosed = errors.New("etcdstore: store closed")

// ErrTTL is wrapped by the error Acquire and Renew return for a lock TTL
// longer than Options.SessionTTL: the session lease keeps the lock's key,
// and a holder cut off from etcd must stop before that lease can expire, so
// no lock may outlast it. Raise SessionTTL or shorten the lock's TTL.
var ErrTTL = fmt.Errorf("etcdstore: lock TTL longer than Options.SessionTTL: %w", driver.ErrUnsupported)

// Options configures a Store. A nil *Options means all defaults; zero fields
// take their defaults. New never writes into it. Every Store, CLI and
// dashboard that works on the same locks must use the same Prefix.
type Options struct {
	// Prefix is prepended to every etcd key the Store writes. It must end
	// with "/", and the prefixes of Stores on one cluster must not nest.
	// Default: DefaultPrefix.
	Prefix string
	// SessionTTL is the TTL of the Store's session lease, which keeps the
	// keys of all its locks: a holder that dies or is cut off is replaced
	// within SessionTTL (plus etcd's expiry check, up to 0.5 s). It must be
	// a whole number of seconds, at least 1 s, and at least every lock
	// TTL used through the Store (ErrTTL otherwise). etcd may grant more
	// than asked: at least 1.5 election timeouts, rounded up to seconds
	// (2 s with etcd's default 1 s election timeout). Default:
	// DefaultSessionTTL.
	SessionTTL time.Duration
}

// Store keeps tasklock leases in etcd through the caller's client. It
// implements driver.Store, driver.Queuer, driver.Kinder, driver.Notifier,
// driver.Lister, driver.ForceReleaser and ledger.Ledger, and is safe for
// concurrent use. Create it with New and end it with Close.
type Store struct {
	c      *clientv3.Client
	prefix string
	ttl    time.Duration // Options.SessionTTL
	ttlSec int64

	ctx    context.Context // ends background calls at Close
	cancel context.CancelFunc

	grantSem chan struct{}  // capacity 1: one session grant at a time
	bg       sync.WaitGroup // keepalives under way; Add only under mu while open
	txnOps   atomic.Int64   // operations per Txn the server accepts (--max-txn-ops)

	name string // the last part of the etcd key of this Store's mutex grants: see Acquire

	mu      sync.Mutex
	closed  bool
	sess    *session            // the current session; nil before the first grant
	held    map[string]*entry   // by etcd key: the locks granted through this Store
	claimed map[string]struct{} // etcd keys under the Store's name that an Acquire under way may put
	reap    reaper

	waiting map[*ticket]struct{} // entries queued through this Store (queue.go)
	keeping bool                 // keepWaiting is running

	ledger ledgerState // ledger.go; has its own mutex
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Notifier      = (*Store)(nil)
	_ driver.Lister        = (*Store)(nil)
	_ driver.ForceReleaser = (*Store)(nil)
)

// badOption returns the error for an invalid argument or option: a
// *driver.OptionError (tasklock.OptionError) naming field, with the
// offending value when value is not empty.
func badOption(field, value, format string, args ...any) error {
	return &driver.OptionError{Pkg: "etcdstore", Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// New returns a Store that keeps its leases under opts.Prefix through client.
// It validates opts and returns a *driver.OptionError naming the offending
// field; it does not talk to etcd (the session lease is granted by the first
// Acquire). The caller keeps ownership of client: the Store never closes it.
func New(client *clientv3.Client, opts *Options) (*Store, error) {
	if client == nil {
		return nil, badOption("client", "", "nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	switch {
	case len(o.Prefix) > maxPrefix:
		return nil, badOption("Options.Prefix", "", "%d bytes long, the maximum is %d", len(o.Prefix), maxPrefix)
	case !utf8.ValidString(o.Prefix):
		return nil, badOption("Options.Prefix", o.Prefix, "not valid UTF-8")
	case !strings.HasSuffix(o.Prefix, "/"):
		return nil, badOption("Options.Prefix", o.Prefix, "must end with \"/\"")
	case o.SessionTTL < time.Second:
		return nil, badOption("Options.SessionTTL", "", "%v is below the minimum 1s", o.SessionTTL)
	case o.SessionTTL%time.Second != 0:
		return nil, badOption("Options.SessionTTL", "", "%v is not a whole number of seconds (etcd lease TTLs are)", o.SessionTTL)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		c:        client,
		prefix:   o.Prefix,
		ttl:      o.SessionTTL,
		ttlSec:   int64(o.SessionTTL / time.Second),
		ctx:      ctx,
		cancel:   cancel,
		grantSem: make(chan struct{}, 1),
		name:     storeName(),
		held:     make(map[string]*entry),
		claimed:  make(map[string]struct{}),
		waiting:  make(map[*ticket]struct{}),
	}
	s.reap.s = s
	s.reap.alarm.Fire = s.reap.fire
	s.txnOps.Store(defaultTxnOps)
	return s, nil
}

// Prefix returns the key prefix the Store writes under.
func (s *Store) Prefix() string { return s.prefix }

// Close ends the Store: later calls return ErrClosed and its timer stops.
// When no lock granted through it is still held, it revokes the session
// lease at once. Otherwise it leaves the lease to expire by itself (within
// SessionTTL): the holders of those locks learn at their next renewal
// (ErrClosed, retried until their local validity ends), and revoking first
// would let another process obtain their keys while they still trust them.
// Close the Lockers on top first. ctx bounds the revoke.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sess := s.sess
	busy := false
	for _, e := range s.held {
		if e.state != stateDoomed {
			busy = true
			break
		}
	}
	s.reap.stopLocked()
	s.mu.Unlock()
	s.cancel()
	s.reap.wait()
	s.bg.Wait()
	if sess == nil || busy || sess.dead.Load() {
		return nil
	}
	sess.dead.Store(true)
	if _, err := s.c.Revoke(ctx, sess.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("etcdstore: close: revoke session lease %x: %w", int64(sess.id), err)
	}
	return nil
}

// Entry states.
const (
	stateHeld     = iota // held; the reaper deletes it at its deadline
	stateRenewing        // a Renew is under way; the reaper leaves it alone
	stateDoomed          // expired or abandoned: the reaper deletes its key
)

// entry is a lock granted through this Store: the local half of its lease.
// It is kept small (one per held lock).
type entry struct {
	key      string // the etcd key
	token    string // the token, when key ends with the Store's name rather than the token
	sess     *session
	deadline time.Time // held: the reaper deletes the key then, unless renewed; doomed: next delete attempt
	state    uint8
	attempts uint8 // doomed: failed delete attempts
	gone     bool  // removed from Store.held
}

// keyPrefix is the etcd prefix of every entry of lock key: the holder's is
// the one with the lowest create revision (there is only ever one).
func (s *Store) keyPrefix(key string) string {
	return s.prefix + escape(key) + "/"
}

// entryKey is the etcd key of token's entry for key.
func (s *Store) entryKey(key, token string) string {
	return s.prefix + escape(key) + "/" + escape(token)
}

// storeName returns a name for a Store's mutex entries: "%" and 32 random
// hex digits. escape never makes a lone "%" (it writes % as %25), so no
// token's entry can have it.
func storeName() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "%" + hex.EncodeToString(b[:])
}

// mutexKeyLocked returns the etcd key of token's mutex hold of key, and
// its entry if the Store holds it: the Store's named entry when it is
// token's, else the entry named by the token. Callers hold s.mu.
func (s *Store) mutexKeyLocked(key, token string) (string, *entry) {
	kp := s.keyPrefix(key)
	nk := kp + s.name
	if e := s.held[nk]; e != nil && e.token == token {
		return nk, e
	}
	ek := kp + escape(token)
	return ek, s.held[ek]
}

// claimName returns the etcd key an Acquire for token puts under the key
// prefix kp (keyPrefix): the Store's named entry, claimed for the Acquire
// (named is true) until keepHeld or unclaim lets it go, unless the Store
// has it already (held, being deleted, or claimed by another Acquire under
// way); then the entry named by the token.
//
// Reusing one name per Store keeps etcd's index small: a key deleted stays
// in it, with every revision, until the cluster is compacted, and each
// Acquire's compare over the key's prefix visits them all, so a token's
// name per grant made every grant of a busy key slower than the one
// before (0.6 ms per Acquire and Release with no deleted key under the
// prefix, 1.05 ms with 10,000, on one etcd).
func (s *Store) claimName(kp, token string) (ek string, named bool) {
	nk := kp + s.name
	s.mu.Lock()
	defer s.mu.Unlock()
	_, busy := s.claimed[nk]
	if busy || s.held[nk] != nil {
		return kp + escape(token), false
	}
	s.claimed[nk] = struct{}{}
	return nk, true
}

// unclaim lets go of the claim claimName took on ek.
func (s *Store) unclaim(ek string) {
	s.mu.Lock()
	delete(s.claimed, ek)
	s.mu.Unlock()
}

// parseKey splits an etcd key under the Store's prefix into the lock key
// and token; ok is false for a key that is not one of ours.
func (s *Store) parseKey(k []byte) (key, token string, ok bool) {
	rest, found := strings.CutPrefix(string(k), s.prefix)
	if !found {
		return "", "", false
	}
	ek, et, found := strings.Cut(rest, "/")
	if !found || ek == "" || et == "" || strings.Contains(et, "/") || strings.HasPrefix(rest, kindsMark) {
		return "", "", false
	}
	return unescape(ek), unescape(et), true
}

var (
	escaper   = strings.NewReplacer("%", "%25", "/", "%2F")
	unescaper = strings.NewReplacer("%2F", "/", "%25", "%")
)

// escape makes s free of "/", so that the lock key and the token can be
// told apart in an etcd key, and escape(p) is a prefix of escape(k) exactly
// when p is a prefix of k (Leases filters with it).
func escape(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '/') < 0 {
		return s
	}
	return escaper.Replace(s)
}

func unescape(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	return unescaper.Replace(s)
}

// value is what an entry's key holds: the token, the TTL asked for at the
// grant in milliseconds, and the owner name, one per line.
func value(token, owner string, ttl time.Duration) string {
	return token + "\n" + strconv.FormatInt(ttl.Milliseconds(), 10) + "\n" + owner
}

// parseValue reads value's format; a value it cannot read yields no owner.
func parseValue(v []byte) (token, owner string, ttl time.Duration) {
	tok, rest, ok := strings.Cut(string(v), "\n")
	if !ok {
		return tok, "", 0
	}
	ms, owner, ok := strings.Cut(rest, "\n")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil {
		return tok, "", 0
	}
	return tok, owner, time.Duration(n) * time.Millisecond
}

// Acquire implements driver.Store. In one Txn it puts token's entry under
// the key's prefix with the session lease, if no entry exists there, and
// otherwise reads the holder's. The entry is named by the Store, so that
// a key granted again and again through it reuses one etcd key (see
// claimName), or by the token when the Store has that key already. The
// fence is the new entry's create
// revision. When the session lease must be refreshed to cover the TTL (it
// was last kept alive too long ago) a LeaseKeepAlive runs alongside the
// Txn. A held key costs a LeaseTimeToLive of the holder's lease too, for
// HeldError.TTL. The first Acquire, and the first after the session lease
// was lost, grants a new session lease first. A mode other than ModeMutex
// is a read-write lock's or a semaphore's (kinds.go).
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if p.TTL > s.ttl {
		return driver.Grant{}, fmt.Errorf("etcdstore: acquire %q: %w (%v > %v)", p.Key, ErrTTL, p.TTL, s.ttl)
	}
	if p.Mode != driver.ModeMutex {
		return s.acquireKind(ctx, p)
	}
	start := time.Now()
	kp := s.keyPrefix(p.Key)
	ek, named := s.claimName(kp, p.Token)
	claimed := named // until the entry is in s.held (or handed to the reaper)
	defer func() {
		if claimed {
			s.unclaim(ek)
		}
	}()
	val := value(p.Token, p.Owner, p.TTL)
	resp, ss, err := s.onSession(ctx, start, p.TTL, []string{ek}, func(ctx context.Context, ss *session) clientv3.Txn {
		return s.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(kp), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(ek, val, clientv3.WithLease(ss.id))).
			Else(clientv3.OpGet(kp, firstEntry...))
	})
	switch {
	case err != nil:
		return driver.Grant{}, fmt.Errorf("etcdstore: acquire %q: %w", p.Key, err)
	case !resp.Succeeded:
		return driver.Grant{}, s.heldError(ctx, resp)
	}
	token := "" // an entry named by its token needs none
	if named {
		token = p.Token
	}
	claimed = false // keepHeld lets the claim go
	if err := s.keepHeld(ek, token, named, ss, start.Add(p.TTL)); err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Fence: uint64(resp.Header.Revision)}, nil
}

// firstEntry are the options of a Get of a key's prefix that reads the
// entry with the lowest create revision: the holder's. Made once, as each
// option is an allocation.
var firstEntry = []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1)}

// onSession commits the Txn that build makes for the Store's live session
// (its puts carry the session lease), with a LeaseKeepAlive alongside when
// the session must be refreshed so that it lives until start+ttl. When etcd
// says the session lease is gone, the keys put with it went with it: it
// tries once more on a new session. A Txn whose compares failed is
// returned as it is, whatever the keepalive said. On a failure after which
// the Txn may have been applied, the keys in put, which the Txn may have
// put, are handed to the reaper (see commit for a caller that left). build
// makes the Txn with the context it is given.
func (s *Store) onSession(ctx context.Context, start time.Time, ttl time.Duration, put []string, build func(ctx context.Context, ss *session) clientv3.Txn) (*clientv3.TxnResponse, *session, error) {
	for attempt := 0; ; attempt++ {
		ss, ka, err := s.liveSession(ctx, start, ttl)
		if err != nil {
			return nil, nil, err
		}
		resp, err := s.commit(ctx, ss, put, build)
		if errors.Is(err, errLeft) {
			return nil, nil, ctx.Err()
		}
		kaErr := ka.wait(ctx)
		leaseGone := isLeaseGone(err) || isLeaseGone(kaErr)
		if leaseGone {
			ss.dead.Store(true)
		}
		switch {
		case err == nil && !resp.Succeeded:
			return resp, ss, nil
		case leaseGone:
			// The session lease expired: a key put with it went with it.
			// Try once more on a new session.
			if attempt == 0 {
				continue
			}
			return nil, nil, fmt.Errorf("session lease lost twice: %w", firstErr(err, kaErr))
		case err != nil:
			for _, ek := range put {
				s.abandon(ek, ss) // the puts may have been applied
			}
			return nil, nil, err
		case kaErr != nil:
			for _, ek := range put {
				s.abandon(ek, ss)
			}
			return nil, nil, fmt.Errorf("keep the session lease alive: %w", kaErr)
		}
		return resp, ss, nil
	}
}

// errLeft is commit's error when its caller's ctx ended first.
var errLeft = errors.New("the caller left")

// commit sends the Txn build makes and waits for etcd's answer or the end
// of ctx. The Txn is not cancelled with ctx: a request cancelled in flight
// may still be applied, after a Delete sent once the caller left, and put a
// key that nobody knows of on the session lease, which the Store keeps
// alive (a writer's waiting entry left behind after a cancelled Lock was
// seen so). It runs on, bounded by the session TTL and Close, and once
// etcd has answered, the keys in put, which it may have put, go to the
// reaper. A caller that left gets errLeft. A ctx that never ends (no
// deadline of the caller's) does not leave, and its Txn has the same bound:
// etcd's answer is not awaited past the session TTL, as a client blocks
// until etcd answers, forever while it is down.
func (s *Store) commit(ctx context.Context, ss *session, put []string, build func(context.Context, *session) clientv3.Txn) (*clientv3.TxnResponse, error) {
	if ctx.Done() == nil {
		ctx, cancel := bounded(ctx, ss.ttl)
		defer cancel()
		return build(ctx, ss).Commit()
	}
	type answer struct {
		resp *clientv3.TxnResponse
		err  error
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.bg.Add(1)
	s.mu.Unlock()
	done := make(chan answer) // unbuffered: taken by the caller, or not at all
	left := make(chan struct{})
	go func() {
		defer s.bg.Done()
		tctx, cancel := context.WithTimeout(s.ctx, ss.ttl)
		resp, err := build(tctx, ss).Commit()
		cancel()
		select {
		case done <- answer{resp, err}:
		case <-left:
			for _, ek := range put {
				s.abandon(ek, ss)
			}
		}
	}()
	select {
	case a := <-done:
		return a.resp, a.err
	case <-ctx.Done():
		close(left)
		return nil, errLeft
	}
}

// bounded returns ctx, or when ctx has no deadline, ctx bounded by d: etcd's
// client waits for an answer as long as its ctx lets it, which is forever
// while etcd is down, and a call to the Store must end with an error then.
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// keepHeld records the key ek, which this Store just put (or found put)
// with ss, as held until deadline, after which the reaper deletes it
// unless a Renew extends it, and lets go of claimName's claim on ek when
// claimed. After Close it hands the key to the reaper instead and returns
// ErrClosed.
func (s *Store) keepHeld(ek, token string, claimed bool, ss *session, deadline time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if claimed {
		delete(s.claimed, ek) // the entry is in s.held, or the reaper's, below: in the same hold of s.mu
	}
	if s.closed {
		s.abandonLocked(ek, ss)
		return ErrClosed
	}
	s.holdLocked(ek, ss, deadline).token = token
	return nil
}

// holdLocked records ek as held until deadline. Callers hold s.mu.
func (s *Store) holdLocked(ek string, ss *session, deadline time.Time) *entry {
	e := &entry{key: ek, sess: ss, deadline: deadline}
	if old := s.held[ek]; old != nil {
		old.gone = true
	}
	s.held[ek] = e
	s.reap.armLocked(e.deadline)
	return e
}

// heldError describes the holder found by a failed Acquire.
func (s *Store) heldError(ctx context.Context, resp *clientv3.TxnResponse) error {
	he := &driver.HeldError{}
	if len(resp.Responses) == 0 {
		return he
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return he
	}
	kv := kvs[0]
	_, he.Owner, he.TTL = parseValue(kv.Value)
	if kv.Lease != 0 {
		he.TTL = s.remaining(ctx, clientv3.LeaseID(kv.Lease), he.TTL)
	}
	return he
}

// remaining returns how long the key on lease can live at most without its
// holder: the lease's remaining TTL (etcd rounds it up to seconds), capped
// by the lock TTL the holder asked for (which its own Store enforces), or
// that TTL alone when etcd cannot tell.
func (s *Store) remaining(ctx context.Context, lease clientv3.LeaseID, lockTTL time.Duration) time.Duration {
	ctx, cancel := bounded(ctx, s.ttl)
	defer cancel()
	r, err := s.c.TimeToLive(ctx, lease)
	if err != nil || r.TTL < 0 {
		return lockTTL
	}
	left := time.Duration(r.TTL) * time.Second
	if lockTTL > 0 && lockTTL < left {
		return lockTTL
	}
	return left
}

// Release implements driver.Store. Without KeepFor it deletes token's entry
// (one Delete: the key names the token, or the Store, which does not name
// another entry so while this one's delete is under way; for
// ModeWrite one Txn that deletes the writer's waiting entry too, and
// reports ErrNotHeld when only that was there). With KeepFor it grants a
// lease of KeepFor rounded up to whole seconds and, in one Txn that checks
// the entry still exists, moves the entry onto it, so that the key
// outlives the session's other locks by exactly that lease (two round
// trips). An entry whose local deadline passed is deleted and reported as
// ErrNotHeld: it had expired.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	if err := s.Kinds(p.Mode); err != nil {
		return fmt.Errorf("etcdstore: release %q: %w", p.Key, err)
	}
	ctx, cancel := bounded(ctx, s.ttl) // the session lease ends the entry by then
	defer cancel()
	wk := ""
	if p.Mode == driver.ModeWrite {
		wk = s.waitKey(p.Key, p.Token)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	ek, e := s.holdKeyLocked(p.Key, p.Token, p.Mode)
	expired := e != nil && (e.state == stateDoomed || !time.Now().Before(e.deadline))
	if e != nil {
		s.dropLocked(e)
		if e.token != "" {
			// Named by the Store: no Acquire may name another entry so
			// until this one's fate is settled (deleted, kept, or handed
			// to the reaper below).
			s.claimed[ek] = struct{}{}
			defer func() {
				s.mu.Lock()
				delete(s.claimed, ek)
				s.mu.Unlock()
			}()
		}
	}
	var we *entry // the writer's waiting entry
	if wk != "" {
		if we = s.held[wk]; we != nil {
			s.dropLocked(we)
		}
	}
	s.mu.Unlock()

	if p.KeepFor > 0 && !expired {
		if we != nil {
			s.abandon(wk, we.sess)
		}
		return s.keep(ctx, p, ek, e)
	}
	deleted, err := s.deleteHold(ctx, ek, wk)
	if err != nil {
		if e != nil {
			s.abandon(ek, e.sess) // the reaper deletes it later
		}
		if we != nil {
			s.abandon(wk, we.sess)
		}
		return fmt.Errorf("etcdstore: release %q: %w", p.Key, err)
	}
	if !deleted || expired {
		return driver.ErrNotHeld
	}
	return nil
}

// deleteHold deletes the held entry ek, and the waiting entry wk with it
// unless wk is "", in one request, and reports whether ek was there.
func (s *Store) deleteHold(ctx context.Context, ek, wk string) (bool, error) {
	if wk == "" {
		resp, err := s.c.Delete(ctx, ek)
		return err == nil && resp.Deleted > 0, err
	}
	resp, err := s.c.Txn(ctx).Then(clientv3.OpDelete(ek), clientv3.OpDelete(wk)).Commit()
	return err == nil && resp.Responses[0].GetResponseDeleteRange().GetDeleted() > 0, err
}

// keep implements Release with KeepFor.
func (s *Store) keep(ctx context.Context, p driver.ReleaseParams, ek string, e *entry) error {
	// On failure the key stays on the session lease; the reaper deletes it
	// when KeepFor has passed.
	fallback := func() {
		if e == nil {
			return
		}
		s.mu.Lock()
		if !s.closed {
			e.gone, e.state = false, stateHeld
			e.deadline = time.Now().Add(p.KeepFor)
			s.held[ek] = e
			s.reap.armLocked(e.deadline)
		}
		s.mu.Unlock()
	}
	secs := driver.Units(p.KeepFor, time.Second)
	lease, err := s.c.Grant(ctx, secs)
	if err != nil {
		fallback()
		return fmt.Errorf("etcdstore: release %q: grant a %ds lease for KeepFor: %w", p.Key, secs, err)
	}
	resp, err := s.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ek), ">", 0)).
		Then(clientv3.OpPut(ek, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil {
		// The unused lease, if unused, expires after KeepFor by itself.
		fallback()
		return fmt.Errorf("etcdstore: release %q: %w", p.Key, err)
	}
	if !resp.Succeeded {
		_, _ = s.c.Revoke(ctx, lease.ID) // it holds nothing; else it expires by itself
		return driver.ErrNotHeld
	}
	return nil
}

// dropLocked forgets e. Callers hold s.mu.
func (s *Store) dropLocked(e *entry) {
	if !e.gone {
		delete(s.held, e.key)
		e.gone = true
	}
}

// abandon hands the key ek, which may exist at etcd without anyone
// holding it (a call failed after a put might have been applied), to the
// reaper to delete.
func (s *Store) abandon(ek string, ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandonLocked(ek, ss)
}

// abandonLocked is abandon for a caller that holds s.mu.
func (s *Store) abandonLocked(ek string, ss *session) {
	if s.closed || ss.dead.Load() {
		return // the session lease deletes it
	}
	e := s.held[ek]
	if e == nil {
		e = &entry{key: ek, sess: ss}
		s.held[ek] = e
	}
	s.doomLocked(e, time.Now())
}

// isLeaseGone reports whether err says a lease does not exist (expired or
// revoked).
func isLeaseGone(err error) bool {
	return err != nil && errors.Is(err, rpctypes.ErrLeaseNotFound)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

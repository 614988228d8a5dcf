package etcdstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Kinder = (*Store)(nil)

// kindsMark starts the keys of read-write locks and semaphores, after
// Prefix: Prefix + kindsMark + escaped key + "/" is a kinds key's prefix.
// 0xfe never occurs in a lock key (valid UTF-8), so no mutex entry sorts at
// or after Prefix + kindsMark, no mutex's prefix covers a kinds key, and
// the ledger's keys (Prefix + 0xff ...) sort after them all.
const kindsMark = "\xfekinds/"

// The keys under a kinds key's prefix. Entries (every key but the counter)
// live on the session lease of the Store that put them; the counter lives
// on no lease and is never deleted, so that fences outlive the entries.
// The counter sorts before every entry: [prefix + subPermit, the prefix's
// end) holds the entries and nothing else.
const (
	subFence   = "f"  // the counter: its mod revision is the key's fence
	subPermit  = "p/" // + token: a semaphore's permit
	subWaiting = "q/" // + token: a writer's waiting entry
	subRead    = "r/" // + token: a reader
	subWrite   = "w/" // + token: the writer
)

// maxPermitRounds bounds the Txns of one permit Acquire while other grants
// keep changing the key's permits under it; then it returns an error
// wrapping driver.ErrTryAgain.
const maxPermitRounds = 8

// Kinds implements driver.Kinder: the Store keeps mutexes, read-write locks
// and semaphores.
func (s *Store) Kinds(m driver.Mode) error {
	switch m {
	case driver.ModeMutex, driver.ModeRead, driver.ModeWrite, driver.ModePermit:
		return nil
	}
	return fmt.Errorf("etcdstore: %w: no lock of mode %v", driver.ErrUnsupported, m)
}

// kindPrefix is the etcd prefix of every key of the read-write lock or
// semaphore key.
func (s *Store) kindPrefix(key string) string {
	return s.prefix + kindsMark + escape(key) + "/"
}

// kindsRoot is where the keys of read-write locks and semaphores start,
// and the mutex entries end.
func (s *Store) kindsRoot() string { return s.prefix + kindsMark }

// modeSub is the sub-prefix of the entries of mode m, a mode other than
// ModeMutex.
func modeSub(m driver.Mode) string {
	switch m {
	case driver.ModeRead:
		return subRead
	case driver.ModeWrite:
		return subWrite
	}
	return subPermit
}

// holdKey is the etcd key of token's hold of key in mode m, a mode the
// Store keeps.
func (s *Store) holdKey(key, token string, m driver.Mode) string {
	if m == driver.ModeMutex {
		return s.entryKey(key, token)
	}
	return s.kindPrefix(key) + modeSub(m) + escape(token)
}

// holdKeyLocked returns the etcd key of token's hold of key in mode m and
// its entry if the Store holds it (a mutex's may be under the Store's
// name: mutexKeyLocked). Callers hold s.mu.
func (s *Store) holdKeyLocked(key, token string, m driver.Mode) (string, *entry) {
	if m == driver.ModeMutex {
		return s.mutexKeyLocked(key, token)
	}
	ek := s.holdKey(key, token, m)
	return ek, s.held[ek]
}

// waitKey is the etcd key of token's waiting entry as a writer of key.
func (s *Store) waitKey(key, token string) string {
	return s.kindPrefix(key) + subWaiting + escape(token)
}

// kindValue is what a kinds entry holds: the semaphore's Limit (0 for a
// read-write lock), then value's lines.
func kindValue(limit int, token, owner string, ttl time.Duration) string {
	return strconv.Itoa(limit) + "\n" + value(token, owner, ttl)
}

// parseKindValue reads kindValue's format; a value it cannot read yields
// no owner and Limit 0.
func parseKindValue(v []byte) (limit int, owner string, ttl time.Duration) {
	l, rest, ok := strings.Cut(string(v), "\n")
	n, err := strconv.Atoi(l)
	if !ok || err != nil {
		return 0, "", 0
	}
	_, owner, ttl = parseValue([]byte(rest))
	return n, owner, ttl
}

// parseKindKey splits an etcd key under Prefix + kindsMark into the lock
// key, the sub-prefix (subFence for the counter) and the token; ok is false
// for a key that is not one of ours.
func (s *Store) parseKindKey(k []byte) (key, sub, token string, ok bool) {
	rest, found := strings.CutPrefix(string(k), s.kindsRoot())
	if !found {
		return "", "", "", false
	}
	ek, rest, found := strings.Cut(rest, "/")
	if !found || ek == "" {
		return "", "", "", false
	}
	if rest == subFence {
		return unescape(ek), subFence, "", true
	}
	if len(rest) < 3 || strings.IndexByte(rest[2:], '/') >= 0 {
		return "", "", "", false
	}
	switch sub = rest[:2]; sub {
	case subWaiting, subPermit, subRead, subWrite:
		return unescape(ek), sub, unescape(rest[2:]), true
	}
	return "", "", "", false
}

// lockOf returns the lock key of one of the Store's entries, a mutex's or
// a kinds key's; ok is false for any other key (a kinds counter, a ledger
// key, another Store's).
func (s *Store) lockOf(k []byte) (key string, ok bool) {
	if key, _, ok = s.parseKey(k); ok {
		return key, true
	}
	key, sub, _, ok := s.parseKindKey(k)
	return key, ok && sub != subFence
}

// kindState is a kinds key's keys as one read found them.
type kindState struct {
	rev                                int64 // the revision of the read
	fence                              int64 // the counter's mod revision, 0 before any grant
	waiting, permits, readers, writers []*mvccpb.KeyValue
	own                                *mvccpb.KeyValue // the entry asked for, when on the session lease
}

// mismatch returns the error for an Acquire with limit (0: a read-write
// lock) when the key's live entries are of another kind, and nil otherwise.
func (st *kindState) mismatch(key string, limit int) error {
	switch {
	case len(st.permits) > 0:
		l, _, _ := parseKindValue(st.permits[0].Value)
		if l != limit {
			return fmt.Errorf("etcdstore: acquire %q: %w: held as a semaphore of %d permits", key, driver.ErrKindMismatch, l)
		}
	case limit != 0 && len(st.waiting)+len(st.readers)+len(st.writers) > 0:
		return fmt.Errorf("etcdstore: acquire %q: %w: held as a read-write lock", key, driver.ErrKindMismatch)
	}
	return nil
}

// kindAcquire is one Acquire of a read-write lock's side or a semaphore's
// permit.
type kindAcquire struct {
	s     *Store
	p     driver.AcquireParams
	start time.Time
	kp    string // the key's prefix
	ek    string // the entry asked for
	val   string
}

// acquireKind is Acquire for a mode other than ModeMutex. A reader or a
// writer is one Txn whose compares are the grant's conditions (no entry
// of the modes that exclude it); a permit, whose condition (fewer than
// Limit permits) no compare can state, is granted by a Txn guarded by the
// key being as a read found it, the read being the Else of the Txn before.
func (s *Store) acquireKind(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if err := s.Kinds(p.Mode); err != nil {
		return driver.Grant{}, fmt.Errorf("etcdstore: acquire %q: %w", p.Key, err)
	}
	switch {
	case p.Mode == driver.ModePermit && p.Limit < 1:
		return driver.Grant{}, badOption("AcquireParams.Limit", strconv.Itoa(p.Limit), "a semaphore has at least 1 permit")
	case p.Mode != driver.ModePermit && p.Limit != 0:
		return driver.Grant{}, badOption("AcquireParams.Limit", strconv.Itoa(p.Limit), "must be 0 for a %v hold", p.Mode)
	}
	a := &kindAcquire{
		s: s, p: p, start: time.Now(),
		kp: s.kindPrefix(p.Key), ek: s.holdKey(p.Key, p.Token, p.Mode),
		val: kindValue(p.Limit, p.Token, p.Owner, p.TTL),
	}
	switch p.Mode {
	case driver.ModeRead:
		return a.read(ctx)
	case driver.ModeWrite:
		return a.write(ctx)
	}
	return a.permit(ctx)
}

// read grants a reader unless a writer holds or waits, or the key is a
// semaphore: one Txn. Its fence is the counter's, read in the same Txn.
func (a *kindAcquire) read(ctx context.Context) (driver.Grant, error) {
	resp, ss, err := a.s.onSession(ctx, a.start, a.p.TTL, []string{a.ek}, func(ctx context.Context, ss *session) clientv3.Txn {
		return a.s.c.Txn(ctx).
			If(a.none(subWaiting), a.none(subPermit), a.none(subWrite)).
			Then(a.put(ss), clientv3.OpGet(a.kp+subFence)).
			Else(a.getAll())
	})
	if err != nil {
		return driver.Grant{}, a.fail(err)
	}
	if resp.Succeeded {
		var fence int64
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			fence = kvs[0].ModRevision
		}
		return a.granted(ss, fence)
	}
	st := a.state(resp, ss)
	if err := st.mismatch(a.p.Key, 0); err != nil {
		return driver.Grant{}, err
	}
	switch {
	case st.own != nil: // an earlier attempt's grant
		return a.granted(ss, st.fence)
	case len(st.writers) > 0:
		return driver.Grant{}, a.s.heldBy(ctx, st.writers)
	}
	he := &driver.HeldError{} // a waiting writer: TTL 0
	if len(st.waiting) > 0 {
		_, he.Owner, _ = parseKindValue(st.waiting[0].Value)
	}
	return driver.Grant{}, he
}

// write grants the writer when no reader, writer or permit holds the key:
// one Txn that puts the hold, deletes the token's waiting entry and
// increments the counter (the grant's revision is its fence). Refused, the
// same Txn's Else puts the waiting entry, if it is not there yet, and the
// Store keeps it for p.TTL more.
func (a *kindAcquire) write(ctx context.Context) (driver.Grant, error) {
	wk := a.s.waitKey(a.p.Key, a.p.Token)
	resp, ss, err := a.s.onSession(ctx, a.start, a.p.TTL, []string{a.ek, wk}, func(ctx context.Context, ss *session) clientv3.Txn {
		return a.s.c.Txn(ctx).
			If(a.none(subPermit), a.none(subRead), a.none(subWrite)).
			Then(a.put(ss), clientv3.OpDelete(wk), a.bump()).
			Else(a.getAll(), clientv3.OpTxn(
				[]clientv3.Cmp{a.none(subPermit), absent(a.ek), absent(wk)},
				[]clientv3.Op{clientv3.OpPut(wk, a.val, clientv3.WithLease(ss.id))}, nil))
	})
	if err != nil {
		return driver.Grant{}, a.fail(err)
	}
	if resp.Succeeded {
		a.s.forget(wk)
		return a.granted(ss, resp.Header.Revision)
	}
	st := a.state(resp, ss)
	if err := st.mismatch(a.p.Key, 0); err != nil {
		return driver.Grant{}, err
	}
	if st.own != nil { // an earlier attempt's grant
		return a.granted(ss, st.own.ModRevision)
	}
	if err := a.s.keepHeld(wk, "", false, ss, a.start.Add(a.p.TTL)); err != nil {
		return driver.Grant{}, err
	}
	if len(st.writers) > 0 {
		return driver.Grant{}, a.s.heldBy(ctx, st.writers)
	}
	return driver.Grant{}, a.s.heldBy(ctx, st.readers)
}

// permit grants a permit while fewer than Limit are held: the first Txn
// when the key has no entry at all, and otherwise a Txn guarded by no key
// under the key's prefix having changed since the Else of the one before
// read them. The grant increments the counter (its revision is the fence).
func (a *kindAcquire) permit(ctx context.Context) (driver.Grant, error) {
	guard := []clientv3.Cmp{a.none(subWaiting), a.none(subPermit), a.none(subRead), a.none(subWrite)}
	for range maxPermitRounds {
		resp, ss, err := a.s.onSession(ctx, a.start, a.p.TTL, []string{a.ek}, func(ctx context.Context, ss *session) clientv3.Txn {
			return a.s.c.Txn(ctx).If(guard...).Then(a.put(ss), a.bump()).Else(a.getAll())
		})
		if err != nil {
			return driver.Grant{}, a.fail(err)
		}
		if resp.Succeeded {
			return a.granted(ss, resp.Header.Revision)
		}
		st := a.state(resp, ss)
		if err := st.mismatch(a.p.Key, a.p.Limit); err != nil {
			return driver.Grant{}, err
		}
		switch {
		case st.own != nil: // an earlier attempt's grant
			return a.granted(ss, st.own.ModRevision)
		case len(st.permits) >= a.p.Limit:
			return driver.Grant{}, a.s.heldBy(ctx, st.permits)
		}
		guard = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(a.kp), "<", st.rev+1).WithPrefix()}
	}
	return driver.Grant{}, fmt.Errorf("etcdstore: acquire %q: the permits changed %d times while it looked: %w", a.p.Key, maxPermitRounds, driver.ErrTryAgain)
}

// none compares true when no key starts with the key's prefix + sub.
func (a *kindAcquire) none(sub string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(a.kp+sub), "=", 0).WithPrefix()
}

// absent compares true when key does not exist.
func absent(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
}

// put puts the entry asked for on ss.
func (a *kindAcquire) put(ss *session) clientv3.Op {
	return clientv3.OpPut(a.ek, a.val, clientv3.WithLease(ss.id))
}

// bump increments the key's counter: its mod revision becomes the Txn's.
func (a *kindAcquire) bump() clientv3.Op { return clientv3.OpPut(a.kp+subFence, "") }

// getAll reads every key of the key's prefix.
func (a *kindAcquire) getAll() clientv3.Op { return clientv3.OpGet(a.kp, clientv3.WithPrefix()) }

func (a *kindAcquire) fail(err error) error {
	return fmt.Errorf("etcdstore: acquire %q: %w", a.p.Key, err)
}

// granted keeps the entry asked for, on ss, as held for p.TTL from the
// start of the call, and returns the grant.
func (a *kindAcquire) granted(ss *session, fence int64) (driver.Grant, error) {
	if err := a.s.keepHeld(a.ek, "", false, ss, a.start.Add(a.p.TTL)); err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Fence: uint64(fence)}, nil
}

// state reads the keys that the Else of a failed Txn read (getAll, its
// first operation), at the Txn's revision.
func (a *kindAcquire) state(resp *clientv3.TxnResponse, ss *session) *kindState {
	st := &kindState{rev: resp.Header.Revision}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		rest := strings.TrimPrefix(string(kv.Key), a.kp)
		switch {
		case rest == subFence:
			st.fence = kv.ModRevision
		case strings.HasPrefix(rest, subWaiting):
			st.waiting = append(st.waiting, kv)
		case strings.HasPrefix(rest, subPermit):
			st.permits = append(st.permits, kv)
		case strings.HasPrefix(rest, subRead):
			st.readers = append(st.readers, kv)
		case strings.HasPrefix(rest, subWrite):
			st.writers = append(st.writers, kv)
		}
		if string(kv.Key) == a.ek && kv.Lease == int64(ss.id) {
			st.own = kv
		}
	}
	return st
}

// heldBy describes the holder among kvs whose entry can end first: the
// one with the shortest lock TTL (the oldest among equals), with its
// remaining TTL as remaining tells it (one LeaseTimeToLive).
func (s *Store) heldBy(ctx context.Context, kvs []*mvccpb.KeyValue) *driver.HeldError {
	var (
		first    *mvccpb.KeyValue
		firstTTL time.Duration
	)
	for _, kv := range kvs {
		_, _, ttl := parseKindValue(kv.Value)
		if first == nil || ttl < firstTTL || (ttl == firstTTL && kv.ModRevision < first.ModRevision) {
			first, firstTTL = kv, ttl
		}
	}
	he := &driver.HeldError{}
	if first == nil {
		return he
	}
	_, he.Owner, he.TTL = parseKindValue(first.Value)
	if first.Lease != 0 {
		he.TTL = s.remaining(ctx, clientv3.LeaseID(first.Lease), he.TTL)
	}
	return he
}

// forget drops the key ek from the Store's held entries, if there: it was
// deleted at etcd.
func (s *Store) forget(ek string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.held[ek]; e != nil {
		s.dropLocked(e)
	}
}

// kindLease describes the kinds entry kv of key, which has the sub-prefix
// sub, as Leases lists it; fence is the key's counter (a reader's fence).
func kindLease(key, sub string, kv *mvccpb.KeyValue, fence int64) driver.Lease {
	limit, owner, _ := parseKindValue(kv.Value)
	l := driver.Lease{Key: key, Owner: owner, Fence: uint64(kv.ModRevision), Limit: limit}
	switch sub {
	case subWaiting:
		l.Mode, l.Waiting, l.Fence = driver.ModeWrite, true, 0
	case subRead:
		l.Mode, l.Fence = driver.ModeRead, uint64(fence)
	case subWrite:
		l.Mode = driver.ModeWrite
	default:
		l.Mode = driver.ModePermit
	}
	return l
}

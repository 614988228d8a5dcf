package zkstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
)

// Read-write locks and semaphores (driver.Kinder) live apart from the
// mutexes, under Root/%kinds (a name no key node can have: escapeName
// writes every '%' of a key as %25, and "ki" is no hex pair):
//
//	Root/%kinds/<K>            persistent: the key's entries
//	Root/%kinds/<K>/%guard     persistent: the key's counter, and the guard of every decision
//	Root/%kinds/<K>/<token>-<read|write|wait|permit.L>-<n>   ephemeral: one entry per hold
//
// See the package documentation (Read-write locks and semaphores).
const (
	kindsName = "%kinds"
	guardName = "%guard"
)

// Entry name words: the hold's mode, or a writer's waiting claim. A
// permit's word is followed by "." and the semaphore's limit.
const (
	wordRead   = "read"
	wordWrite  = "write"
	wordWait   = "wait"
	wordPermit = "permit."
)

// kindRounds bounds the looks of one kinds Acquire that keeps losing the
// guard's compare-and-set (or finds the key changing between its two
// reads): then it returns an error wrapping driver.ErrTryAgain.
const kindRounds = 4

// rotateVersion is the guard's data version from which a decision
// replaces the guard node (delete, version-checked, and create, in the
// same multi) instead of setting its data: a version is an int32, and at
// -1 a version check would accept any version. (Store.rotateAt holds it;
// the tests lower it.)
const rotateVersion = 1 << 30

// guardData is what the guard node holds, as JSON.
type guardData struct {
	Fence  uint64 `json:"fence"`  // the last fence granted to a writer or a permit
	Writer uint64 `json:"writer"` // the last writer's fence: what readers are granted
}

func (g guardData) encode() []byte {
	b, err := json.Marshal(g)
	if err != nil {
		panic("zkstore: encoding guard data: " + err.Error()) // numbers always encode
	}
	return b
}

// Kinds implements driver.Kinder: the Store keeps read-write locks and
// semaphores (ModeRead, ModeWrite, ModePermit) as well as mutexes.
func (s *Store) Kinds(m driver.Mode) error {
	switch m {
	case driver.ModeMutex, driver.ModeRead, driver.ModeWrite, driver.ModePermit:
		return nil
	}
	return fmt.Errorf("zkstore: %w: mode %v", driver.ErrUnsupported, m)
}

// kindsPath is the parent node of key's read-write lock or semaphore
// entries.
func (s *Store) kindsPath(key string) string {
	return s.root + "/" + kindsName + "/" + escapeName(key)
}

// entryWord is the word that names an entry of mode m (waiting: a
// writer's claim; limit: a permit's semaphore's) in its node's name.
func entryWord(m driver.Mode, waiting bool, limit int) string {
	switch {
	case waiting:
		return wordWait
	case m == driver.ModeRead:
		return wordRead
	case m == driver.ModeWrite:
		return wordWrite
	}
	return wordPermit + strconv.Itoa(limit)
}

// entryName is the name of token's entry of mode m with number n: the
// Store numbers the entries it creates, so that an entry whose creation's
// outcome is unknown (and which the reaper deletes) never has the name of
// a later entry of the same token. A permit's name carries its
// semaphore's limit, so that the kind of a key is known from the list of
// its entries alone.
func entryName(token string, m driver.Mode, waiting bool, limit int, n int64) string {
	return escapeName(token) + "-" + entryWord(m, waiting, limit) + "-" + strconv.FormatInt(n, 10)
}

// kindEntry is an entry as its name tells it.
type kindEntry struct {
	name    string
	token   string
	mode    driver.Mode
	waiting bool // a writer's claim to be next, not a hold
	limit   int  // a permit's semaphore's number of permits
	n       int64
}

// parseEntry parses an entry's name; it reports false for any other
// child (the guard).
func parseEntry(name string) (kindEntry, bool) {
	e := kindEntry{name: name}
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return e, false
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return e, false
	}
	j := strings.LastIndexByte(name[:i], '-')
	if j < 0 {
		return e, false
	}
	switch word := name[j+1 : i]; word {
	case wordRead:
		e.mode = driver.ModeRead
	case wordWrite:
		e.mode = driver.ModeWrite
	case wordWait:
		e.mode, e.waiting = driver.ModeWrite, true
	default:
		l, ok := strings.CutPrefix(word, wordPermit)
		if !ok {
			return e, false
		}
		if e.limit, err = strconv.Atoi(l); err != nil || e.limit < 1 {
			return e, false
		}
		e.mode = driver.ModePermit
	}
	tok, ok := unescapeName(name[:j])
	if !ok {
		return e, false
	}
	e.token, e.n = tok, n
	return e, true
}

// kindState is one look at a kinds key: its guard and its entries.
type kindState struct {
	guard   guardData
	version int32  // the guard's data version, which every creation checks
	base    uint64 // the counter: the guard's fence, at least its czxid
	entries []kindEntry
}

// errKeyChanged means that a look at a key, or a decision made from one,
// lost to a change of the key (an entry created between the look's two
// reads, the guard's version moved, an entry named gone): look again.
var errKeyChanged = errors.New("the key changed between its reads")

// readKind reads the guard of kp and its children, pipelined, with a
// child watch for the Store's subscribers when watch is not nil. The two
// reads may reach the server in either order: every change of the guard
// is made in a multi that also creates a child, so a guard changed no
// later than the children were read (its mzxid at most the parent's
// pzxid) comes with every entry created so far, and the guard's version
// check in the decision's multi catches every creation since. A missing
// node is zk.ErrNoNode.
func (s *Store) readKind(kp string, watch *watchSlot) (kindState, error) {
	var (
		st           kindState
		data         []byte
		gst, pst     *zk.Stat
		kids         []string
		gerr, perr   error
		ch           <-chan zk.Event
		guard        = kp + "/" + guardName
		readChildren = func() {
			if watch.wanted() {
				kids, pst, ch, perr = s.conn.ChildrenW(kp)
				watch.set(ch)
				return
			}
			kids, pst, perr = s.conn.Children(kp)
		}
	)
	parallel(2, func(i int) {
		if i == 0 {
			data, gst, gerr = s.conn.Get(guard)
			return
		}
		readChildren()
	})
	if err := errors.Join(gerr, perr); err != nil {
		return st, err
	}
	if gst.Mzxid > pst.Pzxid {
		return st, errKeyChanged
	}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &st.guard); err != nil {
			return st, fmt.Errorf("%s holds %q, not a guard: %w", guard, data, err)
		}
	}
	st.version = gst.Version
	st.base = max(st.guard.Fence, uint64(gst.Czxid))
	for _, k := range kids {
		if e, ok := parseEntry(k); ok {
			st.entries = append(st.entries, e)
		}
	}
	return st, nil
}

// ensureKind creates kp and its guard (and Root/%kinds, and Root) where
// missing.
func (s *Store) ensureKind(kp string) error {
	create := func(path string, data []byte) error {
		_, err := s.conn.Create(path, data, zk.FlagPersistent, s.acl)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", path, err)
		}
		return nil
	}
	if _, err := s.conn.Create(kp, nil, zk.FlagPersistent, s.acl); errors.Is(err, zk.ErrNoNode) {
		if err := s.ensureRoot(); err != nil {
			return err
		}
		if err := create(s.root+"/"+kindsName, nil); err != nil {
			return err
		}
		if err := create(kp, nil); err != nil {
			return err
		}
	} else if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", kp, err)
	}
	return create(kp+"/"+guardName, guardData{}.encode())
}

// guardOps are the first ops of a decision's multi: they change the
// guard to g if it is still at the version st read. The last one's result
// carries the multi's zxid (the czxid of the nodes it creates).
func (s *Store) guardOps(kp string, st kindState, g guardData) []any {
	guard, data := kp+"/"+guardName, g.encode()
	// Versions never pass rotateAt (from there every decision replaces
	// the guard), so they stay far from -1, which would match any.
	if st.version < s.rotateAt && st.version >= 0 {
		return []any{&zk.SetDataRequest{Path: guard, Data: data, Version: st.version}}
	}
	return []any{
		&zk.DeleteRequest{Path: guard, Version: st.version},
		&zk.CreateRequest{Path: guard, Data: data, Acl: s.acl, Flags: zk.FlagPersistent},
		&zk.SetDataRequest{Path: guard, Data: data, Version: -1},
	}
}

// verdict is what a kinds Acquire decides from one look at the key.
type verdict struct {
	err      error        // ErrKindMismatch
	repeat   bool         // the token holds an entry of the mode asked: renew it
	grant    bool         // create the token's entry
	fence    uint64       // the grant's fence
	guard    guardData    // the guard's data after the grant
	blockers []*kindEntry // refused: the entries to name the one ending first of
	withTTL  bool         // the HeldError gives the TTL (else 0: a waiting writer)
	claim    bool         // refused writer: create or renew the token's claim
	own      *kindEntry   // the token's claim (write) as listed, when the Store keeps it
}

// decide applies the rules of driver.Mode to one look at a key, for p.
// mine is the token's lease in this Store, if it is one of this key's
// entries; entries of the token that the Store does not keep (a create
// whose outcome was unknown, which the reaper deletes) count as anyone's.
func decide(p driver.AcquireParams, st kindState, mine *lease) verdict {
	var (
		v                        verdict
		readers, writers, claims []*kindEntry
		permits                  []*kindEntry
		anyRW                    bool
	)
	for i := range st.entries {
		e := &st.entries[i]
		if e.mode == driver.ModePermit {
			permits = append(permits, e)
		} else {
			anyRW = true
		}
		if mine != nil && e.token == p.Token && e.n == mine.seq && e.mode == mine.mode && e.waiting == mine.waiting {
			switch {
			case e.waiting:
				v.own = e
				continue
			case e.mode == p.Mode:
				v.repeat = true
				continue
			}
		}
		switch {
		case e.mode == driver.ModeRead:
			readers = append(readers, e)
		case e.waiting:
			claims = append(claims, e)
		case e.mode == driver.ModeWrite:
			writers = append(writers, e)
		}
	}
	if (len(permits) > 0 && p.Limit != permits[0].limit) || (anyRW && p.Limit != 0) {
		have := "a read-write lock"
		if len(permits) > 0 {
			have = fmt.Sprintf("a semaphore of %d permits", permits[0].limit)
		}
		v.err = fmt.Errorf("%w: %s, asked for %v with %d permits", driver.ErrKindMismatch, have, p.Mode, p.Limit)
		return v
	}
	if v.repeat {
		return v
	}
	v.guard = st.guard
	switch p.Mode {
	case driver.ModeRead:
		switch {
		case len(writers) > 0:
			v.blockers, v.withTTL = firstOf(writers), true
		case len(claims) > 0:
			v.blockers = claims[:1]
		default:
			v.grant, v.fence = true, st.guard.Writer
		}
	case driver.ModeWrite:
		switch {
		case len(writers) > 0:
			v.blockers, v.withTTL, v.claim = firstOf(writers), true, true
		case len(readers) > 0:
			v.blockers, v.withTTL, v.claim = firstOf(readers), true, true
		default:
			v.grant, v.fence = true, st.base+1
			v.guard.Fence, v.guard.Writer = v.fence, v.fence
		}
	case driver.ModePermit:
		if len(permits) >= p.Limit {
			v.blockers, v.withTTL = firstOf(permits), true
			break
		}
		v.grant, v.fence = true, st.base+1
		v.guard.Fence = v.fence
	}
	return v
}

// firstOf returns the first maxParallel of es: the entries a refusal
// reads to name the one that ends first.
func firstOf(es []*kindEntry) []*kindEntry { return es[:min(len(es), maxParallel)] }

// checkKind validates the mode and limit of a kinds Acquire.
func checkKind(p driver.AcquireParams) error {
	switch {
	case p.Mode != driver.ModeRead && p.Mode != driver.ModeWrite && p.Mode != driver.ModePermit:
		return fmt.Errorf("%w: AcquireParams.Mode %v", driver.ErrUnsupported, p.Mode)
	case p.Mode == driver.ModePermit && p.Limit < 1:
		return fmt.Errorf("%w: AcquireParams.Limit %d: a semaphore needs at least 1 permit", driver.ErrUnsupported, p.Limit)
	case p.Mode != driver.ModePermit && p.Limit != 0:
		return fmt.Errorf("%w: AcquireParams.Limit %d: only a permit has a limit", driver.ErrUnsupported, p.Limit)
	}
	return nil
}

// acquireKind is Acquire for a read-write lock or semaphore: look at the
// key (the guard and the children, pipelined), decide, and make the
// decision in one multi that checks the guard's version. Two round trips
// when granted; a refusal reads the entry it names (and a refused writer
// creates its claim alongside, in a multi of its own).
func (s *Store) acquireKind(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if err := checkKind(p); err != nil {
		return driver.Grant{}, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return driver.Grant{}, ErrClosed
	}
	if err := s.knowMarker(); err != nil {
		return driver.Grant{}, err
	}
	kp := s.kindsPath(p.Key)
	if err := s.turns.enter(ctx, p.Key); err != nil {
		return driver.Grant{}, err
	}
	defer s.turns.leave(p.Key)
	watch := s.note.slot(p.Key)
	defer watch.done()
	for round := 0; ; round++ {
		if round == kindRounds {
			return driver.Grant{}, fmt.Errorf("the key kept changing: %w", driver.ErrTryAgain)
		}
		sent := time.Now()
		st, err := s.readKind(kp, watch)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			if err := s.ensureKind(kp); err != nil {
				return driver.Grant{}, err
			}
			continue
		case errors.Is(err, errKeyChanged):
			continue
		case err != nil:
			return driver.Grant{}, err
		}
		s.mu.Lock()
		mine := s.leases[p.Token]
		s.mu.Unlock()
		if mine != nil && (mine.key != p.Key || mine.mode != p.Mode) {
			return driver.Grant{}, fmt.Errorf("%w: token already holds a %v lease of %q in this Store", driver.ErrUnsupported, mine.mode, mine.key)
		}
		v := decide(p, st, mine)
		switch {
		case v.err != nil:
			return driver.Grant{}, v.err
		case v.repeat:
			return s.repeatKind(p, mine)
		case v.grant:
			g, err := s.grantKind(p, kp, st, v)
			if errors.Is(err, errKeyChanged) {
				continue
			}
			return g, err
		}
		he, err := s.refuseKind(p, kp, st, v, mine, sent)
		if errors.Is(err, errKeyChanged) {
			continue
		}
		if err != nil {
			return driver.Grant{}, err
		}
		return driver.Grant{}, he
	}
}

// repeatKind answers an Acquire whose token holds the entry asked for
// already (an earlier answer was lost): it renews the lease, as Renew
// would, and returns its fence again.
func (s *Store) repeatKind(p driver.AcquireParams, l *lease) (driver.Grant, error) {
	res, err := s.renew([]driver.RenewParams{{Key: p.Key, Token: p.Token, TTL: p.TTL, Mode: p.Mode}})
	if err != nil {
		return driver.Grant{}, err
	}
	if res[0] != nil {
		if errors.Is(res[0], driver.ErrNotHeld) {
			return driver.Grant{}, fmt.Errorf("the token's entry ended as it was asked for again: %w", driver.ErrTryAgain)
		}
		return driver.Grant{}, res[0]
	}
	return driver.Grant{Fence: l.fence}, nil
}

// createEntry makes the multi that changes the guard (guardOps) and
// creates token's entry, plus extra ops, and keeps the entry as a lease
// of the Store when the multi succeeds. A lost compare-and-set (or an op
// on a node gone meanwhile) is errKeyChanged; a multi whose outcome is
// unknown hands the entry to the reaper.
func (s *Store) createEntry(p driver.AcquireParams, kp string, st kindState, g guardData, waiting bool, fence uint64, extra ...any) error {
	n := s.entrySeq.Add(1)
	name := entryName(p.Token, p.Mode, waiting, p.Limit, n)
	ops := s.guardOps(kp, st, g)
	zxidAt := len(ops) - 1
	data := encodeData(p.Owner, p.TTL, fence)
	ops = append(ops, &zk.CreateRequest{Path: kp + "/" + name, Data: data, Acl: s.acl, Flags: zk.FlagEphemeral})
	ops = append(ops, extra...)
	before := s.conn.SessionID()
	sent := time.Now()
	resp, err := s.conn.Multi(ops...)
	switch {
	case err == nil:
	case !answered(err):
		s.addOrphan(kp, name, false, 0)
		return err
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrNodeExists):
		return errKeyChanged
	default:
		return err
	}
	if len(resp) != len(ops) || resp[zxidAt].Stat == nil {
		return fmt.Errorf("unexpected multi response (%d results)", len(resp))
	}
	if s.conn.SessionID() != before {
		s.removeNode(kp, name, 0)
		return errors.New("the session changed while the entry was created")
	}
	err = s.addLease(p.Token, &lease{
		key: p.Key, owner: p.Owner, fence: fence, zxid: resp[zxidAt].Stat.Mzxid, seq: n, session: before,
		ttl: p.TTL, until: s.since(sent) + p.TTL, mode: p.Mode, waiting: waiting, limit: int32(p.Limit),
	})
	if err != nil {
		s.removeNode(kp, name, before) // closed meanwhile: no reaper to end it
	}
	return err
}

// grantKind creates the token's entry as v decided; a writer's claim, if
// the Store keeps one, is deleted in the same multi.
func (s *Store) grantKind(p driver.AcquireParams, kp string, st kindState, v verdict) (driver.Grant, error) {
	var extra []any
	if v.own != nil {
		extra = append(extra, &zk.DeleteRequest{Path: kp + "/" + v.own.name, Version: -1})
	}
	if err := s.createEntry(p, kp, st, v.guard, false, v.fence, extra...); err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Fence: v.fence}, nil
}

// refuseKind reads the entries v names (pipelined) for the
// *driver.HeldError, which names the one that ends first as far as the
// store can tell: the earliest creation time plus TTL (renewals leave no
// trace in the nodes). A refused writer also creates its claim (alongside
// the reads), or renews the claim the Store keeps for it: its deadline
// moves to sent + TTL. Entries all gone by the time they are read are
// errKeyChanged.
func (s *Store) refuseKind(p driver.AcquireParams, kp string, st kindState, v verdict, mine *lease, sent time.Time) (*driver.HeldError, error) {
	var (
		nodes    []*node
		claimErr error
	)
	names := make([]string, len(v.blockers))
	for i, e := range v.blockers {
		names[i] = e.name
	}
	create := v.claim && v.own == nil
	parallel(1+btoi(create), func(i int) {
		if i == 1 {
			claimErr = s.createEntry(p, kp, st, st.guard, true, 0)
			return
		}
		nodes = s.readNodes(kp, names)
	})
	if v.claim && !create {
		s.mu.Lock()
		if s.leases[p.Token] == mine && mine.session == s.conn.SessionID() {
			mine.ttl, mine.until = p.TTL, max(mine.until, s.since(sent)+p.TTL)
			s.reap.armLocked(s.base.Add(mine.until))
		}
		s.mu.Unlock()
	}
	var n *node
	for _, m := range nodes {
		switch {
		case errors.Is(m.err, zk.ErrNoNode):
		case m.err != nil:
			return nil, m.err
		case n == nil || m.stat.Ctime+m.data.TTL < n.stat.Ctime+n.data.TTL:
			n = m
		}
	}
	switch {
	case claimErr != nil:
		return nil, claimErr // errKeyChanged: the claim lost the race, look again
	case n == nil:
		return nil, errKeyChanged
	}
	he := &driver.HeldError{Owner: n.data.Owner}
	if v.withTTL {
		he.TTL = n.ttl()
	}
	return he, nil
}

// releaseKind is Release for a read-write lock or semaphore: it deletes
// the token's entry (one request). A writer's claim is deleted too, and
// then ErrNotHeld is returned. With KeepFor the entry stays and the
// Store's deadline for it moves to KeepFor from now, when the reaper
// deletes it (after Close, which stopped the reaper, it is deleted at
// once).
func (s *Store) releaseKind(p driver.ReleaseParams) error {
	now := time.Now()
	current := s.conn.SessionID()
	s.mu.Lock()
	l := s.leases[p.Token]
	if l == nil || l.key != p.Key || l.mode != p.Mode {
		s.mu.Unlock()
		return driver.ErrNotHeld
	}
	kp, name := s.nodeOf(p.Token, l)
	gone, late, waiting := s.sessionEnded(l, current), s.since(now) >= l.until, l.waiting
	if keep := time.Duration(driver.Units(p.KeepFor, time.Millisecond)) * time.Millisecond; keep > 0 && !waiting && !gone && !late && !s.closed {
		l.until = s.since(now) + keep
		s.reap.armLocked(s.base.Add(l.until))
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	switch {
	case gone:
		s.forget(p.Token, l)
		return driver.ErrNotHeld
	case late:
		s.forget(p.Token, l)
		s.removeNode(kp, name, l.session)
		return driver.ErrNotHeld
	}
	err := s.conn.Delete(kp+"/"+name, -1)
	if err == nil {
		s.note.announce(p.Key)
	}
	switch {
	case err == nil && !waiting:
		s.forget(p.Token, l)
		return nil
	case err == nil, errors.Is(err, zk.ErrNoNode):
		s.forget(p.Token, l)
		return driver.ErrNotHeld
	}
	return err
}

// entriesOf lists the entries of the kinds key node kp (none when it is
// missing).
func (s *Store) entriesOf(kp string) ([]kindEntry, error) {
	kids, _, err := s.conn.Children(kp)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var es []kindEntry
	for _, k := range kids {
		if e, ok := parseEntry(k); ok {
			es = append(es, e)
		}
	}
	return es, nil
}

// listKinds lists the entries of every kinds key starting with prefix:
// one list of Root/%kinds, then per key (pipelined) its children and the
// data of each entry.
func (s *Store) listKinds(prefix string) ([]driver.Lease, error) {
	keys, err := s.keysUnder(s.root+"/"+kindsName, prefix)
	if err != nil {
		return nil, err
	}
	per := make([][]driver.Lease, len(keys))
	errs := make([]error, len(keys))
	parallel(len(keys), func(i int) {
		kp := s.kindsPath(keys[i])
		es, err := s.entriesOf(kp)
		if err != nil {
			errs[i] = fmt.Errorf("%s: %w", kp, err)
			return
		}
		if len(es) == 0 {
			return
		}
		names := make([]string, len(es))
		for j, e := range es {
			names[j] = e.name
		}
		for j, n := range s.readNodes(kp, names) {
			switch {
			case errors.Is(n.err, zk.ErrNoNode):
			case n.err != nil:
				errs[i] = fmt.Errorf("%s: %w", kp, n.err)
				return
			default:
				per[i] = append(per[i], driver.Lease{
					Key: keys[i], Owner: n.data.Owner, Fence: n.data.Fence, TTL: n.ttl(),
					Mode: es[j].mode, Limit: es[j].limit, Waiting: es[j].waiting,
				})
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []driver.Lease
	for _, ls := range per {
		out = append(out, ls...)
	}
	return out, nil
}

// forceChunk bounds the entries one force-release multi deletes.
const forceChunk = 64

// forceKinds deletes every entry of key's read-write lock or semaphore
// (claims too), whoever's, and reports whether it deleted any. Each multi
// deletes up to forceChunk entries and raises the marker's version once
// per entry (the first raise checks the version read), naming them in its
// data, so that their holders' Stores learn of it at their next renewal
// (see Renew). Entries gone meanwhile are left out and the multi sent
// again.
func (s *Store) forceKinds(key string) (bool, error) {
	kp := s.kindsPath(key)
	es, err := s.entriesOf(kp)
	if err != nil {
		return false, err
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.name
	}
	deleted := false
	for len(names) > 0 {
		chunk := names[:min(len(names), forceChunk)]
		names = names[len(chunk):]
		n, err := s.forceDelete(kp, chunk)
		if err != nil {
			return deleted, err
		}
		deleted = deleted || n > 0
	}
	return deleted, nil
}

// forceDelete deletes the children names of kp in one multi with the
// marker's raises (see forceKinds) and returns how many it deleted.
func (s *Store) forceDelete(kp string, names []string) (int, error) {
	rounds := len(names) + 4
	for round := 0; len(names) > 0; round++ {
		data, mst, err := s.readMarker()
		if err != nil {
			return 0, err
		}
		paths := make([]string, len(names))
		ops := make([]any, 0, 2*len(names))
		for i, n := range names {
			paths[i] = kp + "/" + n
			ops = append(ops, &zk.DeleteRequest{Path: paths[i], Version: -1})
		}
		last := markerData(data, paths...)
		for i := range names {
			d, v := []byte(nil), int32(-1)
			if i == 0 {
				v = mst.Version
			}
			if i == len(names)-1 {
				d = last
			}
			ops = append(ops, &zk.SetDataRequest{Path: s.marker, Data: d, Version: v})
		}
		resp, err := s.conn.Multi(ops...)
		if err == nil {
			return len(names), nil
		}
		if round == rounds || len(resp) != len(ops) {
			return 0, err
		}
		gone := -1
		for i := range names {
			if errors.Is(resp[i].Error, zk.ErrNoNode) {
				gone = i
			}
		}
		switch {
		case gone >= 0:
			names = append(names[:gone:gone], names[gone+1:]...)
		case errors.Is(resp[len(names)].Error, zk.ErrBadVersion):
			// Another force release came between: read the marker again.
		default:
			return 0, err
		}
	}
	return 0, nil
}

// turnstile lets one kinds Acquire of a key at a time through a Store:
// two decisions on one key race for the same version of its guard, so
// that all but one of them would lose; in turn, each looks at the key as
// the last one left it.
type turnstile struct {
	mu sync.Mutex
	m  map[string]chan struct{} // closed when the key's turn ends
}

// enter waits for key's turn, or until ctx ends.
func (t *turnstile) enter(ctx context.Context, key string) error {
	for {
		t.mu.Lock()
		ch, busy := t.m[key]
		if !busy {
			if t.m == nil {
				t.m = make(map[string]chan struct{})
			}
			t.m[key] = make(chan struct{})
			t.mu.Unlock()
			return nil
		}
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// leave ends key's turn.
func (t *turnstile) leave(key string) {
	t.mu.Lock()
	ch := t.m[key]
	delete(t.m, key)
	t.mu.Unlock()
	close(ch)
}

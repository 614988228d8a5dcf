package zkstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
)

// markerName is the force-release marker under Root: a persistent node
// whose version ForceRelease raises, in the multi that deletes a lock node,
// and whose data names the last markerHistory lock nodes it deleted. No key
// node has this name: escapeName writes every '%' of a key as %25.
const markerName = "%force-released"

// markerHistory is how many deleted lock nodes the marker's data names.
const markerHistory = 16

// renewRounds bounds the multis of one Renew when the marker keeps changing
// under it.
const renewRounds = 4

// markerState is the marker as a Store last adopted it. Guarded by
// Store.mu.
type markerState struct {
	version int32
	zxid    int64 // its mzxid; 0 until the Store first read it
	czxid   int64 // its czxid: another one means it was deleted and created again
}

// errUnverified is a lease's result when a force release came between the
// check of its node and the renewal: the Locker retries it.
var errUnverified = errors.New("a force release came before the lease could be checked; retry")

// Renew implements driver.Store. A lease lives as long as its node, and
// its node as long as the Conn's session, unless the reaper deletes it at
// its deadline or an operator force-releases it. So renewing a batch of
// any size is one request: a multi holding one check of the version of
// the marker node Root/%force-released. It is a write, so the leader
// answers it only while the session is alive: the server heard from the
// session after the request was sent, and the session cannot expire before
// the send time plus SessionTimeout, at least the TTL (ErrTTL). The same
// check tells that no lock node was force-released since the Store last
// looked: ForceRelease raises the marker's version in the multi that
// deletes the node. Each lease's deadline moves to the multi's send time
// plus its TTL.
//
// When the check fails (the marker changed) the Store reads the marker
// (one request), marks the leases whose nodes the force releases since may
// have deleted — those the marker's data names when it names all of them,
// else every lease created before the marker last changed — reads the
// nodes of those marks that are in the batch (one read each, pipelined; a
// node gone is ErrNotHeld) and sends the check again.
//
// Before sending anything, leases of a session the client was told has
// expired (or that it replaced with another), and leases past their
// deadline (the reaper deletes their nodes), are ErrNotHeld at once.
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	res, err := call(ctx, func() ([]error, error) { return s.renew(ps) }, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: renew %d leases: %w", len(ps), err)
	}
	return res, nil
}

// renewOp is one lease of a renewal.
type renewOp struct {
	i     int // index in the batch
	token string
	l     *lease
	ttl   time.Duration
}

func (s *Store) renew(ps []driver.RenewParams) ([]error, error) {
	res := make([]error, len(ps))
	now := time.Now()
	current := s.conn.SessionID()
	ops := make([]renewOp, 0, len(ps))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	for i, p := range ps {
		l := s.lookupLocked(p.Key, p.Token, p.Mode)
		switch {
		case l == nil:
			res[i] = driver.ErrNotHeld
		case s.sessionEnded(l, current):
			res[i] = driver.ErrNotHeld
			delete(s.leases, p.Token)
		case s.since(now) >= l.until:
			// Its deadline passed: the reaper deletes its node.
			res[i] = driver.ErrNotHeld
			s.reap.armLocked(now)
		case p.TTL > s.session:
			res[i] = fmt.Errorf("%w (%v > %v)", ErrTTL, p.TTL, s.session)
		default:
			ops = append(ops, renewOp{i: i, token: p.Token, l: l, ttl: p.TTL})
		}
	}
	m := s.mark
	s.mu.Unlock()
	if len(ops) == 0 {
		return res, nil
	}
	for round := 0; ; round++ {
		if m.zxid == 0 || round > 0 {
			var err error
			if m, err = s.adoptMarker(); err != nil {
				return nil, err
			}
		}
		var err error
		if ops, err = s.verify(ops, res, m.zxid); err != nil {
			return nil, err
		}
		if len(ops) == 0 {
			return res, nil
		}
		if round == renewRounds {
			for _, op := range ops {
				res[op.i] = errUnverified
			}
			return res, nil
		}
		before := s.conn.SessionID()
		sent := time.Now()
		resp, err := s.conn.Multi(&zk.CheckVersionRequest{Path: s.marker, Version: m.version})
		after := s.conn.SessionID()
		if err == nil && len(resp) == 1 && resp[0].Error == nil {
			s.certify(ops, res, sent, before, after, m.zxid)
			return res, nil
		}
		if err == nil {
			err = fmt.Errorf("unexpected multi response (%d results)", len(resp))
		}
		if !errors.Is(err, zk.ErrBadVersion) && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		// The marker changed (or is missing): read it and check again.
	}
}

// certify settles the ops after the marker check sent at sent succeeded,
// on session after (before when the check was sent): the session was alive
// at the server after sent, and no lock node was force-released since the
// marker state of mzxid.
func (s *Store) certify(ops []renewOp, res []error, sent time.Time, before, after, mzxid int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		l := op.l
		switch {
		case s.leases[op.token] != l:
			res[op.i] = driver.ErrNotHeld // released, or reaped, meanwhile
		case l.session != before || before != after:
			res[op.i] = driver.ErrNotHeld // the session changed: its node went with it
			delete(s.leases, op.token)
		case s.since(sent) >= l.until:
			// Its deadline passed before the check was sent: the reaper
			// may be deleting it now.
			res[op.i] = driver.ErrNotHeld
			s.reap.armLocked(sent)
		case l.check != 0 && l.check <= mzxid:
			res[op.i] = errUnverified // marked after verify read it
		default:
			l.ttl, l.until = op.ttl, s.since(sent)+op.ttl
		}
	}
}

// verify reads the nodes of the ops whose leases are marked for a check up
// to the marker state mzxid (pipelined), settles those found gone as
// ErrNotHeld and returns the others. The reads are sent after that marker
// state was read, so they see every force release it counts.
func (s *Store) verify(ops []renewOp, res []error, mzxid int64) ([]renewOp, error) {
	var check []int
	s.mu.Lock()
	for j, op := range ops {
		if c := op.l.check; c != 0 && c <= mzxid {
			check = append(check, j)
		}
	}
	s.mu.Unlock()
	if len(check) == 0 {
		return ops, nil
	}
	exists := make([]bool, len(check))
	errs := make([]error, len(check))
	parallel(len(check), func(k int) {
		op := ops[check[k]]
		exists[k], _, errs[k] = s.conn.Exists(s.nodePath(op.token, op.l))
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	gone := make(map[int]bool)
	s.mu.Lock()
	for k, j := range check {
		op := ops[j]
		if !exists[k] {
			gone[j] = true
			res[op.i] = driver.ErrNotHeld
			if s.leases[op.token] == op.l {
				delete(s.leases, op.token)
			}
			continue
		}
		if op.l.check <= mzxid {
			op.l.check = 0
		}
	}
	s.mu.Unlock()
	if len(gone) == 0 {
		return ops, nil
	}
	kept := ops[:0]
	for j, op := range ops {
		if !gone[j] {
			kept = append(kept, op)
		}
	}
	return kept, nil
}

// adoptMarker reads the marker (creating it when missing) and, when it
// changed since the Store last adopted it, marks the leases whose nodes
// the force releases since may have deleted. It returns the marker state
// now adopted.
func (s *Store) adoptMarker() (markerState, error) {
	data, st, err := s.readMarker()
	if err != nil {
		return markerState{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.mark
	if st.Mzxid <= old.zxid {
		return old, nil // another Renew adopted this state, or a newer one
	}
	s.mark = markerState{version: st.Version, zxid: st.Mzxid, czxid: st.Czxid}
	named := markerPaths(data)
	if n := int(st.Version - old.version); old.zxid != 0 && old.czxid == st.Czxid && n > 0 && n <= len(named) {
		// The data names every node deleted since: mark their leases.
		for _, path := range named[len(named)-n:] {
			tok, ok := nodeToken(path[strings.LastIndexByte(path, '/')+1:])
			if l := s.leases[tok]; ok && l != nil && s.nodePath(tok, l) == path {
				l.check = st.Mzxid
			}
		}
		return s.mark, nil
	}
	for _, l := range s.leases {
		if l.zxid < st.Mzxid {
			l.check = st.Mzxid
		}
	}
	return s.mark, nil
}

// nodeToken returns the token whose lock node or kinds entry is named
// name.
func nodeToken(name string) (string, bool) {
	if i := strings.LastIndex(name, lockInfix); i >= 0 {
		return unescapeName(name[:i])
	}
	e, ok := parseEntry(name)
	return e.token, ok
}

// readMarker reads the marker, creating it (and Root) when missing.
func (s *Store) readMarker() ([]byte, *zk.Stat, error) {
	data, st, err := s.conn.Get(s.marker)
	if errors.Is(err, zk.ErrNoNode) {
		if err := s.createMarker(); err != nil {
			return nil, nil, err
		}
		data, st, err = s.conn.Get(s.marker)
	}
	return data, st, err
}

// knowMarker reads the marker when the Store has not yet (see createNode).
func (s *Store) knowMarker() error {
	s.mu.Lock()
	known := s.mark.zxid != 0
	s.mu.Unlock()
	if known {
		return nil
	}
	_, err := s.adoptMarker()
	return err
}

// createMarker creates the marker node (and Root) if it is missing.
func (s *Store) createMarker() error {
	_, err := s.conn.Create(s.marker, nil, zk.FlagPersistent, s.acl)
	if errors.Is(err, zk.ErrNoNode) {
		if err := s.ensureRoot(); err != nil {
			return err
		}
		_, err = s.conn.Create(s.marker, nil, zk.FlagPersistent, s.acl)
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", s.marker, err)
	}
	return nil
}

// markerData is the marker's data after a force release of paths: the
// paths it named, then paths, the oldest dropped beyond markerHistory.
func markerData(old []byte, paths ...string) []byte {
	named := append(markerPaths(old), paths...)
	if len(named) > markerHistory {
		named = named[len(named)-markerHistory:]
	}
	return []byte(strings.Join(named, "\n"))
}

// markerPaths returns the paths the marker's data names, oldest first
// (node names never hold a newline: escapeName escapes it).
func markerPaths(data []byte) []string {
	var out []string
	for _, p := range strings.Split(string(data), "\n") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

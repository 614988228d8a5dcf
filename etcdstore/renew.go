package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/driver"
)

// defaultTxnOps is etcd's default --max-txn-ops. A server configured lower
// makes the Store halve it (ErrTooManyOps) until its Txns fit.
const defaultTxnOps = 128

// Renew implements driver.Store. However many leases ps names, it costs two
// etcd requests sent together (one round trip), usually on one session:
//
//   - a check that every lease's key still exists: for up to 128 leases
//     one Txn of count-only Gets (linearizable); for more, one
//     LeaseTimeToLive of the session lease with its attached keys, whose
//     missing keys (rare: force-released) are confirmed by Txns of Gets
//     before they are reported as ErrNotHeld;
//   - one LeaseKeepAlive of the session lease, unless an earlier one already
//     covers the longest TTL of the batch (leases much shorter than the
//     session), so that the lease lives at etcd until at least the start
//     of this call plus its TTL.
//
// A lease whose key is gone, whose session lease is gone, or whose deadline
// passed before this call is ErrNotHeld. A TTL above SessionTTL is an error
// wrapping ErrTTL for that lease. Other failures are per-lease errors the
// Locker retries; when one failure covers the whole batch it is the call's
// error.
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	start := time.Now()
	res := make([]error, len(ps))
	ents := make([]*entry, len(ps))
	type group struct {
		sess   *session
		idx    []int
		maxTTL time.Duration
	}
	var groups []*group
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	for i, p := range ps {
		if err := s.Kinds(p.Mode); err != nil {
			res[i] = fmt.Errorf("etcdstore: renew %q: %w", p.Key, err)
			continue
		}
		if p.TTL > s.ttl {
			res[i] = fmt.Errorf("etcdstore: renew %q: %w (%v > %v)", p.Key, ErrTTL, p.TTL, s.ttl)
			continue
		}
		_, e := s.holdKeyLocked(p.Key, p.Token, p.Mode)
		switch {
		case e != nil && e.state == stateRenewing:
			res[i] = fmt.Errorf("etcdstore: renew %q: a renewal of this lease is already under way", p.Key)
			continue
		case e == nil || e.state == stateDoomed || e.sess.dead.Load():
			res[i] = driver.ErrNotHeld
			continue
		case !start.Before(e.deadline):
			s.doomLocked(e, start)
			res[i] = driver.ErrNotHeld
			continue
		}
		e.state = stateRenewing
		ents[i] = e
		var g *group
		for _, x := range groups {
			if x.sess == e.sess {
				g = x
				break
			}
		}
		if g == nil {
			g = &group{sess: e.sess}
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.maxTTL = max(g.maxTTL, p.TTL)
	}
	s.mu.Unlock()

	var callErr error
	for _, g := range groups {
		keys := make([]string, len(g.idx))
		for j, i := range g.idx {
			keys[j] = ents[i].key
		}
		out, err := s.renewSession(ctx, g.sess, start, g.maxTTL, keys)
		for j, i := range g.idx {
			if out[j] != nil && !errors.Is(out[j], driver.ErrNotHeld) {
				res[i] = fmt.Errorf("etcdstore: renew %q: %w", ps[i].Key, out[j])
			} else {
				res[i] = out[j]
			}
		}
		if err != nil && len(g.idx) == len(ps) {
			callErr = fmt.Errorf("etcdstore: renew %d leases: %w", len(ps), err)
		}
	}

	s.mu.Lock()
	for i, e := range ents {
		if e == nil || e.gone || e.state != stateRenewing {
			continue // released meanwhile
		}
		e.state = stateHeld
		switch {
		case res[i] == nil:
			e.deadline = start.Add(ps[i].TTL)
		case errors.Is(res[i], driver.ErrNotHeld):
			s.dropLocked(e) // its key is gone
			continue
		}
		s.reap.armLocked(e.deadline)
	}
	s.mu.Unlock()
	if callErr != nil {
		return nil, callErr
	}
	return res, nil
}

// renewSession checks which of keys still exist and keeps ss alive until
// start+ttl, both requests at once. It returns one result per key: nil,
// ErrNotHeld when etcd said the key or the session lease does not exist, or
// the error of a request that failed; and that error alone when it is
// every key's result.
func (s *Store) renewSession(ctx context.Context, ss *session, start time.Time, ttl time.Duration, keys []string) ([]error, error) {
	ka := ss.refresh(s, start, ttl)
	var held []bool
	var err error
	if len(keys) <= int(s.txnOps.Load()) {
		held, err = s.exist(ctx, keys)
	} else {
		held, err = s.attached(ctx, ss, keys)
	}
	kaErr := ka.wait(ctx)
	out := make([]error, len(keys))
	if isLeaseGone(kaErr) || ss.dead.Load() {
		ss.dead.Store(true)
		for j := range out {
			out[j] = driver.ErrNotHeld
		}
		return out, nil
	}
	if err != nil {
		for j := range out {
			out[j] = err
		}
		return out, err
	}
	if kaErr != nil {
		kaErr = fmt.Errorf("keep the session lease alive: %w", kaErr)
	}
	all := kaErr != nil
	for j, h := range held {
		switch {
		case !h:
			out[j] = driver.ErrNotHeld // gone is gone, whatever the keepalive said
			all = false
		case kaErr != nil:
			out[j] = kaErr
		}
	}
	if all {
		return out, kaErr
	}
	return out, nil
}

// attached checks keys against the session lease's attached keys: one
// LeaseTimeToLive whatever their number. etcd answers it from the leader's
// lease table rather than through raft, so keys it reports missing are
// confirmed by a linearizable read before anyone is told they are lost.
func (s *Store) attached(ctx context.Context, ss *session, keys []string) ([]bool, error) {
	resp, err := s.c.TimeToLive(ctx, ss.id, clientv3.WithAttachedKeys())
	if err != nil {
		return nil, err
	}
	held := make([]bool, len(keys))
	if resp.TTL < 0 {
		ss.dead.Store(true)
		return held, nil
	}
	on := make(map[string]struct{}, len(resp.Keys))
	for _, k := range resp.Keys {
		on[string(k)] = struct{}{}
	}
	var missing []int
	for j, k := range keys {
		if _, ok := on[k]; ok {
			held[j] = true
		} else {
			missing = append(missing, j)
		}
	}
	if len(missing) == 0 {
		return held, nil
	}
	mk := make([]string, len(missing))
	for m, j := range missing {
		mk[m] = keys[j]
	}
	exist, err := s.exist(ctx, mk)
	if err != nil {
		return nil, err
	}
	for m, j := range missing {
		held[j] = exist[m]
	}
	return held, nil
}

// exist reports whether each key exists, in linearizable Txns of count-only
// Gets, as many per Txn as etcd allows: one request for up to 128 keys.
func (s *Store) exist(ctx context.Context, keys []string) ([]bool, error) {
	out := make([]bool, len(keys))
	for lo := 0; lo < len(keys); {
		n := min(len(keys)-lo, int(s.txnOps.Load()))
		ops := make([]clientv3.Op, n)
		for i := range n {
			ops[i] = clientv3.OpGet(keys[lo+i], clientv3.WithCountOnly())
		}
		resp, err := s.c.Txn(ctx).Then(ops...).Commit()
		if s.tooManyOps(err, n) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for i, r := range resp.Responses {
			out[lo+i] = r.GetResponseRange().GetCount() > 0
		}
		lo += n
	}
	return out, nil
}

// tooManyOps reports whether err says a Txn of n operations was too big
// for the server, and then lowers the Store's Txn size below n.
func (s *Store) tooManyOps(err error, n int) bool {
	if n <= 1 || !errors.Is(err, rpctypes.ErrTooManyOps) {
		return false
	}
	for {
		cur := s.txnOps.Load()
		if cur < int64(n) || s.txnOps.CompareAndSwap(cur, int64(n/2)) {
			return true
		}
	}
}

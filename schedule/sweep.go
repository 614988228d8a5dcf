package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
)

// A node shows it is alive by holding its node lease, the lock
// Config.NodeKeyPrefix + Config.Node. Each attempt writes a running record
// before its handler starts, and the attempt's outcome replaces it (the
// same ledger.RunKey). Every node looks, every third of Config.NodeLeaseTTL, for
// running records whose node holds no node lease — it was killed, or lost
// the store for longer than the lease — and replaces them with interrupted
// records: so every attempt ends with exactly one final record. If that
// node was only slow and records the outcome after all, the outcome
// replaces the interrupted record: still one record.
//
// A node's own outcome that could not be written (the store was down) is
// written again by its next sweep that reads the store: a live node's
// running records are settled by nobody else.

// maxSweep bounds the running records one sweep reads.
const maxSweep = 1000

// takeNodeLease takes the node lease unless the caller holds it. When
// another process holds it — an earlier process of this node that was
// killed, whose lease has not expired yet, or a live one under the same
// name — Start goes on, and the sweeps take the lease once it is free.
func (s *Scheduler) takeNodeLease(ctx context.Context) error {
	s.mu.Lock()
	own := s.nodeTaken.IsZero()
	if own {
		s.ownLease, s.nodeTaken = true, s.clock.Now()
	}
	s.mu.Unlock()
	if !own {
		return nil
	}
	key := s.nodePrefix + s.node
	l, err := s.tryNodeLease(ctx)
	var ne *tasklock.NotObtainedError
	switch {
	case errors.As(err, &ne):
		holder := ne.Owner
		if holder == "" {
			holder = "another process"
		}
		s.log.Warn("schedule: the node lease is held by another process: an earlier one of this node that stopped, or another Scheduler under the same name; taking it once it is free",
			"node", s.node, "key", key, "holder", holder, "expires_in", ne.TTL)
		return nil
	case err != nil:
		return fmt.Errorf("schedule: start: taking the node lease %q: %w", key, err)
	}
	s.mu.Lock()
	s.nodeLease = l
	s.mu.Unlock()
	return nil
}

// keepNodeLease takes the node lease when this Scheduler should hold it
// and does not: it was held elsewhere at Start, or lost since.
func (s *Scheduler) keepNodeLease() {
	s.mu.Lock()
	l, own := s.nodeLease, s.ownLease
	s.mu.Unlock()
	if !own || (l != nil && l.Err() == nil) {
		return
	}
	key := s.nodePrefix + s.node
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	nl, err := s.tryNodeLease(ctx)
	cancel()
	switch {
	case err != nil && l == nil && errors.Is(err, tasklock.ErrNotObtained):
		return // still held by the other process; logged by Start
	case err != nil:
		s.outageAt = s.clock.Now()
		s.log.Error("schedule: cannot take the node lease; other nodes may record this node's runs as interrupted", "node", s.node, "key", key, "err", err)
		return
	case l != nil:
		s.outageAt = s.clock.Now()
		s.log.Warn("schedule: the node lease was lost; took it again", "node", s.node, "key", key, "lost", l.Err())
	default:
		s.log.Info("schedule: took the node lease", "node", s.node, "key", key)
	}
	s.mu.Lock()
	s.nodeLease = nl
	s.mu.Unlock()
}

// tryNodeLease makes one attempt to take this node's lease.
func (s *Scheduler) tryNodeLease(ctx context.Context) (*tasklock.Lock, error) {
	return s.lk.TryObtain(ctx, s.nodePrefix+s.node, &tasklock.ObtainOptions{TTL: s.nodeTTL, Owner: s.node})
}

// holdsOwnLease reports whether this node's own running records from
// before nodeTaken may be settled: the node lease is this process's.
func (s *Scheduler) holdsOwnLease() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ownLease || (s.nodeLease != nil && s.nodeLease.Err() == nil)
}

// releaseNodeLease releases the node lease Start took.
func (s *Scheduler) releaseNodeLease() {
	s.mu.Lock()
	l := s.nodeLease
	s.nodeLease = nil
	s.mu.Unlock()
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := l.Release(ctx); err != nil && !errors.Is(err, tasklock.ErrNotHeld) {
		s.log.Error("schedule: releasing the node lease", "node", s.node, "err", err)
	}
}

// sweep replaces the running records of stopped nodes with interrupted
// ones.
func (s *Scheduler) sweep(now time.Time) {
	s.keepNodeLease()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	rs, err := s.ledger.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning, Limit: maxSweep})
	s.sweepFail.Log(s.log, s.clock.Now(), err, "schedule: reading the running records", "schedule: reading the running records again", "node", s.node)
	s.noteStore(err)
	if err != nil {
		return
	}
	s.rewrite()
	if len(rs) == 0 {
		return
	}
	s.mu.Lock()
	taken := s.nodeTaken
	s.mu.Unlock()
	if !s.holdsOwnLease() {
		taken = time.Time{} // maybe a live namesake's: leave them
	}
	alive := s.aliveNodes(ctx)
	var out []ledger.RunRecord
	for _, r := range rs {
		why := ""
		switch {
		case r.Node == s.node && r.Start.Before(taken):
			why = "an earlier process of node %q stopped before it recorded the outcome (noticed by %q when it started)"
		case r.Node != s.node && alive != nil && !alive(ctx, r.Node):
			why = "node %q stopped before it recorded the outcome: its node lease ended (noticed by %q)"
		default:
			continue
		}
		out = append(out, s.interrupted(r, now, why))
	}
	s.settle(out)
}

// interrupted is r, the running record of a run whose node stopped,
// settled interrupted at now; why names that node, then this one.
func (s *Scheduler) interrupted(r ledger.RunRecord, now time.Time, why string) ledger.RunRecord {
	r.Status = ledger.RunInterrupted
	r.End = now
	r.Error = truncate(fmt.Sprintf("schedule: run interrupted: "+why, r.Node, s.node), maxErrorLen)
	return r
}

// settle records the interrupted records out, and logs and emits each.
func (s *Scheduler) settle(out []ledger.RunRecord) {
	if len(out) == 0 {
		return
	}
	if err := s.record(out...); err != nil {
		return
	}
	for i := range out {
		r := &out[i]
		s.log.Warn("schedule: run interrupted", "node", s.node, "job", r.Job, "tick", r.Tick, "trigger", r.Trigger,
			"attempt", r.Attempt, "ran_on", r.Node, "err", r.Error)
		e := runEvent(EventRunInterrupted, r, false)
		e.Duration, e.Status, e.Error, e.RanOn = r.End.Sub(r.Start), r.Status, r.Error, r.Node
		s.emit(e)
	}
}

// nodeList is a listing of the live nodes (Config.NodeLister) and when it
// was read. A listing costs the store a pass over every key (redisstore
// SCANs), so the shard passes reuse a recent one where a stale answer is
// safe. Loop only.
type nodeList struct {
	live liveNodes
	at   time.Time // zero: none read yet
}

// liveNodes is a listing of the node leases: each listed node and when its
// lease ends unless renewed, the listing's time plus the TTL the store
// gave (sweepEvery when it gave none). A reused listing never counts a
// node alive past that.
type liveNodes map[string]time.Time

// has reports whether the listing holds node.
func (l liveNodes) has(node string) bool {
	_, ok := l[node]
	return ok
}

// listNodes reads the node leases and keeps the listing.
func (s *Scheduler) listNodes(ctx context.Context) (liveNodes, error) {
	ls, err := s.lister.Leases(ctx, s.nodePrefix)
	s.noteStore(err)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	live := make(liveNodes, len(ls))
	var ownFence uint64
	for _, l := range ls {
		name := strings.TrimPrefix(l.Key, s.nodePrefix)
		ttl := l.TTL
		if ttl <= 0 {
			ttl = s.sweepEvery
		}
		live[name] = later(live[name], now.Add(ttl))
		if name == s.node {
			ownFence = l.Fence
		}
	}
	s.nodes = nodeList{live: live, at: now}
	_, listed := live[s.node]
	switch {
	case !listed && s.leaseTaken():
		s.outageAt = now // this node's own lease is gone too (judging)
	case listed && ownFence != 0 && s.ownFence != 0 && ownFence != s.ownFence:
		// This node's lease was taken again since the last listing, so it
		// had lapsed: most likely the store was out for longer than a
		// lease, and every node lost its lease alike. The node took its
		// own back first (serve's node-name lock, retaken by serve, or
		// keepNodeLease) and no listing saw it gone, as none could be
		// read meanwhile; the others take theirs back within a lease.
		s.outageAt = now
	}
	if ownFence != 0 {
		s.ownFence = ownFence
	}
	return live, nil
}

// noteStore notes the outcome of a call to the store. A spell of failures
// that lasts a sweep interval or more is an outage that may have made the
// other nodes' leases lapse, and judging marks it (outageAt) as it ends. A
// shorter one could not: a lease lapses only when its holder cannot renew
// it for most of its TTL. Loop only.
func (s *Scheduler) noteStore(err error) {
	now := s.clock.Now()
	switch {
	case err != nil && s.storeDownSince.IsZero():
		s.storeDownSince = now
	case err == nil && !s.storeDownSince.IsZero():
		if now.Sub(s.storeDownSince) >= s.sweepEvery {
			s.storeOutage = true
		}
		s.storeDownSince = time.Time{}
	}
}

// leaseTaken reports whether this node's lease was taken (by Start, or by
// the caller) and is believed held: then a listing should show it.
func (s *Scheduler) leaseTaken() bool {
	s.mu.Lock()
	taken := !s.nodeTaken.IsZero()
	s.mu.Unlock()
	return taken && s.holdsOwnLease()
}

// judging reports whether a node whose lease is missing may be taken for
// stopped: its running records settled interrupted, its shards and
// requests taken over. Not within a lease TTL of an outage (outageAt): the
// time this node found its own lease gone, or retaken, or its store calls
// answered again after failing for a sweep interval or more (noteStore).
// Then the store was out for long enough that the live nodes' leases may
// have lapsed, and their holders take them again within a sweep. Judging
// them at once ran their shard-runs a second time, beside or after the
// first, which had ended ok during the outage (seen by hand: a 25 s Redis
// outage, 3 nodes). This node's own lease may be listed all along: a lease
// ends at the store a little after its holder stops trusting it, and each
// at its holder's last renewal, so it may outlive an outage that another
// did not (TestServeNoRetakeAfterStoreOutage, twice in full test runs).
// Loop only.
func (s *Scheduler) judging() bool {
	if s.storeOutage {
		s.outageAt, s.storeOutage = s.clock.Now(), false
	}
	return s.outageAt.IsZero() || s.clock.Now().Sub(s.outageAt) >= s.nodeTTL
}

// recentNodes returns the kept listing when it is younger than age.
func (s *Scheduler) recentNodes(age time.Duration) (liveNodes, bool) {
	if s.nodes.at.IsZero() || s.clock.Now().Sub(s.nodes.at) >= age {
		return nil, false
	}
	return s.nodes.live, true
}

// aliveNodes returns a function that reports whether a node holds its node
// lease, or nil when that cannot be told now. With a NodeLister it lists
// the node leases at once (the sweep: a node is found stopped only from a
// fresh listing).
func (s *Scheduler) aliveNodes(ctx context.Context) func(context.Context, string) bool {
	if s.lister != nil {
		live, err := s.listNodes(ctx)
		if err != nil {
			s.log.Error("schedule: listing the node leases", "node", s.node, "err", err)
			return nil
		}
		if !s.judging() {
			return nil
		}
		return func(_ context.Context, node string) bool { return live.has(node) }
	}
	if !s.judging() {
		return nil
	}
	return s.nodeChecker()
}

// shardAlive is aliveNodes for the shard passes: with a NodeLister, a node
// in a listing younger than sweepEvery is alive until its lease as listed
// could end (the store's TTL); any other node, or one past that, is looked
// up in a fresh listing, read at most once per call of shardAlive. A
// failed listing tells nothing: every node counts as alive.
func (s *Scheduler) shardAlive() func(context.Context, string) bool {
	alive := s.listedAlive()
	return func(ctx context.Context, node string) bool {
		// A listing may note an outage (judging): then every node counts
		// as alive.
		return alive(ctx, node) || !s.judging()
	}
}

// listedAlive is shardAlive but for judging.
func (s *Scheduler) listedAlive() func(context.Context, string) bool {
	if s.lister == nil {
		return s.nodeChecker()
	}
	var fresh liveNodes // this call's listing
	tried := false
	return func(ctx context.Context, node string) bool {
		if fresh != nil {
			return fresh.has(node)
		}
		if live, ok := s.recentNodes(s.sweepEvery); ok {
			// Alive by a recent listing, unless its lease as listed
			// has ended since: then look again, so that a node killed
			// just after a listing is found stopped at its lease's end.
			if until, ok := live[node]; ok && s.clock.Now().Before(until) {
				return true
			}
		}
		if tried {
			return true // the listing failed
		}
		tried = true
		live, err := s.listNodes(ctx)
		if err != nil {
			s.log.Error("schedule: listing the node leases", "node", s.node, "err", err)
			return true
		}
		fresh = live
		return live.has(node)
	}
}

// nodeChecker reports whether a node holds its node lease by trying to
// take it, once per node per checker.
func (s *Scheduler) nodeChecker() func(context.Context, string) bool {
	known := map[string]bool{}
	return func(ctx context.Context, node string) bool {
		if a, ok := known[node]; ok {
			return a
		}
		a := s.leaseHeld(ctx, node)
		known[node] = a
		return a
	}
}

// leaseHeld reports whether node holds its node lease, by trying to take
// it (and releasing it at once when that works). On a store error it
// reports true: nothing is settled on a guess.
func (s *Scheduler) leaseHeld(ctx context.Context, node string) bool {
	l, err := s.lk.TryObtain(ctx, s.nodePrefix+node, &tasklock.ObtainOptions{TTL: time.Second, Owner: s.node})
	switch {
	case errors.Is(err, tasklock.ErrNotObtained):
		return true
	case err != nil:
		s.log.Error("schedule: checking a node's lease", "node", s.node, "of", node, "err", err)
		return true
	}
	rctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	_ = l.Release(rctx)
	return false
}

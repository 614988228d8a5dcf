package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
)

// A serve holds its node-name lock (serve/node/NODE, the Schedulers' node
// lease) from takeNode to its exit. When the lock is lost — the store was
// out, or serve was paused (SIGSTOP, a stalled VM), for longer than its
// lease — serve takes it back and goes on as before. But another serve
// may have taken the name meanwhile: one started under this name while
// this one was paused. Then this one must stop at once: its Schedulers,
// their node name the other's, would take the other serve's runs for
// their own, settle them interrupted, take its shard-runs over and run
// them a second time (shard-runs were recorded ok twice a tick for as
// long as both ran: TestServeNodeNameTakenWhilePaused). nodeName keeps
// the lock and judges each loss: when another process holds the name,
// serve shuts down as on SIGTERM and exits 75.
//
// It gates the Schedulers' writes to the ledger too (gate): they would
// otherwise run on in the moments between the resume of a paused serve
// and the judgement of its lost lock, which takes a store round trip or
// two. While the lock is lost and not yet judged, claims, records and
// the other writes wait; once the loss is judged not another process's
// (the store did not answer, or still holds this node's own lapsed lease)
// they go on as before; once the name is another's they are refused, but
// for the outcomes of this process's own runs.

// nodeNameTTL is the node-name lock's lease (nodeLockOptions asks for the
// default).
const nodeNameTTL = tasklock.DefaultTTL

// errNameTaken is what the Schedulers' writes to the ledger return once
// the node name is another serve's.
var errNameTaken = errors.New("tasklock serve: the node name was taken by another serve: this serve claims, starts and settles nothing more")

// nodeName keeps a serve's node-name lock: see above.
type nodeName struct {
	s *server
	// taken is closed once another process holds the name: the serve
	// shuts down.
	taken chan struct{}
	stop  chan struct{} // closed by release: stop keeping the lock
	done  chan struct{} // closed when keep returns

	mu     sync.Mutex
	guard  *tasklock.Lock // the hold: current, or lost and not yet taken back
	judged chan struct{}  // closed once guard's loss is judged, or guard replaced
	// open says guard's loss was judged not another process's: the
	// Schedulers' writes go on.
	open    bool
	by      retook        // once taken: who holds the name
	heldFor time.Duration // once taken, by a holder the store could not list: for how long it was seen held
	// own are this process's runs whose running record was written and
	// whose outcome was not yet: once the name is another's, their
	// outcomes are still written, and nothing else.
	own map[runID]bool
}

// runID is a ledger.RunKey usable as a map key whatever the tick's
// location or monotonic reading.
type runID struct {
	job, trigger   string
	tick           int64
	shard, attempt int
}

// idOf is r's runID.
func idOf(r *ledger.RunRecord) runID {
	return runID{job: r.Job, trigger: r.Trigger, tick: r.Tick.UnixNano(), shard: r.Shard, attempt: r.Attempt}
}

// keepNode starts keeping guard, the node-name lock takeNode took.
func (s *server) keepNode(guard *tasklock.Lock) *nodeName {
	n := &nodeName{
		s: s, guard: guard, judged: make(chan struct{}), own: map[runID]bool{},
		taken: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go n.keep()
	return n
}

// keep takes the lock back each time it is lost, until release or until
// another process holds the name.
func (n *nodeName) keep() {
	defer close(n.done)
	for {
		n.mu.Lock()
		g := n.guard
		n.mu.Unlock()
		select {
		case <-n.stop:
			return
		case <-g.Done():
		}
		n.s.log.Warn("lost the node-name lock; taking it again", "node", n.s.node, "key", nodeKeyPrefix+n.s.node, "err", g.Err())
		if !n.retake(g) {
			return
		}
	}
}

// retake tries to take the lock back after lost ended, at the pace
// retakeNode gives, and judges each refusal. It reports whether it holds
// the lock again; false when another process holds the name (taken is
// closed), or on release.
func (n *nodeName) retake(lost *tasklock.Lock) bool {
	var heldSince time.Time // first refused by a holder the store could not tell
	for {
		r := n.s.retakeNode(lost)
		switch {
		case r.lock != nil:
			n.mu.Lock()
			n.guard = r.lock
			n.judgeLocked(false)
			n.judged = make(chan struct{})
			n.mu.Unlock()
			return true
		case r.other:
			n.takenBy(r, 0)
			return false
		case r.own:
			heldSince = time.Time{}
		case r.held:
			// The store cannot list its leases: the holder may be this
			// node's own lapsed lease, which the store expires within
			// its TTL of the last renewal that reached it, before this
			// process lost it. Held for longer than that, and a retry,
			// it is another's.
			now := time.Now()
			if heldSince.IsZero() {
				heldSince = now
			} else if held := now.Sub(heldSince); held >= nodeNameTTL+retakeRetry {
				n.takenBy(r, held)
				return false
			}
		}
		n.mu.Lock()
		n.judgeLocked(true)
		n.mu.Unlock()
		t := time.NewTimer(r.again)
		select {
		case <-n.stop:
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// judgeLocked ends the wait for the judgement of the current guard's loss;
// open says whether the Schedulers' writes go on. Callers hold n.mu.
func (n *nodeName) judgeLocked(open bool) {
	n.open = open
	select {
	case <-n.judged: // closed already
	default:
		close(n.judged)
	}
}

// takenBy records that r's holder has the name, held for heldFor when the
// store could not list it, refuses the Schedulers' writes from now on and
// closes taken.
func (n *nodeName) takenBy(r retook, heldFor time.Duration) {
	n.mu.Lock()
	n.by, n.heldFor = r, heldFor
	n.judgeLocked(false)
	close(n.taken)
	n.mu.Unlock()
	attrs := []any{"node", n.s.node, "key", nodeKeyPrefix + n.s.node, "holder", r.holder}
	if r.other {
		attrs = append(attrs, "holder_fence", r.fence)
	} else {
		attrs = append(attrs, "held_for", heldFor)
	}
	n.s.log.Error("the node name was taken by another serve while this one could not renew it (was it paused?): stopping scheduling and shutting down",
		append(attrs, "exit", exitTempFail)...)
}

// takenError is serve's last line once the name is another's.
func (n *nodeName) takenError() string {
	n.mu.Lock()
	by, heldFor := n.by, n.heldFor
	n.mu.Unlock()
	holder := cmp.Or(by.holder, "its holder unknown")
	var who string
	if by.other {
		who = fmt.Sprintf("%s, fence %d", holder, by.fence)
	} else {
		who = fmt.Sprintf("%s; held for %v since this serve lost it, longer than its own lease could have lasted: the store cannot list leases to tell", holder, heldFor.Round(time.Second))
	}
	return fmt.Sprintf("node name %s was taken by another serve (%s) while this one could not renew it (it was paused, or cut off from the store, for longer than the name's %v lease); this serve stopped scheduling and shut down",
		redact.Quote(n.s.node), who, nodeNameTTL)
}

// release stops keeping the lock and releases it, once the Schedulers
// have stopped.
func (n *nodeName) release() {
	close(n.stop)
	<-n.done
	n.mu.Lock()
	g := n.guard
	if !n.isTaken() {
		n.judgeLocked(true) // nothing waits for a judgement any more
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = g.Release(ctx)
}

// isTaken reports whether taken is closed.
func (n *nodeName) isTaken() bool {
	select {
	case <-n.taken:
		return true
	default:
		return false
	}
}

// admit lets a Scheduler's write to the ledger, or a run's start, through:
// at once while the lock is held, or its loss was judged not another
// process's; after the judgement when it is lost and not yet judged (ctx
// bounds the wait); never once the name is another's (errNameTaken). A nil
// n (a server that holds no node name: tests) lets everything through.
func (n *nodeName) admit(ctx context.Context) error {
	if n == nil {
		return nil
	}
	for {
		if n.isTaken() {
			return errNameTaken
		}
		n.mu.Lock()
		g, judged, open := n.guard, n.judged, n.open
		n.mu.Unlock()
		if open {
			return nil
		}
		select {
		case <-g.Done(): // lost, also while this process was paused: wait for the judgement
		default:
			return nil
		}
		select {
		case <-judged:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// gate returns l for the Schedulers, its writes gated by n (admit); l
// itself when n is nil.
func (n *nodeName) gate(l ledger.Ledger) ledger.Ledger {
	if n == nil {
		return l
	}
	g := &gatedLedger{Ledger: l, n: n}
	// The optional capabilities the Scheduler looks for, kept.
	m, marks := l.(ledger.Marker)
	r, registers := l.(ledger.Registrar)
	gm, gr := gatedMarker{m: m, n: n}, gatedRegistrar{r: r, n: n}
	switch {
	case marks && registers:
		return struct {
			*gatedLedger
			gatedMarker
			gatedRegistrar
		}{g, gm, gr}
	case marks:
		return struct {
			*gatedLedger
			gatedMarker
		}{g, gm}
	case registers:
		return struct {
			*gatedLedger
			gatedRegistrar
		}{g, gr}
	}
	return g
}

// gatedLedger is a Scheduler's ledger whose writes nodeName admits.
type gatedLedger struct {
	ledger.Ledger
	n *nodeName
}

// Claim implements ledger.Ledger.
func (l *gatedLedger) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	if len(ps) > 0 {
		if err := l.n.admit(ctx); err != nil {
			return nil, err
		}
	}
	return l.Ledger.Claim(ctx, ps)
}

// RecordRuns implements ledger.Ledger. Once the name is another's it
// writes the outcomes of this process's own runs only, and refuses the
// rest: a settlement of a run of the serve that has the name now.
func (l *gatedLedger) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	err := l.n.admit(ctx)
	keep := rs
	switch {
	case err == nil:
		l.n.noteRunning(rs)
	case errors.Is(err, errNameTaken):
		keep = l.n.ownOnly(rs)
	default:
		return err
	}
	if len(keep) > 0 {
		if werr := l.Ledger.RecordRuns(ctx, keep); werr != nil {
			return werr
		}
		l.n.noteEnded(keep)
	}
	if len(keep) < len(rs) {
		return err
	}
	return nil
}

// SetJobState implements ledger.Ledger.
func (l *gatedLedger) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if err := l.n.admit(ctx); err != nil {
		return ledger.JobState{}, err
	}
	return l.Ledger.SetJobState(ctx, p)
}

// Prune implements ledger.Ledger.
func (l *gatedLedger) Prune(ctx context.Context, p ledger.PruneParams) (ledger.PruneResult, error) {
	if err := l.n.admit(ctx); err != nil {
		return ledger.PruneResult{}, err
	}
	return l.Ledger.Prune(ctx, p)
}

// gatedMarker is a ledger.Marker whose marks nodeName admits.
type gatedMarker struct {
	m ledger.Marker
	n *nodeName
}

// Mark implements ledger.Marker.
func (g gatedMarker) Mark(ctx context.Context, m ledger.ClaimMark, ttl time.Duration) ([]ledger.ClaimMark, error) {
	if err := g.n.admit(ctx); err != nil {
		return nil, err
	}
	return g.m.Mark(ctx, m, ttl)
}

// gatedRegistrar is a ledger.Registrar whose registrations nodeName admits.
type gatedRegistrar struct {
	r ledger.Registrar
	n *nodeName
}

// RegisterJobs implements ledger.Registrar.
func (g gatedRegistrar) RegisterJobs(ctx context.Context, ps []ledger.JobStateParams) ([]ledger.JobState, error) {
	if err := g.n.admit(ctx); err != nil {
		return nil, err
	}
	return g.r.RegisterJobs(ctx, ps)
}

// noteRunning notes the runs whose running record rs holds as this
// process's own.
func (n *nodeName) noteRunning(rs []ledger.RunRecord) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range rs {
		if rs[i].Status == ledger.RunRunning {
			n.own[idOf(&rs[i])] = true
		}
	}
}

// noteEnded forgets the runs whose outcome rs, written, holds.
func (n *nodeName) noteEnded(rs []ledger.RunRecord) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range rs {
		if rs[i].Status.Final() {
			delete(n.own, idOf(&rs[i]))
		}
	}
}

// ownOnly returns the records of rs that are of this process's own runs.
func (n *nodeName) ownOnly(rs []ledger.RunRecord) []ledger.RunRecord {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []ledger.RunRecord
	for i := range rs {
		if n.own[idOf(&rs[i])] {
			out = append(out, rs[i])
		}
	}
	return out
}

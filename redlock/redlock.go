package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/redisstore"
)

// DefaultPrefix is the key prefix when Options.Prefix is empty: the same as
// redisstore's, so the nodes hold the same keys a redisstore.Store would.
const DefaultPrefix = redisstore.DefaultPrefix

// DefaultNodeTimeout caps the node timeout (see Options.NodeTimeout) of
// Acquire and Renew when Options.NodeTimeout is zero, and is the node
// timeout of Release and ForceRelease then.
const DefaultNodeTimeout = 50 * time.Millisecond

// minNodeTimeout is the least default node timeout, for very short leases.
const minNodeTimeout = 2 * time.Millisecond

//go:embed raise.lua
var raiseSrc string

var raiseScript = redis.NewScript(raiseSrc)

//go:embed release.lua
var releaseSrc string

var releaseScript = redis.NewScript(releaseSrc)

// Options configures a Store. A nil *Options means all defaults; zero fields
// take their defaults. New never writes into it.
type Options struct {
	// Prefix starts every key the store writes on every node, as in
	// redisstore.Options.Prefix. It must not contain '{' or '}'.
	// Default: DefaultPrefix.
	Prefix string

	// NodeTimeout is how long a call waits for every node. A node that has
	// not answered by then counts as failed as soon as a majority of the
	// nodes have answered (for Acquire, once its answers settle the vote:
	// see the package documentation), so a dead or cut-off minority delays
	// each Acquire and Renew by this much (and Acquire's time counts against the
	// lease's validity: keep it a small fraction of the TTL). While fewer
	// than a majority have answered, the call waits on, up to the lease's
	// validity for Acquire and Renew and at most 1 s: a slow majority is
	// waited for, not failed. Zero: TTL/20, at least 2ms and at most
	// DefaultNodeTimeout, computed per call (for Renew from the shortest
	// TTL in the batch); DefaultNodeTimeout for Release and ForceRelease.
	NodeTimeout time.Duration
}

// node is one independent Redis server.
type node struct {
	addr   string // for errors
	client *redis.Client
	store  *redisstore.Store
}

// Store keeps leases on N independent Redis nodes and grants a lock when a
// majority of them grant it (the RedLock algorithm). It implements
// driver.Store, driver.Batcher, driver.Notifier, driver.Lister and
// driver.ForceReleaser, and driver.Kinder only to refuse every mode but
// the mutex (kinds.go); it is safe for concurrent use. Create it with New.
type Store struct {
	nodes       []*node
	quorum      int
	prefix      string
	channel     any // redisstore's release channel, Prefix+"released", boxed once for release.lua
	nodeTimeout time.Duration
	now         func() time.Time    // time.Now; tests move it
	pause       func(time.Duration) // time.Sleep; tests act in it (see acquire)

	lateMu sync.Mutex
	late   map[string]*lateState // by token: grants with answers to come
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
	return &driver.OptionError{Pkg: "redlock", Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// New returns a Store over clients, one *redis.Client per independent Redis
// server (no replicas, no Cluster: the nodes must fail independently). Their
// number must be odd and at least 3. A *redis.Client from
// redis.NewFailoverClient is accepted as one node, but see the package
// documentation. New validates clients and opts and returns a
// *driver.OptionError naming the offending one. The caller keeps ownership of
// the clients: the Store never closes them.
func New(clients []redis.UniversalClient, opts *Options) (*Store, error) {
	n := len(clients)
	if n < 3 || n%2 == 0 {
		return nil, badOption("clients", "", "%d given, need an odd number of at least 3", n)
	}
	s := &Store{quorum: n/2 + 1, prefix: DefaultPrefix, now: time.Now, pause: time.Sleep, late: make(map[string]*lateState)}
	if opts != nil {
		if opts.Prefix != "" {
			if strings.ContainsAny(opts.Prefix, "{}") {
				return nil, badOption("Options.Prefix", opts.Prefix, "must not contain '{' or '}'")
			}
			s.prefix = opts.Prefix
		}
		if opts.NodeTimeout < 0 {
			return nil, badOption("Options.NodeTimeout", "", "%v is negative", opts.NodeTimeout)
		}
		s.nodeTimeout = opts.NodeTimeout
	}
	s.channel = s.prefix + "released"
	seen := make(map[string]int, n)
	for i, uc := range clients {
		c, ok := uc.(*redis.Client)
		switch {
		case uc == nil || (ok && c == nil):
			return nil, badOption(fmt.Sprintf("clients[%d]", i), "", "nil")
		case !ok:
			return nil, badOption(fmt.Sprintf("clients[%d]", i), "", "type %T, want *redis.Client (one independent Redis server per client)", uc)
		}
		for j, other := range s.nodes {
			if other.client == c {
				return nil, badOption(fmt.Sprintf("clients[%d]", i), "", "the same client as clients[%d]", j)
			}
		}
		o := c.Options()
		addr := o.Addr
		if addr == "FailoverClient" { // go-redis's placeholder: the master moves
			addr = "clients[" + strconv.Itoa(i) + "]"
		} else {
			id := o.Network + " " + addr
			if j, dup := seen[id]; dup {
				return nil, badOption(fmt.Sprintf("clients[%d]", i), "", "the same address %s as clients[%d]: the nodes must be independent servers", addr, j)
			}
			seen[id] = i
		}
		st, err := redisstore.New(c, &redisstore.Options{Prefix: s.prefix})
		if err != nil {
			return nil, &driver.OptionError{Pkg: "redlock", Field: fmt.Sprintf("clients[%d]", i), Err: err}
		}
		s.nodes = append(s.nodes, &node{addr: addr, client: c, store: st})
	}
	return s, nil
}

// timeout returns the per-node timeout of a call about leases of ttl, or of
// a call without a lease length when ttl is zero.
func (s *Store) timeout(ttl time.Duration) time.Duration {
	if s.nodeTimeout > 0 {
		return s.nodeTimeout
	}
	if ttl <= 0 {
		return DefaultNodeTimeout
	}
	return min(DefaultNodeTimeout, max(ttl/20, minNodeTimeout))
}

// drift is RedLock's allowance for the nodes' clocks running at other rates
// than the client's: 1% of the TTL plus 2ms for the nodes' expiry
// resolution.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// patience is the most a call waits for a majority of the nodes to answer
// (less for Acquire and Renew when the lease's validity is shorter).
const patience = time.Second

// result is one node's answer in a fan-out.
type result[T any] struct {
	val      T
	err      error
	answered bool // false: err says why there is no answer
}

// wait says how long a fan-out waits for the nodes' answers: for every node
// until nodeTimeout, then only while fewer than quorum nodes have given a
// definite answer (or, with fanOut's settled, while the missing answers
// could still change the outcome), and never past limit (zero: until ctx ends). A call
// cannot decide without a majority of definite answers, so a slow majority,
// on a loaded machine say, is waited for rather than failed; a dead or
// silent minority costs nodeTimeout.
type wait struct {
	nodeTimeout time.Duration
	limit       time.Duration
	quorum      int
	callTimeout time.Duration // bounds each node's call; zero: only its context does
}

// fanOut calls do on every node at once, each under calls (bounded by
// w.callTimeout), and collects the answers as w says, while ctx lasts.
// definite tells an answer that counts towards the quorum from a failure.
// Nodes without an answer get an error wrapping context.DeadlineExceeded or
// ctx's error. Their calls run on, and whether they are cancelled is up to
// the caller's calls context: a renewal or a release that is merely slow
// should still reach its node. A call's answer that comes after fanOut
// returned is passed to late, when not nil, on the call's goroutine.
// Cancelling a call stops go-redis's retries; with ContextTimeoutEnabled the
// client also stops waiting for the reply (without it, a call to a silent
// node waits for the client's ReadTimeout).
//
// The calls record their answers themselves, and wake the caller only when
// it can decide: when every node has answered, or, after the node timeout,
// when a quorum of definite answers is in and settled (when not nil) says
// the answers still missing cannot change the outcome; settled sees out
// with the missing answers' answered false. A fan-out whose nodes all
// answer in time thus wakes its caller once, not once per node.
func fanOut[T any](ctx, calls context.Context, w wait, nodes []*node,
	do func(context.Context, *node) (T, error),
	definite func(T, error) bool,
	settled func(quorum int, out []result[T]) bool,
	late func(i int, v T, err error),
) []result[T] {
	f := &fan[T]{quorum: w.quorum, definite: definite, settled: settled, late: late, wake: make(chan struct{}, 1)}
	if len(nodes) <= len(f.buf) {
		f.out = f.buf[:len(nodes):len(nodes)]
	} else {
		f.out = make([]result[T], len(nodes))
	}
	cctx, finished := callContext(calls, w.callTimeout, len(nodes))
	for i, n := range nodes {
		go f.call(cctx, i, n, do, finished)
	}

	// One timer: the node timeout, then (when w.limit is set) the rest of
	// the limit; the limit alone when it comes first.
	limitFirst := w.limit > 0 && w.limit <= w.nodeTimeout
	first := w.nodeTimeout
	if limitFirst {
		first = w.limit
	}
	timer := getTimer(first)
	defer putTimer(timer)
	// why the nodes still without an answer have none, once decided (nil:
	// they missed the node timeout); f.mu is held from the decision until
	// returned is set.
	var why error
wait:
	for {
		select {
		case <-f.wake:
			f.mu.Lock()
			if f.decidable() {
				break wait
			}
			f.mu.Unlock()
		case <-timer.C:
			f.mu.Lock()
			if f.straggled || limitFirst {
				why = fmt.Errorf("no answer within %v: %w", w.limit, context.DeadlineExceeded)
				break wait
			}
			f.straggled = true
			if w.limit > 0 {
				timer.Reset(max(w.limit-w.nodeTimeout, 0))
			}
			if f.decidable() {
				break wait
			}
			f.mu.Unlock()
		case <-ctx.Done():
			f.mu.Lock()
			why = fmt.Errorf("no answer: %w", ctx.Err())
			break wait
		}
	}
	f.returned = true
	out, answered := f.out, f.answered
	f.mu.Unlock()
	if answered < len(nodes) {
		if why == nil {
			why = fmt.Errorf("no answer within %v: %w", w.nodeTimeout, context.DeadlineExceeded)
		}
		for i := range out {
			if !out[i].answered {
				out[i].err = why
			}
		}
	}
	return out
}

// fan is the state of one fanOut, shared with its calls: one allocation,
// which holds the answers too for up to 5 nodes.
type fan[T any] struct {
	mu        sync.Mutex
	out       []result[T]   // guarded by mu until returned
	answered  int           // guarded by mu
	sure      int           // guarded by mu: definite answers
	straggled bool          // guarded by mu: the node timeout has passed
	returned  bool          // guarded by mu: fanOut has decided
	wake      chan struct{} // "you can decide now"

	quorum   int
	definite func(T, error) bool
	settled  func(quorum int, out []result[T]) bool
	late     func(i int, v T, err error)
	buf      [5]result[T]
}

// decidable reports whether the caller can decide. Callers hold f.mu.
func (f *fan[T]) decidable() bool {
	return f.answered == len(f.out) || (f.straggled && f.sure >= f.quorum && (f.settled == nil || f.settled(f.quorum, f.out)))
}

// call is node i's call: it records the answer, and wakes the caller when
// it can decide, or passes a late answer on.
func (f *fan[T]) call(ctx context.Context, i int, n *node, do func(context.Context, *node) (T, error), finished func()) {
	defer finished()
	v, err := do(ctx, n)
	f.mu.Lock()
	if f.returned {
		f.mu.Unlock()
		if f.late != nil {
			f.late(i, v, err)
		}
		return
	}
	f.out[i] = result[T]{val: v, err: err, answered: true}
	f.answered++
	if f.definite(v, err) {
		f.sure++
	}
	wakeUp := f.decidable()
	f.mu.Unlock()
	if wakeUp {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// timers keeps stopped timers for fanOut: one per call otherwise.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// getTimer returns a timer from the pool, set to fire after d.
func getTimer(d time.Duration) *time.Timer {
	t := timers.Get().(*time.Timer)
	t.Reset(d)
	return t
}

// putTimer stops t and returns it to the pool. Since Go 1.23 a stopped
// timer's channel holds no stale value, so the next Reset starts clean;
// the drain keeps that so in a program run with GODEBUG=asynctimerchan=1.
func putTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}

// callContext returns the context of n calls that start together from
// calls, bounded by timeout when it is positive (one deadline bounds them
// all), and the function each call runs when it has finished: the last one
// releases the context.
func callContext(calls context.Context, timeout time.Duration, n int) (context.Context, func()) {
	if timeout <= 0 {
		return calls, func() {}
	}
	ctx, cancel := context.WithTimeout(calls, timeout)
	running := new(atomic.Int32)
	running.Store(int32(n))
	return ctx, func() {
		if running.Add(-1) == 0 {
			cancel()
		}
	}
}

// succeeded is the definite answer of calls whose only definite answer is
// success.
func succeeded[T any](_ T, err error) bool { return err == nil }

// okOrNotHeld is the definite answer of releases.
func okOrNotHeld[T any](_ T, err error) bool { return err == nil || errors.Is(err, driver.ErrNotHeld) }

// isHeld reports whether err is a node's "held by another owner".
func isHeld(err error) bool { return asHeld(err) != nil }

// asHeld returns err's *driver.HeldError, nil when it has none (or err is
// nil, which costs no allocation: errors.As's target escapes to the heap).
func asHeld(err error) *driver.HeldError {
	if err == nil {
		return nil
	}
	var he *driver.HeldError
	if errors.As(err, &he) {
		return he
	}
	return nil
}

// leaseWait is how long a call about leases of ttl waits: the lease's
// validity bounds it, since an answer after that is of no use.
func (s *Store) leaseWait(ttl time.Duration) wait {
	limit := max(min(patience, ttl-drift(ttl)), minNodeTimeout)
	return wait{nodeTimeout: min(s.timeout(ttl), limit), limit: limit, quorum: s.quorum, callTimeout: patience}
}

// quorumError builds a *QuorumError: detail says what the nodes that did
// not fail answered.
func (s *Store) quorumError(op, key, detail string, failed []*NodeError) *QuorumError {
	return &QuorumError{Op: op, Key: key, Nodes: len(s.nodes), Quorum: s.quorum, Failed: failed, detail: detail}
}

// Acquire implements driver.Store. It runs redisstore's acquire script on
// every node at once and grants the lock when a majority granted it and the
// time taken leaves the lease valid (TTL − elapsed − drift > 0). It waits
// for every node up to the node timeout and, while fewer than a majority
// have answered or the missing answers could still decide the vote (see
// voteSettled), up to the lease's validity (at most 1 s). The fence is the
// highest of the granting nodes' fences; nodes whose counter was below it
// are raised to it before Acquire returns (see the package documentation,
// "Fences").
//
// When the quorum fails, every grant is given back (token-checked, taking
// its fence back, and waking waiters only when a majority had granted it)
// before Acquire returns, and a grant that arrives later is given back when
// it arrives; a split vote's keeper asks again first (see acquire). The
// error is then:
//   - a *driver.HeldError when a majority of the nodes answered and some are
//     held by another owner that holds a majority, or could with the
//     failed nodes while this request could not: the owner most nodes
//     named, with the shortest of its remaining TTLs;
//   - an error wrapping ErrSplitVote (and driver.ErrTryAgain) when a
//     majority answered but no owner holds a majority, and none can even
//     counting every failed node as its own, or (wrapping ErrUndecided as
//     well) the failed nodes could give one to this request as well as to
//     another: contenders split the vote (or may have);
//   - a *QuorumError naming each failed node when fewer than a majority
//     answered;
//   - an error wrapping ErrTooSlow when a majority granted but too late.
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if err := checkAcquire(p); err != nil {
		return driver.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, fmt.Errorf("redlock: acquire %q: %w", p.Key, err)
	}
	var r [1]driver.AcquireResult
	s.acquire(ctx, []driver.AcquireParams{p}, r[:])
	return r[0].Grant, r[0].Err
}

// checkAcquire refuses, before any node is asked, a request that no node
// could grant.
func checkAcquire(p driver.AcquireParams) error {
	if p.Mode != driver.ModeMutex {
		return kindsError(p.Mode)
	}
	if p.Key == "" || p.Key[0] == '}' {
		return fmt.Errorf("%w: %q: a key must not be empty or start with '}'", redisstore.ErrKey, p.Key)
	}
	if p.TTL <= 0 {
		return fmt.Errorf("redlock: TTL is %s, must be positive", p.TTL)
	}
	return nil
}

// votes is how the nodes answered one request of an acquire.
type votes struct {
	grants []int               // the nodes that granted it
	held   []*driver.HeldError // the nodes' "held by another owner"
	failed []*NodeError        // the other nodes, and why
}

// voteSettled is the settled rule of acquire's fan-out: a vote is settled
// when the answers still missing cannot change the outcome of any request,
// that is when a majority of the nodes granted it or named one holder, or
// when neither it nor any holder named could reach a majority even with
// every missing answer. Until then the fan-out waits on past the node
// timeout (up to its limit): a missing answer that is merely slow, on a
// loaded machine, decides the vote, and deciding without it has every
// contender count it as another's, report the key held by a holder that
// does not exist and give back its own grants, so that nobody gets a free
// key.
func voteSettled(quorum int, rs []result[[]driver.AcquireResult]) bool {
	missing, n := 0, 0
	for _, r := range rs {
		switch {
		case !r.answered:
			missing++
		case r.err == nil:
			n = len(r.val)
		}
	}
	for j := range n {
		grants, most := 0, 0
		for i, r := range rs {
			if !r.answered || r.err != nil {
				continue
			}
			if r.val[j].Err == nil {
				grants++
			} else if he := asHeld(r.val[j].Err); he != nil {
				same := 0 // the answers naming the same grant, from this one on
				for _, q := range rs[i:] {
					if q.answered && q.err == nil {
						if h := asHeld(q.val[j].Err); h != nil && h.Owner == he.Owner && h.Token == he.Token {
							same++
						}
					}
				}
				most = max(most, same)
			}
		}
		if grants < quorum && most < quorum && (grants+missing >= quorum || most+missing >= quorum) {
			return false
		}
	}
	return true
}

// keeperRounds is how many times a lone request that split the vote asks
// again while it keeps its grants (see keeps).
const keeperRounds = 2

// maxKeeperPause bounds the keeper's pause before it asks again.
const maxKeeperPause = 5 * time.Millisecond

// acquire is Acquire and AcquireBatch: it makes one attempt for every
// request in ps (each passed by checkAcquire) on every node at once, each
// node's share in one call (see node.acquire), and sets out[j] to the
// outcome of ps[j] by the rules Acquire documents. The calls wait as
// Acquire's do for the shortest TTL in ps, and elapsed is measured for
// them all; a node whose call failed fails every request.
//
// A lone request that split the vote and is its keeper (see keeps) keeps
// its grants, waits as long as the attempt took (the others' give-backs
// are under way by then) and asks again with the same token, up to
// keeperRounds times: the nodes it has answer with the same grant, the
// ones the others gave back grant it, and the split is settled in one more
// round trip instead of every contender backing off and trying again.
// Elapsed, and so the lease's validity, counts from the first attempt.
func (s *Store) acquire(ctx context.Context, ps []driver.AcquireParams, out []driver.AcquireResult) {
	start := s.now()
	for round := 1; ; round++ {
		t0 := s.now()
		if !s.attempt(ctx, ps, out, start, round <= keeperRounds) {
			return
		}
		s.pause(min(s.now().Sub(t0), maxKeeperPause))
	}
}

// attempt is one round of acquire, whose lease validity counts from start.
// When keep allows and the lone request of ps is a split vote's keeper, it
// gives back nothing and returns true: acquire asks again. Otherwise out
// holds the outcome, and it returns false.
func (s *Store) attempt(ctx context.Context, ps []driver.AcquireParams, out []driver.AcquireResult, start time.Time, keep bool) bool {
	shortest := ps[0].TTL
	for _, p := range ps[1:] {
		shortest = min(shortest, p.TTL)
	}
	w := s.leaseWait(shortest)

	// A node that answers after the decision did not count towards it.
	// Whatever it granted for a request that was not granted is released.
	// For one that was, its copy is the holder's (renewals and the release
	// cover it), unless the holder has released the lock meanwhile. granted
	// is written before decided is closed.
	decided := make(chan struct{})
	granted := make([]bool, len(ps))
	defer close(decided)
	late := func(i int, rs []driver.AcquireResult, err error) {
		<-decided
		// Nobody waits for these copies: a lock's release has woken the
		// waiters already, or there was no lock. A grant that never
		// became a lock takes its fence back.
		var undo []releaseItem
		for j, p := range ps {
			if (err != nil || !isHeld(rs[j].Err)) && (!granted[j] || s.releasedMeanwhile(p.Token)) {
				it := releaseItem{p: driver.ReleaseParams{Key: p.Key, Token: p.Token}}
				if !granted[j] {
					it.flags = rollBackFence
				}
				undo = append(undo, it)
			}
		}
		if len(undo) > 0 {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), patience)
			_, _ = s.releaseOn(ctx, s.nodes[i], undo)
			cancel()
		}
		for j, p := range ps {
			if granted[j] {
				s.lateDone(p.Token)
			}
		}
	}
	// The calls outlive a cancelled ctx, so that late answers are handled;
	// they are cancelled when nothing was granted (go-redis must not retry
	// them later), and otherwise run on to give the leases their copies.
	// One context bounds the calls (w.callTimeout) and cancels them.
	calls, cancelCalls := context.WithTimeout(context.WithoutCancel(ctx), w.callTimeout)
	var ones []driver.AcquireResult
	if len(ps) == 1 {
		ones = make([]driver.AcquireResult, len(s.nodes))
	}
	fw := w
	fw.callTimeout = 0
	rs := fanOut(ctx, calls, fw, s.nodes, func(ctx context.Context, n *node) ([]driver.AcquireResult, error) {
		var one []driver.AcquireResult // a lone request's result, of all nodes' in ones
		if ones != nil {
			for i, m := range s.nodes {
				if m == n {
					one = ones[i : i+1 : i+1]
				}
			}
		}
		return n.acquire(ctx, ps, one)
	}, succeeded, voteSettled, late)

	vs := make([]votes, len(ps))
	grants := make([]int, 0, len(ps)*len(s.nodes)) // every request's grants, one allocation
	for j := range ps {
		v := &vs[j]
		v.grants = grants[len(grants):len(grants):cap(grants)]
		for i, r := range rs {
			err := r.err
			if err == nil {
				err = r.val[j].Err
			}
			if err == nil {
				v.grants = append(v.grants, i)
				continue
			}
			if he := asHeld(err); he != nil {
				v.held = append(v.held, he)
			} else {
				v.failed = append(v.failed, &NodeError{Addr: s.nodes[i].addr, Err: err})
			}
		}
		grants = grants[:len(grants)+len(v.grants)]
	}
	fences, raiseFailed := s.raise(ctx, ps, start, w, rs, vs)
	elapsed := s.now().Sub(start)

	var failed []int // the requests not granted
	anyGranted := false
	for j, p := range ps {
		out[j] = driver.AcquireResult{} // an earlier round's outcome goes
		v := &vs[j]
		var rf []*NodeError
		if raiseFailed != nil {
			rf = raiseFailed[j]
		}
		switch {
		case len(v.grants) >= s.quorum && len(v.grants)-len(rf) < s.quorum:
			out[j].Err = s.quorumError("acquire", p.Key,
				fmt.Sprintf("granted on %d, but raising the fence counters failed", len(v.grants)), append(v.failed, rf...))
		case len(v.grants) >= s.quorum && p.TTL-elapsed-drift(p.TTL) <= 0:
			out[j].Err = fmt.Errorf("redlock: acquire %q: %w: %d of %d nodes granted after %v, with a TTL of %v",
				p.Key, ErrTooSlow, len(v.grants), len(s.nodes), elapsed.Round(time.Microsecond), p.TTL)
		case len(v.grants) >= s.quorum:
			out[j].Grant = driver.Grant{Fence: fences[j]}
			granted[j], anyGranted = true, true
			continue
		case len(v.held) > 0 && len(v.grants)+len(v.held) >= s.quorum:
			// A majority answered: the lock is held, and a release will
			// wake the waiters — unless no owner can hold a majority, not
			// even with every failed node on its side, or the failed nodes
			// could as well have given the majority to this request: then
			// the vote split between contenders (or may have), the holder
			// would be a guess, nobody will release, and the caller should
			// try again. Contenders that each guessed another held the key
			// would all give back their grants and leave it to nobody.
			// The latter is ErrUndecided: the failed nodes could have made
			// it a grant.
			h, n := heldView(v.held)
			if undecided := len(v.grants)+len(v.failed) >= s.quorum; undecided || n+len(v.failed) < s.quorum {
				why := ErrSplitVote
				if undecided {
					why = ErrUndecided
				}
				out[j].Err = fmt.Errorf("redlock: acquire %q: %w: granted on %d, held on %d (by %s on %d), %d failed",
					p.Key, why, len(v.grants), len(v.held), h.Owner, n, len(v.failed))
				break
			}
			out[j].Err = h
		default:
			out[j].Err = s.quorumError("acquire", p.Key,
				fmt.Sprintf("granted on %d, held on %d", len(v.grants), len(v.held)), v.failed)
		}
		failed = append(failed, j)
	}
	if anyGranted && s.expectLate(ps, granted, rs) {
		time.AfterFunc(patience, cancelCalls) // the calls' own bound
	} else {
		cancelCalls()
	}
	if keep && s.keeps(ps, out, rs, vs) {
		return true
	}
	s.undo(ctx, ps, failed, rs, vs, shortest)
	return false
}

// keeps reports whether the lone request of ps, whose vote split, keeps its
// grants and asks again: every node answered, and the first of them (in
// node order) granted it. Every contender in the split sees the same first
// node (it answered them all) held by one of them, so one contender keeps
// and the others give back and back off; should two see it differently,
// both ask again, and give back after keeperRounds.
func (s *Store) keeps(ps []driver.AcquireParams, out []driver.AcquireResult, rs []result[[]driver.AcquireResult], vs []votes) bool {
	if len(ps) != 1 || len(vs[0].failed) > 0 || len(vs[0].grants) == 0 || !errors.Is(out[0].Err, ErrSplitVote) {
		return false
	}
	for _, r := range rs {
		if !r.answered || r.err != nil {
			return false
		}
	}
	return vs[0].grants[0] == 0
}

// lateState tracks the nodes that had not answered when a lock was granted.
type lateState struct {
	pending  int  // answers still to come
	released bool // the holder released the lock meanwhile
}

// expectLate records that the nodes without an answer in rs may still
// answer the requests of ps marked granted, and reports whether there are
// any such nodes.
func (s *Store) expectLate(ps []driver.AcquireParams, granted []bool, rs []result[[]driver.AcquireResult]) bool {
	n := 0
	for _, r := range rs {
		if !r.answered {
			n++
		}
	}
	if n == 0 {
		return false
	}
	s.lateMu.Lock()
	for j, p := range ps {
		if granted[j] {
			s.late[p.Token] = &lateState{pending: n}
		}
	}
	s.lateMu.Unlock()
	return true
}

// releasedMeanwhile reports whether the holder of token has called Release
// since the grant. A Release that starts after it reported false reaches
// each node after the late answer did, so it deletes that copy itself.
func (s *Store) releasedMeanwhile(token string) bool {
	s.lateMu.Lock()
	defer s.lateMu.Unlock()
	st := s.late[token]
	return st != nil && st.released
}

// lateDone records that one of the late answers has been dealt with.
func (s *Store) lateDone(token string) {
	s.lateMu.Lock()
	defer s.lateMu.Unlock()
	if st := s.late[token]; st != nil {
		if st.pending--; st.pending == 0 {
			delete(s.late, token)
		}
	}
}

// releasing marks a lock with answers still to come as released. Release
// calls it before it sends anything.
func (s *Store) releasing(token string) {
	s.lateMu.Lock()
	if st := s.late[token]; st != nil {
		st.released = true
	}
	s.lateMu.Unlock()
}

// heldView is the holder as a majority of the "held" answers see it: the
// grant (owner and token) named most often (the first such in node order on
// a tie) and the shortest remaining TTL among its answers, with how many
// answers named it. Answers are counted by token, not by owner name: one
// Locker's grants of two attempts (a late grant of an attempt given up, and
// the next attempt's) are not one holder with a majority.
func heldView(held []*driver.HeldError) (*driver.HeldError, int) {
	type grantKey struct{ owner, token string }
	grant := func(h *driver.HeldError) grantKey { return grantKey{h.Owner, h.Token} }
	counts := make(map[grantKey]int, len(held))
	best := held[0]
	for _, h := range held {
		counts[grant(h)]++
		if counts[grant(h)] > counts[grant(best)] {
			best = h
		}
	}
	out := &driver.HeldError{Owner: best.Owner, Token: best.Token}
	for _, h := range held {
		if grant(h) == grant(best) && h.TTL > 0 && (out.TTL == 0 || h.TTL < out.TTL) {
			out.TTL = h.TTL
		}
	}
	return out, counts[grant(best)]
}

// raise returns the fence of every request in ps that a majority granted
// (vs), the highest among its granting nodes, and raises the fence counter
// of every granting node that is below it: one call per node that is
// behind (see node.raise), all at once, within what is left of w's limit.
// It returns, per request, the nodes where that failed; nil when no node
// was behind.
func (s *Store) raise(ctx context.Context, ps []driver.AcquireParams, start time.Time, w wait,
	rs []result[[]driver.AcquireResult], vs []votes,
) ([]uint64, [][]*NodeError) {
	fences := make([]uint64, len(ps))
	var behind map[*node][]int // the requests whose counter each node must raise
	for j := range ps {
		if len(vs[j].grants) < s.quorum {
			continue
		}
		for _, i := range vs[j].grants {
			fences[j] = max(fences[j], rs[i].val[j].Grant.Fence)
		}
		for _, i := range vs[j].grants {
			if rs[i].val[j].Grant.Fence < fences[j] {
				if behind == nil {
					behind = make(map[*node][]int)
				}
				behind[s.nodes[i]] = append(behind[s.nodes[i]], j)
			}
		}
	}
	if len(behind) == 0 {
		return fences, nil
	}
	nodes := make([]*node, 0, len(behind))
	for _, n := range s.nodes {
		if behind[n] != nil {
			nodes = append(nodes, n)
		}
	}
	w.limit = max(w.limit-s.now().Sub(start), minNodeTimeout)
	w.nodeTimeout = min(w.nodeTimeout, w.limit)
	w.quorum = len(nodes) // wait for all of them
	res := fanOut(ctx, ctx, w, nodes, func(ctx context.Context, n *node) ([]error, error) {
		js := behind[n]
		counters := make([]string, len(js))
		args := make([]string, len(js))
		for k, j := range js {
			counters[k] = s.prefix + "{" + ps[j].Key + "}:fence"
			args[k] = strconv.FormatUint(fences[j], 10)
		}
		return n.raise(ctx, counters, args)
	}, succeeded, nil, nil)
	failed := make([][]*NodeError, len(ps))
	for k, r := range res {
		for m, j := range behind[nodes[k]] {
			err := r.err
			if r.val != nil {
				err = r.val[m]
			}
			if err != nil {
				failed[j] = append(failed[j], &NodeError{Addr: nodes[k].addr, Err: fmt.Errorf("raise fence counter: %w", err)})
			}
		}
	}
	return fences, failed
}

// undo gives back the requests of ps listed in failed (acquisitions that
// failed), token-checked, on every node that answered for them other than
// "held", even if ctx has ended: the grants are ours to remove, and a grant
// left behind would block its node until its TTL. Each node takes back the
// grant's fence (the counter goes down again unless it moved since), so
// failed votes do not push fences up. A give-back wakes nobody unless a
// majority had granted the request (too late, or its fences could not be
// raised): others may have seen that as a holder, and wait for its
// release. Other give-backs are of grants on a minority, which no waiter
// waits for; waking the waiters for them would only have them all try
// again at once. It makes one call per node (see releaseOn), all at once;
// these nodes have just answered, so it waits for all of them, at most 1 s.
// Nodes that have not answered are released when they do (see acquire).
func (s *Store) undo(ctx context.Context, ps []driver.AcquireParams, failed []int, rs []result[[]driver.AcquireResult], vs []votes, ttl time.Duration) {
	if len(failed) == 0 {
		return
	}
	var (
		nodes  []*node
		byNode = make(map[*node][]releaseItem)
	)
	for i, r := range rs {
		if !r.answered {
			continue
		}
		var rps []releaseItem
		for _, j := range failed {
			if r.err == nil && isHeld(r.val[j].Err) {
				continue
			}
			it := releaseItem{p: driver.ReleaseParams{Key: ps[j].Key, Token: ps[j].Token}, flags: rollBackFence}
			if len(vs[j].grants) >= s.quorum {
				it.flags |= publishRelease
			}
			rps = append(rps, it)
		}
		if len(rps) > 0 {
			nodes = append(nodes, s.nodes[i])
			byNode[s.nodes[i]] = rps
		}
	}
	if len(nodes) == 0 {
		return
	}
	detached := context.WithoutCancel(ctx)
	fanOut(detached, detached, wait{nodeTimeout: s.timeout(ttl), limit: patience, quorum: len(nodes), callTimeout: patience}, nodes,
		func(ctx context.Context, n *node) ([]error, error) {
			return s.releaseOn(ctx, n, byNode[n])
		}, succeeded, nil, nil)
}

// Renew implements driver.Store: one redisstore Renew call per node (one
// round trip per node, batched as redisstore batches), all nodes at once,
// waiting as Acquire does for the shortest TTL in the batch. A lease is
// renewed when a majority of the nodes renewed it. Its result is
// driver.ErrNotHeld when so many nodes said "not held" that no majority can
// have renewed it, and otherwise (too many nodes failed to tell) a
// *QuorumError, which the Locker retries while the lease is still valid.
// When fewer than a majority of the nodes answered at all, the call as a
// whole fails with a *QuorumError.
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	if len(ps) == 0 {
		return []error{}, nil
	}
	if hasKinds(ps, renewMode) {
		return withoutKinds(ps, renewMode, func(ps []driver.RenewParams) ([]error, error) { return s.Renew(ctx, ps) })
	}
	shortest := ps[0].TTL
	for _, p := range ps {
		if p.TTL <= 0 {
			return nil, fmt.Errorf("redlock: renew %q: TTL is %s, must be positive", p.Key, p.TTL)
		}
		shortest = min(shortest, p.TTL)
	}
	// A renewal that is merely slow still extends its node's copy.
	rs := fanOut(ctx, context.WithoutCancel(ctx), s.leaseWait(shortest), s.nodes, func(ctx context.Context, n *node) ([]error, error) {
		res, err := n.store.Renew(ctx, ps)
		if err == nil && len(res) != len(ps) {
			err = fmt.Errorf("%d results for %d leases", len(res), len(ps))
		}
		return res, err
	}, succeeded, nil, nil)
	var failed []*NodeError
	for i, r := range rs {
		if r.err != nil {
			failed = append(failed, &NodeError{Addr: s.nodes[i].addr, Err: r.err})
		}
	}
	if len(s.nodes)-len(failed) < s.quorum {
		return nil, s.quorumError("renew", "", fmt.Sprintf("%d leases", len(ps)), failed)
	}
	out := make([]error, len(ps))
	for j, p := range ps {
		renewed, notHeld := 0, 0
		for _, r := range rs {
			switch {
			case r.err != nil:
			case r.val[j] == nil:
				renewed++
			default:
				notHeld++
			}
		}
		switch {
		case renewed >= s.quorum:
		case renewed+len(failed) < s.quorum:
			out[j] = driver.ErrNotHeld
		default:
			out[j] = s.quorumError("renew", p.Key, fmt.Sprintf("renewed on %d, not held on %d", renewed, notHeld), failed)
		}
	}
	return out, nil
}

// releaseWait is how long Release and ForceRelease wait.
func (s *Store) releaseWait() wait {
	return wait{nodeTimeout: s.timeout(0), limit: patience, quorum: s.quorum, callTimeout: patience}
}

// Release implements driver.Store: redisstore's release script on every
// node at once (token-checked; each node that deletes the lease publishes
// the release), waiting for every node up to the node timeout and for a
// majority up to 1 s; a release still under way then runs on by itself. It
// returns driver.ErrNotHeld when a majority of the nodes did not hold the
// lease: it was not held as a lock any more, though a copy left on a
// minority (a grant that came late, a node that missed the expiry's
// renewals) is deleted all the same. Otherwise it succeeds when any node
// released the lease, and returns a *QuorumError when too few nodes
// answered to tell.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	return s.release(ctx, []driver.ReleaseParams{p})[0]
}

// release is Release and ReleaseBatch: it releases every lease in ps on
// every node at once, each node's share in one call (see node.release), and
// returns the outcome of each by the rules Release documents; a node whose
// call failed fails every lease.
func (s *Store) release(ctx context.Context, ps []driver.ReleaseParams) []error {
	if hasKinds(ps, releaseMode) {
		out, _ := withoutKinds(ps, releaseMode, func(ps []driver.ReleaseParams) ([]error, error) { return s.release(ctx, ps), nil })
		return out
	}
	items := make([]releaseItem, len(ps))
	for j, p := range ps {
		s.releasing(p.Token)
		items[j] = releaseItem{p: p, flags: publishRelease}
	}
	calls := s.releaseCalls(items)
	rs := fanOut(ctx, context.WithoutCancel(ctx), s.releaseWait(), s.nodes, func(ctx context.Context, n *node) ([]error, error) {
		return n.release(ctx, calls, len(items))
	}, succeeded, nil, nil)
	out := make([]error, len(ps))
	errs := make([]error, len(s.nodes))
	for j, p := range ps {
		for i, r := range rs {
			if errs[i] = r.err; r.err == nil {
				errs[i] = r.val[j]
			}
		}
		out[j] = s.anyDeleted("release", p.Key, errs)
	}
	return out
}

// ForceRelease implements driver.ForceReleaser: it deletes the lease of key
// on every node, whoever holds it, and wakes waiters. Like Release, it
// returns driver.ErrNotHeld when a majority of the nodes did not have the
// key held (a minority copy is deleted all the same).
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	rs := fanOut(ctx, context.WithoutCancel(ctx), s.releaseWait(), s.nodes, func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, n.store.ForceRelease(ctx, key)
	}, okOrNotHeld, nil, nil)
	errs := make([]error, len(rs))
	for i, r := range rs {
		errs[i] = r.err
	}
	return s.anyDeleted("force release", key, errs)
}

// anyDeleted is the outcome of a release of key on every node, given each
// node's answer in errs.
func (s *Store) anyDeleted(op, key string, errs []error) error {
	released, notHeld := 0, 0
	var failed []*NodeError
	for i, err := range errs {
		switch {
		case err == nil:
			released++
		case errors.Is(err, driver.ErrNotHeld):
			notHeld++
		default:
			failed = append(failed, &NodeError{Addr: s.nodes[i].addr, Err: err})
		}
	}
	switch {
	case notHeld >= s.quorum:
		return driver.ErrNotHeld
	case released > 0:
		return nil
	}
	return s.quorumError(op, key, fmt.Sprintf("not held on %d", notHeld), failed)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// The etcd, ZooKeeper and RedLock part (issue 4, item 7): per store,
// tasklock against the Go library users would pick instead, on the same
// private servers in the same run.
//
//	P1-<store>  16 goroutines, distinct keys: Obtain+Release pairs/s
//	P3-<store>  16 goroutines on one key: release → next holder handoff
//	P4-<store>  requests to the store that keeping 10,000 locks alive for
//	            one TTL takes, and whether it grows with the number of locks

// coordKind names one store of the part.
type coordKind string

const (
	kindEtcd    coordKind = "etcd"
	kindZK      coordKind = "zk"
	kindRedLock coordKind = "redlock"
)

// coordKinds in the order they run.
var coordKinds = []coordKind{kindEtcd, kindZK, kindRedLock}

// coordID returns the -only id of measurement p ("P1") on k: "P1-ETCD".
func coordID(p string, k coordKind) string { return p + "-" + strings.ToUpper(string(k)) }

// addCoordOnly adds what the -only word id (upper case) selects of this
// part to only and reports whether id was one of its words: P1-etcd …
// P4-redlock, the stores etcd, zk (zookeeper) and redlock, and coord (the
// whole part).
func addCoordOnly(only map[string]bool, id string) bool {
	add := func(k coordKind) {
		for _, p := range []string{"P1", "P3", "P4"} {
			only[coordID(p, k)] = true
		}
	}
	switch id {
	case "COORD":
		for _, k := range coordKinds {
			add(k)
		}
		return true
	case "ETCD":
		add(kindEtcd)
		return true
	case "ZK", "ZOOKEEPER":
		add(kindZK)
		return true
	case "REDLOCK":
		add(kindRedLock)
		return true
	}
	for _, k := range coordKinds {
		for _, p := range []string{"P1", "P3", "P4"} {
			if id == coordID(p, k) {
				only[id] = true
				return true
			}
		}
	}
	return false
}

// coordOnlyHelp lists the -only words of this part.
const coordOnlyHelp = "P1-etcd, P3-etcd, P4-etcd, P1-zk, P3-zk, P4-zk, P1-redlock, P3-redlock, P4-redlock, the stores etcd, zk, redlock, or coord (all three)"

// coordParams are the part's sizes, from -quick.
type coordParams struct {
	duration   time.Duration // P1: measured per implementation (in slices); P3: per implementation over all rounds
	p3Rounds   int
	goroutines int
	warmup     time.Duration
	locks      int           // P4: the many
	few        int           // P4: the few, for "independent of the number of locks"
	ttl        time.Duration // P4: lease, session TTL, session timeout
	settle     time.Duration // P4: after the last obtain, before counting
	window     time.Duration // P4: counted
}

func newCoordParams(cfg config) coordParams {
	p := coordParams{duration: 3 * time.Second, p3Rounds: 2, goroutines: 16, warmup: 500 * time.Millisecond,
		locks: 10000, few: 100, ttl: 3 * time.Second}
	if cfg.quick {
		p.duration, p.p3Rounds, p.warmup, p.locks, p.ttl = 500*time.Millisecond, 1, 200*time.Millisecond, 500, time.Second
	}
	p.settle, p.window = p.ttl/3, 2*p.ttl
	if cfg.quick {
		p.window = p.ttl
	}
	return p
}

// coordEnv is one store of the part: its servers (three for RedLock).
type coordEnv struct {
	kind  coordKind
	title string
	srvs  []*server
	err   error // the servers could not be started: the store is not run
}

func (e *coordEnv) cpu() (time.Duration, bool) {
	var total time.Duration
	for _, s := range e.srvs {
		t, ok := s.cpu()
		if !ok {
			return 0, false
		}
		total += t
	}
	return total, true
}

func (e *coordEnv) stop() {
	for _, s := range e.srvs {
		s.stop()
	}
}

func (e *coordEnv) describe() string {
	switch e.kind {
	case kindEtcd:
		return "etcd " + e.srvs[0].version + " (one member, heartbeat 10 ms, election timeout 100 ms, --unsafe-no-fsync)"
	case kindZK:
		return "ZooKeeper " + e.srvs[0].version + " (standalone, tickTime 200 ms, forceSync=no, JVM -Xmx256m, serial GC, C1 only)"
	default:
		return fmt.Sprintf("%d × redis-server %s (independent, no persistence)", len(e.srvs), e.srvs[0].version)
	}
}

// startCoord starts the servers of kinds, in parallel (ZooKeeper's JVM
// takes a second or two).
func startCoord(ctx context.Context, kinds []coordKind, add func(func())) []*coordEnv {
	envs := make([]*coordEnv, len(kinds))
	var wg sync.WaitGroup
	started := func(s *server) { add(s.stop) }
	for i, k := range kinds {
		e := &coordEnv{kind: k}
		envs[i] = e
		wg.Add(1)
		go func() {
			defer wg.Done()
			var start func(context.Context, func(*server)) (*server, error)
			n := 1
			switch k {
			case kindEtcd:
				e.title, start = "etcd", startEtcd
			case kindZK:
				e.title, start = "ZooKeeper", startZooKeeper
			default:
				e.title, start, n = "RedLock", startServer, 3
			}
			for range n {
				s, err := start(ctx, started)
				if err != nil {
					e.err = err
					return
				}
				e.srvs = append(e.srvs, s)
			}
		}()
	}
	wg.Wait()
	for _, e := range envs {
		if e.err != nil {
			e.stop()
		}
	}
	return envs
}

// coordResult is what one store's measurements gave.
type coordResult struct {
	env *coordEnv

	p1      []*p1Result
	p1Impls []coordImpl
	p1Reqs  []reqs  // requests of the whole run (warm-ups included)
	p1Pairs []int64 // pairs of the whole run
	p1Err   error
	p1Run   bool
	p1Floor []*redlockFloorResult // RedLock: against its raw floor

	// etcd and ZooKeeper: P1 again with one goroutine (p1One), and the
	// handoff with handoffContenders contenders (h).
	p1One    []*p1Result
	p1OneErr error

	p3      []*p3Result
	p3Impls []coordImpl
	p3Reqs  []reqs   // requests of the runs, warm-ups included
	p3Nodes [][]reqs // the same, per server
	p3Err   error
	p3Run   bool

	h      []*p3Result
	hImpls []coordImpl
	hReqs  []reqs
	hErr   error

	p4    []*coordHoldResult
	p4Err error
	p4Run bool
}

// coordReport is the part's section of the report.
type coordReport struct {
	params  coordParams
	quick   bool
	results []*coordResult
	elapsed time.Duration
	summary targets
}

// runCoord runs what cfg selects of the part, store after store, each
// store's servers stopped once it is done; nil when nothing is selected.
func runCoord(ctx context.Context, cfg config, add func(func())) *coordReport {
	var kinds []coordKind
	for _, k := range coordKinds {
		if cfg.runs(coordID("P1", k)) || cfg.runs(coordID("P3", k)) || cfg.runs(coordID("P4", k)) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	start := time.Now()
	r := &coordReport{params: newCoordParams(cfg), quick: cfg.quick}
	envs := startCoord(ctx, kinds, add)
	for _, e := range envs {
		res := &coordResult{env: e}
		r.results = append(r.results, res)
		if e.err != nil {
			progress("%s: %v", e.title, e.err)
			continue
		}
		addrs := make([]string, len(e.srvs))
		for i, s := range e.srvs {
			addrs[i] = s.addr
		}
		progress("%s on %s", e.describe(), strings.Join(addrs, ", "))
		if e.kind == kindZK {
			// A JVM that has just started runs its requests interpreted:
			// warm it up, or whichever contender goes first pays for it.
			if err := warmZooKeeper(e, 2*r.params.warmup); err != nil {
				progress("ZooKeeper warm-up: %v", err)
			}
		}
		if cfg.runs(coordID("P1", e.kind)) {
			res.p1Run = true
			r.runP1(ctx, res)
			if e.kind == kindRedLock && res.p1Err == nil {
				r.runP1RedlockFloor(ctx, res)
			}
		}
		if cfg.runs(coordID("P3", e.kind)) {
			res.p3Run = true
			r.runP3(ctx, res)
		}
		if cfg.runs(coordID("P4", e.kind)) {
			res.p4Run = true
			res.p4, res.p4Err = r.runP4(ctx, e)
		}
		e.stop()
	}
	r.elapsed = time.Since(start)
	return r
}

// warmZooKeeper sends the server, for d, the kinds of requests the
// measurements send (create, getChildren, multi, delete) from 16 goroutines
// on a session of its own.
func warmZooKeeper(e *coordEnv, d time.Duration) error {
	conn, err := zkConnect(e, zkSession, &reqCounter{})
	if err != nil {
		return err
	}
	defer conn.Close()
	const root = "/lockbench-warm"
	if _, err := conn.Create(root, nil, 0, zkACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	end := time.Now().Add(d)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := fmt.Sprintf("%s/%d", root, g)
			err := func() error {
				if _, err := conn.Create(dir, nil, 0, zkACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					return err
				}
				for time.Now().Before(end) {
					path, err := conn.Create(dir+"/n-", []byte("warm"), zk.FlagEphemeral|zk.FlagSequence, zkACL)
					if err != nil {
						return err
					}
					if _, _, err := conn.Children(dir); err != nil {
						return err
					}
					if _, err := conn.Multi(&zk.SetDataRequest{Path: path, Data: []byte("warm"), Version: -1}); err != nil {
						return err
					}
					if err := conn.Delete(path, -1); err != nil {
						return err
					}
				}
				return nil
			}()
			if err != nil {
				errOnce.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}

// failures lists what could not run.
func (r *coordReport) failures() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, res := range r.results {
		e := res.env
		if e.err != nil {
			out = append(out, e.title+": "+e.err.Error())
			continue
		}
		for _, err := range []error{res.p1Err, res.p1OneErr, res.p3Err, res.hErr, res.p4Err} {
			if err != nil {
				out = append(out, err.Error())
			}
		}
		for _, h := range res.p4 {
			if h.err != nil {
				out = append(out, fmt.Sprintf("P4-%s %s (%d locks): %v", e.kind, h.name, h.locks, h.err))
			}
		}
	}
	return out
}

// --- P1 ----------------------------------------------------------------

// runP1 measures Obtain+Release pairs/s of every implementation of the
// store, taking turns in slices as P1 does, and the requests per pair.
func (r *coordReport) runP1(ctx context.Context, res *coordResult) {
	e := res.env
	var impls []coordImpl
	for _, im := range coordImpls(e.kind) {
		if im.p1 != nil {
			impls = append(impls, im)
		}
	}
	res.p1Impls = impls
	names := make([]string, len(impls))
	opens := make([]func() (*instance, error), len(impls))
	cs := make([]counters, len(impls))
	pairs := make([]*atomic.Int64, len(impls))
	for i, im := range impls {
		names[i] = im.name
		cs[i] = newCounters(len(e.srvs))
		pairs[i] = new(atomic.Int64)
		opens[i] = func() (*instance, error) {
			inst, err := im.p1(ctx, e, cs[i])
			if err != nil {
				return nil, err
			}
			// Count the pairs of the whole run, warm-ups included, to
			// divide the requests by.
			return inst.countingPairs(pairs[i]), nil
		}
	}
	p := r.params
	slice := min(p1Slice, p.duration)
	cycles := int((p.duration + slice - 1) / slice)
	label := "P1-" + string(e.kind)
	res.p1, res.p1Err = runSlices(ctx, label, names, opens, e.cpu,
		fmt.Sprintf("lockbench-%s-p1-%d-", e.kind, time.Now().UnixNano()), p.goroutines, p.warmup, slice, cycles)
	if res.p1Err != nil {
		return
	}
	for i := range impls {
		res.p1Reqs = append(res.p1Reqs, sumReqs(cs[i].snapshot()))
		res.p1Pairs = append(res.p1Pairs, pairs[i].Load())
	}
	if e.kind == kindEtcd || e.kind == kindZK {
		// Most cron jobs are one goroutine: the same again with one.
		res.p1One, res.p1OneErr = runSlices(ctx, label+" 1 goroutine", names, opens, e.cpu,
			fmt.Sprintf("lockbench-%s-p1one-%d-", e.kind, time.Now().UnixNano()), 1, p.warmup, slice, cycles)
	}
}

// --- P3 ----------------------------------------------------------------

// runP3 runs every implementation's blocking obtain on one key with 16
// goroutines, in rounds (odd rounds in reverse order), and pools the
// samples, as P3 does; the requests per acquisition count the release and
// every attempt and wake-up call.
func (r *coordReport) runP3(ctx context.Context, res *coordResult) {
	e := res.env
	res.p3Impls = blockingImpls(e.kind)
	res.p3, res.p3Reqs, res.p3Nodes, res.p3Err = r.handoffRounds(ctx, e, res.p3Impls, "P3", r.params.goroutines)
	if res.p3Err == nil && (e.kind == kindEtcd || e.kind == kindZK) {
		res.hImpls = res.p3Impls
		res.h, res.hReqs, _, res.hErr = r.handoffRounds(ctx, e, res.hImpls, "handoff", handoffContenders)
	}
}

// handoffContenders is the number of contenders of the handoff row of etcd
// and ZooKeeper (issue 16): each with clients of its own, on one key.
const handoffContenders = 8

// blockingImpls are the implementations of the store that can wait for a
// lock (the raw floors cannot).
func blockingImpls(k coordKind) []coordImpl {
	var out []coordImpl
	for _, im := range coordImpls(k) {
		if im.p3 != nil {
			out = append(out, im)
		}
	}
	return out
}

// handoffRounds runs impls' blocking obtains on one key with n
// contenders, in rounds (odd rounds in reverse order), and pools the
// samples, as P3 does.
func (r *coordReport) handoffRounds(ctx context.Context, e *coordEnv, impls []coordImpl, label string, n int) ([]*p3Result, []reqs, [][]reqs, error) {
	p := r.params
	out := make([]*p3Result, len(impls))
	used := make([]reqs, len(impls))
	nodes := make([][]reqs, len(impls))
	for i, im := range impls {
		nodes[i] = make([]reqs, len(e.srvs))
		out[i] = &p3Result{name: im.name, note: im.p3Note}
	}
	d := p.duration / time.Duration(p.p3Rounds)
	for round := range p.p3Rounds {
		for j := range impls {
			i := j
			if round%2 == 1 {
				i = len(impls) - 1 - j
			}
			im := impls[i]
			key := fmt.Sprintf("lockbench-%s-%s%d-%d-%d-%d", e.kind, label, n, i, round, time.Now().UnixNano())
			cs := newCounters(len(e.srvs))
			fs, closeAll, err := im.p3(ctx, e, key, n, cs)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%s-%s %s: %w", label, e.kind, im.name, err)
			}
			x := out[i]
			if x.perG == nil {
				x.perG = make([]int, len(fs))
			}
			before := len(x.handoffs)
			c0 := cs.snapshot()
			overlap := measureHandoffs(ctx, fs, x, p.warmup, d)
			perNode := subReqs(cs.snapshot(), c0)
			u := sumReqs(perNode)
			x.calls += u.total
			used[i] = used[i].add(u)
			for k, n := range perNode {
				nodes[i][k] = nodes[i][k].add(n)
			}
			closeAll()
			if overlap > 0 {
				return nil, nil, nil, fmt.Errorf("%s-%s %s: %d times two goroutines held the lock at once", label, e.kind, im.name, overlap)
			}
			progress("%s-%s round %d %-32s %6d handoffs, p50 %v", label, e.kind, round+1, im.name, len(x.handoffs)-before, percentile(x.handoffs[before:], 0.50))
		}
	}
	return out, used, nodes, nil
}

// --- P4 ----------------------------------------------------------------

// coordHoldResult is what keeping locks alive cost one implementation.
type coordHoldResult struct {
	name, role, note string
	locks            int
	ttl              time.Duration
	obtainTime       time.Duration
	window           time.Duration
	perServer        []reqs // inside the window
	total            reqs
	renewals         int64 // tasklock: lease renewals inside the window
	lost             int
	err              error
}

// perTTL returns the requests per TTL: counted × TTL ÷ window.
func (h *coordHoldResult) perTTL() float64 {
	if h.window == 0 {
		return 0
	}
	return float64(h.total.total) * h.ttl.Seconds() / h.window.Seconds()
}

// scale is the factor that turns window counts into per-TTL counts.
func (h *coordHoldResult) scale() float64 {
	if h.window == 0 {
		return 0
	}
	return h.ttl.Seconds() / h.window.Seconds()
}

// cycles is how many times every lock was renewed inside the window
// (tasklock only).
func (h *coordHoldResult) cycles() float64 { return float64(h.renewals) / float64(h.locks) }

// perCycle returns the requests per renewal cycle (a renewal of every held
// lock), tasklock only.
func (h *coordHoldResult) perCycle() float64 {
	if h.renewals == 0 {
		return 0
	}
	return float64(h.total.total) / h.cycles()
}

// runP4 holds p.locks and p.few locks with every hold implementation of
// the store, all at once (each with clients of its own, so that each
// counts only its own requests), and counts the requests each sends over
// the same window.
func (r *coordReport) runP4(ctx context.Context, e *coordEnv) ([]*coordHoldResult, error) {
	p := r.params
	type held struct {
		res   *coordHoldResult
		h     *coordHolder
		cs    counters
		locks []any
	}
	var hs []*held
	defer func() {
		for _, x := range hs {
			releaseHeld(ctx, x.h, x.locks)
			x.h.close()
		}
	}()
	for _, im := range coordHoldImpls(e.kind) {
		for _, n := range []int{p.locks, p.few} {
			res := &coordHoldResult{name: im.name, role: im.role, note: im.note, locks: n, ttl: p.ttl}
			cs := newCounters(len(e.srvs))
			prefix := fmt.Sprintf("%d-%d", n, time.Now().UnixNano())
			h, err := im.open(ctx, e, p.ttl, prefix, cs)
			if err != nil {
				return nil, fmt.Errorf("P4-%s %s: %w", e.kind, im.name, err)
			}
			x := &held{res: res, h: h, cs: cs}
			hs = append(hs, x)
			t0 := time.Now()
			x.locks, err = obtainMany(ctx, h, n, fmt.Sprintf("k%d-", n))
			res.obtainTime = time.Since(t0)
			if err != nil {
				res.err = err
				continue
			}
			progress("P4-%s %-32s obtained %6d locks in %v", e.kind, im.name, n, res.obtainTime.Round(time.Millisecond))
		}
	}
	time.Sleep(p.settle)
	// Each implementation's window starts and ends at an instant when none
	// of its renewals is under way (tasklock's; the peers renew nothing),
	// so that the requests counted and the leases renewed match.
	type snap struct {
		c []reqs
		r int64
		t time.Time
	}
	read := func(x *held) snap {
		var s snap
		get := func() { s.c, s.t = x.cs.snapshot(), time.Now() }
		if x.h.renewals != nil {
			s.r = x.h.renewals.between(get, p.ttl)
		} else {
			get()
		}
		return s
	}
	snaps := make([][2]snap, len(hs))
	var wg sync.WaitGroup
	for i, x := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			snaps[i][0] = read(x)
			time.Sleep(p.window)
			snaps[i][1] = read(x)
		}()
	}
	wg.Wait()
	var out []*coordHoldResult
	for i, x := range hs {
		res := x.res
		out = append(out, res)
		if res.err != nil {
			continue
		}
		s0, s1 := snaps[i][0], snaps[i][1]
		res.window = s1.t.Sub(s0.t)
		res.perServer = subReqs(s1.c, s0.c)
		res.total = sumReqs(res.perServer)
		res.renewals = s1.r - s0.r
		for _, l := range x.locks {
			if l != nil && x.h.lost(l) {
				res.lost++
			}
		}
		line := fmt.Sprintf("P4-%s %-32s %6d locks: %.1f requests per TTL (%s)", e.kind, res.name, res.locks, res.perTTL(), res.total.describe(res.scale()))
		if x.h.renewals != nil {
			line += fmt.Sprintf(", %.2f renewal cycles, %.1f per cycle", res.cycles(), res.perCycle())
		}
		progress("%s", line)
	}
	return out, nil
}

// obtainMany obtains n locks on distinct keys with 16 goroutines.
func obtainMany(ctx context.Context, h *coordHolder, n int, prefix string) ([]any, error) {
	const workers = 16
	locks := make([]any, n)
	var (
		wg      sync.WaitGroup
		failed  atomic.Int64
		errOnce sync.Once
		first   error
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				l, err := h.obtain(ctx, fmt.Sprintf("%s%05d", prefix, i))
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { first = err })
					continue
				}
				locks[i] = l
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return locks, fmt.Errorf("%d of %d obtains failed: %w", failed.Load(), n, first)
	}
	return locks, nil
}

// releaseHeld releases every lock held, with 16 goroutines.
func releaseHeld(ctx context.Context, h *coordHolder, locks []any) {
	const workers = 16
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(locks); i += workers {
				if locks[i] != nil {
					_ = h.release(ctx, locks[i])
				}
			}
		}()
	}
	wg.Wait()
}

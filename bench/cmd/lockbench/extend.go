package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// The targets of issue 16 for Extend and for one goroutine's pairs.
const (
	extendVsFloor    = 1.0  // tasklock extends/s ÷ floor extends/s, at least, at 1 and 64 goroutines
	extendMaxAllocs  = 12.0 // allocations per Extend, at most
	p1OneVsFloor     = 0.9  // one goroutine's pairs/s ÷ the floor's, at least
	p1OneVsRedsync   = 1.0  // one goroutine's pairs/s ÷ redsync's, at least
	extendGoroutines = 64   // the larger Extend measurement; the other is 1
)

// floorExtend is the compare-and-expire script of the raw floor's extend.
var floorExtend = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)

// extenders are the Extend implementations, the raw floor first. Each
// instance's pair function makes one extend of a lock it obtained on its
// key the first time it was asked for that key.
var extenders = []contender{
	{"raw floor", openFloorExtend},
	{"tasklock", openTasklockExtend},
	{"redsync v4", openRedsyncExtend},
	{"bsm/redislock", openRedislockExtend},
}

// heldKeys gives each key the extend function of the lock held on it,
// obtaining it on first use: measurePairs asks again for the same keys in
// every slice.
type heldKeys struct {
	mu     sync.Mutex
	extend map[string]pairFunc
	obtain func(key string) (pairFunc, error)
}

func newHeldKeys(obtain func(key string) (pairFunc, error)) *heldKeys {
	return &heldKeys{extend: map[string]pairFunc{}, obtain: obtain}
}

// pair returns the extend of key's lock; when obtaining it failed, a
// function that returns that error.
func (h *heldKeys) pair(key string) pairFunc {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f, ok := h.extend[key]; ok {
		return f
	}
	f, err := h.obtain(key)
	if err != nil {
		return func(context.Context) error { return err }
	}
	h.extend[key] = f
	return f
}

// openFloorExtend holds each key with SET NX PX and extends it with EVALSHA
// of a compare-and-PEXPIRE script: the least a Redis lock's extend does.
func openFloorExtend(ctx context.Context, addr string) (*instance, error) {
	c := newClient(addr)
	if err := floorExtend.Load(ctx, c).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("lockbench: load the floor's extend script: %w", err)
	}
	ttl := benchTTL.Milliseconds()
	h := newHeldKeys(func(key string) (pairFunc, error) {
		token := rand.Text()
		ok, err := c.SetNX(ctx, key, token, benchTTL).Result()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errNotObtained
		}
		keys := []string{key}
		return func(ctx context.Context) error {
			n, err := floorExtend.EvalSha(ctx, c, keys, token, ttl).Int64()
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("lockbench: floor: extend of %q found another token", key)
			}
			return nil
		}, nil
	})
	return &instance{pair: h.pair, close: func() { _ = c.Close() }}, nil
}

// openTasklockExtend shares one Locker (default Config) and extends each
// goroutine's Lock (default ObtainOptions, renewal on) by benchTTL.
func openTasklockExtend(ctx context.Context, addr string) (*instance, error) {
	c := newClient(addr)
	lk, err := newLocker(c, nil)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	h := newHeldKeys(func(key string) (pairFunc, error) {
		l, err := lk.TryObtain(ctx, key, nil)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return l.Extend(ctx, benchTTL) }, nil
	})
	return &instance{pair: h.pair, close: func() {
		_ = lk.Close()
		_ = c.Close()
	}}, nil
}

// openRedsyncExtend holds each key with a Mutex (tries=1, expiry benchTTL)
// and extends it with Mutex.ExtendContext.
func openRedsyncExtend(ctx context.Context, addr string) (*instance, error) {
	c := newClient(addr)
	rs := redsync.New(goredis.NewPool(c))
	h := newHeldKeys(func(key string) (pairFunc, error) {
		m := rs.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(benchTTL))
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, err := m.ExtendContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("lockbench: redsync: extend of %q failed", key)
			}
			return nil
		}, nil
	})
	return &instance{pair: h.pair, close: func() { _ = c.Close() }}, nil
}

// openRedislockExtend holds each key with Client.Obtain and extends it with
// Lock.Refresh by benchTTL.
func openRedislockExtend(ctx context.Context, addr string) (*instance, error) {
	c := newClient(addr)
	rl := redislock.New(c)
	h := newHeldKeys(func(key string) (pairFunc, error) {
		l, err := rl.Obtain(ctx, key, benchTTL, nil)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return l.Refresh(ctx, benchTTL, nil) }, nil
	})
	return &instance{pair: h.pair, close: func() { _ = c.Close() }}, nil
}

// extendResult is the Extend measurement: extends/s at 1 and at
// extendGoroutines goroutines, and allocations per extend on one goroutine.
type extendResult struct {
	one, many []*p1Result // per extender
	allocs    []p2Result  // per extender
}

// runExtend measures every extender's extends/s at 1 and at
// extendGoroutines goroutines, taking turns in slices as P1 does, and its
// allocations per extend as P2 counts them.
func runExtend(ctx context.Context, srv *server, cfg config) (*extendResult, error) {
	res := &extendResult{}
	var err error
	if res.one, err = runTurns(ctx, srv, cfg, "Extend ×1", "lockbench:x1:", 1, extenders); err != nil {
		return nil, err
	}
	if res.many, err = runTurns(ctx, srv, cfg, fmt.Sprintf("Extend ×%d", extendGoroutines), "lockbench:x64:", extendGoroutines, extenders); err != nil {
		return nil, err
	}
	if res.allocs, err = countAllocs(ctx, srv.addr, "Extend", "lockbench:xa:", "extend", extenders, cfg.p2Pairs); err != nil {
		return nil, err
	}
	return res, nil
}

// runP1One measures one goroutine's Obtain+Release pairs/s, P1's contenders
// taking turns in slices as in P1.
func runP1One(ctx context.Context, srv *server, cfg config) ([]*p1Result, error) {
	return runTurns(ctx, srv, cfg, "P1 ×1", "lockbench:p1x1:", 1, contenders)
}

// writeExtend prints the Extend measurement with its targets.
func (r *report) writeExtend(p func(string, ...any)) {
	x := r.extend
	if x == nil {
		return
	}
	p("")
	p("### Extend — extends/s of a held lock, 1 and %d goroutines on distinct keys", extendGoroutines)
	p("")
	p("Each goroutine holds one lock and extends it by %v in a loop; the implementations take turns in %d slices of %v as in P1. \"vs floor\": median over the cycles of the ratio of one cycle's slices. Allocations: %d sequential extends on one goroutine, GOMAXPROCS 1, whole process, as in P2. The floor extends with EVALSHA of a compare-and-PEXPIRE script.",
		benchTTL, len(x.one[0].slices), min(p1Slice, r.cfg.p1Duration), r.cfg.p2Pairs)
	p("")
	p("| implementation | 1 goroutine: extends/s | vs floor | CPU µs/extend client + server | %d goroutines: extends/s | vs floor | CPU µs/extend client + server | allocs/extend | bytes/extend | target | result |", extendGoroutines)
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
	for i := range x.one {
		one, many := x.one[i], x.many[i]
		vs1, vsN := pairedRatio(one, x.one[0]), pairedRatio(many, x.many[0])
		var a p2Result
		if i < len(x.allocs) {
			a = x.allocs[i]
		}
		target, result := "", ""
		if one.name == "tasklock" {
			target = fmt.Sprintf("≥ %.2f× floor at 1 and %d; ≤ %.0f allocs", extendVsFloor, extendGoroutines, extendMaxAllocs)
			result = r.target("Extend", fmt.Sprintf("1 goroutine ≥ %.2f× floor", extendVsFloor), fmt.Sprintf("%.2f× floor", vs1), vs1 >= extendVsFloor) + " " +
				r.target("Extend", fmt.Sprintf("%d goroutines ≥ %.2f× floor", extendGoroutines, extendVsFloor), fmt.Sprintf("%.2f× floor", vsN), vsN >= extendVsFloor) + " " +
				r.target("Extend", fmt.Sprintf("≤ %.0f allocs/extend", extendMaxAllocs), fmt.Sprintf("%.1f", a.allocs), a.allocs <= extendMaxAllocs)
		}
		p("| %s%s | %s | %.2f× | %s | %s | %.2f× | %s | %.1f | %s | %s | %s |", one.name, failures(one, many), thousands(one.median()), vs1, cpuPer(one),
			thousands(many.median()), vsN, cpuPer(many), a.allocs, thousands(a.bytes), target, result)
	}
}

// cpuPer formats r's CPU µs per pair (or extend) of client and server, "—"
// when unknown.
func cpuPer(r *p1Result) string {
	c, s := r.cpuPerPair()
	if c <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f + %.1f = %.1f", c, s, c+s)
}

// failures notes the failed calls of a measurement's runs, "" when none.
func failures(rs ...*p1Result) string {
	out := ""
	for _, r := range rs {
		if r.errs > 0 {
			out += fmt.Sprintf(" (%d failed: %v)", r.errs, r.err)
		}
	}
	return out
}

// writeP1One prints one goroutine's pairs/s with its targets.
func (r *report) writeP1One(p func(string, ...any)) {
	rs := r.p1one
	if rs == nil {
		return
	}
	floor := rs[0]
	p("")
	p("### P1 at 1 goroutine — Obtain+Release pairs/s, the cron job's case")
	p("")
	p("As P1, with one goroutine: %d slices of %v per implementation, taking turns.", len(floor.slices), min(p1Slice, r.cfg.p1Duration))
	p("")
	p("| implementation | pairs/s | vs floor | CPU µs/pair client + server | allocs/pair (in the slices) | target | result |")
	p("|---|--:|--:|--:|--:|---|---|")
	var tl, redsync *p1Result
	for _, res := range rs {
		switch res.name {
		case "tasklock":
			tl = res
		case "redsync v4":
			redsync = res
		}
	}
	for _, res := range rs {
		vs := pairedRatio(res, floor)
		target, result := "", ""
		if res == tl {
			target = fmt.Sprintf("≥ %.2f× floor", p1OneVsFloor)
			result = r.target("P1 ×1", target, fmt.Sprintf("%.2f× floor", vs), vs >= p1OneVsFloor)
		}
		p("| %s%s | %s | %.2f× | %s | %.1f | %s | %s |", res.name, failures(res), thousands(res.median()), vs, cpuPer(res), res.allocsPerPair(), target, result)
	}
	if tl != nil && redsync != nil {
		vs := pairedRatio(tl, redsync)
		target := fmt.Sprintf("≥ %.2f× redsync", p1OneVsRedsync)
		p("| tasklock ÷ redsync v4 | | %.2f× | | | %s | %s |", vs, target, r.target("P1 ×1", target, fmt.Sprintf("%.2f× redsync", vs), vs >= p1OneVsRedsync))
	}
}

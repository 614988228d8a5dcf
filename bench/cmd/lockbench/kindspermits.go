package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/redisstore"
)

// P4-permits: P4 for semaphore permits. One Locker holds the permits
// (half of them on semaphores of 1 permit, half on semaphores of 100),
// and then, in the same run on the same server, as many mutexes; each is
// counted as P4 counts: round trips by a go-redis hook on the Locker's
// client, leases renewed by Config.OnEvent, over two renewal cycles after
// one. redis-server's own INFO commandstats counts the commands it ran in
// the same window.

// permitsHold is what keeping one set of leases alive cost.
type permitsHold struct {
	name       string // "semaphore permits", "mutexes"
	leases     int
	obtainTime time.Duration
	window     time.Duration
	renewed    int64 // leases the store renewed inside the window
	calls      int64 // the Locker's Store.Renew calls inside the window
	lost       int64 // EventLost during the whole hold
	cycles     float64
	trips      int64            // round trips: single commands + pipelines
	pipelines  int64            // of which pipelines
	piped      int64            // commands inside them
	pipeTime   time.Duration    // a pipeline's time to its answer, on average
	server     map[string]int64 // commands redis-server ran in the window, by name
	err        error            // the measurement failed
	releaseErr error            // the leases could not all be released afterwards
}

// perCycle returns the round trips per renewal cycle.
func (h *permitsHold) perCycle() float64 {
	if h.cycles == 0 {
		return 0
	}
	return float64(h.trips) / h.cycles
}

// tripsPerCall returns the round trips per Store.Renew call.
func (h *permitsHold) tripsPerCall() float64 {
	if h.calls == 0 {
		return 0
	}
	return float64(h.trips) / float64(h.calls)
}

// serverPerCycle returns redis-server's commands per renewal cycle.
func (h *permitsHold) serverPerCycle() float64 {
	if h.cycles == 0 {
		return 0
	}
	var n int64
	for _, v := range h.server {
		n += v
	}
	return float64(n) / h.cycles
}

// permitsResult is the whole P4-permits measurement.
type permitsResult struct {
	ttl   time.Duration
	holds []*permitsHold // the permits, then the mutexes
	err   error          // could not run at all
}

// permitsBig is the number of permits of the shared semaphores.
const permitsBig = 100

// runPermits holds p.permits semaphore permits, then as many mutexes,
// through one Locker each on the server, and counts what renewing them
// costs.
func runPermits(ctx context.Context, srv *server, p kindsParams) *permitsResult {
	res := &permitsResult{ttl: p.permitTTL}
	n := p.permits
	single := n / 2
	stamp := time.Now().UnixNano()
	permit := func(lk *tasklock.Locker, i int, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
		if i < single {
			return lk.Semaphore(fmt.Sprintf("lockbench:permits:%d:one:%05d", stamp, i), 1).TryAcquire(ctx, opts)
		}
		j := (i - single) / permitsBig
		return lk.Semaphore(fmt.Sprintf("lockbench:permits:%d:shared:%03d", stamp, j), permitsBig).TryAcquire(ctx, opts)
	}
	mutex := func(lk *tasklock.Locker, i int, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
		return lk.TryObtain(ctx, fmt.Sprintf("lockbench:permits:%d:mutex:%05d", stamp, i), opts)
	}
	for _, x := range []struct {
		name   string
		obtain func(*tasklock.Locker, int, *tasklock.ObtainOptions) (*tasklock.Lock, error)
	}{{"semaphore permits", permit}, {"mutexes", mutex}} {
		h := holdAndCount(ctx, srv.addr, x.name, n, p, x.obtain)
		res.holds = append(res.holds, h)
		if h.err == nil {
			progress("P4-permits %-17s %6d leases: %.2f round trips per renewal cycle (%.2f cycles in %v, pipelines of %v), redis-server %.1f commands per cycle",
				h.name, h.leases, h.perCycle(), h.cycles, h.window.Round(time.Millisecond), h.pipeTime.Round(time.Millisecond), h.serverPerCycle())
		}
	}
	return res
}

// holdAndCount obtains n leases through a new Locker with obtain (16
// goroutines), lets one renewal cycle pass, counts over two cycles' time,
// and releases them all.
func holdAndCount(ctx context.Context, addr, name string, n int, p kindsParams,
	obtain func(*tasklock.Locker, int, *tasklock.ObtainOptions) (*tasklock.Lock, error)) *permitsHold {
	res := &permitsHold{name: name, leases: n}
	hook := &counter{}
	c := newClient(addr)
	defer c.Close()
	c.AddHook(hook)
	stats := newClient(addr) // INFO, not counted by the hook
	defer stats.Close()
	var lost atomic.Int64
	st, err := redisstore.New(c, nil)
	if err != nil {
		res.err = err
		return res
	}
	rc := &renewCount{}
	lk, err := tasklock.New(countedRedisStore{st, rc.wrap(st)}, &tasklock.Config{OnEvent: func(e tasklock.Event) {
		if e.Type == tasklock.EventLost {
			lost.Add(1)
		}
	}})
	if err != nil {
		res.err = err
		return res
	}
	defer lk.Close()

	const workers = 16
	locks := make([]*tasklock.Lock, n)
	opts := &tasklock.ObtainOptions{TTL: p.permitTTL}
	var (
		wg      sync.WaitGroup
		failed  atomic.Int64
		errOnce sync.Once
		first   error
	)
	each := func(f func(i int) error) {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += workers {
					if err := f(i); err != nil {
						failed.Add(1)
						errOnce.Do(func() { first = err })
					}
				}
			}()
		}
		wg.Wait()
	}
	t0 := time.Now()
	each(func(i int) error {
		l, err := obtain(lk, i, opts)
		locks[i] = l
		return err
	})
	res.obtainTime = time.Since(t0)
	release := func() {
		each(func(i int) error {
			if locks[i] == nil {
				return nil
			}
			return locks[i].Release(ctx)
		})
	}
	if first != nil {
		res.err = fmt.Errorf("%d of %d obtains failed: %w", failed.Load(), n, first)
		release()
		return res
	}
	progress("P4-permits obtained %d %s in %v", n, name, res.obtainTime.Round(time.Millisecond))

	// One renewal cycle first: the first renewal call on a server loads
	// the renewal script (a NOSCRIPT answer, then the script itself).
	cycle := p.permitTTL / 3
	time.Sleep(cycle)
	// The window opens and closes when no renewal call is under way, so
	// that the round trips and the leases renewed are those of the same
	// calls.
	type snap struct {
		c        counts
		r, calls int64
		busy     int64
		at       time.Time
	}
	read := func() snap {
		var x snap
		x.r = rc.between(func() { x.c, x.calls, x.busy, x.at = hook.snapshot(), rc.calls, hook.busy.Load(), time.Now() }, cycle)
		return x
	}
	x0 := read()
	s0, err := commandStats(ctx, stats)
	if err != nil {
		res.err = err
		release()
		return res
	}
	time.Sleep(2 * cycle)
	x1 := read()
	c0, c1, r0, r1, b0, b1, w0, w1 := x0.c, x1.c, x0.r, x1.r, x0.busy, x1.busy, x0.at, x1.at
	res.window = w1.Sub(w0)
	s1, err := commandStats(ctx, stats)
	if err != nil {
		res.err = err
		release()
		return res
	}
	res.renewed, res.calls = r1-r0, x1.calls-x0.calls
	res.cycles = float64(res.renewed) / float64(n)
	res.pipelines, res.piped = c1.pipelines-c0.pipelines, c1.piped-c0.piped
	res.trips = c1.single - c0.single + res.pipelines
	if res.pipelines > 0 {
		res.pipeTime = time.Duration((b1 - b0) / res.pipelines)
	}
	res.server = map[string]int64{}
	for k, v := range s1 {
		if k == "info" {
			continue
		}
		if d := v - s0[k]; d != 0 {
			res.server[k] = d
		}
	}
	res.lost = lost.Load()
	release()
	if first != nil {
		res.releaseErr = fmt.Errorf("%d of %d releases failed: %w", failed.Load(), n, first)
	}
	return res
}

// countedRedisStore is a redisstore.Store whose renewals a renewCount
// counts: every other method, and so every optional interface the Locker
// looks for (driver.Kinder, driver.Batcher, driver.Notifier …), is the
// Store's own.
type countedRedisStore struct {
	*redisstore.Store
	counted driver.Store
}

// Renew goes through the renewCount.
func (s countedRedisStore) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	return s.counted.Renew(ctx, ps)
}

// commandStats returns redis-server's INFO commandstats: calls by command.
func commandStats(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("lockbench: INFO commandstats: %w", err)
	}
	out := map[string]int64{}
	for _, l := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					out[strings.TrimPrefix(name, "cmdstat_")] = n
				}
			}
		}
	}
	return out, nil
}

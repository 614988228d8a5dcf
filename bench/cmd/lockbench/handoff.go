package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
)

// waitContender is one implementation in P3: open returns one obtainFunc
// per goroutine, all on key, and the function that frees what it made.
// Every client it makes counts its commands in h.
type waitContender struct {
	name string
	note string // how it waits
	open func(addr, key string, n int, h *counter) ([]obtainFunc, func(), error)
}

var waitContenders = []waitContender{
	{"tasklock, 1 Locker", "Locker.Obtain; one Locker shared by the goroutines (local wake-up on Release, plus Redis pub/sub)", openTasklockWait(false)},
	{"tasklock, 16 Lockers", "Locker.Obtain; one Locker and one client per goroutine, as 16 processes would (wake-up through Redis pub/sub)", openTasklockWait(true)},
	{"redsync v4", "Mutex.LockContext with default tries (32) and delay (50–250 ms); tried again when it gives up", openRedsyncWait},
	{"bsm/redislock", fmt.Sprintf("Obtain with RetryStrategy LinearBackoff(%v), the interval of its README example, no retry limit", redislockBackoff), openRedislockWait},
}

func openTasklockWait(perGoroutine bool) func(addr, key string, n int, h *counter) ([]obtainFunc, func(), error) {
	return func(addr, key string, n int, h *counter) ([]obtainFunc, func(), error) {
		var (
			clients []*redis.Client
			lockers []*tasklock.Locker
		)
		closeAll := func() {
			for _, lk := range lockers {
				_ = lk.Close()
			}
			for _, c := range clients {
				_ = c.Close()
			}
		}
		fs := make([]obtainFunc, n)
		for i := range n {
			if i == 0 || perGoroutine {
				c := newClient(addr)
				c.AddHook(h)
				clients = append(clients, c)
				lk, err := newLocker(c, nil)
				if err != nil {
					closeAll()
					return nil, nil, err
				}
				lockers = append(lockers, lk)
			}
			lk := lockers[len(lockers)-1]
			fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
				l, err := lk.Obtain(ctx, key, nil)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		}
		return fs, closeAll, nil
	}
}

func openRedsyncWait(addr, key string, n int, h *counter) ([]obtainFunc, func(), error) {
	c := newClient(addr)
	c.AddHook(h)
	rs := redsync.New(goredis.NewPool(c))
	fs := make([]obtainFunc, n)
	for i := range n {
		m := rs.NewMutex(key, redsync.WithExpiry(benchTTL))
		fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = errors.New("lockbench: redsync: unlock failed")
				}
				return err
			}, nil
		}
	}
	return fs, func() { _ = c.Close() }, nil
}

func openRedislockWait(addr, key string, n int, h *counter) ([]obtainFunc, func(), error) {
	c := newClient(addr)
	c.AddHook(h)
	rl := redislock.New(c)
	opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(redislockBackoff)}
	fs := make([]obtainFunc, n)
	for i := range n {
		fs[i] = func(ctx context.Context) (func(context.Context) error, error) {
			l, err := rl.Obtain(ctx, key, benchTTL, opts)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
	}
	return fs, func() { _ = c.Close() }, nil
}

// p3Result is one P3 implementation's numbers, pooled over its rounds.
type p3Result struct {
	name, note string
	acquired   int             // acquisitions inside the measured windows
	window     time.Duration   // the measured windows, added up
	handoffs   []time.Duration // release → next holder, every holder
	toOther    []time.Duration // the same, where the next holder is another goroutine
	waits      []time.Duration // time inside each blocking obtain that returned the lock
	perG       []int           // acquisitions by goroutine, added up over the rounds
	giveUps    int             // blocking obtains that gave up before the run ended
	calls      int64           // Redis round trips of the whole runs (warm-up included)
	allAcq     int             // acquisitions of the whole runs (warm-up included)
	errs       int
	err        error
}

func (r *p3Result) rate() float64 { return float64(r.acquired) / r.window.Seconds() }

// waiterRate is the acquisitions per second that went to a waiter: rate
// times the share of the handoffs whose next holder was another goroutine
// than the one that released.
func (r *p3Result) waiterRate() float64 {
	if len(r.handoffs) == 0 {
		return 0
	}
	return r.rate() * float64(len(r.toOther)) / float64(len(r.handoffs))
}

// callsPerAcq returns the Redis round trips per acquisition, the release
// and the attempts that found the key held included.
func (r *p3Result) callsPerAcq() float64 {
	if r.allAcq == 0 {
		return 0
	}
	return float64(r.calls) / float64(r.allAcq)
}

// handoffClock records, for the holder of the one key, when it started to
// release, so that the next holder can tell how long the handoff took.
type handoffClock struct {
	start time.Time
	warm  time.Time // samples count from here
	end   time.Time // and until here

	mu      sync.Mutex
	relAt   time.Duration // since start; <0 when no release is pending
	relBy   int
	res     *p3Result
	holders int // holding the lock now: more than one would be a safety bug
	overlap int
}

// obtained is called by goroutine g right after its blocking obtain, which
// took wait, returned the lock.
func (h *handoffClock) obtained(g int, wait time.Duration) {
	now := time.Since(h.start)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holders++
	if h.holders > 1 {
		h.overlap++
	}
	in := now >= h.warm.Sub(h.start) && now < h.end.Sub(h.start)
	h.res.allAcq++
	if in {
		h.res.acquired++
		h.res.perG[g]++
		h.res.waits = append(h.res.waits, wait)
	}
	if h.relAt >= 0 && in {
		d := now - h.relAt
		h.res.handoffs = append(h.res.handoffs, d)
		if h.relBy != g {
			h.res.toOther = append(h.res.toOther, d)
		}
	}
	h.relAt = -1
}

// releasing is called by goroutine g just before it calls release.
func (h *handoffClock) releasing(g int) {
	h.mu.Lock()
	h.holders--
	h.relAt, h.relBy = time.Since(h.start), g
	h.mu.Unlock()
}

// runP3 runs every wait contender for every round (odd rounds in reverse
// order) and pools each one's samples.
func runP3(ctx context.Context, addr string, cfg config) ([]*p3Result, error) {
	res := make([]*p3Result, len(waitContenders))
	for i, c := range waitContenders {
		res[i] = &p3Result{name: c.name, note: c.note}
	}
	for round := range cfg.rounds {
		for j := range waitContenders {
			i := j
			if round%2 == 1 {
				i = len(waitContenders) - 1 - j
			}
			c := waitContenders[i]
			key := fmt.Sprintf("lockbench:p3:%d:%d", i, round)
			h := &counter{}
			fs, closeAll, err := c.open(addr, key, cfg.p3Goroutines, h)
			if err != nil {
				return nil, fmt.Errorf("P3 %s: %w", c.name, err)
			}
			r := res[i]
			if r.perG == nil {
				r.perG = make([]int, len(fs))
			}
			before := len(r.handoffs)
			overlap := measureHandoffs(ctx, fs, r, cfg.warmup, cfg.p3Duration)
			closeAll()
			n := h.snapshot()
			r.calls += n.single + n.pipelines
			if overlap > 0 {
				return nil, fmt.Errorf("P3 %s: %d times two goroutines held the lock at once", c.name, overlap)
			}
			progress("P3 round %d %-20s %6d handoffs, p50 %v", round+1, c.name, len(r.handoffs)-before, percentile(r.handoffs[before:], 0.50))
		}
	}
	return res, nil
}

// measureHandoffs runs one goroutine per obtainFunc, each looping blocking
// obtain → release on the same key until warm-up+d has passed, and adds the
// acquisitions and handoffs inside the window to r. It returns how many
// times the lock was found held twice.
func measureHandoffs(ctx context.Context, fs []obtainFunc, r *p3Result, warmup, d time.Duration) int {
	start := time.Now()
	h := &handoffClock{start: start, warm: start.Add(warmup), end: start.Add(warmup + d), relAt: -1, res: r}
	ctx, cancel := context.WithDeadline(ctx, h.end)
	defer cancel()
	var (
		wg sync.WaitGroup
		mu sync.Mutex // guards r.giveUps, r.errs, r.err
	)
	for g, obtain := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				release, err := obtain(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return // the run is over
					}
					mu.Lock()
					if errors.Is(err, redsync.ErrFailed) || errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, tasklock.ErrNotObtained) {
						r.giveUps++
					} else {
						r.errs++
						if r.err == nil {
							r.err = err
						}
					}
					mu.Unlock()
					continue
				}
				h.obtained(g, time.Since(t0))
				h.releasing(g)
				// Released with a context of its own: the last holder
				// must not leave its lock behind when the run ends.
				if err := release(context.WithoutCancel(ctx)); err != nil {
					mu.Lock()
					r.errs++
					if r.err == nil {
						r.err = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	r.window += d
	return h.overlap
}

// percentile returns the p-quantile of ds (nearest rank), 0 when empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

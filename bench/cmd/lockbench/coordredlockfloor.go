package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// P1-redlock against its raw floor (issue 16 item 3: every store at least
// 0.9× its raw floor for one goroutine as well as for 64). The floor is the
// least a RedLock does: SET key token NX PX on every node at once, and when
// a majority said OK, the compare-and-delete script on every node at once.

// coordRedlockVsFloor is the target: tasklock's pairs/s ÷ the floor's, at
// least, for every number of goroutines in redlockFloorGoroutines.
const coordRedlockVsFloor = 0.9

// redlockFloorGoroutines are the numbers of goroutines P1-redlock measures
// the floor with.
var redlockFloorGoroutines = []int{1, 64}

const redlockFloorName = "raw floor (3 nodes)"

// redlockFloorResult is one number of goroutines' floor and tasklock.
type redlockFloorResult struct {
	goroutines int
	floor, tl  *p1Result
	err        error
}

// runP1RedlockFloor measures the floor and tasklock, taking turns in
// slices as P1 does, with each number of goroutines.
func (r *coordReport) runP1RedlockFloor(ctx context.Context, res *coordResult) {
	e := res.env
	p := r.params
	slice := min(p1Slice, p.duration)
	cycles := int((p.duration + slice - 1) / slice)
	for _, g := range redlockFloorGoroutines {
		opens := []func() (*instance, error){
			func() (*instance, error) { return openRedlockFloor(ctx, e) },
			func() (*instance, error) { return p1RedlockTasklock(ctx, e, newCounters(len(e.srvs))) },
		}
		x := &redlockFloorResult{goroutines: g}
		rs, err := runSlices(ctx, fmt.Sprintf("P1-redlock floor, %d goroutines", g), []string{redlockFloorName, "tasklock"}, opens, e.cpu,
			fmt.Sprintf("lockbench-redlock-floor-%d-%d-", g, time.Now().UnixNano()), g, p.warmup, slice, cycles)
		if err != nil {
			x.err = err
		} else {
			x.floor, x.tl = rs[0], rs[1]
		}
		res.p1Floor = append(res.p1Floor, x)
	}
}

// openRedlockFloor makes the floor's clients, one per node (as
// redisNodes makes them), with the compare-and-delete script loaded.
func openRedlockFloor(ctx context.Context, e *coordEnv) (*instance, error) {
	clients := redisNodes(e, newCounters(len(e.srvs)))
	for _, c := range clients {
		if err := floorUnlock.Load(ctx, c).Err(); err != nil {
			closeRedis(clients)
			return nil, fmt.Errorf("lockbench: load the floor's script: %w", err)
		}
	}
	quorum := len(clients)/2 + 1
	// each runs do on every node at once and returns how many succeeded.
	each := func(do func(c *redis.Client) bool) int {
		var (
			wg sync.WaitGroup
			mu sync.Mutex
			n  int
		)
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if do(c) {
					mu.Lock()
					n++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return n
	}
	return &instance{
		pair: func(key string) pairFunc {
			keys := []string{key}
			return func(ctx context.Context) error {
				token := rand.Text()
				unlock := func(c *redis.Client) bool { return floorUnlock.EvalSha(ctx, c, keys, token).Val() == int64(1) }
				got := each(func(c *redis.Client) bool { return c.SetNX(ctx, key, token, benchTTL).Val() })
				if got < quorum {
					each(unlock)
					return errNotObtained
				}
				if n := each(unlock); n < quorum {
					return fmt.Errorf("lockbench: redlock floor: compare-and-delete of %q removed %d copies", key, n)
				}
				return nil
			}
		},
		close: func() { closeRedis(clients) },
	}, nil
}

// writeP1RedlockFloor prints P1-redlock's floor table and its targets.
func (r *coordReport) writeP1RedlockFloor(p func(string, ...any), res *coordResult) {
	if len(res.p1Floor) == 0 {
		return
	}
	p("")
	p("P1-redlock against its raw floor (%s: SET NX PX on every node at once, then when a majority said OK the compare-and-delete script on every node at once, a fresh token per pair), with 1 and 64 goroutines on distinct keys, taking turns in slices as above. Target: tasklock ≥ %.2f× the floor for each (issue 16, item 3).", redlockFloorName, coordRedlockVsFloor)
	p("")
	p("| goroutines | implementation | pairs/s | slices min–max | CPU µs/pair client + server | target | result |")
	p("|--:|---|--:|--:|--:|---|---|")
	for _, x := range res.p1Floor {
		if x.err != nil {
			p("| %d | **not run**: %v | | | | | |", x.goroutines, x.err)
			continue
		}
		for _, y := range []*p1Result{x.floor, x.tl} {
			name, spread, cpu := sliceCells(y)
			p("| %d | %s | %s | %s | %s | | |", x.goroutines, name, thousands(y.median()), spread, cpu)
		}
		vs := pairedRatio(x.tl, x.floor)
		target := fmt.Sprintf("≥ %.2f× floor", coordRedlockVsFloor)
		p("| %d | tasklock ÷ floor | %.2f× | | | %s | %s |", x.goroutines, vs, target,
			r.target(fmt.Sprintf("P1-redlock-floor-%d", x.goroutines), fmt.Sprintf("tasklock on RedLock, %d goroutine(s): %s", x.goroutines, target),
				fmt.Sprintf("%.2f×", vs), vs >= coordRedlockVsFloor))
	}
}

package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// p1Slice is the length of one P1 slice: the contenders take turns in
// slices this long, so that a burst of background load hits them alike.
const p1Slice = 500 * time.Millisecond

// p1Settle is how long a contender runs before each of its slices after
// the first (which gets the full warm-up): its goroutines start again.
const p1Settle = 100 * time.Millisecond

// p1Result is one contender's P1 throughput, one value per slice; slice k
// of every contender ran in the same cycle k.
type p1Result struct {
	name   string
	slices []float64 // pairs/s
	errs   int64     // failed pairs, over all slices
	err    error     // the first of them

	// CPU time used inside the measured slices and the pairs completed
	// there; cpuOK is false when it could not be read.
	pairs, client, server float64
	cpuOK                 bool
	// Heap allocations of the whole process inside the measured slices.
	mallocs float64

	// SQL contenders: statements and network round trips inside the
	// measured slices (counted is false for the Redis contenders).
	counts  sqlCounts
	counted bool
	network bool
}

// perPair returns statements and round trips per pair.
func (r *p1Result) perPair() (stmts, trips float64) {
	if !r.counted || r.pairs == 0 {
		return 0, 0
	}
	return float64(r.counts.stmts) / r.pairs, float64(r.counts.trips) / r.pairs
}

// cpuPerPair returns the CPU µs per pair used by lockbench's process and by
// redis-server.
func (r *p1Result) cpuPerPair() (client, server float64) {
	if !r.cpuOK || r.pairs == 0 {
		return 0, 0
	}
	return r.client / r.pairs * 1e6, r.server / r.pairs * 1e6
}

// allocsPerPair returns the process's heap allocations per pair inside the
// slices (the library's background goroutines and the client's included).
func (r *p1Result) allocsPerPair() float64 {
	if r.pairs == 0 {
		return 0
	}
	return r.mallocs / r.pairs
}

// median returns the median pairs/s of r's slices.
func (r *p1Result) median() float64 { return median(r.slices) }

// pairedRatio returns the median over the cycles of a's pairs/s ÷ b's in
// the same cycle: a ratio of runs made seconds apart, which background load
// disturbs far less than a ratio of two separately taken medians.
func pairedRatio(a, b *p1Result) float64 {
	var rs []float64
	for k := range min(len(a.slices), len(b.slices)) {
		if b.slices[k] > 0 {
			rs = append(rs, a.slices[k]/b.slices[k])
		}
	}
	return median(rs)
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// runP1 measures Obtain+Release pairs/s with cfg.p1Goroutines goroutines on
// distinct keys (runTurns).
func runP1(ctx context.Context, srv *server, cfg config) ([]*p1Result, error) {
	return runTurns(ctx, srv, cfg, "P1", "lockbench:p1:", cfg.p1Goroutines, contenders)
}

// runTurns measures each of cs with n goroutines on distinct keys. Every
// contender is measured for cfg.rounds × p1Duration in all, in slices of
// p1Slice; the contenders take turns slice by slice, in reverse order every
// other cycle, so that none always goes first.
func runTurns(ctx context.Context, srv *server, cfg config, label, prefix string, n int, cs []contender) ([]*p1Result, error) {
	slice := min(p1Slice, cfg.p1Duration)
	cycles := int((time.Duration(cfg.rounds)*cfg.p1Duration + slice - 1) / slice)
	names := make([]string, len(cs))
	opens := make([]func() (*instance, error), len(cs))
	for i, c := range cs {
		names[i] = c.name
		opens[i] = func() (*instance, error) { return c.open(ctx, srv.addr) }
	}
	return runSlices(ctx, label, names, opens, srv.cpu, prefix, n, cfg.warmup, slice, cycles)
}

// runSlices opens every contender, then runs cycles cycles in which each
// contender in turn (in reverse order every other cycle) runs n goroutines
// on distinct keys for one slice, after warm-up (the first time) or
// p1Settle, and returns one result per contender.
func runSlices(ctx context.Context, label string, names []string, opens []func() (*instance, error), serverCPU func() (time.Duration, bool),
	prefix string, n int, warmup, slice time.Duration, cycles int) ([]*p1Result, error) {
	res := make([]*p1Result, len(names))
	insts := make([]*instance, len(names))
	defer func() {
		for _, inst := range insts {
			if inst != nil {
				inst.close()
			}
		}
	}()
	for i, name := range names {
		res[i] = &p1Result{name: name, cpuOK: true}
		inst, err := opens[i]()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", label, name, err)
		}
		insts[i] = inst
		if inst.counter != nil {
			res[i].counted, res[i].network = true, inst.counter.network
		}
	}
	for k := range cycles {
		line := fmt.Sprintf("%s cycle %2d/%d:", label, k+1, cycles)
		for j := range names {
			i := j
			if k%2 == 1 {
				i = len(names) - 1 - j
			}
			warm := p1Settle
			if k == 0 {
				warm = warmup
			}
			m := measurePairs(ctx, insts[i], serverCPU, fmt.Sprintf("%s%d:", prefix, i), n, warm, slice)
			r := res[i]
			r.slices = append(r.slices, m.rate)
			r.pairs += m.pairs
			r.client += m.client.Seconds()
			r.server += m.server.Seconds()
			r.mallocs += float64(m.mallocs)
			r.cpuOK = r.cpuOK && m.cpuOK
			r.counts = sqlCounts{r.counts.stmts + m.counts.stmts, r.counts.updates + m.counts.updates, r.counts.pings + m.counts.pings, r.counts.trips + m.counts.trips}
			r.errs += m.errs
			if r.err == nil {
				r.err = m.first
			}
			line += fmt.Sprintf("  %s %.0f", names[i], m.rate)
		}
		progress("%s", line)
	}
	return res, nil
}

// pairsRun is what one measurePairs run saw inside its measured window.
type pairsRun struct {
	rate           float64 // pairs/s
	pairs          float64
	client, server time.Duration // CPU time of lockbench and of redis-server
	cpuOK          bool
	mallocs        uint64 // heap allocations of the process
	errs           int64
	first          error
	counts         sqlCounts // SQL contenders: counted inside the window
}

// measurePairs runs n goroutines, each looping Obtain+Release on its own
// key, and returns the pairs/s completed between the end of warm-up and
// warm-up+d, with the CPU time lockbench and the server (serverCPU) used
// meanwhile, and for SQL contenders the statements and round trips.
// Goroutines finish the pair under way when told to stop, so no lock is
// left behind.
func measurePairs(ctx context.Context, inst *instance, serverCPU func() (time.Duration, bool), prefix string, n int, warmup, d time.Duration) pairsRun {
	var first error
	var (
		done    atomic.Int64
		failed  atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		wg      sync.WaitGroup
	)
	for g := range n {
		pair := inst.pair(fmt.Sprintf("%s%d", prefix, g))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := pair(ctx); err != nil {
					failed.Add(1)
					errOnce.Do(func() { first = err })
					continue
				}
				done.Add(1)
			}
		}()
	}
	snap := func() sqlCounts {
		if inst.counter == nil {
			return sqlCounts{}
		}
		return inst.counter.snapshot()
	}
	time.Sleep(warmup)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m0 := ms.Mallocs
	cl0, ok0 := selfCPU()
	sv0, ok1 := serverCPU()
	n0 := snap()
	c0, t0 := done.Load(), time.Now()
	time.Sleep(d)
	c1, t1 := done.Load(), time.Now()
	n1 := snap()
	cl1, ok2 := selfCPU()
	sv1, ok3 := serverCPU()
	runtime.ReadMemStats(&ms)
	stop.Store(true)
	wg.Wait()
	return pairsRun{
		rate: float64(c1-c0) / t1.Sub(t0).Seconds(), pairs: float64(c1 - c0),
		client: cl1 - cl0, server: sv1 - sv0, cpuOK: ok0 && ok1 && ok2 && ok3, mallocs: ms.Mallocs - m0,
		errs: failed.Load(), first: first, counts: n1.sub(n0),
	}
}

// p2Result is one contender's allocations per Obtain+Release pair.
type p2Result struct {
	name   string
	allocs float64
	bytes  float64
}

// runP2 counts heap allocations (runtime.MemStats.Mallocs, process-wide, so
// the library's background goroutines count too) over n sequential pairs on
// one goroutine with GOMAXPROCS=1, as testing.AllocsPerRun does, after a
// warm-up of n/10 pairs.
func runP2(ctx context.Context, addr string, n int) ([]p2Result, error) {
	return countAllocs(ctx, addr, "P2", "lockbench:p2:", "pair", contenders, n)
}

// countAllocs counts each of cs's allocations per call of its pair
// function (a unit such as "pair") as runP2 describes.
func countAllocs(ctx context.Context, addr, label, prefix, unit string, cs []contender, n int) ([]p2Result, error) {
	var res []p2Result
	for i, c := range cs {
		inst, err := c.open(ctx, addr)
		if err != nil {
			return nil, fmt.Errorf("lockbench: %s %s: %w", label, c.name, err)
		}
		pair := inst.pair(fmt.Sprintf("%s%d", prefix, i))
		allocs, bytes, err := allocsPerPair(ctx, pair, n)
		inst.close()
		if err != nil {
			return nil, fmt.Errorf("lockbench: %s %s: %w", label, c.name, err)
		}
		res = append(res, p2Result{name: c.name, allocs: allocs, bytes: bytes})
		progress("%s %-14s %6.1f allocs/%s %8.0f B/%s", label, c.name, allocs, unit, bytes, unit)
	}
	return res, nil
}

func allocsPerPair(ctx context.Context, pair pairFunc, n int) (allocs, bytes float64, err error) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for range max(n/10, 1) {
		if err := pair(ctx); err != nil {
			return 0, 0, err
		}
	}
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range n {
		if err := pair(ctx); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&b)
	return float64(b.Mallocs-a.Mallocs) / float64(n), float64(b.TotalAlloc-a.TotalAlloc) / float64(n), nil
}

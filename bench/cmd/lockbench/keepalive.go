package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
)

// p4TTL is the lease length of the locks P4 keeps alive; tasklock renews
// about every TTL/3.
const p4TTL = 3 * time.Second

// counter is a go-redis hook that counts what the client sends: a command
// sent alone is one round trip, a pipeline is one round trip however many
// commands it carries.
type counter struct {
	single    atomic.Int64
	pipelines atomic.Int64
	piped     atomic.Int64 // commands inside pipelines
	busy      atomic.Int64 // time spent waiting for pipelines' answers, in ns
}

func (h *counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.single.Add(1)
		return next(ctx, cmd)
	}
}

func (h *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		h.piped.Add(int64(len(cmds)))
		t0 := time.Now()
		defer func() { h.busy.Add(int64(time.Since(t0))) }()
		return next(ctx, cmds)
	}
}

type counts struct{ single, pipelines, piped int64 }

func (h *counter) snapshot() counts {
	return counts{h.single.Load(), h.pipelines.Load(), h.piped.Load()}
}

// p4Result is what keeping n locks alive cost tasklock.
type p4Result struct {
	locks          int
	obtainTime     time.Duration
	window         time.Duration
	renewed        int64 // lease renewals (EventRenewed) inside the window
	lost           int64 // EventLost during the whole hold (or releases that found the lease gone, if more): must be 0
	roundTrips     int64 // inside the window
	pipelines      int64
	single         int64
	piped          int64
	cycles         float64 // renewed / locks
	goroutineDelta int     // the largest NumGoroutine rise while holding, over the baseline
	heapPerLock    float64 // median of the samples
	heapSamples    []float64

	ttl time.Duration // of every lock
	// CPU time inside the window of lockbench's process (the renewals,
	// almost all of it) and of redis-server; cpuOK is false when it could
	// not be read.
	client, server time.Duration
	cpuOK          bool
}

// perCycle returns the round trips per renewal cycle, a cycle being one
// renewal of every held lock.
func (r *p4Result) perCycle() float64 {
	if r.cycles == 0 {
		return 0
	}
	return float64(r.roundTrips) / r.cycles
}

// runP4 obtains n locks (lease ttl, renewal on) through one Locker whose client
// counts its commands, lets one renewal cycle pass (unless quick), and then
// counts, over two cycles' time, the round trips the renewals take, the CPU
// time lockbench and srv use, the goroutines and the heap the held locks
// cost. With heapProfile set it writes the live heap to that file while
// the locks are held. A release that finds a lock lost counts it in lost
// (the larger of those and the EventLost events).
func runP4(ctx context.Context, srv *server, n int, ttl time.Duration, quick bool, heapProfile string) (*p4Result, error) {
	h := &counter{}
	c := newClient(srv.addr)
	defer c.Close()
	c.AddHook(h)
	var renewed, lost atomic.Int64
	lk, err := newLocker(c, &tasklock.Config{OnEvent: func(e tasklock.Event) {
		switch e.Type {
		case tasklock.EventRenewed:
			renewed.Add(1)
		case tasklock.EventLost:
			lost.Add(1)
		}
	}})
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			_ = lk.Close()
		}
	}()

	// Everything that is the caller's, not the library's, exists before
	// the baseline: the keys, the slice of locks, and the client's
	// connections (opened by the same number of goroutines as obtain).
	const workers = 16
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("lockbench:p4:%05d", i)
	}
	locks := make([]*tasklock.Lock, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				_ = c.Ping(ctx).Err()
			}
		}()
	}
	wg.Wait()
	heap0 := heapAfterGC()
	g0 := runtime.NumGoroutine()

	opts := &tasklock.ObtainOptions{TTL: ttl}
	var (
		failed  atomic.Int64
		errOnce sync.Once
		first   error
	)
	t0 := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				l, err := lk.TryObtain(ctx, keys[i], opts)
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
	res := &p4Result{locks: n, ttl: ttl, obtainTime: time.Since(t0)}
	if first != nil {
		return nil, fmt.Errorf("P4: %d of %d obtains failed: %w", failed.Load(), n, first)
	}
	progress("P4 obtained %d locks in %v", n, res.obtainTime.Round(time.Millisecond))

	cycle := ttl / 3
	maxG := 0
	sampleGoroutines := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			maxG = max(maxG, runtime.NumGoroutine()-g0)
		}
	}
	if !quick {
		sampleGoroutines(cycle)
	}
	cl0, ok0 := selfCPU()
	sv0, ok1 := srv.cpu()
	c0, r0, w0 := h.snapshot(), renewed.Load(), time.Now()
	sampleGoroutines(2 * cycle)
	c1, r1 := h.snapshot(), renewed.Load()
	res.window = time.Since(w0)
	cl1, ok2 := selfCPU()
	sv1, ok3 := srv.cpu()
	res.client, res.server, res.cpuOK = cl1-cl0, sv1-sv0, ok0 && ok1 && ok2 && ok3
	res.renewed = r1 - r0
	res.single, res.pipelines, res.piped = c1.single-c0.single, c1.pipelines-c0.pipelines, c1.piped-c0.piped
	res.roundTrips = res.single + res.pipelines
	res.cycles = float64(res.renewed) / float64(n)
	progress("P4 %d renewals, %d round trips (%d pipelines of %d commands, %d single) in %v",
		res.renewed, res.roundTrips, res.pipelines, res.piped, res.single, res.window.Round(time.Millisecond))

	// Heap: GC'd samples while the locks are held; a renewal call under way
	// at a sample adds its transient buffers, so the median is reported.
	samples := 5
	if quick {
		samples = 3
	}
	for i := range samples {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		res.heapSamples = append(res.heapSamples, float64(int64(heapAfterGC())-int64(heap0))/float64(n))
		maxG = max(maxG, runtime.NumGoroutine()-g0)
	}
	s := slices.Clone(res.heapSamples)
	slices.Sort(s)
	res.heapPerLock = s[len(s)/2]
	res.goroutineDelta = maxG
	if heapProfile != "" {
		if err := writeHeapProfile(heapProfile); err != nil {
			return nil, err
		}
	}

	// Release every lock before closing the Locker, as a program would:
	// Close would end them as lost (ErrClosed) and log each one. A release
	// that finds the lease gone found it lost (before, or without, the
	// Locker's EventLost).
	var gone atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				err := locks[i].Release(ctx)
				switch {
				case errors.Is(err, tasklock.ErrNotHeld):
					gone.Add(1)
				case err != nil:
					failed.Add(1)
					errOnce.Do(func() { first = err })
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, fmt.Errorf("P4: %d of %d releases failed: %w", failed.Load(), n, first)
	}
	res.lost = max(lost.Load(), gone.Load())
	closed = true
	if err := lk.Close(); err != nil {
		return nil, fmt.Errorf("P4: close: %w", err)
	}
	return res, nil
}

// writeHeapProfile writes the live heap, after a collection, to path.
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("lockbench: %w", err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return fmt.Errorf("lockbench: %w", err)
	}
	return nil
}

// heapAfterGC returns the live heap after a full collection.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

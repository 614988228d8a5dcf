package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/memstore"
)

const demoUsage = `Usage: tasklock demo [--workers N] [--duration D]

Starts N workers (default 5) in this process that compete for one lock,
"demo-job", for D (default 6s), over an in-process store: no server is
needed. Each worker has its own Locker, as separate hosts would have, and
obtains the lock with a TTL of 1s. A holder works for a moment, writing to
a fenced register under its fence, and releases the lock.

Halfway through, the worker holding the lock crashes: it stops renewing
and never releases. The others take over once its lease expires, within
the TTL.

Each grant prints the time since the start, the worker, the fence and how
long the worker waited. The summary counts grants, distinct holders, the
stale writes the register rejected (0: no two holders overlapped), and the
highest fence.
`

// Demo settings.
const (
	demoKey      = "demo-job"
	demoTTL      = time.Second
	demoWrites   = 3                     // register writes per grant
	demoWriteGap = 80 * time.Millisecond // work before each write
	maxWorkers   = 100
)

// runDemo is the demo command.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	workers := fs.Int("workers", 5, "")
	duration := fs.Duration("duration", 6*time.Second, "")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, demoUsage)
		return exitOK
	case err != nil:
		err = flagError(err)
	case *workers < 1 || *workers > maxWorkers:
		err = usagef("--workers must be between 1 and %d, got %d", maxWorkers, *workers)
	case *duration <= 0:
		err = usagef("--duration must be positive, got %v", *duration)
	case fs.NArg() > 0:
		err = usagef("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock demo: %v\nRun 'tasklock help demo' for usage.\n", err)
		return exitUsage
	}
	d := &demo{out: stdout, mem: memstore.New(nil), workers: *workers, duration: *duration}
	return d.run()
}

// demo is one run of the demo command.
type demo struct {
	out      io.Writer
	mem      *memstore.Store
	workers  int
	duration time.Duration
	start    time.Time
	reg      tasklock.FencedRegister
	crashed  atomic.Bool // a worker has crashed

	mu      sync.Mutex // guards the output and the counts below
	grants  int
	holders map[string]bool
}

func (d *demo) run() int {
	ctx, cancel := context.WithTimeout(context.Background(), d.duration)
	defer cancel()
	d.start = time.Now()
	d.holders = make(map[string]bool)
	fmt.Fprintf(d.out, "%d workers compete for lock %q (TTL %v) for %v over an in-process store;\n"+
		"the holder at %v crashes without releasing it.\n\n",
		d.workers, demoKey, demoTTL, d.duration, d.duration/2)
	fmt.Fprintf(d.out, "%8s  %-10s  %s\n", "time", "worker", "event")

	var wg sync.WaitGroup
	for i := range d.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.worker(ctx, fmt.Sprintf("worker-%d", i+1))
		}()
	}
	wg.Wait()

	accepted, stale := d.reg.Counts()
	fmt.Fprintf(d.out, "\nsummary: %d grants, %d distinct holders, %d stale writes rejected, max fence %d (%d writes accepted)\n",
		d.grants, len(d.holders), stale, d.reg.Highest(), accepted)
	if stale > 0 {
		return exitSoftware
	}
	return exitOK
}

// printf prints one line about worker, with the time since the start.
func (d *demo) printf(worker, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%7.3fs  %-10s  %s\n", time.Since(d.start).Seconds(), worker, fmt.Sprintf(format, args...))
}

// worker obtains, works and releases until ctx ends or it crashes.
func (d *demo) worker(ctx context.Context, name string) {
	store := &crashableStore{Store: d.mem}
	lk, err := tasklock.New(store, &tasklock.Config{Owner: name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		d.printf(name, "cannot start: %v", err)
		return
	}
	defer lk.Close()
	opts := &tasklock.ObtainOptions{TTL: demoTTL}
	for {
		asked := time.Now()
		l, err := lk.Obtain(ctx, demoKey, opts)
		if err != nil {
			return // the demo is over
		}
		d.mu.Lock()
		d.grants++
		d.holders[name] = true
		d.mu.Unlock()
		d.printf(name, "fence %-3d  granted after waiting %v", l.Fence(), time.Since(asked).Round(time.Millisecond))

		if time.Since(d.start) >= d.duration/2 && d.crashed.CompareAndSwap(false, true) {
			// From now on every call this worker makes to the store fails,
			// as if its process had died: no renewal, no release. Close
			// only ends its goroutines; the lease stays until its TTL.
			store.crashed.Store(true)
			d.printf(name, "fence %-3d  CRASHES holding the lock: no more renewals, no release", l.Fence())
			return
		}
		d.work(name, l)
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_ = l.Release(rctx)
		rcancel()
		// Rest a little, so that a waiting worker gets the next turn.
		t := time.NewTimer(time.Duration(20+rand.IntN(40)) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// work writes to the register under the lock's fence a few times, and stops
// if the lock is lost.
func (d *demo) work(name string, l *tasklock.Lock) {
	for range demoWrites {
		t := time.NewTimer(demoWriteGap + time.Duration(rand.IntN(20))*time.Millisecond)
		select {
		case <-t.C:
		case <-l.Done():
			t.Stop()
			d.printf(name, "fence %-3d  lost the lock: %v", l.Fence(), l.Err())
			return
		}
		if err := d.reg.Write(l.Fence()); err != nil {
			d.printf(name, "fence %-3d  write REJECTED: %v", l.Fence(), err)
		}
	}
}

// errCrashed is what a crashed worker's store calls return.
var errCrashed = errors.New("demo: worker crashed")

// crashableStore is one worker's view of the shared store: once crashed,
// every call fails, like the calls of a process that died.
type crashableStore struct {
	*memstore.Store
	crashed atomic.Bool
}

func (s *crashableStore) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if s.crashed.Load() {
		return driver.Grant{}, errCrashed
	}
	return s.Store.Acquire(ctx, p)
}

func (s *crashableStore) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	if s.crashed.Load() {
		return nil, errCrashed
	}
	return s.Store.Renew(ctx, ps)
}

func (s *crashableStore) Release(ctx context.Context, p driver.ReleaseParams) error {
	if s.crashed.Load() {
		return errCrashed
	}
	return s.Store.Release(ctx, p)
}

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
	"github.com/tasklock/tasklock/fence"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/memstore"
)

const demoUsage = `Usage: tasklock demo [--duration D] [--nodes N] [--jobs N] [--keep]
       tasklock demo --lock [--workers N] [--duration D]

Runs a small cluster on this machine with nothing to install: N (default
3) "tasklock serve" processes (this program, started again) share a
SQLite store in a temporary directory and run J (default 3, at most 6)
jobs that are due every second, for D (default 20s), and one more,
"sharded", with shards: 3: each of its ticks is 3 shard-runs spread over
the live nodes. With 3 jobs or more the last waits for the first (after:,
within: 2s). Each job is a command (this program again) that appends its
tick, its shard, the fence of the job's (or the shard's) lock and its
node to a file in that directory: a record of what really ran, kept
apart from the store's ledger.

Halfway through, the node that has just started a run is killed with
SIGKILL, as a crash would kill it, and a second later it is started
again under a new name (its old name stays taken in the store until the
dead process's lease on it expires). A shard-run the killed node left
unfinished is retaken by another node once that lease has ended, about
10s after the kill: the demo waits past D for it, up to 14s after the
kill. At the end every node gets SIGTERM and the directory is removed;
--keep keeps it (the store, the file of runs, each node's configuration
and log, and a copy of this program, which the configurations name, so
that "tasklock serve --config node-1.yaml" there starts a node again).

One line per tick shows, for each job, the node that ran it and the fence
of the job's lock; for "sharded", how many of its shards ran and the node
that ran each ("3/3 n1 n2 n3"; "(k)": cut short by the kill). The summary
counts the ticks from the first whole second at which every node was up
to the end:

  ticks due    jobs x seconds
  runs         ticks whose command ran (the file has a line for them)
  duplicates   runs of a tick beyond its first: must be 0
  missed       ticks that no node claimed, or that were claimed too late
               and passed over by the misfire policy: 0 while a node is up
  skipped      ticks that came while the job's previous run still held the
               job's lock: after the kill, until the dead node's lease on
               that lock ran out (lock_ttl 2s); overlap: skip at work
  lost         ticks the killed node had claimed but not started: the
               ledger keeps them claimed, so nobody runs them; a crash
               costs a tick, never a second run
  interrupted  runs the kill cut short (they ran, their end was never
               recorded); counted in runs too

and, on a line of its own, the sharded job's shard-runs the same way
(3 a tick), with "retaken": shard-runs the kill cut short that another
node ran again to the end, counted once in ran; a duplicate there is a
shard-run that ran to the end twice.

Ctrl-C stops the nodes, prints the summary so far and exits 130; the
nodes never outlive the demo (on Linux not even when it is killed).

--lock runs the older demo instead, in this process: --workers workers
(default 5) compete for one lock, "demo-job", for D (default 6s) over an
in-process store. Each has its own Locker, obtains the lock with a TTL of
1s, writes to a fenced register under its fence and releases it. Halfway
through, the holder crashes: it stops renewing and never releases, and
the others take over once its lease expires. Its summary counts grants,
distinct holders and the stale writes the register rejected (0: no two
holders overlapped).

Exit status: 0 when nothing ran twice (no duplicates, no stale writes);
70 otherwise, or when nothing ran at all; 69 when the nodes could not be
started; 64 bad usage; 130 after Ctrl-C.
`

// Demo settings.
const (
	demoKey      = "demo-job"
	demoTTL      = time.Second
	demoWrites   = 3                     // register writes per grant
	demoWriteGap = 80 * time.Millisecond // work before each write
	maxWorkers   = 100

	defaultClusterDuration = 20 * time.Second
	defaultLockDuration    = 6 * time.Second
	minClusterDuration     = 5 * time.Second
	maxNodes               = 9
)

// demoJobCmd is the hidden first argument of "tasklock demo" that makes it
// the demo's job command.
const demoJobCmd = "__job"

// clusterOptions are the demo's checked flags without --lock.
type clusterOptions struct {
	duration time.Duration
	nodes    int
	jobs     int
	keep     bool
}

// runDemo is the demo command.
func runDemo(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == demoJobCmd {
		return runDemoJob(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	lock := fs.Bool("lock", false, "")
	workers := fs.Int("workers", 5, "")
	duration := fs.Duration("duration", 0, "")
	nodes := fs.Int("nodes", 3, "")
	jobs := fs.Int("jobs", 3, "")
	keep := fs.Bool("keep", false, "")
	err := fs.Parse(args)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	bound := checkDurations(fs) // --duration at most 8760h, as every duration
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, demoUsage)
		return exitOK
	case err != nil:
		err = flagError(fs, err)
	case fs.NArg() > 0:
		err = usagef("unexpected argument %s", redact.Quote(fs.Arg(0)))
	case bound != nil:
		err = bound
	case set["duration"] && *duration <= 0:
		err = usagef("--duration must be positive, got %v", *duration)
	case *lock && (set["nodes"] || set["jobs"] || set["keep"]):
		err = usagef("--nodes, --jobs and --keep do not go with --lock")
	case *lock && (*workers < 1 || *workers > maxWorkers):
		err = usagef("--workers must be between 1 and %d, got %d", maxWorkers, *workers)
	case !*lock && set["workers"]:
		err = usagef("--workers goes with --lock only")
	case !*lock && (*nodes < 2 || *nodes > maxNodes):
		err = usagef("--nodes must be between 2 and %d (one is killed halfway), got %d", maxNodes, *nodes)
	case !*lock && (*jobs < 1 || *jobs > len(demoJobNames)):
		err = usagef("--jobs must be between 1 and %d, got %d", len(demoJobNames), *jobs)
	case !*lock && set["duration"] && *duration < minClusterDuration:
		err = usagef("--duration must be at least %v, to leave time for the kill and the restart; got %v", minClusterDuration, *duration)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock demo: %v\nRun 'tasklock help demo' for usage.\n", err)
		return exitUsage
	}
	if *lock {
		if !set["duration"] {
			*duration = defaultLockDuration
		}
		d := &demo{out: stdout, mem: memstore.New(nil), workers: *workers, duration: *duration}
		return d.run()
	}
	if !set["duration"] {
		*duration = defaultClusterDuration
	}
	return runClusterDemo(clusterOptions{duration: *duration, nodes: *nodes, jobs: *jobs, keep: *keep}, stdout, stderr)
}

// demoJobNames name the cluster demo's jobs.
var demoJobNames = []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}

// demo is one run of the lock demo (--lock).
type demo struct {
	out      io.Writer
	mem      *memstore.Store
	workers  int
	duration time.Duration
	start    time.Time
	reg      fence.Register
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
	switch {
	case stale > 0:
		return exitSoftware
	case d.grants == 0: // as the help says: 70 when nothing ran at all
		fmt.Fprintf(d.out, "FAIL: nothing ran\n")
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

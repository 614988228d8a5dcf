//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/etcdstore"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/redisstore"
	"github.com/tasklock/tasklock/redlock"
	"github.com/tasklock/tasklock/zkstore"
)

// errLeaseEnded matches a start of COMMAND that the supervisor refused
// because the lock's lease had ended, or was about to, by then (Linux).
var errLeaseEnded = errors.New("the lock's lease ended before COMMAND could start")

const execUsage = `Usage: tasklock exec --store URL --key NAME [flags] -- COMMAND [ARGS...]

Runs COMMAND while holding the lock NAME in the store at URL, so that of
all the hosts running the same line, one runs COMMAND at a time. The lock
is renewed while COMMAND runs and released when it exits.

Flags:
  --store URL       the store; default $TASKLOCK_STORE (see "tasklock help")
  --key NAME        the lock's name (required)
  --ttl D           lease length at the store: a holder that dies is
                    replaced within D (default 10s); on etcd and ZooKeeper
                    the lock lives on the store's session, so a dead holder
                    is replaced when the session expires (session_ttl,
                    default 11s; session_timeout, default 10s)
  --wait D          how long to wait while the lock is held elsewhere;
                    0 makes a single attempt (default 0s)
  --max-hold D      stop COMMAND D after the lock was obtained (default 0,
                    no limit)
  --min-hold D      keep the lock until D after it was obtained, even when
                    COMMAND ends sooner, so that other hosts skip this run
                    (default 0)
  --kill-grace D    time from SIGTERM to SIGKILL when COMMAND must stop;
                    must be less than half of --ttl (default 2s)
  --owner NAME      the owner name other hosts see (default host:pid); no
                    control characters
  --shared          hold the read side of the read-write lock NAME: any
                    number of --shared holders run at once, none while an
                    --exclusive one runs or waits (writers are not starved)
  --exclusive       hold the write side of the read-write lock NAME: alone,
                    with no --shared holder
  --permits N       hold one of N permits of the semaphore NAME: at most N
                    holders run at once (1 to 10000; every holder must give
                    the same N while any holds a permit)
  --verbose         log progress to stderr (default: warnings only); on a
                    redlock:// store, first warn of each node that does not
                    answer PING within 1s, as "tasklock locks list" does
Durations are Go durations: 300ms, 10s, 1h30m; at most 8760h (365 days).

Without --shared, --exclusive or --permits, NAME is a plain lock (a mutex).
The plain lock NAME is another lock than the read-write lock NAME and the
semaphore NAME: a plain lock does not exclude --shared holders, so give
writers --exclusive. The read-write lock NAME and the semaphore NAME share
the name: while one of them is held, the other (or the semaphore with
another N) is refused with exit 64. At most one of the three flags.

COMMAND gets TASKLOCK_KEY, TASKLOCK_FENCE, TASKLOCK_OWNER and TASKLOCK_MODE
(mutex, read, write or permit) in its environment. TASKLOCK_FENCE grows
with every grant of the lock: pass it to what COMMAND writes to, so that a
stale holder's writes can be refused. A --shared holder's fence is that of
the last --exclusive holder.
Every other variable whose name starts with TASKLOCK_ is removed from
COMMAND's environment: TASKLOCK_STORE (which may hold the store's
password), TASKLOCK_TOKEN and the rest. A COMMAND that needs the store URL
gets it under another name: STORE_URL=... tasklock exec ... -- COMMAND.
COMMAND runs in its own process group (so it cannot read a terminal), with
stdin, stdout and stderr passed through.

Nothing COMMAND starts outlives it (Linux): COMMAND runs under a
supervisor, "tasklock __supervise", a child subreaper, so every process
COMMAND starts stays in its tree, whatever process group or session it
moves to (setsid, nohup, a daemon's double fork). The supervisor kills all
of them when COMMAND exits, when COMMAND gets SIGKILL, when tasklock dies,
even by SIGKILL, and when the lease ends while tasklock is stopped
(SIGSTOP, Ctrl-Z) or starved and cannot stop COMMAND itself: at the end of
the lease's local validity, the time of the SIGKILL below, after which
tasklock exits 70 once it runs again. So what COMMAND leaves running in
the background is killed when it ends: wait for it in COMMAND. Only what
leaves the tree through another service escapes (systemd-run, at, a daemon
manager, ssh), and processes running as another user, which tasklock may
not signal; if the supervisor itself is SIGKILLed, tasklock kills
COMMAND's process group only. The supervisor costs about 10-15 ms per
start and 3-4 MB of private memory while COMMAND runs. On other systems
COMMAND is tasklock's own child: signals reach its process group only, and
it outlives a tasklock that is SIGKILLed.

Lock loss: when the store no longer has the lease, or it could not be
renewed in time, tasklock says so naming the store (its URL without
secrets), sends SIGTERM to COMMAND's process group and SIGKILL (to every
process COMMAND started, on Linux) --kill-grace later, and once COMMAND
has exited gives the store at most 1s more to take the release and close
the connection (a killed or frozen store is not waited for: the lease or
session ends at the store by itself), then exits 70. When renewals fail,
the SIGTERM comes --kill-grace before the lease's local validity ends, so
the SIGKILL lands before the lease could expire at the store and another
host could obtain it. When the store says the lease is gone (deleted, or
lost in a server restart) it is already too late for that: use
TASKLOCK_FENCE.

--max-hold: COMMAND's process group gets SIGTERM D after the lock was
obtained and SIGKILL --kill-grace later, while the lock is still held and
renewed; it is released only once COMMAND has exited, so the next holder
never overlaps it. tasklock then exits 70.

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to tasklock (Ctrl-C and
Ctrl-\ at a terminal too) are passed on to COMMAND's process group,
followed by SIGCONT so that a stopped COMMAND (one that read the terminal
gets SIGTTIN) sees them too; tasklock waits for COMMAND, releases the lock
and exits with COMMAND's status. While tasklock waits for the lock, they
end the wait (exit 128+N).

Exit status:
  64   bad usage (the message names the flag), a --ttl longer than the
       session of an etcd or ZooKeeper store (raise its session_ttl or
       session_timeout), NAME held as another kind of lock (--shared or
       --exclusive against --permits, or another --permits N), or a kind
       the store cannot keep (--shared, --exclusive or --permits on redlock
       or mode=connection)
  69   store unreachable, failing or refusing the URL's credentials (or,
       with ?migrate=false, its table not migrated)
  70   lock lost or --max-hold reached while COMMAND ran (also when the
       lease is found gone only as COMMAND ended)
  75   lock held elsewhere and not obtained within --wait
  126  COMMAND could not be run; 127 COMMAND not found
  else COMMAND's exit status, or 128+N when signal N killed it
`

// releaseTimeout bounds the Release after COMMAND exits.
const releaseTimeout = 5 * time.Second

// lostTimeout bounds what exec still asks of the store once the lock was
// lost while COMMAND ran (the release, closing the Locker and the
// connection, an etcd session's revoke): the store may be gone or frozen,
// and waiting for it only delays the exit. What is left undone then ends at
// the store by itself (the lease, the session).
const lostTimeout = time.Second

// openTimeout bounds connecting to the store and its first PING.
const openTimeout = 10 * time.Second

// execConfig holds exec's checked flags.
type execConfig struct {
	store     string
	storeEnv  bool // store came from $TASKLOCK_STORE
	key       string
	ttl       time.Duration
	wait      time.Duration
	maxHold   time.Duration
	minHold   time.Duration
	killGrace time.Duration
	owner     string
	verbose   bool
	shared    bool // --shared: a reader of the read-write lock
	exclusive bool // --exclusive: the writer of the read-write lock
	permits   int  // --permits: one of a semaphore's permits; 0 without
	argv      []string
}

// parseExec parses and checks exec's arguments. It returns flag.ErrHelp for
// -h, and a *usageError naming the flag for every mistake.
func parseExec(args []string, getenv func(string) string) (*execConfig, error) {
	c := &execConfig{}
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.store, "store", "", "")
	fs.StringVar(&c.key, "key", "", "")
	fs.DurationVar(&c.ttl, "ttl", tasklock.DefaultTTL, "")
	fs.DurationVar(&c.wait, "wait", 0, "")
	fs.DurationVar(&c.maxHold, "max-hold", 0, "")
	fs.DurationVar(&c.minHold, "min-hold", 0, "")
	fs.DurationVar(&c.killGrace, "kill-grace", 2*time.Second, "")
	fs.StringVar(&c.owner, "owner", "", "")
	fs.BoolVar(&c.verbose, "verbose", false, "")
	fs.BoolVar(&c.shared, "shared", false, "")
	fs.BoolVar(&c.exclusive, "exclusive", false, "")
	// Base 10 only: flag.IntVar would read --permits 010 as 8 and 0x10 as 16.
	fs.Func("permits", "", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("not a whole number between 1 and %d", tasklock.MaxPermits)
		}
		c.permits = n
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, flagError(fs, err)
	}
	c.argv = fs.Args()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// The flag package takes the next argument as a value, even the --
	// that ends the flags or another flag: "--key -- COMMAND" would run
	// COMMAND under the lock "--".
	for _, name := range []string{"store", "key", "owner"} {
		if v := fs.Lookup(name).Value.String(); set[name] && takenFlag(fs, v) {
			return nil, usagef("--%s needs a value: it took %s", name, redact.Quote(v))
		}
	}

	if !set["store"] {
		c.store, c.storeEnv = getenv("TASKLOCK_STORE"), true
	}
	switch {
	case c.store == "" && set["store"]:
		return nil, usagef("--store is empty")
	case c.store == "":
		return nil, usagef("--store is required (or set TASKLOCK_STORE)")
	case !set["key"]:
		return nil, usagef("--key is required")
	}
	if err := tasklock.ValidateKey(c.key); err != nil {
		var oe *tasklock.OptionError
		if errors.As(err, &oe) {
			return nil, usagef("invalid --key %s: %s", redact.Quote(c.key), oe.Reason)
		}
		return nil, usagef("invalid --key %s: %v", redact.Quote(c.key), err)
	}
	if err := checkDurations(fs); err != nil {
		return nil, err
	}
	switch {
	case c.ttl <= 0:
		return nil, usagef("--ttl must be positive, got %v", c.ttl)
	case c.ttl < tasklock.MinTTL:
		return nil, usagef("--ttl %v is below the minimum %v", c.ttl, tasklock.MinTTL)
	case c.wait < 0:
		return nil, usagef("--wait must not be negative, got %v", c.wait)
	case c.maxHold < 0:
		return nil, usagef("--max-hold must not be negative, got %v", c.maxHold)
	case c.minHold < 0:
		return nil, usagef("--min-hold must not be negative, got %v", c.minHold)
	case c.maxHold > 0 && c.minHold > c.maxHold:
		return nil, usagef("--min-hold %v is longer than --max-hold %v", c.minHold, c.maxHold)
	case c.killGrace < 0:
		return nil, usagef("--kill-grace must not be negative, got %v", c.killGrace)
	case c.killGrace >= c.ttl/2 && !set["kill-grace"]:
		// --ttl 3s alone: name the default the user did not type.
		return nil, usagef("--kill-grace %v (the default) must be less than half of --ttl %v: lower --kill-grace or raise --ttl", c.killGrace, c.ttl)
	case c.killGrace >= c.ttl/2:
		return nil, usagef("--kill-grace %v must be less than half of --ttl %v", c.killGrace, c.ttl)
	case set["owner"] && c.owner == "":
		return nil, usagef("--owner is empty (leave it out for host:pid)")
	case len(c.owner) > tasklock.MaxOwnerLen:
		return nil, usagef("--owner is %d bytes long, the maximum is %d", len(c.owner), tasklock.MaxOwnerLen)
	case redact.CheckName(c.owner) != "":
		return nil, usagef("--owner %s: %s", redact.Quote(c.owner), redact.CheckName(c.owner))
	case set["permits"] && (c.permits < 1 || c.permits > tasklock.MaxPermits):
		return nil, usagef("--permits must be between 1 and %d, got %d", tasklock.MaxPermits, c.permits)
	case btoi(c.shared)+btoi(c.exclusive)+btoi(set["permits"]) > 1:
		return nil, usagef("--shared, --exclusive and --permits exclude each other: give at most one")
	case len(c.argv) == 0:
		return nil, usagef("missing COMMAND after the flags (tasklock exec [flags] -- COMMAND [ARGS...])")
	case c.argv[0] == "":
		return nil, usagef("COMMAND is empty")
	}
	kind := "" // the flag of a kind other than a plain lock
	switch {
	case c.shared:
		kind = "--shared"
	case c.exclusive:
		kind = "--exclusive"
	case set["permits"]:
		kind = "--permits"
	}
	if plain := storeurl.PlainOnly(c.store); kind != "" && plain != "" {
		return nil, usagef("%s: a %s store keeps plain locks only, no read-write lock or semaphore", kind, plain)
	}
	return c, nil
}

// takenFlag reports whether v, a flag's value, is what the user meant as
// the next flag: the -- that ends the flags, or a flag of fs (--wait,
// -ttl=5s).
func takenFlag(fs *flag.FlagSet, v string) bool {
	if v == "--" {
		return true
	}
	name, ok := strings.CutPrefix(v, "-")
	if !ok {
		return false
	}
	name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
	return fs.Lookup(name) != nil
}

// runExec is the exec command.
func runExec(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := parseExec(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, execUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock exec: %v\nRun 'tasklock help exec' for usage.\n", err)
		return exitUsage
	}
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	redis.SetLogger(redisLogger{log})
	_ = mysql.SetLogger(mysqlLogger{log})
	e := &execRun{c: c, log: log, stdin: stdin, stdout: stdout, stderr: stderr}
	return e.run()
}

// execRun is one run of exec.
type execRun struct {
	c      *execConfig
	log    *slog.Logger
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// lostBy is when exec stops waiting for the store once the lock was
	// lost (lostTimeout after it was seen); zero while it was not.
	lostBy time.Time
	// end follows the end of the lease, for the supervisor.
	end *leaseWatch
}

// leaseWatch follows, from the Locker's events, the last moment COMMAND may
// run under the lease: its local validity plus --kill-grace, when exec
// itself would send SIGKILL (sent time + TTL − drift, before the store can
// let the lease go). The supervisor kills COMMAND and all it started then
// by itself, should exec be stopped or starved and miss it.
type leaseWatch struct {
	grace time.Duration
	moved chan struct{} // ticks when at moves later
	mu    sync.Mutex
	at    time.Time
}

// newLeaseWatch returns a leaseWatch for --kill-grace grace.
func newLeaseWatch(grace time.Duration) *leaseWatch {
	return &leaseWatch{grace: grace, moved: make(chan struct{}, 1)}
}

// event is the Locker's OnEvent: exec holds one lock, whose grant and
// renewals move the end later. It does not block.
func (le *leaseWatch) event(ev tasklock.Event) {
	if (ev.Type != tasklock.EventObtained && ev.Type != tasklock.EventRenewed) || ev.ValidUntil.IsZero() {
		return
	}
	t := ev.ValidUntil.Add(le.grace)
	le.mu.Lock()
	later := t.After(le.at)
	if later {
		le.at = t
	}
	le.mu.Unlock()
	if later {
		select {
		case le.moved <- struct{}{}:
		default:
		}
	}
}

// get is the end as last moved.
func (le *leaseWatch) get() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.at
}

// storeName is the store's URL as messages show it: without secrets.
func (e *execRun) storeName() string { return redact.URL(e.c.store) }

// shutdown closes the Locker (nil: not created) and then the store
// connection. After a loss it waits for them until lostBy only: a store
// that was killed or froze would hold exec up to the clients' own
// timeouts (an etcd session's revoke waits 5s), long after COMMAND was
// stopped.
func (e *execRun) shutdown(lk *tasklock.Locker, closeStore func() error) {
	done := make(chan error, 1)
	go func() {
		if lk != nil {
			_ = lk.Close()
		}
		done <- closeStore()
	}()
	var timeout <-chan time.Time
	if !e.lostBy.IsZero() {
		t := time.NewTimer(time.Until(e.lostBy))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case err := <-done:
		if err != nil {
			e.log.Warn("closing the store connection", "store", e.storeName(), "err", err)
		}
	case <-timeout:
		// The process exits now: the connection goes with it, and the
		// store ends what is left (the lease, the etcd or ZooKeeper
		// session) by itself, as it does for a holder that died.
		e.log.Warn("the store did not answer within "+lostTimeout.String()+" of the loss: exiting without waiting for the release and the connection's close; "+leaseEnd(e.c.store),
			"store", e.storeName())
	}
}

// leaseEnd says how a lease left behind ends on the store at storeURL: on
// etcd and ZooKeeper with the store's session, elsewhere by its own TTL.
func leaseEnd(storeURL string) string {
	scheme, _, _ := strings.Cut(strings.ToLower(storeURL), "://")
	switch scheme {
	case "etcd", "etcds":
		return "the lease (the etcd session) ends at the store at its session_ttl"
	case "zk":
		return "the lease (the ZooKeeper session) ends at the store at its session_timeout"
	case "mem":
		return "the lease (in this process) ends with it"
	default:
		return "the lease ends at the store at its TTL"
	}
}

// failf prints a message naming why tasklock exits.
func (e *execRun) failf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "tasklock exec: "+format+"\n", args...)
}

func (e *execRun) run() int {
	c := e.c
	sigs := make(chan os.Signal, 8)
	// SIGQUIT too: Ctrl-\ at a terminal reaches tasklock's process group,
	// not COMMAND's, and Go's own handling (a goroutine dump, exit 2)
	// would leave the lock at the store until its TTL.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	// Until COMMAND runs, a signal ends the attempt to get the lock.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		gotSig   os.Signal
		watching = make(chan struct{})
		watched  sync.WaitGroup
	)
	watched.Add(1)
	go func() {
		defer watched.Done()
		select {
		case s := <-sigs:
			gotSig = s
			cancel()
		case <-watching:
		}
	}()
	var stopOnce sync.Once
	stopWatching := func() os.Signal {
		stopOnce.Do(func() {
			close(watching)
			watched.Wait()
		})
		return gotSig
	}
	defer stopWatching()

	openCtx, openCancel := context.WithTimeout(ctx, openTimeout)
	store, closeStore, err := storeurl.Open(openCtx, c.store)
	openCancel()
	if err != nil {
		if s := stopWatching(); s != nil {
			e.failf("interrupted by %s while connecting to the store", sigName(s))
			return 128 + sigNum(s)
		}
		e.failf("%v", fromEnv(err, c.storeEnv))
		return openExit(err)
	}
	var lk *tasklock.Locker
	defer func() { e.shutdown(lk, closeStore) }()
	if rs, ok := store.(*redlock.Store); ok && c.verbose {
		e.warnRedlockNodes(ctx, rs)
	}

	e.end = newLeaseWatch(c.killGrace)
	lk, err = tasklock.New(store, &tasklock.Config{Owner: c.owner, Logger: e.log, OnEvent: e.end.event})
	if err != nil {
		stopWatching()
		e.failf("%v", err)
		return exitUsage
	}

	l, err := e.obtain(ctx, lk)
	if s := stopWatching(); s != nil {
		if l != nil {
			e.release(l)
		}
		e.failf("interrupted by %s while obtaining lock %q", sigName(s), c.key)
		return 128 + sigNum(s)
	}
	if err != nil {
		return e.obtainFailed(err)
	}
	e.log.Info("lock obtained", "key", c.key, "owner", l.Owner(), "fence", l.Fence())
	obtainedAt := time.Now()

	ch, err := startCommand(e.command(l))
	if lost := l.Err(); err != nil && (errors.Is(err, errLeaseEnded) || lost != nil && !errors.Is(lost, tasklock.ErrReleased)) {
		// tasklock was held up so long after the grant that the lease
		// ended before COMMAND could start: the supervisor refused it, by
		// its kill-by time, which may pass just before the Lock ends.
		if lost == nil {
			lost = err
		}
		e.lostBy = time.Now().Add(lostTimeout)
		e.failf("lock %q lost before COMMAND could start (store %s): %v", c.key, e.storeName(), lost)
		e.release(l)
		return exitSoftware
	}
	if err != nil {
		e.release(l)
		// COMMAND's name is quoted, and so is the error, which may hold
		// it raw (fork/exec NAME: ...).
		e.failf("cannot run %s: %s", redact.Quote(c.argv[0]), redact.Printable(err.Error()))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	e.log.Info("command started", "pid", ch.pid, "command", c.argv[0])
	status, stopped := e.supervise(ch, l, sigs, obtainedAt)
	if err := l.Err(); err != nil && !errors.Is(err, tasklock.ErrReleased) {
		// Lost: the store may not answer (killed, frozen); exit soon.
		e.lostBy = time.Now().Add(lostTimeout)
		e.log.Info("lock lost: releasing it and closing the store connection within "+lostTimeout.String(), "store", e.storeName())
	}
	// A lock found gone only at the release was lost while COMMAND ran,
	// as one a renewal finds gone is: another holder may have run beside
	// it (exit 70, not COMMAND's status).
	if gone := e.release(l); stopped || gone {
		return exitSoftware
	}
	return status
}

// warnRedlockNodes logs at WARN, as locks list warns, each node of s, a
// RedLock store, that does not answer (redlockNodesDown): the lock will be
// obtained on a quorum, which says nothing of the minority that failed
// it, and the next node lost would stop every lock. exec checks once, with
// --verbose only; a signal that ends the check shows nothing of it.
func (e *execRun) warnRedlockNodes(ctx context.Context, s *redlock.Store) {
	warnings := redlockNodesDown(ctx, s, e.c.store)
	if ctx.Err() != nil {
		return
	}
	for _, w := range warnings {
		e.log.Warn(w)
	}
}

// obtain makes one attempt, or waits up to --wait.
func (e *execRun) obtain(ctx context.Context, lk *tasklock.Locker) (*tasklock.Lock, error) {
	// Grace: Done closes --kill-grace before local validity ends, so
	// SIGTERM then SIGKILL both land before the lease can expire.
	opts := &tasklock.ObtainOptions{TTL: e.c.ttl, MinHold: e.c.minHold, Grace: e.c.killGrace, Wait: e.c.wait}
	try := e.c.wait == 0
	switch {
	case e.c.shared && try:
		return lk.RWMutex(e.c.key).TryRLock(ctx, opts)
	case e.c.shared:
		return lk.RWMutex(e.c.key).RLock(ctx, opts)
	case e.c.exclusive && try:
		return lk.RWMutex(e.c.key).TryLock(ctx, opts)
	case e.c.exclusive:
		return lk.RWMutex(e.c.key).Lock(ctx, opts)
	case e.c.permits > 0 && try:
		return lk.Semaphore(e.c.key, e.c.permits).TryAcquire(ctx, opts)
	case e.c.permits > 0:
		return lk.Semaphore(e.c.key, e.c.permits).Acquire(ctx, opts)
	case try:
		return lk.TryObtain(ctx, e.c.key, opts)
	}
	return lk.Obtain(ctx, e.c.key, opts)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// obtainFailed reports why the lock was not obtained and returns the exit
// status.
func (e *execRun) obtainFailed(err error) int {
	var ne *tasklock.NotObtainedError
	var oe *tasklock.OptionError
	switch {
	case errors.As(err, &ne) || errors.Is(err, tasklock.ErrNotObtained):
		holder := "another owner"
		if ne != nil && ne.Owner != "" {
			holder = redact.Printable(ne.Owner)
		}
		lease := "" // the holder's lease left, when the store tells
		if ne != nil && ne.TTL > 0 {
			lease = " (its lease ends in " + ne.TTL.Round(time.Millisecond).String() + ")"
		}
		within := "at once (--wait 0)"
		if e.c.wait > 0 {
			within = "within --wait " + e.c.wait.String()
		}
		switch {
		case e.c.permits > 0:
			e.failf("all %d permits of semaphore %q are held, the first to end by %s%s; not obtained %s", e.c.permits, e.c.key, holder, lease, within)
		case e.c.shared:
			// A reader is refused by a writer that holds the key or
			// waits for it (driver.Kinder): say which may be the case.
			e.failf("read-write lock %q has a writer, %s, holding it or waiting for it (waiting writers go first)%s; not obtained %s", e.c.key, holder, lease, within)
		case e.c.exclusive:
			e.failf("read-write lock %q is held by %s%s; not obtained %s", e.c.key, holder, lease, within)
		default:
			e.failf("lock %q is held by %s%s; not obtained %s", e.c.key, holder, lease, within)
		}
		return exitTempFail
	case errors.As(err, &oe) || errors.Is(err, redisstore.ErrKey):
		e.failf("invalid --key %s: %v", redact.Quote(e.c.key), err)
		return exitUsage
	case errors.Is(err, etcdstore.ErrTTL):
		// etcd lease TTLs are whole seconds.
		e.failf("--ttl %v is longer than the etcd session TTL, which no lock may outlast: lower --ttl, or raise the session_ttl parameter of the store URL (default 11s), e.g. ?session_ttl=%v (%v)",
			e.c.ttl, (e.c.ttl + time.Second - 1).Truncate(time.Second), err)
		return exitUsage
	case errors.Is(err, zkstore.ErrTTL):
		e.failf("--ttl %v is longer than the ZooKeeper session timeout, which no lock may outlast: lower --ttl, or raise the session_timeout parameter of the store URL (default 10s; the server keeps it between its minSessionTimeout and maxSessionTimeout), e.g. ?session_timeout=%v (%v)",
			e.c.ttl, e.c.ttl, err)
		return exitUsage
	case errors.Is(err, tasklock.ErrKindMismatch):
		e.failf("lock %q is held as another kind of lock (a read-write lock, or a semaphore with another number of permits): give every holder the same flags (%v)", e.c.key, err)
		return exitUsage
	case errors.Is(err, tasklock.ErrUnsupported):
		// The store can never grant the lock as asked: retrying cannot help.
		e.failf("the store cannot grant lock %q as asked: %v", e.c.key, err)
		return exitUsage
	case e.c.wait > 0:
		// Not "held elsewhere": the store failed as the wait ended, and
		// the holder seen before may be long gone.
		e.failf("store failed while waiting for lock %q (--wait %v; store %s): %v", e.c.key, e.c.wait, e.storeName(), err)
		return exitUnavailable
	default:
		e.failf("store failed taking lock %q (store %s): %v", e.c.key, e.storeName(), err)
		return exitUnavailable
	}
}

// command is COMMAND with the lock's variables in its environment, and
// without tasklock's own (childEnv).
func (e *execRun) command(l *tasklock.Lock) commandSpec {
	return commandSpec{
		argv: e.c.argv,
		env: childEnv(os.Environ(),
			"TASKLOCK_KEY="+l.Key(),
			"TASKLOCK_FENCE="+strconv.FormatUint(l.Fence(), 10),
			"TASKLOCK_OWNER="+l.Owner(),
			"TASKLOCK_MODE="+l.Mode().String(),
		),
		stdin: e.stdin, stdout: e.stdout, stderr: e.stderr,
		killBy: e.end.get(),
	}
}

// supervise waits for COMMAND to exit, passing signals on and stopping it
// when the lock is lost or --max-hold passes. It returns COMMAND's exit
// status, and whether COMMAND ran without the lock or past --max-hold.
func (e *execRun) supervise(ch *command, l *tasklock.Lock, sigs <-chan os.Signal, obtainedAt time.Time) (status int, stopped bool) {
	var maxHold <-chan time.Time
	if e.c.maxHold > 0 {
		t := time.NewTimer(time.Until(obtainedAt.Add(e.c.maxHold)))
		defer t.Stop()
		maxHold = t.C
	}
	killTimer := time.NewTimer(time.Hour)
	killTimer.Stop()
	defer killTimer.Stop()
	var killAt <-chan time.Time

	// terminate sends SIGTERM to COMMAND's process group, and arms SIGKILL.
	terminate := func() {
		stopped = true
		ch.ask(syscall.SIGTERM)
		killTimer.Reset(e.c.killGrace)
		killAt = killTimer.C
	}
	done := l.Done()
	for {
		select {
		case <-ch.done:
			status = statusCode(ch.status)
			if !stopped {
				// Both may have happened at once: work that finished
				// without the lock is not reported as success.
				if err := l.Err(); err != nil && !errors.Is(err, tasklock.ErrReleased) {
					e.failf("lock %q lost while COMMAND ran (store %s): %v", e.c.key, e.storeName(), err)
					stopped = true
				}
			}
			if stopped {
				// Whatever COMMAND left running in its group must stop too.
				ch.signal(syscall.SIGKILL)
			}
			e.log.Info("command exited", "pid", ch.pid, "status", status)
			return status, stopped
		case <-done:
			done = nil
			if !stopped {
				e.failf("lock %q lost (store %s): %v; stopping COMMAND (pid %d): SIGTERM now, SIGKILL in %v",
					e.c.key, e.storeName(), l.Err(), ch.pid, e.c.killGrace)
				terminate()
			}
		case <-maxHold:
			maxHold = nil
			if !stopped {
				e.failf("--max-hold %v reached for lock %q; stopping COMMAND (pid %d): SIGTERM now, SIGKILL in %v",
					e.c.maxHold, e.c.key, ch.pid, e.c.killGrace)
				terminate()
			}
		case <-killAt:
			killAt = nil
			e.failf("COMMAND (pid %d) still running %v after SIGTERM; sending SIGKILL", ch.pid, e.c.killGrace)
			ch.signal(syscall.SIGKILL)
		case <-e.end.moved:
			ch.moveKillBy(e.end.get())
		case s := <-sigs:
			e.log.Info("passing signal on to COMMAND", "signal", sigName(s), "pid", ch.pid)
			ch.ask(s.(syscall.Signal))
		}
	}
}

// release gives the lock back, within releaseTimeout, or by lostBy once
// the lock was lost. It reports whether the store no longer had it, a loss
// no renewal had noticed.
func (e *execRun) release(l *tasklock.Lock) (gone bool) {
	lost := l.Err()
	deadline := time.Now().Add(releaseTimeout)
	if !e.lostBy.IsZero() {
		deadline = e.lostBy
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	err := l.Release(ctx)
	switch {
	case err == nil:
		e.log.Info("lock released", "key", e.c.key)
	case lost != nil && !errors.Is(lost, tasklock.ErrReleased):
		// Already reported as lost.
	case errors.Is(err, tasklock.ErrNotHeld):
		// Not "expires after its TTL": the store no longer had it.
		e.failf("lock %q was no longer held when COMMAND ended (store %s): it was released by force (tasklock locks release) or expired before a renewal could notice, so another holder may have run beside COMMAND (%v)",
			e.c.key, e.storeName(), err)
		return true
	default:
		e.log.Warn("release failed; the lease expires after its TTL", "key", e.c.key, "err", err)
	}
	return false
}

// sigNum is a signal's number, for the 128+N exit status.
func sigNum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 1
}

// redisLogger sends go-redis's own log lines to the command's logger.
type redisLogger struct{ log *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, args ...any) {
	r.log.InfoContext(ctx, "go-redis: "+redact.Text(fmt.Sprintf(format, args...)))
}

// mysqlLogger sends go-sql-driver/mysql's own log lines (broken
// connections it retries) to the command's logger, shown with --verbose.
type mysqlLogger struct{ log *slog.Logger }

func (m mysqlLogger) Print(v ...any) {
	m.log.Info("go-sql-driver/mysql: " + redact.Text(strings.TrimSpace(fmt.Sprint(v...))))
}

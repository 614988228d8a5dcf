//go:build unix

package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/internal/repeats"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

const serveUsage = `Usage: tasklock serve --config FILE [--store URL] [--node NAME] [--grace D]
                      [--verbose] [--label L]... [--log-format F] [--http ADDR] [--token T] [--public-read]
                      [--insecure] [--output-max N]

Runs the jobs of FILE on their schedules. Run it on as many hosts as you
like with the same file and store: every tick of every job runs once, on
one of them (the store's ledger decides), and runs of one job never
overlap unless the job says overlap: allow.

Flags:
  --config FILE   the configuration file (required); check it first with
                  "tasklock validate --config FILE"
  --store URL     the store; default $TASKLOCK_STORE, then the file's
                  store:, then sqlite://./tasklock.db
  --node NAME     this scheduler's node name; default $TASKLOCK_NODE, then
                  the file's node:, then host:pid
  --grace D       on SIGTERM or SIGINT, how long running jobs may finish
                  before they are stopped (default 30s)
  --verbose       log debug lines too
  --label L       a label of this node, for jobs with nodes: [...]; repeat
                  for more; given, they replace the file's labels:
  --log-format F  text (default: key=value lines) or json (one object a
                  line), on stderr
  --http ADDR     serve the dashboard (web UI and JSON API, see the
                  README) on ADDR (default 127.0.0.1:8080; if that is in
                  use, serve goes on without it); --http '' disables it
  --token T       the secret the dashboard asks for (bearer header or
                  login): every page and API call needs it, except
                  /healthz, /readyz, /api/openapi.json and /metrics;
                  default $TASKLOCK_TOKEN; without one the dashboard is
                  read-only and open to anyone who reaches it. It
                  travels in clear over plain HTTP: off loopback, put
                  serve behind a TLS proxy
  --public-read   with --token: anyone may read the pages and the GET API;
                  trigger, pause, resume and release still need the token
  --insecure      allow a non-loopback --http without a token
  --output-max N  how much of each run's output the history keeps, in
                  bytes (65536, 64KiB; at most 512KiB; 0 keeps none):
                  past it, its first and last halves with a line
                  "… N bytes cut …" between; given, it replaces the
                  file's output_max: (default 64KiB)
Durations are Go durations (300ms, 10s, 1h30m), at most 8760h (365 days).

The store and the node name are each taken from the first of: the flag,
the environment variable ($TASKLOCK_STORE, $TASKLOCK_NODE; empty counts as
unset), the file, the default. So "tasklock jobs list" and "tasklock locks
list", which read $TASKLOCK_STORE, see the store serve uses.

The file:

  store: sqlite://./tasklock.db      # default; see "tasklock help" for URLs
  node: web-1                        # this scheduler's name; default host:pid;
                                     # no control characters
  labels: [gpu, zone=eu]             # this node's labels (--label replaces them)
  pools: {reports: 2}                # fleet-wide: at most 2 runs of the pool's jobs at once
  notify:                            # on a change of a job's outcome (see below)
    on: [failure, timeout, lost, missed, interrupted, recovery]   # default: all
    webhook: {url: "https://hooks.example.com/x", secret_env: TASKLOCK_NOTIFY_SECRET, timeout: 10s}
    command: ["/usr/local/bin/page"]  # the notification as JSON on stdin
    attempts: 5                      # per target; backoff: 1s (doubling), max_time: 5m
  output_max: 64KiB                  # each run's output kept in history (head and tail past it)
  preferred_nodes: false             # true: each job's tick claimed by one node, the others 1s later as a fallback
  claim_ahead: 0s                    # up to 1s: claim a plain job's tick and take its lock that early, start at the tick
  jobs:
    - name: nightly-report           # required, unique
      schedule: "0 30 2 * * *"       # cron (seconds optional), @daily, "@every 10s"
      timezone: Europe/Berlin        # the schedule's zone; default UTC
      command: ["/usr/local/bin/report", "--all"]   # or http: (below)
      kill_grace: 2s                 # SIGTERM to SIGKILL; less than lock_ttl/2 when a lock is taken
      timeout: 10m                   # per attempt; default none
      overlap: skip                  # skip | allow
      misfire: {policy: once, grace: 30s, window: 1h}   # once | skip | catch_up (with max: N)
      retries: {max: 3, backoff: 10s, backoff_max: 1m}
      jitter: 0s                     # a random delay below it before each run; at most misfire's window, below the schedule's interval
      lock_ttl: 10s                  # the job lock's lease (or a pool's or max_concurrent's permit's);
                                     # an error with overlap: allow alone, which takes no lock
      min_hold: 5s                   # keep the lock at least this long
      max_hold: 1h                   # stop the run after this long, retries included
      run_on: any                    # any | leader: only the fleet's elected leader runs it
      max_concurrent: 0              # N > 0: up to N runs at once across the fleet (overlap allow, bounded)
      pool: reports                  # each run holds a permit of the pool while it runs
      pool_wait: 10m                 # wait for a permit up to this; default: until the next tick
      nodes: [zone=eu]               # only nodes with every one of these labels run it
      notify: {on: [failure, recovery]}   # replaces the keys it gives; notify: off for none
    - name: ping
      schedule: "@every 1m"
      http: {method: POST, url: "https://example.com/hook", headers: {Authorization: "Bearer x"}, body: "{}", timeout: 10s}
    - name: publish
      schedule: "0 45 2 * * *"
      timezone: Europe/Berlin
      after: [nightly-report]        # run each tick once these jobs have an ok run of a tick
                                     # since this job's previous one; no cycles
      within: 30m                    # else record the tick skipped after this long;
                                     # default: until the next tick
      command: ["/usr/local/bin/publish"]

Command jobs run without a shell, in their own process group, with stdin
from /dev/null and TASKLOCK_JOB, TASKLOCK_TICK (the scheduled instant, RFC
3339 UTC), TASKLOCK_FENCE, TASKLOCK_NODE, TASKLOCK_ATTEMPT, TASKLOCK_SHARD
and TASKLOCK_SHARDS (the shard-run's index, 0 to shards-1, and the job's
shards:, 0 and 1 when it has none) in their environment, and no other TASKLOCK_* variable of serve's: TASKLOCK_TOKEN,
TASKLOCK_STORE and the rest are removed. A job that needs the store URL
gets it under another name in serve's environment (JOB_STORE=... tasklock
serve ...), or from its own configuration. Their output goes to stdout,
each line prefixed "[JOB] ", and its tail to the run's history; there, and
in the run's error, the dashboard token and the store URL's password (and
the password of any URL) are replaced by xxxxx. When the attempt times out,
the job's lock is lost or max_hold passes, or the grace period of a
shutdown ends, the process group gets SIGTERM (then SIGCONT, so that a
stopped command sees it) and, kill_grace later, SIGKILL. A lost lock is
signalled kill_grace before the lease could go to another node, so the
SIGKILL lands before anyone else can run the job. On Linux that holds
while serve itself is paused (SIGSTOP, a stalled VM) too: the command's
supervisor is told the end of the lease at each renewal and, when it
comes without word from serve, kills the command and all it started.
A run whose lock was lost is recorded lost, its error saying why (e.g.
serve was paused past the lease) and what became of the command: stopped
by SIGTERM, or, when it had ended by itself before the loss was seen, not
signalled, with its exit status. When the command exits, whatever it
left running is killed: nothing runs on without the lock. On Linux that
is every process it started, in any process group or session, and all of
them die with serve too, even when serve is SIGKILLed (see "tasklock help
exec" for the supervisor that does it, and its limits); elsewhere, its
process group. A non-zero exit status
fails the attempt.

HTTP jobs send the request with X-Tasklock-Job, X-Tasklock-Tick,
X-Tasklock-Fence, X-Tasklock-Node, X-Tasklock-Attempt, X-Tasklock-Shard and
X-Tasklock-Shards headers; a status
other than 2xx fails the attempt. http.timeout defaults to 1m.

Notifications: whichever serve records a tick's final outcome (after its
retries) compares it with the job's previous outcome in the ledger and
notifies only a change: failure, timeout, lost, missed or interrupted, and
recovery (ok after one of those). It claims each notification in the
ledger, so one serve sends it, to the webhook (a POST of JSON signed with
X-Tasklock-Signature: sha256=HMAC-SHA256(secret, TIMESTAMP.BODY) and
X-Tasklock-Timestamp; transport errors, 408, 429 and 5xx are retried with
backoff) and the command (run as a job's command, the JSON on stdin,
TASKLOCK_EVENT, _JOB, _TICK, _STATUS, _NODE, _DELIVERY, _ATTEMPT set). Every
attempt goes to the store's audit list, which the dashboard's job page and
GET /api/notifications show. secret_env must name a variable that is set.

Logs and metrics: every run's start and end is logged, with job, tick,
node, fence, attempt, status and duration, and so is every tick skipped or
missed: at info level, but runs that failed, timed out, lost their lock or
were interrupted at warn, and store errors and broken jobs (a schedule
that gives no next tick) at error. With --http, GET /metrics serves Prometheus
metrics (tasklock_job_runs_total, tasklock_tick_lateness_seconds, ...;
see the README), without the token, so that a scraper needs none: they
carry job names and counts, no output. GET /healthz answers "ok" to
anyone (a liveness probe), and GET /readyz 200 while the store answers a
ledger call within 2s, else 503 with the reason (a readiness probe;
"tasklock health [--ready]" asks either from the command line). Sessions of the dashboard's login live in
memory: a restart logs everyone out. Failed logins and bearer tokens are
limited per client address (10, then one per 6 s; more is answered 429).

Signals: SIGTERM or SIGINT stops taking ticks, lets running jobs finish for
up to --grace, then stops them (their runs are recorded interrupted), and
exits 0; a second one stops them at once. SIGHUP reads FILE again: when
it is valid, jobs are added, removed and changed to match it (runs in
progress finish as they were started); when it is not, the mistakes are
logged and the old jobs keep running. The store and the node cannot
change without a restart.

Jobs defined at run time: "tasklock jobs create|update|delete" and the
dashboard's POST /api/jobs, PUT and DELETE /api/jobs/NAME keep jobs with
the same keys in the store (when it keeps a job catalog). Every serve reads
them every 500ms and runs them beside the file's jobs: a changed job is
replaced (a run in progress finishes), a deleted one removed (its run
finishes, or is stopped when the delete said --cancel). The file is
authoritative: a job defined at run time with the name of a job of FILE is
ignored, with a warning. They survive reloads and restarts.

Node names: each serve takes a lock named serve/node/NODE in the store for
as long as it runs, so two serves with the same node name on one store —
the same file started twice with node: set — are refused: the second waits
until the first's lease could end (its TTL, 10s, and a second), then exits
75. A serve restarted under the name of one that was killed takes the name
once the dead one's lease ends, within that wait. A serve that could not
renew its lease (paused, or cut off from the store, for longer than 10s)
takes the name back; if another serve took it meanwhile, it stops
scheduling at once (it claims, starts and settles nothing more), shuts down
as on SIGTERM and exits 75. Where the store's leases cannot be listed, the
name is taken for another's once it stayed held 15s (a lease and a retry)
after the first refusal. Without node: each serve
is host:pid, and any number may run on one host; the store still runs every tick once. (mem:// is private to one
process, so there nothing is shared.)

Limits and placement: max_concurrent: N lets up to N runs of the job be in
progress at once across the fleet (each holds a permit of the semaphore
schedule/JOB/running); a tick that finds N running is recorded skipped.
pools: {NAME: SIZE} defines fleet-wide pools and pool: NAME puts a job in
one: each run holds a permit of schedule/pool/NAME while it runs, retries
included. A run that finds every permit held waits for one, holding its
job's lock, up to pool_wait (default: until the job's next tick); then the
tick is recorded skipped, the reason naming the pool. Give a pool the same
size on every node. nodes: [a, b] runs a job only on nodes that carry both
labels (labels: in the file, or --label flags); the others never claim its
ticks or trigger requests, and if no running node carries them, it does not
run.

Leader election: every serve campaigns for the lock serve/leader, owned
by its node name; its holder leads, and the lock's fence is its term (the
dashboard's nodes page and /api/nodes show both). Jobs with run_on: leader
are claimed only by the leader. A leader stopped by SIGTERM resigns once its
running jobs have finished, and another serve leads at once; when a leader
dies, its lease ends within its TTL (10s) and then another serve is
elected. The ticks in between are owed to the new leader and go to the
job's misfire policy, as after downtime; each is recorded once.

The store must keep a schedule ledger; mem:// always does.

Exit status:
  0    shut down by SIGTERM or SIGINT
  64   bad usage or an invalid configuration (every mistake is printed),
       or a store that keeps no schedule ledger (redlock://)
  69   store unreachable, failing or refusing the URL's credentials, or
       --http ADDR cannot be listened on
  75   another serve with the same node name is running on the store, or
       took this serve's node name while it could not renew it (paused)
`

// noGrace is the schedulers' own ShutdownGrace: serve ends the grace period
// itself, through the context it passes to Shutdown.
const noGrace = time.Duration(1 << 62)

// nodeKeyPrefix is put before the node name to make the key of the lock a
// serve holds while it runs.
const nodeKeyPrefix = "serve/node/"

// leaderKey is the key of the serve fleet's election: the node holding it
// runs the jobs with run_on: leader.
const leaderKey = "serve/leader"

// serveConfig holds serve's checked flags.
type serveConfig struct {
	config    string
	store     string // --store, or $TASKLOCK_STORE; "" for the file's
	storeFrom string // where the store came from: --store, $TASKLOCK_STORE, file or default
	node      string // --node, or $TASKLOCK_NODE; "" for the file's
	nodeFrom  string // --node or $TASKLOCK_NODE, when node is set
	grace     time.Duration
	verbose   bool
	logFormat string
	labels    labelFlags // --label, each once; when given they replace the file's labels:
	outputMax int        // --output-max; -1 when not given (the file's output_max:)
	http      httpFlags
}

// labelFlags are serve's --label flags, in order.
type labelFlags []string

// String implements flag.Value.
func (l *labelFlags) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value: one label a flag.
func (l *labelFlags) Set(v string) error {
	if msg := schedule.CheckLabel(v); msg != "" {
		return errors.New(msg)
	}
	if slices.Contains(*l, v) {
		return fmt.Errorf("%q is given twice", v)
	}
	*l = append(*l, v)
	return nil
}

func parseServe(args []string, getenv func(string) string) (*serveConfig, error) {
	c := &serveConfig{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&c.store, "store", "", "")
	fs.StringVar(&c.node, "node", "", "")
	fs.DurationVar(&c.grace, "grace", schedule.DefaultShutdownGrace, "")
	fs.BoolVar(&c.verbose, "verbose", false, "")
	fs.StringVar(&c.logFormat, "log-format", "text", "")
	fs.Var(&c.labels, "label", "")
	c.outputMax = -1
	fs.Func("output-max", "", func(v string) error {
		n, err := config.ParseSize(v)
		c.outputMax = n
		return err
	})
	addHTTPFlags(fs, &c.http)
	path, err := configFlag(fs, args)
	if err != nil {
		return nil, err
	}
	c.config = path
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// Flag, then environment, then (in apply) the file, then the default.
	for _, o := range []struct {
		val, from *string
		flag, env string
	}{{&c.store, &c.storeFrom, "store", "TASKLOCK_STORE"}, {&c.node, &c.nodeFrom, "node", "TASKLOCK_NODE"}} {
		switch {
		case set[o.flag] && *o.val == "":
			return nil, usagef("--%s is empty", o.flag)
		case set[o.flag]:
			*o.from = "--" + o.flag
		case getenv(o.env) != "":
			*o.val = getenv(o.env)
			*o.from = "$" + o.env
		}
	}
	if c.node != "" {
		if msg := config.CheckNodeName(c.node); msg != "" {
			return nil, usagef("%s %s: %s", c.nodeFrom, redact.Quote(c.node), msg)
		}
	}
	if c.grace < 0 {
		return nil, usagef("--grace must not be negative, got %v", c.grace)
	}
	if !slices.Contains(logFormats, c.logFormat) {
		return nil, usagef("--log-format must be text or json, got %s", redact.Quote(c.logFormat))
	}
	if err := c.http.check(); err != nil {
		return nil, err
	}
	return c, nil
}

// apply puts the store and node of the flags or the environment into f,
// in place of the file's: see serveUsage for the order.
func (c *serveConfig) apply(f *config.File) {
	switch {
	case c.store != "":
		f.Store = c.store
	case f.StoreGiven:
		c.storeFrom = "file"
	default:
		c.storeFrom = "default"
	}
	if c.node != "" {
		f.Node = c.node
	}
	if len(c.labels) > 0 {
		f.Labels = slices.Clone(c.labels)
	}
	if c.outputMax >= 0 {
		f.OutputMax = c.outputMax
	}
}

// runServe is the serve command.
func runServe(args []string, stdout, stderr io.Writer) int {
	c, err := parseServe(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, serveUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock serve: %v\nRun 'tasklock help serve' for usage.\n", err)
		return exitUsage
	}
	f, err := config.Load(c.config)
	if err != nil {
		printConfigErrors(stderr, "tasklock serve", err)
		return exitUsage
	}
	c.apply(f)
	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(newLogHandler(c.logFormat, stderr, level))
	redis.SetLogger(redisLogger{log})
	_ = mysql.SetLogger(mysqlLogger{log})
	s := &server{
		c: c, file: f, storeName: redact.URL(f.Store), log: log, stdout: stdout, stderr: stderr,
		draining: map[*schedule.Scheduler]bool{},
		runtime:  runtimeJobs{applied: map[string]runtimeJob{}, ignored: map[string]int64{}},
		client:   &http.Client{},
		httpMux:  http.NewServeMux(),
		obs:      newObserver(log),
		// The secrets serve holds: no job output shows them.
		redact: newRedactor(append(append(storeSecrets(f.Store), c.http.token), f.Secrets()...)...),
	}
	s.httpMux.Handle("/metrics", s.obs.metricsHandler())
	s.obs.broken = s.brokenJobs
	return s.run()
}

// server is one run of serve.
type server struct {
	c      *serveConfig
	file   *config.File // the configuration in force
	log    *slog.Logger
	obs    *observer // metrics and the log lines of runs (serve_metrics.go)
	stdout io.Writer
	stderr io.Writer
	outMu  sync.Mutex // serialises the jobs' lines on stdout
	client *http.Client

	// storeName is the store's URL without secrets, for messages; the
	// store cannot change while serve runs.
	storeName string

	// redact hides the token and the store's password in the jobs' lines
	// and in what the run history keeps of their output and errors.
	redact func(string) string

	lk     *tasklock.Locker
	ledger ledger.Ledger
	node   string
	cur    *schedule.Scheduler
	// catalogFail rate-limits the log of a catalog that cannot be read
	// (a store down): once, then once a minute.
	catalogFail repeats.Failure
	// The node-name lock is the Schedulers' node lease: taken at nodeTaken,
	// kept by name (serve_nodename.go), which gates the Schedulers'
	// writes to the ledger; lister, when the store can, lists the node
	// leases.
	nodeTaken time.Time
	name      *nodeName
	lister    driver.Lister
	// election elects the node that runs the jobs with run_on: leader;
	// every serve campaigns (campaign) from start to shutdown.
	election *tasklock.Election

	mu       sync.Mutex
	draining map[*schedule.Scheduler]bool // replaced by a reload, finishing their runs
	drains   sync.WaitGroup
	jobsOf   *config.File // the file jobs was made from (serve_http.go)
	jobs     []schedule.Job

	// The jobs defined at run time (serve_catalog.go): catalog is nil
	// when the store keeps none; rtJobs are those applied, by name,
	// rtGen counting their changes (guarded by mu).
	catalog ledger.Catalog
	runtime runtimeJobs
	rtJobs  []config.Job
	rtGen   int
	jobsGen int // the rtGen jobs was made at

	httpMux *http.ServeMux // the --http server's routes: the dashboard at /

	// notify decides and sends the jobs' notifications (notify.go), from
	// notifyCfg: each job's, made from notifyOf and notifyGen (guarded by
	// mu).
	notify    *notifier
	notifyCfg map[string]*config.Notify
	notifyOf  *config.File
	notifyGen int
}

// noLedger says that the store rawURL names keeps no schedule ledger,
// which the command cmd needs, in the user's terms: the store's URL and
// scheme, not its Go type.
func noLedger(rawURL, cmd string) string {
	scheme, _, _ := strings.Cut(rawURL, "://")
	return fmt.Sprintf("store %s keeps no schedule ledger, which tasklock %s needs: a %s:// store keeps locks only",
		redact.URL(rawURL), cmd, strings.ToLower(scheme))
}

// ledgerSchemes are the store URL schemes whose stores keep a schedule
// ledger (every one but redlock://), for serve's message when its store
// keeps none.
const ledgerSchemes = "redis://, postgres://, mysql://, sqlite://, etcd:// or zk://"

func (s *server) failf(format string, args ...any) {
	fmt.Fprintf(s.stderr, "tasklock serve: "+format+"\n", args...)
}

func (s *server) run() int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// Logged last, when all is done: the runs ended, the dashboard
	// stopped, the locks released and the store closed.
	stopped := false
	defer func() {
		if stopped {
			s.log.Info("shut down")
		}
	}()

	openCtx, cancel := context.WithTimeout(context.Background(), openTimeout)
	store, closeStore, err := storeurl.Open(openCtx, s.file.Store)
	cancel()
	if err != nil {
		if from := s.c.storeFrom; from != "file" && from != "default" {
			err = fmt.Errorf("%w (the store of %s)", err, from)
		}
		s.failf("%v", err)
		return openExit(err)
	}
	defer func() {
		if err := closeStore(); err != nil {
			s.log.Warn("closing the store connection", "err", err)
		}
	}()
	l, ok := store.(ledger.Ledger)
	if !ok {
		s.failf("%s; use a store of another scheme: %s (mem:// to try serve out)", noLedger(s.file.Store, "serve"), ledgerSchemes)
		return exitUsage
	}
	s.ledger = l
	s.lister, _ = store.(driver.Lister)
	s.catalog, _ = store.(ledger.Catalog)
	lk, err := tasklock.New(store, &tasklock.Config{Owner: s.file.Node, Logger: s.log, OnEvent: s.obs.lockEvent})
	if err != nil {
		s.failf("%v", err)
		return exitUsage
	}
	defer lk.Close()
	s.lk, s.node = lk, lk.Owner()
	s.notify = s.startNotifier()
	defer s.notify.stopNotifier(notifyStopWait) // after the Schedulers' shutdown

	guard, code := s.takeNode()
	if guard == nil {
		return code
	}
	s.name = s.keepNode(guard)
	defer s.name.release() // last: the Schedulers write nothing more

	s.election = lk.Election(leaderKey, nil)
	campaignCtx, endCampaign := context.WithCancel(context.Background())
	campaignDone := make(chan struct{})
	go func() { defer close(campaignDone); s.campaign(campaignCtx) }()
	defer func() {
		endCampaign()
		<-campaignDone
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = s.election.Resign(ctx)
	}()

	hs, code := s.startHTTP(store)
	if code != exitOK {
		return code
	}
	defer hs.stop()
	cur, err := s.start(s.file)
	if err != nil {
		s.failf("%v", err)
		return exitUnavailable
	}
	s.mu.Lock()
	s.cur = cur
	s.mu.Unlock()
	stopCatalog := s.startCatalog()
	defer stopCatalog() // a shutdown stops it first; stopping twice is fine
	s.log.Info("serving", "jobs", len(s.file.Jobs), "node", s.node, "store", redact.URL(s.file.Store), "store_from", s.c.storeFrom, "config", s.c.config)

	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.reload()
				continue
			}
			stopCatalog()
			s.shutdown(sig, sigs)
			stopped = true
			return exitOK
		case <-s.name.taken:
			// Another serve runs under this name now: this one schedules
			// nothing more (the name's gate refuses the Schedulers'
			// claims already) and stops as on SIGTERM.
			stopCatalog()
			s.shutdown(nil, sigs)
			stopped = true
			s.failf("%s", s.name.takenError())
			return exitTempFail
		}
	}
}

// retakeRetry is how long serve waits before trying again to take back
// its node-name lock when it could not, and retakeTimeout bounds a try.
// After a store outage the other nodes judge nobody stopped for a node
// lease (10 s) from when they could list the leases again (package
// schedule); a serve takes its lock back within both of these.
const (
	retakeRetry   = 5 * time.Second
	retakeTimeout = 3 * time.Second
)

// retook is what a try to take the node-name lock back found
// (retakeNode).
type retook struct {
	lock  *tasklock.Lock // the new hold, or nil
	again time.Duration  // without a hold: when to try again
	// Without a hold, when the store said the lock is held: by this
	// node's own lapsed lease (own), by another process (other, told by
	// the listing of leases), or by someone the store cannot tell
	// (neither); holder is the holder's owner name, redacted, when known,
	// and fence its fence when listed.
	held, own, other bool
	holder           string
	fence            uint64
}

// retakeNode tries to take the node-name lock again after lost, the
// previous hold, ended, and logs what happened in words that tell the
// cases apart: the store did not answer (the usual reason the lease
// lapsed), the store still holds this node's own lost lease (its
// renewals did not reach the store in time, and the store's copy has not
// expired yet), or another process holds it under this node name (two
// serves given one name, or one started under the name of this one while
// this one was paused). It returns the new hold, or when to try again and
// who holds the lock.
func (s *server) retakeNode(lost *tasklock.Lock) retook {
	key := nodeKeyPrefix + s.node
	ctx, cancel := context.WithTimeout(context.Background(), retakeTimeout)
	defer cancel()
	g, err := s.lk.TryObtain(ctx, key, s.nodeLockOptions())
	var ne *tasklock.NotObtainedError
	switch {
	case err == nil:
		s.log.Info("took the node-name lock again", "node", s.node, "key", key, "fence", g.Fence())
		return retook{lock: g}
	case !errors.As(err, &ne) && !errors.Is(err, tasklock.ErrNotObtained):
		s.log.Warn("cannot take the node-name lock again: the store did not answer; trying again", "node", s.node, "key", key, "in", retakeRetry, "err", err)
		return retook{again: retakeRetry}
	}
	r := retook{again: retakeRetry, held: true}
	if ne != nil && ne.Owner != "" {
		r.holder = redact.Printable(ne.Owner)
	}
	holder, listed := s.nodeLease(ctx, key)
	switch {
	case listed && holder != nil && lost != nil && holder.Fence == lost.Fence():
		// The store still has the hold this process lost: it expires
		// there within its TTL, and nobody else can take it meanwhile.
		if holder.TTL > 0 && holder.TTL < r.again {
			r.again = holder.TTL + 10*time.Millisecond
		}
		r.own = true
		s.log.Warn("the node-name lock is still this node's own lease, which lapsed here while its renewals did not reach the store; taking it again once the store expires it",
			"node", s.node, "key", key, "fence", holder.Fence, "expires_in", holder.TTL, "in", r.again)
	case listed && holder == nil:
		// Released or expired between the try and the listing.
		return retook{again: time.Second}
	case listed:
		r.other, r.holder, r.fence = true, redact.Printable(holder.Owner), holder.Fence
		s.log.Error("cannot take the node-name lock again: another process holds it; another serve may use this node name",
			"node", s.node, "key", key, "holder", r.holder, "holder_fence", holder.Fence, "err", err)
	default:
		s.log.Error("cannot take the node-name lock again: it is held, by this node's own lapsed lease until the store expires it, or by another serve using this node name",
			"node", s.node, "key", key, "err", err)
	}
	return r
}

// nodeLease returns the store's lease of the node-name lock key (nil when
// there is none) and whether the store could list it.
func (s *server) nodeLease(ctx context.Context, key string) (*driver.Lease, bool) {
	if s.lister == nil {
		return nil, false
	}
	ls, err := s.lister.Leases(ctx, key)
	if err != nil {
		return nil, false
	}
	for i := range ls {
		if ls[i].Key == key && !ls[i].Waiting {
			return &ls[i], true
		}
	}
	return nil, true
}

// campaign keeps this node a candidate in the fleet's election until ctx
// ends: when elected it leads until the leadership is lost, then stands
// again.
func (s *server) campaign(ctx context.Context) {
	for ctx.Err() == nil {
		l, err := s.election.Campaign(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("leader election: campaign failed; standing again in 5s", "node", s.node, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
			}
			continue
		}
		s.log.Info("leader election: this node leads; it runs the jobs with run_on: leader", "node", s.node, "term", l.Fence())
		select {
		case <-ctx.Done():
			return
		case <-l.Done():
			s.log.Warn("leader election: this node no longer leads", "node", s.node, "term", l.Fence(), "cause", l.Err())
		}
	}
}

// leads reports whether this node leads the fleet now.
func (s *server) leads() bool { return s.election != nil && s.election.Leader() != nil }

// takeNode takes the lock that says a serve with this node name is live. It
// returns nil and the exit status when it cannot. A lock held by another
// process is waited for until its lease could end (at most the lock's TTL
// and a second): a serve that stopped without releasing it (killed,
// crashed) leaves it until then, and is restarted under its name at once
// (systemd's Restart=); one that still renews it is live.
func (s *server) takeNode() (*tasklock.Lock, int) {
	key := nodeKeyPrefix + s.node
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	g, err := s.lk.TryObtain(ctx, key, s.nodeLockOptions())
	var ne *tasklock.NotObtainedError
	if errors.As(err, &ne) {
		wait := tasklock.DefaultTTL
		if ne.TTL > 0 && ne.TTL < wait {
			wait = ne.TTL
		}
		wait += time.Second
		s.log.Warn("the node name is held by another process: a serve that stopped, whose lease ends within its TTL, or a live one under the same name; waiting for it",
			"node", s.node, "key", key, "holder", redact.Printable(ne.Owner), "expires_in", ne.TTL, "wait", wait)
		wctx, cancel := context.WithTimeout(context.Background(), wait)
		g, err = s.lk.Obtain(wctx, key, s.nodeLockOptions())
		cancel()
	}
	switch {
	case err == nil:
		s.nodeTaken = time.Now()
		return g, exitOK
	case errors.As(err, &ne) || errors.Is(err, tasklock.ErrNotObtained):
		holder := "another process"
		if ne != nil && ne.Owner != "" {
			holder = redact.Printable(ne.Owner)
		}
		s.failf("node name %s is in use by a live tasklock serve (%s) on this store, which kept renewing it: give each serve its own node name, or omit node: to use host:pid", redact.Quote(s.node), holder)
		return nil, exitTempFail
	default:
		s.failf("store failed: %v", err)
		return nil, exitUnavailable
	}
}

// start builds a Scheduler with f's jobs and starts it.
func (s *server) start(f *config.File) (*schedule.Scheduler, error) {
	sch, err := schedule.New(s.lk, s.name.gate(s.ledger), &schedule.Config{
		Node: s.node, Logger: schedulerLogger(s.log), ShutdownGrace: noGrace, OnEvent: s.scheduleEvent,
		Redact:        s.redact,
		NodeKeyPrefix: nodeKeyPrefix, NodeLeaseTaken: s.nodeTaken, NodeLister: s.lister,
		IsLeader: s.leads,
		Pools:    f.Pools, Labels: f.Labels,
		OutputMax:      cmp.Or(f.OutputMax, -1), // 0 keeps no output
		PreferredNodes: f.PreferredNodes,
		ClaimAhead:     f.ClaimAhead,
	})
	if err != nil {
		return nil, err
	}
	for _, j := range f.Jobs {
		sj := j.Job
		sj.Handler = s.handler(j)
		if err := sch.Add(sj); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	if err := sch.Start(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	rt := s.rtJobs
	s.mu.Unlock()
	s.obs.setJobs(f.Jobs, rt)
	return sch, nil
}

// reload reads the configuration file again and replaces the Scheduler
// when the jobs changed. The old one finishes its runs in the background.
func (s *server) reload() {
	f, err := config.Load(s.c.config)
	if err != nil {
		for _, line := range config.AsErrors(err) {
			s.log.Error("reload: invalid configuration; the old jobs keep running", "error", line)
		}
		return
	}
	s.c.apply(f)
	switch {
	case f.Store != s.file.Store:
		s.log.Error("reload: the store changed; restart serve to switch stores; the old jobs keep running",
			"was", redact.URL(s.file.Store), "now", redact.URL(f.Store))
		return
	case f.Node != s.file.Node:
		s.log.Error("reload: the node changed; restart serve to rename it; the old jobs keep running", "was", s.file.Node, "now", f.Node)
		return
	}
	added, removed, changed := diffJobs(s.file.Jobs, f.Jobs)
	settings := changedSettings(s.file, f)
	if len(added)+len(removed)+len(changed)+len(settings) == 0 {
		if !reflect.DeepEqual(f.Notify, s.file.Notify) {
			// The jobs run on as they are; their notifications change.
			s.mu.Lock()
			s.file = f
			s.mu.Unlock()
			s.log.Info("reloaded: notify: changed", "jobs", len(f.Jobs))
			return
		}
		s.log.Info("reload: no change", "jobs", len(f.Jobs))
		return
	}
	sch, err := s.start(f)
	if err != nil {
		s.log.Error("reload: starting the new jobs failed; the old jobs keep running", "err", err)
		return
	}
	s.runtime.mu.Lock()
	old := s.cur
	s.mu.Lock()
	s.cur, s.file = sch, f
	s.draining[old] = true
	s.mu.Unlock()
	s.runtime.forgetApplied()
	s.runtime.mu.Unlock()
	if s.catalog != nil {
		s.reconcile() // the jobs defined at run time, on the new Scheduler
	}
	s.drains.Add(1)
	go func() {
		defer s.drains.Done()
		_ = old.Shutdown(context.Background())
		s.mu.Lock()
		delete(s.draining, old)
		s.mu.Unlock()
	}()
	s.log.Info("reloaded", "jobs", len(f.Jobs), "added", added, "removed", removed, "changed", changed, "settings_changed", settings)
}

// changedSettings names the node-wide keys of the configuration that differ
// between was and now: each needs a new Scheduler, as a changed job does.
func changedSettings(was, now *config.File) []string {
	var out []string
	for _, c := range []struct {
		key     string
		changed bool
	}{
		{"pools", !maps.Equal(was.Pools, now.Pools)},
		{"labels", !slices.Equal(was.Labels, now.Labels)},
		{"output_max", was.OutputMax != now.OutputMax},
		{"preferred_nodes", was.PreferredNodes != now.PreferredNodes},
		{"claim_ahead", was.ClaimAhead != now.ClaimAhead},
	} {
		if c.changed {
			out = append(out, c.key)
		}
	}
	return out
}

// brokenJobs returns the jobs in force, each with whether it is broken,
// for the tasklock_job_broken gauge.
func (s *server) brokenJobs() map[string]bool {
	s.mu.Lock()
	cur, f, rt := s.cur, s.file, s.rtJobs
	s.mu.Unlock()
	out := make(map[string]bool, len(f.Jobs)+len(rt))
	if cur == nil {
		return out
	}
	broken := cur.Broken()
	for _, j := range f.Jobs {
		_, out[j.Name] = broken[j.Name]
	}
	for _, j := range rt {
		_, out[j.Name] = broken[j.Name]
	}
	return out
}

// diffJobs names the jobs added, removed and changed from a to b.
func diffJobs(a, b []config.Job) (added, removed, changed []string) {
	old := map[string]config.Job{}
	for _, j := range a {
		j.Line = 0
		old[j.Name] = j
	}
	seen := map[string]bool{}
	for _, j := range b {
		j.Line = 0
		seen[j.Name] = true
		o, ok := old[j.Name]
		switch {
		case !ok:
			added = append(added, j.Name)
		case !reflect.DeepEqual(o, j):
			changed = append(changed, j.Name)
		}
	}
	for _, j := range a {
		if !seen[j.Name] {
			removed = append(removed, j.Name)
		}
	}
	return added, removed, changed
}

// shutdown stops every Scheduler: runs get --grace to finish, or less when
// a signal comes (after sig, or after the node name was taken when sig is
// nil), and are then stopped; it returns once every run
// has recorded its result and released its lock. run then stops the rest
// (the dashboard, the notifier, the election and the node-name lock, the
// store's connection) and logs "shut down".
func (s *server) shutdown(sig os.Signal, sigs <-chan os.Signal) {
	if sig != nil {
		s.log.Info("shutting down: waiting for running jobs", "signal", sigName(sig), "grace", s.c.grace)
	} else {
		s.log.Info("shutting down: waiting for running jobs", "cause", "the node name was taken by another serve", "grace", s.c.grace)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.c.grace)
	defer cancel()
	go func() {
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					continue
				}
				s.log.Warn("second signal: stopping running jobs now", "signal", sigName(sig))
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	s.mu.Lock()
	all := []*schedule.Scheduler{s.cur}
	for sch := range s.draining {
		all = append(all, sch)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, sch := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sch.Shutdown(ctx) == nil {
				return
			}
			// The runs were told to stop: wait for them to end.
			s.log.Warn("grace period over: stopping running jobs")
			_ = sch.Shutdown(context.Background())
		}()
	}
	wg.Wait()
	s.drains.Wait()
	s.log.Debug("shutting down: running jobs ended; stopping the dashboard and the notifier, leaving the election, releasing the node-name lock, closing the store")
}

// handler is the schedule handler of a job.
func (s *server) handler(j config.Job) func(context.Context, schedule.Run) error {
	run := func(ctx context.Context, r schedule.Run) error { return s.runCommand(ctx, j, r) }
	if j.HTTP != nil {
		run = func(ctx context.Context, r schedule.Run) error { return s.runHTTP(ctx, j.HTTP, r) }
	}
	return func(ctx context.Context, r schedule.Run) error {
		// Not once the node name is another serve's, nor before a lost
		// node-name lock is judged (serve_nodename.go): a run claimed
		// just before this serve was paused may start only now, and its
		// running record need not be written before it starts.
		if err := s.name.admit(ctx); err != nil {
			return fmt.Errorf("not started: %w", err)
		}
		return run(ctx, r)
	}
}

// jobEnvNames are the variables runCommand sets.
var jobEnvNames = []string{"TASKLOCK_JOB", "TASKLOCK_TICK", "TASKLOCK_FENCE", "TASKLOCK_NODE", "TASKLOCK_ATTEMPT", "TASKLOCK_SHARD", "TASKLOCK_SHARDS"}

// jobVars are the values of the run's variables, in jobEnvNames' order.
func jobVars(r schedule.Run) []string {
	return []string{r.Job, r.Tick.UTC().Format(time.RFC3339), strconv.FormatUint(r.Fence, 10), r.Node, strconv.Itoa(r.Attempt),
		strconv.Itoa(r.Shard), strconv.Itoa(max(r.Shards, 1))}
}

// leaseEndPoll is how often runCommand looks whether a renewal moved the
// end of the run's lease, to tell the command's supervisor.
const leaseEndPoll = 100 * time.Millisecond

// leaseOver reports whether the lease of r's lock (with max_concurrent,
// its permit) has passed its local validity: the run has ended, lost,
// though its context may not say so yet.
func leaseOver(r schedule.Run) bool {
	return r.Deadline != nil && !time.Now().Before(r.Deadline())
}

// runEndWait bounds how long runEnded waits for a run's context to end
// after its lease has passed.
const runEndWait = time.Second

// errLeaseOver is why a run ended when its lease had passed and its
// context did not say why within runEndWait.
var errLeaseOver = fmt.Errorf("%w: its lease had ended unrenewed when serve saw the command's exit (was serve paused?)", tasklock.ErrLockLost)

// runEnded returns why the run whose context is ctx ended, ctx having
// ended or the run's lease having passed (leaseOver): ctx's cause, waiting
// up to runEndWait for ctx to end, else errLeaseOver.
func runEnded(ctx context.Context) error {
	t := time.NewTimer(runEndWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return errLeaseOver
	}
}

// runCommand runs a command job's attempt: see serveUsage.
func (s *server) runCommand(ctx context.Context, j config.Job, r schedule.Run) error {
	vars := jobVars(r)
	set := make([]string, len(vars))
	for i, v := range vars {
		set[i] = jobEnvNames[i] + "=" + v
	}
	lines := &lineWriter{mu: &s.outMu, w: s.stdout, prefix: "[" + r.Job + "] ", redact: s.redact}
	out := io.MultiWriter(r.Output, lines)
	// The lease's end as this node last knew it: the lock's validity
	// (kill_grace before the lease could end: its Grace) plus kill_grace,
	// when serve itself sends SIGKILL. The command's supervisor kills the
	// command and all it started by itself then, should serve be paused
	// (SIGSTOP, a stalled VM) and unable to; zero without a lock.
	leaseEnd := func() time.Time {
		if r.Deadline == nil {
			return time.Time{}
		}
		return r.Deadline().Add(j.KillGrace)
	}
	end := leaseEnd()
	ch, err := startCommand(commandSpec{
		argv: j.Command, env: childEnv(os.Environ(), set...), stdout: out, stderr: out,
		// Output that outlives the command is cut off a second after it exits.
		waitDelay: time.Second,
		killBy:    end,
	})
	if err != nil {
		return fmt.Errorf("cannot run %s: %w", j.Command[0], err)
	}
	var renewed <-chan time.Time // polls the lease's end, which renewals move
	if !end.IsZero() {
		t := time.NewTicker(leaseEndPoll)
		defer t.Stop()
		renewed = t.C
	}
	killTimer := time.NewTimer(time.Hour)
	killTimer.Stop()
	defer killTimer.Stop()
	var killAt <-chan time.Time
	done := ctx.Done()
	stopped := false // SIGTERM was sent because the run ended
	for {
		select {
		case <-renewed:
			// Also once the run has ended (a timeout): the lock is held,
			// and renewed, until the command is gone.
			if e := leaseEnd(); e.After(end) {
				end = e
				ch.moveKillBy(e)
			}
		case <-ch.done:
			lines.flush()
			// Nothing the command started may run on without the lock.
			ch.signal(syscall.SIGKILL)
			how := describeStatus(ch.status)
			switch {
			case ch.atLeaseEnd:
				// serve neither renewed the lock nor stopped the command
				// by the lease's end (paused, starved): its supervisor
				// killed it then, by itself, whatever serve sent once it
				// ran again.
				return fmt.Errorf("command %s at the lock's lease end by its supervisor, serve having neither renewed the lock nor stopped it (was serve paused?): %w", how, runEnded(ctx))
			case stopped:
				return fmt.Errorf("command stopped: sent SIGTERM, then it %s: %w", how, context.Cause(ctx))
			case ctx.Err() != nil || leaseOver(r):
				// It ended by itself, and the run ended too before its
				// exit was seen: both at once when a node resumes from a
				// pause (SIGSTOP) longer than the lock's lease. ctx may
				// not say so yet: it learns of the lease's end when the
				// Locker's goroutine runs, at once after the resume, and
				// this one may see the exit first.
				return fmt.Errorf("command %s by itself, not signalled, but the run had ended before its exit was seen: %w", how, runEnded(ctx))
			case statusCode(ch.status) != 0:
				return errors.New("command " + how)
			}
			return nil
		case <-done:
			done = nil
			select {
			case <-ch.done:
				continue // it has ended already: nothing to stop
			default:
			}
			if !ch.ask(syscall.SIGTERM) {
				continue // it has ended already, not yet reaped
			}
			stopped = true
			s.log.Info("stopping a command: SIGTERM sent, SIGKILL after kill_grace", "job", r.Job, "pid", ch.pid,
				"kill_grace", j.KillGrace, "cause", context.Cause(ctx), "store", s.storeName)
			killTimer.Reset(j.KillGrace)
			killAt = killTimer.C
		case <-killAt:
			killAt = nil
			s.log.Warn("command still running after SIGTERM; sending SIGKILL", "job", r.Job, "pid", ch.pid, "kill_grace", j.KillGrace)
			ch.signal(syscall.SIGKILL)
		}
	}
}

// maxHTTPBody bounds how much of a response is read into the run's output.
const maxHTTPBody = 1 << 20

// runHTTP makes an HTTP job's request.
func (s *server) runHTTP(ctx context.Context, h *config.HTTP, r schedule.Run) error {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, h.Method, h.URL, strings.NewReader(h.Body))
	if err != nil {
		return fmt.Errorf("http request: %s", redact.Text(err.Error()))
	}
	for k, v := range h.Headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	for i, v := range jobVars(r) {
		name := "X-Tasklock-" + strings.TrimPrefix(jobEnvNames[i], "TASKLOCK_")
		req.Header.Set(name, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// A *url.Error: net/http hides the URL's password, not its query.
		return redact.Error(err)
	}
	defer resp.Body.Close()
	fmt.Fprintf(r.Output, "HTTP %s\n", resp.Status)
	_, _ = io.Copy(r.Output, io.LimitReader(resp.Body, maxHTTPBody))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s %s: HTTP %s", h.Method, redact.URL(h.URL), resp.Status)
	}
	return nil
}

// lineWriter writes whole lines to w, each after prefix and rewritten by
// redact (when set), holding mu for each; flush writes a last line that
// lacks its newline.
type lineWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	redact func(string) string
	buf    []byte
}

// maxLine is where lineWriter breaks a line that has no newline.
const maxLine = 64 << 10

// Write implements io.Writer; it never fails.
func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 && len(l.buf) < maxLine {
			break
		}
		if i < 0 {
			i = len(l.buf) - 1
		}
		l.emit(l.buf[:i+1])
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func (l *lineWriter) flush() {
	if len(l.buf) > 0 {
		l.emit(append(l.buf, '\n'))
		l.buf = nil
	}
}

func (l *lineWriter) emit(line []byte) {
	if line[len(line)-1] != '\n' {
		line = append(line, '\n')
	}
	text := string(line)
	if l.redact != nil {
		text = l.redact(text)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, l.prefix+text)
}

package schedule

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/internal/repeats"
	"github.com/tasklock/tasklock/internal/slogfilter"
	"github.com/tasklock/tasklock/ledger"
)

// Config configures a Scheduler. A nil *Config means all defaults; zero
// fields take the defaults documented on them. New never writes into it.
type Config struct {
	// Node names this scheduler in claims, history and the job locks it
	// holds. Default: the Locker's owner name (host:pid).
	Node string
	// Clock is the source of time for ticks, timeouts, backoff and
	// polling. Default: tasklock.SystemClock.
	Clock tasklock.Clock
	// Logger receives the scheduler's logs. Nil: warnings and above go to
	// slog.Default().
	Logger *slog.Logger
	// KeyPrefix is put before a job's name to make its lock key. Default:
	// "schedule/".
	KeyPrefix string
	// PollInterval is how often the job states (pause, trigger-now) are
	// read from the ledger. Default: 500ms, so that every node obeys a
	// change within a second. At least 10ms.
	PollInterval time.Duration
	// ShutdownGrace is how long Shutdown lets running handlers finish
	// before it cancels their contexts with ErrShutdown. Default: 30s.
	ShutdownGrace time.Duration
	// ClaimRetention is how long the ledger keeps a claim: a tick is never
	// run twice within it. Default: 24h; at least twice every job's
	// MisfireWindow.
	ClaimRetention time.Duration
	// HistoryKeep is how many history records per job are kept. Default:
	// 1000; negative: no limit by count.
	HistoryKeep int
	// HistoryMaxAge is how long history records are kept. Default: 30
	// days; negative: no limit by age.
	HistoryMaxAge time.Duration
	// PruneInterval is how often this node prunes the ledger. Default: 1h.
	PruneInterval time.Duration
	// OutputMax is how many bytes of Run.Output are recorded: all of it
	// up to OutputMax; past that the first half and the last half, with a
	// line "… N bytes cut …" (CutMarker) between them. Default:
	// DefaultOutputMax; negative: none. Every store's ledger keeps 64 KiB
	// per record (ledgertest checks it); `tasklock serve` records 64 KiB
	// unless told otherwise (output_max).
	OutputMax int
	// PreferredNodes, with a ledger that keeps claim marks
	// (ledger.Marker: memstore, redisstore), has each plain job's tick
	// claimed at the tick by its preferred node only, and by the other
	// nodes two poll intervals later as a fallback unless the preferred
	// node's mark says it claimed it (see the package doc). That saves
	// the claims made in vain (one per node and tick), at the price of a
	// slow node's ticks waiting for it or the fallback instead of going
	// to a free node: measured with 10,000 jobs on 3 nodes it cut Redis
	// reads per run from 5 to 2 but raised lateness p99 (bench/README,
	// P5). Default false: every node claims every tick at the tick. Every
	// node of a fleet should say the same; nodes that differ only claim
	// more.
	PreferredNodes bool
	// ClaimAhead, when positive, has this node claim a plain job's tick,
	// and take the job's lock, up to ClaimAhead before the tick, and start
	// the handler at the tick: the claim's and the lock's store work is
	// then done before the tick instead of making the run late. With
	// thousands of jobs due at the same instant that work is what makes
	// the last of them start late (bench/README, P5). A plain job is one
	// with at most one shard, no After, Jitter, LeaderOnly, Pool,
	// MaxConcurrent, and no Lock option that counts from the obtain
	// (MaxHold, MinHold, NoRenew); the others are claimed at the tick.
	// The tick's running record is written when it is claimed, so a node
	// killed before the tick leaves a record that is settled as
	// interrupted, and the job's lock held until its TTL, as a kill
	// during a run does. A lock still held at the claim (the previous run) is
	// asked for again at the tick, so OverlapSkip skips only what it skips
	// without ClaimAhead. What is decided at the claim: a pause or trigger
	// the node learns of in the last ClaimAhead before a tick does not
	// change that tick. At most MaxClaimAhead; not with PreferredNodes.
	// Default 0: every tick is claimed at the tick.
	ClaimAhead time.Duration
	// OutputTail is what OutputMax was called before it kept the head as
	// well: it is used when OutputMax is 0.
	//
	// Deprecated: use OutputMax.
	OutputTail int
	// Redact, when set, rewrites the output and the error text of
	// every run record before it is written to the ledger, for example to
	// hide passwords and tokens a handler printed: the history can be read
	// by anyone who may read the ledger. It is called on the run's
	// goroutine, possibly several at once. Nil: recorded as they are.
	Redact func(string) string
	// OnEvent, when set, is called for every claim, run start and end,
	// skipped and missed tick (see EventType). It runs on the Scheduler's
	// goroutines, possibly several at once, and must not block: it is
	// called while the run waits for it.
	OnEvent func(Event)

	// NodeKeyPrefix is put before a node's name to make the key of its
	// node lease: the lock a Scheduler holds while it runs, so that the
	// other nodes can tell it stopped. Default: KeyPrefix + "node/". Every
	// node of a fleet must use the same.
	NodeKeyPrefix string
	// NodeLeaseTTL is the lease length of the node lease Start takes, and
	// sets how often this node looks for the runs of stopped nodes: every
	// third of it. Default: tasklock.DefaultTTL (10s).
	NodeLeaseTTL time.Duration
	// NodeLeaseTaken, when set, says the caller took this node's lease
	// (NodeKeyPrefix + Node) at that time and holds it for as long as the
	// Scheduler runs — tasklock serve holds its node-name lock — so the
	// Scheduler takes none. Running records of this node that started
	// before it are from an earlier process and are settled as interrupted.
	NodeLeaseTaken time.Time
	// NodeLister, when set, lists the node leases (it must be the Locker's
	// store) in one call per look for stopped nodes. Nil: the Scheduler
	// asks the Locker, one TryObtain per node with running records, and
	// releases a lease it gets at once.
	NodeLister driver.Lister
	// IsLeader reports whether this node leads the fleet now, for jobs
	// with Job.LeaderOnly (tasklock serve: whether it holds its
	// tasklock.Election's leadership). It is called on the Scheduler's
	// timing goroutine with its state locked, and must return at once.
	IsLeader func() bool

	// Pools are the fleet's run pools, by name, each with its size: how
	// many runs of the jobs in it (Job.Pool) may be in progress at once
	// across the fleet. Every node must give a pool the same size. A name
	// is 1 to MaxLabelLen bytes of ASCII letters, digits and - _ . : = /.
	Pools map[string]int
	// Labels are this node's labels, written as pool names are: a job
	// with Job.Nodes runs only on the nodes that carry each of them.
	Labels []string
}

// Config defaults.
const (
	DefaultKeyPrefix      = "schedule/"
	DefaultPollInterval   = 500 * time.Millisecond
	DefaultShutdownGrace  = 30 * time.Second
	DefaultClaimRetention = 24 * time.Hour
	DefaultHistoryKeep    = 1000
	DefaultHistoryMaxAge  = 30 * 24 * time.Hour
	DefaultPruneInterval  = time.Hour
	DefaultOutputMax      = 4096
	// DefaultOutputTail is DefaultOutputMax's former name.
	//
	// Deprecated: use DefaultOutputMax.
	DefaultOutputTail = DefaultOutputMax
)

// storeTimeout bounds each ledger and lock call the scheduler makes.
const storeTimeout = 10 * time.Second

// A Scheduler runs jobs on their schedules, each tick once across every
// Scheduler that shares the ledger. It owns one goroutine for timing (from
// Start to Shutdown) and one per job while it runs; none per idle job.
type Scheduler struct {
	lk         *tasklock.Locker
	ledger     ledger.Ledger
	clock      tasklock.Clock
	log        *slog.Logger
	node       string
	token      string // this instance's claim token
	keyPrefix  string
	poll       time.Duration
	grace      time.Duration
	retention  time.Duration
	pruneEvery time.Duration
	keep       int
	maxAge     time.Duration
	tail       int
	redact     func(string) string // nil: none
	onEvent    func(Event)
	nodePrefix string
	nodeTTL    time.Duration
	sweepEvery time.Duration
	lister     driver.Lister
	isLeader   func() bool     // nil: no job may be LeaderOnly
	pools      map[string]int  // Config.Pools (limits.go)
	labels     map[string]bool // Config.Labels
	claimAhead time.Duration   // Config.ClaimAhead

	// Failures of the polls, logged once and then once a minute while
	// they go on (a store down logs a line a minute, not one a poll).
	statesFail, sweepFail repeats.Failure
	shardsFail            repeats.Failure // reading sharded ticks' history (pollShards)

	// runCtx is the parent of every run's context; cancelRuns ends it when
	// Shutdown's grace period is over.
	runCtx     context.Context
	cancelRuns context.CancelCauseFunc

	wake     chan struct{} // capacity 1: "look again"
	quit     chan struct{}
	loopDone chan struct{}
	idle     chan struct{} // closed once stopping, the loop has seen it, and no run is left
	stopCh   chan struct{} // closed by Shutdown: ends the waits for pool permits (limits.go)

	// Used by the loop goroutine only.
	nextPoll, nextPrune, retryAt time.Time
	nextSweep, nextMark          time.Time
	claimFails                   int
	nodes                        nodeList // the last listing of the node leases (sweep.go)
	// outageAt is when this node last found its own node lease gone (a
	// store outage longer than the lease, or a store that lost its
	// data): other nodes lost theirs then too, and are not judged stopped
	// until a lease TTL later (judging, sweep.go).
	outageAt time.Time
	// storeDownSince is the first failure of the store calls failing now
	// (zero: the last call succeeded); storeOutage says such a spell, as
	// long as sweepEvery at least, has ended, and judging has not yet
	// marked it an outage (outageAt): the other nodes' leases may have
	// lapsed in it, before their holders could take them back, while this
	// node's did not (noteStore, sweep.go).
	storeDownSince time.Time
	storeOutage    bool
	// ownFence is the fence of this node's lease in the last listing
	// that showed it (0: none yet): a listing with another fence shows a
	// lease taken again since, so one that had lapsed (listNodes).
	ownFence uint64
	// The node lease: taken by Start (nodeLease) or held by the caller
	// (Config.NodeLeaseTaken); nodeTaken is when.
	nodeLease *tasklock.Lock
	nodeTaken time.Time
	ownLease  bool // this Scheduler takes the node lease (no Config.NodeLeaseTaken)

	mu          sync.Mutex
	jobs        map[string]*job
	heap        jobHeap
	states      map[string]ledger.JobState
	seen        map[triggerKey]bool         // trigger requests this node has claimed or seen claimed
	held        map[triggerKey]*heldRequest // requests of plain jobs another node claimed first (retake.go)
	deadlines   map[*deadline]struct{}
	active      int  // run goroutines
	started     bool // Start was called
	loopStarted bool
	stopping    bool
	loopStopped bool // the loop saw stopping: it claims nothing more
	idleClosed  bool
	stepped     time.Time // the clock reading of the loop's last step
	brokenEvs   []Event   // EventBroken events to emit once s.mu is released (flushBroken)
	// handled is, for each job removed (Remove), when and up to which
	// instant it had handled its ticks: a job of that name added again
	// starts from there (skipHandled).
	handled map[string]removal

	hist history // history records waiting to be written together (history.go)
	// lockCalls bounds the job lock's obtain and release calls (run.go).
	lockCalls sharedTimeout
	// passBuf keeps the last pass's batch, whose arrays the next pass
	// reuses; only the loop goroutine touches it.
	passBuf batch

	deps depWaiters // ticks waiting for their parents (deps.go)

	shards shardState // sharded jobs' ticks (shard.go); guarded by mu

	pref prefs // preferred nodes and claim marks (prefer.go); guarded by mu
}

type triggerKey struct{ job, id string }

// deadline cancels a run's context at a time on the Scheduler's clock.
type deadline struct {
	at     time.Time
	cancel context.CancelCauseFunc
	cause  error
}

// New returns a Scheduler that holds job locks with locker and keeps its
// ledger in l — usually the same store as the Locker's. A nil cfg means
// defaults. It returns a *tasklock.OptionError naming the field when an
// argument is invalid. Add jobs, then Start.
func New(locker *tasklock.Locker, l ledger.Ledger, cfg *Config) (*Scheduler, error) {
	if locker == nil {
		return nil, badOption("locker", "nil")
	}
	if l == nil {
		return nil, badOption("ledger", "nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Node == "" {
		c.Node = locker.Owner()
	}
	if c.Clock == nil {
		c.Clock = tasklock.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slogfilter.AtLeast(slog.Default().Handler(), slog.LevelWarn))
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	c.PollInterval = orDefault(c.PollInterval, DefaultPollInterval)
	c.ShutdownGrace = orDefault(c.ShutdownGrace, DefaultShutdownGrace)
	c.ClaimRetention = orDefault(c.ClaimRetention, DefaultClaimRetention)
	c.HistoryMaxAge = orDefault(c.HistoryMaxAge, DefaultHistoryMaxAge)
	c.PruneInterval = orDefault(c.PruneInterval, DefaultPruneInterval)
	if c.HistoryKeep == 0 {
		c.HistoryKeep = DefaultHistoryKeep
	}
	if c.OutputMax == 0 {
		c.OutputMax = cmp.Or(c.OutputTail, DefaultOutputMax)
	}
	if c.NodeKeyPrefix == "" {
		c.NodeKeyPrefix = c.KeyPrefix + "node/"
	}
	c.NodeLeaseTTL = orDefault(c.NodeLeaseTTL, tasklock.DefaultTTL)
	switch {
	case len(c.Node) > tasklock.MaxOwnerLen:
		return nil, badOption("Config.Node", "%d bytes long, the maximum is %d", len(c.Node), tasklock.MaxOwnerLen)
	case redact.CheckName(c.Node) != "":
		// The node name is the owner of the job locks: the owner's rules.
		return nil, badOption("Config.Node", "%s", redact.CheckName(c.Node))
	case c.PollInterval < 10*time.Millisecond:
		return nil, badOption("Config.PollInterval", "%v is below the minimum 10ms", c.PollInterval)
	case c.ShutdownGrace < 0:
		return nil, badOption("Config.ShutdownGrace", "%v is negative", c.ShutdownGrace)
	case c.ClaimRetention < 2*time.Minute:
		return nil, badOption("Config.ClaimRetention", "%v is below the minimum 2m", c.ClaimRetention)
	case c.PruneInterval < time.Second:
		return nil, badOption("Config.PruneInterval", "%v is below the minimum 1s", c.PruneInterval)
	case c.NodeLeaseTTL < 100*time.Millisecond:
		return nil, badOption("Config.NodeLeaseTTL", "%v is below the minimum 100ms", c.NodeLeaseTTL)
	case c.ClaimAhead < 0:
		return nil, badOption("Config.ClaimAhead", "%v is negative", c.ClaimAhead)
	case c.ClaimAhead > MaxClaimAhead:
		return nil, badOption("Config.ClaimAhead", "%v is above the maximum %v", c.ClaimAhead, MaxClaimAhead)
	case c.ClaimAhead > 0 && c.PreferredNodes:
		return nil, badOption("Config.ClaimAhead", "%v cannot be used with PreferredNodes", c.ClaimAhead)
	}
	if err := tasklock.ValidateKey(c.NodeKeyPrefix + c.Node); err != nil {
		return nil, &tasklock.OptionError{Pkg: "schedule", Field: "Config.NodeKeyPrefix",
			Reason: fmt.Sprintf("%q and the node name make an invalid lock key: %v", c.NodeKeyPrefix, err), Err: err}
	}
	pools, labels, err := limitsConfig(&c)
	if err != nil {
		return nil, err
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("schedule: reading random bytes: %w", err)
	}
	s := &Scheduler{
		lk: locker, ledger: l, clock: c.Clock, log: c.Logger,
		node: c.Node, token: hex.EncodeToString(tok[:]), keyPrefix: c.KeyPrefix,
		poll: c.PollInterval, grace: c.ShutdownGrace, retention: c.ClaimRetention,
		pruneEvery: c.PruneInterval, keep: max(c.HistoryKeep, 0), maxAge: max(c.HistoryMaxAge, 0), tail: c.OutputMax, redact: c.Redact, onEvent: c.OnEvent,
		nodePrefix: c.NodeKeyPrefix, nodeTTL: c.NodeLeaseTTL, sweepEvery: c.NodeLeaseTTL / 3, lister: c.NodeLister, nodeTaken: c.NodeLeaseTaken,
		isLeader: c.IsLeader, pools: pools, labels: labels, claimAhead: c.ClaimAhead,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), loopDone: make(chan struct{}), idle: make(chan struct{}), stopCh: make(chan struct{}),
		jobs: make(map[string]*job), states: make(map[string]ledger.JobState),
		seen: make(map[triggerKey]bool), deadlines: make(map[*deadline]struct{}),
	}
	if m, ok := l.(ledger.Marker); ok && c.PreferredNodes {
		s.pref = prefs{marker: m, delay: s.fallbackDelay(), ttl: markTTL(c.NodeLeaseTTL, c.PollInterval)}
	}
	s.runCtx, s.cancelRuns = context.WithCancelCause(context.Background())
	return s, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Node returns the scheduler's node name.
func (s *Scheduler) Node() string { return s.node }

// Add adds a job. Jobs may be added before or after Start. A job starts
// with a look back over its MisfireWindow for ticks no node handled, but
// never before the fleet first ran it with this schedule: Start (or Add,
// after Start) registers the job's schedule in the ledger, and the first
// registration of a schedule records when that was (ledger.JobRegister). So
// a new job, or a job whose schedule changed, starts at its next tick. It
// returns a *tasklock.OptionError naming the job and the field when the job
// is invalid or its name was added before, and the ledger's error when Add
// is called after Start and the job cannot be registered.
func (s *Scheduler) Add(j Job) error {
	jj, err := validateJob(j, s.keyPrefix, s.retention)
	if err == nil {
		err = s.checkLimits(jj)
	}
	if err != nil {
		return err
	}
	check := func() error {
		if s.stopping {
			return ErrShutdown
		}
		if _, dup := s.jobs[j.Name]; dup {
			return badJob(j.Name, "Job.Name", "a job of this name was added before", nil)
		}
		if j.LeaderOnly && s.isLeader == nil {
			return badJob(j.Name, "Job.LeaderOnly", "needs Config.IsLeader, which says when this node leads", nil)
		}
		return s.cycleOf(&jj.Job)
	}
	s.mu.Lock()
	err = check()
	started := s.started
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if started {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err := s.register(ctx, jj)
		cancel()
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	if err := check(); err != nil {
		s.mu.Unlock()
		return err
	}
	s.jobs[j.Name] = jj
	jj.obtainOpts = jj.lockOptions(s.node)
	if plain(jj) {
		jj.ahead = s.claimAhead
	}
	if jj.Shards > 1 {
		s.shards.jobs++
	}
	s.jobsChanged()
	if s.loopStarted {
		s.begin(jj, s.clock.Now())
	}
	s.mu.Unlock()
	s.flushBroken()
	s.poke()
	return nil
}

// specOf is the spec j is registered with in the ledger: its schedule, with
// its time zone as a CRON_TZ= prefix, blanks collapsed. A spec longer than
// the ledger takes is cut and ends with a hash of the whole.
func specOf(j *job) string {
	spec := strings.Join(strings.Fields(j.Schedule), " ")
	if j.TimeZone != "" {
		spec = "CRON_TZ=" + j.TimeZone + " " + spec
	}
	if len(spec) > ledger.MaxSpecLen {
		sum := sha256.Sum256([]byte(spec))
		h := " #" + hex.EncodeToString(sum[:])
		spec = spec[:ledger.MaxSpecLen-len(h)] + h
	}
	return spec
}

// register records j's schedule in the ledger (ledger.JobRegister) and sets
// j.since to when the fleet first ran the job with it.
func (s *Scheduler) register(ctx context.Context, j *job) error {
	st, err := s.ledger.SetJobState(ctx, ledger.JobStateParams{Job: j.Name, Op: ledger.JobRegister, Spec: specOf(j), Since: s.clock.Now()})
	if err != nil {
		return fmt.Errorf("schedule: registering job %q: %w", j.Name, err)
	}
	s.mu.Lock()
	j.since = st.Since
	s.mu.Unlock()
	return nil
}

// registerAll registers jobs: in batches when the ledger can
// (ledger.Registrar), otherwise several at a time.
func (s *Scheduler) registerAll(ctx context.Context, jobs []*job) error {
	if r, ok := s.ledger.(ledger.Registrar); ok {
		return s.registerBatch(ctx, r, jobs)
	}
	sem := make(chan struct{}, 16)
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = s.register(ctx, j)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// registerBatch registers jobs with r, registerChunk to a call.
func (s *Scheduler) registerBatch(ctx context.Context, r ledger.Registrar, jobs []*job) error {
	const registerChunk = 5000
	for len(jobs) > 0 {
		chunk := jobs[:min(registerChunk, len(jobs))]
		jobs = jobs[len(chunk):]
		ps := make([]ledger.JobStateParams, len(chunk))
		now := s.clock.Now()
		for i, j := range chunk {
			ps[i] = ledger.JobStateParams{Job: j.Name, Op: ledger.JobRegister, Spec: specOf(j), Since: now}
		}
		sts, err := r.RegisterJobs(ctx, ps)
		if err == nil && len(sts) != len(ps) {
			err = fmt.Errorf("the ledger returned %d registrations for %d jobs", len(sts), len(ps))
		}
		if err != nil {
			return fmt.Errorf("schedule: registering %d jobs: %w", len(ps), err)
		}
		s.mu.Lock()
		for i, j := range chunk {
			j.since = sts[i].Since
		}
		s.mu.Unlock()
	}
	return nil
}

// begin schedules j's first pass: it covers the ticks of the last
// MisfireWindow from the job's registration on (a tick at the very instant
// of the registration is owed: it is the job's first). Callers hold s.mu.
func (s *Scheduler) begin(j *job, now time.Time) {
	if !s.runsHere(j) {
		return // Job.Nodes: not this node's to claim
	}
	j.after = now.Add(-j.MisfireWindow)
	if from := j.since.Add(-time.Nanosecond); !j.since.IsZero() && from.After(j.after) {
		j.after = from
	}
	s.skipHandled(j, now)
	s.setPreference(j)
	if s.schedule(j, j.after) {
		heap.Push(&s.heap, j)
	}
}

// setNext sets j.next to j's first tick after t and reports whether there
// is one. When the schedule cannot answer, the job is broken: it leaves the
// heap for good, with an ERROR log and an EventBroken the first time (see
// Broken). Callers hold s.mu and call flushBroken after releasing it.
func (s *Scheduler) setNext(j *job, t time.Time) bool {
	j.next = j.sched.Next(t)
	if !j.next.IsZero() {
		return true
	}
	if j.broken == "" {
		s.jobsChanged()
		j.broken = fmt.Sprintf("schedule: job %q is broken: its schedule %q gives no tick after %s", j.Name, j.Schedule, t.UTC().Format(time.RFC3339))
		s.log.Error("schedule: job is broken: its schedule gives no next tick; it will not run again until the schedule is fixed",
			"node", s.node, "job", j.Name, "schedule", j.Schedule, "timezone", j.TimeZone, "after", t.UTC())
		s.brokenEvs = append(s.brokenEvs, Event{Type: EventBroken, Job: j.Name, Tick: t.UTC(), Error: j.broken})
	}
	return false
}

// flushBroken emits the EventBroken events setNext queued. Callers do not
// hold s.mu.
func (s *Scheduler) flushBroken() {
	s.mu.Lock()
	evs := s.brokenEvs
	s.brokenEvs = nil
	s.mu.Unlock()
	for _, e := range evs {
		s.emit(e)
	}
}

// Broken returns the jobs whose schedule could not give a next tick, by
// name, each with the reason. A broken job is not run again by this
// Scheduler: it was logged at ERROR and reported with EventBroken once.
func (s *Scheduler) Broken() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string)
	for name, j := range s.jobs {
		if j.broken != "" {
			out[name] = j.broken
		}
	}
	return out
}

// Start reads the job states from the ledger, so that paused jobs stay
// paused from the first tick, and starts the timing goroutine. ctx bounds
// the call; the Scheduler runs until Shutdown.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.stopping:
		s.mu.Unlock()
		return ErrShutdown
	case s.started:
		s.mu.Unlock()
		return ErrStarted
	}
	s.started = true
	jobs := make([]*job, 0, len(s.jobs))
	for _, j := range s.jobs {
		jobs = append(jobs, j)
	}
	s.mu.Unlock()

	err := s.takeNodeLease(ctx)
	if err == nil {
		var sts []ledger.JobState
		sts, err = s.ledger.JobStates(ctx)
		if err != nil {
			err = fmt.Errorf("schedule: start: reading job states: %w", err)
		} else {
			err = s.registerAll(ctx, jobs)
		}
		if err == nil {
			if err = s.startLoop(sts); err == nil {
				return nil
			}
		}
	}
	s.releaseNodeLease()
	s.mu.Lock()
	s.started = false
	if s.ownLease {
		s.ownLease, s.nodeTaken = false, time.Time{}
	}
	s.mu.Unlock()
	return err
}

// startLoop begins every job and starts the timing goroutine.
func (s *Scheduler) startLoop(sts []ledger.JobState) error {
	now := s.clock.Now()
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return ErrShutdown
	}
	s.setStates(sts)
	for _, j := range s.jobs {
		s.begin(j, now)
	}
	s.nextPoll = now.Add(s.poll)
	s.nextPrune = now.Add(s.pruneEvery)
	s.nextSweep = now // at once: runs of this node's earlier process
	s.nextMark = now  // at once: the live nodes
	s.loopStarted = true
	go s.loop()
	s.mu.Unlock()
	s.flushBroken()
	return nil
}

// Shutdown stops claiming ticks, lets running handlers finish for up to
// Config.ShutdownGrace, then cancels their contexts with ErrShutdown, and
// returns once every run has ended and released its lock. When ctx ends
// first it cancels the runs and returns ctx.Err() without waiting for them.
// It does not close the Locker. Calling it again waits again.
func (s *Scheduler) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.stopping {
		close(s.stopCh)
	}
	s.stopping = true
	loop := s.loopStarted
	if !loop {
		s.loopStopped = true
	}
	s.checkIdle()
	s.mu.Unlock()
	if !loop {
		return nil
	}
	s.poke()
	defer func() {
		s.mu.Lock()
		done := s.idleClosed
		s.mu.Unlock()
		if done {
			s.releaseNodeLease()
		}
	}()

	grace := s.clock.NewTimer(s.grace)
	defer grace.Stop()
	graceC := grace.C()
	var err error
wait:
	for {
		select {
		case <-s.idle:
			break wait
		case <-graceC:
			graceC = nil
			s.cancelRuns(ErrShutdown)
		case <-ctx.Done():
			s.cancelRuns(ErrShutdown)
			err = ctx.Err()
			break wait
		}
	}
	s.closeQuit()
	<-s.loopDone
	s.dropMark()
	s.mu.Lock()
	s.loopStopped = true // the loop is gone: a later Shutdown waits for runs only
	s.checkIdle()
	s.mu.Unlock()
	return err
}

func (s *Scheduler) closeQuit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
}

// checkIdle closes s.idle when shutdown is complete but for the loop.
// Callers hold s.mu.
func (s *Scheduler) checkIdle() {
	if s.stopping && s.loopStopped && s.active == 0 && !s.idleClosed {
		s.idleClosed = true
		close(s.idle)
	}
}

// Pause pauses job across the cluster: every node stops running its ticks
// within a second (Config.PollInterval plus a step). Ticks while paused are
// claimed but neither run nor recorded, so resuming does not make them
// misfires. A trigger-now request still runs; a backfill's or re-run's
// tick whose turn comes while paused is recorded skipped (backfill it
// again once resumed), and RequestBackfill and RequestRerun refuse a paused job.
func (s *Scheduler) Pause(ctx context.Context, job string) error {
	_, err := s.setState(ctx, job, ledger.JobPause, "")
	return err
}

// Resume undoes Pause.
func (s *Scheduler) Resume(ctx context.Context, job string) error {
	_, err := s.setState(ctx, job, ledger.JobResume, "")
	return err
}

// Trigger asks for one run of job now, on one node of the cluster (any that
// has the job), within about a second. It returns the request's ID, which
// the run carries as Run.Trigger and its history as ledger.RunRecord.Trigger.
func (s *Scheduler) Trigger(ctx context.Context, job string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("schedule: reading random bytes: %w", err)
	}
	id := hex.EncodeToString(b[:])
	if _, err := s.setState(ctx, job, ledger.JobTrigger, id); err != nil {
		return "", err
	}
	return id, nil
}

var opNames = map[ledger.JobStateOp]string{
	ledger.JobPause: "pause", ledger.JobResume: "resume", ledger.JobTrigger: "trigger", ledger.JobTriggerDone: "finish trigger",
}

func (s *Scheduler) setState(ctx context.Context, name string, op ledger.JobStateOp, trigger string) (ledger.JobState, error) {
	s.mu.Lock()
	_, ok := s.jobs[name]
	stopping := s.stopping
	s.mu.Unlock()
	switch {
	case stopping:
		// A shut-down Scheduler runs nothing more; a trigger through it
		// would return an ID for a run that may never come.
		return ledger.JobState{}, ErrShutdown
	case !ok:
		return ledger.JobState{}, fmt.Errorf("%w %q", ErrUnknownJob, name)
	}
	st, err := s.ledger.SetJobState(ctx, ledger.JobStateParams{Job: name, Op: op, Trigger: trigger})
	if err != nil {
		return st, fmt.Errorf("schedule: %s %q: %w", opNames[op], name, err)
	}
	s.mu.Lock()
	s.takeCancels(&st, nil)
	if st.Paused || len(st.Triggers) > 0 {
		s.states[name] = st
	} else {
		delete(s.states, name)
	}
	s.mu.Unlock()
	s.poke()
	return st, nil
}

// setStates replaces the known job states and forgets the trigger requests
// that are no longer pending. Callers hold s.mu.
func (s *Scheduler) setStates(sts []ledger.JobState) {
	m := make(map[string]ledger.JobState, len(sts))
	pending := make(map[triggerKey]bool)
	for _, st := range sts {
		s.takeCancels(&st, pending)
		m[st.Job] = st
		for _, tr := range st.Triggers {
			pending[triggerKey{st.Job, tr.ID}] = true
		}
	}
	s.states = m
	for k := range s.seen {
		if !pending[k] {
			delete(s.seen, k)
		}
	}
}

// Runs returns history records from the ledger, newest first (see
// ledger.Ledger.Runs).
func (s *Scheduler) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if q.Limit < 0 {
		return nil, badOption("RunQuery.Limit", "%d is negative", q.Limit)
	}
	rs, err := s.ledger.Runs(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("schedule: reading history: %w", err)
	}
	return rs, nil
}

// poke wakes the loop to look again.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Scheduler) loop() {
	defer close(s.loopDone)
	t := s.clock.NewTimer(time.Hour)
	defer t.Stop()
	for {
		t.Reset(s.step())
		select {
		case <-t.C():
		case <-s.wake:
		case <-s.quit:
			return
		}
	}
}

// step does what is due — deadlines, polling, pruning, ticks — and returns
// how long to sleep.
func (s *Scheduler) step() time.Duration {
	now := s.clock.Now()
	s.fireDeadlines(now)
	s.mu.Lock()
	stopping := s.stopping
	if stopping && !s.loopStopped {
		s.loopStopped = true
		s.checkIdle()
	}
	s.mu.Unlock()
	if !stopping {
		if !now.Before(s.nextPoll) {
			s.pollStates()
			s.nextPoll = now.Add(s.poll)
		}
		if !now.Before(s.nextPrune) {
			s.prune()
			s.nextPrune = now.Add(s.pruneEvery)
		}
		if !now.Before(s.nextSweep) {
			s.sweep(now)
			s.retakeRequests()
			s.nextSweep = now.Add(s.sweepEvery)
		}
		if s.pref.marker != nil && !now.Before(s.nextMark) {
			s.exchangeMarks(now)
			s.nextMark = now.Add(s.poll)
		}
		s.pollShards(now)
		if !now.Before(s.retryAt) {
			s.pass(now)
		}
	}
	return s.sleepFor(now, stopping)
}

func (s *Scheduler) sleepFor(now time.Time, stopping bool) time.Duration {
	next := now.Add(time.Hour)
	s.mu.Lock()
	if !stopping && len(s.heap) > 0 {
		t := s.heap[0].next
		if s.retryAt.After(t) {
			t = s.retryAt
		}
		next = earliest(next, t)
	}
	for d := range s.deadlines {
		next = earliest(next, d.at)
	}
	s.stepped = now
	s.mu.Unlock()
	if !stopping {
		next = earliest(earliest(earliest(next, s.nextPoll), s.nextPrune), s.nextSweep)
		if s.pref.marker != nil {
			next = earliest(next, s.nextMark)
		}
	}
	return max(next.Sub(now), 0)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *Scheduler) pollStates() {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	sts, err := s.ledger.JobStates(ctx)
	cancel()
	s.statesFail.Log(s.log, s.clock.Now(), err, "schedule: reading job states", "schedule: reading job states again", "node", s.node)
	s.noteStore(err)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.setStates(sts)
	s.mu.Unlock()
}

func (s *Scheduler) prune() {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	res, err := s.ledger.Prune(ctx, ledger.PruneParams{RunsOlderThan: s.maxAge, KeepPerJob: s.keep, TriggersOlderThan: s.retention / 2})
	cancel()
	if err != nil {
		s.log.Error("schedule: pruning the ledger", "node", s.node, "err", err)
		return
	}
	s.log.Debug("schedule: pruned the ledger", "node", s.node, "claims", res.Claims, "runs", res.Runs, "triggers", res.Triggers)
}

// work is one claimed tick (or trigger) for a run goroutine.
type work struct {
	tick    time.Time
	trigger string // the run record's Trigger
	// request is the trigger request this work answers, removed from the
	// ledger once claimed; claim, when set, is the Trigger of the claim's
	// key where it is not the record's (backfill.go).
	request, claim string
	past           bool          // a backfill or re-run of a past tick (backfill.go)
	rerun          bool          // run it even when it already ran
	allow          bool          // without the job's lock
	elsewhere      bool          // claimed by another node: only remove the request
	gap            gap           // with missed: the ticks before the backlog this record stands for
	late           time.Duration // how late the tick was handled
	missed         bool          // record as missed, do not run
	catchUp        bool          // a missed tick run by the misfire policy
	paused         bool          // claimed while paused: nothing to do

	// A shard-run of a sharded job (shard.go).
	shard    int  // the shard index
	shards   int  // the job's shard count; 0 when not sharded
	attempts int  // attempts recorded before this run: a retake goes on from them
	retake   bool // taken over from a stopped node: wait for its shard lock to expire

	// first is the number of this node's first attempt at the work, set
	// by runTick: 1, or the first after those a stopped node or an earlier
	// run made (a retake, a re-run). Event.First marks its start.
	first int
	// turn, set for a past tick's work as it leaves its job's pastQueue,
	// is the queue's turn, given back as its first attempt starts: the
	// next work of the queue may start then (pastqueue.go). Nil otherwise.
	turn *pastTurn
}

// batch is what one pass claims.
type batch struct {
	claims []ledger.ClaimParams
	owners []*job
	works  []work
	undo   []undo
	seen   []triggerKey
	// watched are the sharded ticks this pass began to watch (addShards):
	// a failed pass stops watching them again.
	watched []tickKey
	// fall are the due ticks of jobs another node prefers, claimed only
	// where its mark does not cover them (prefer.go).
	fall []fallback
	gap  bool      // a preferred job's ticks older than its backlog were left unclaimed
	runs runGroups // the claimed work, by job
	// ticks holds the due ticks of the pass's jobs, one stretch each.
	ticks []time.Time
}

// reset empties b for the next pass, keeping its arrays: a pass of
// 10,000 jobs would otherwise grow six slices from nothing every second.
func (b batch) reset() batch {
	clear(b.owners) // let removed jobs go
	clear(b.fall)
	return batch{claims: b.claims[:0], owners: b.owners[:0], works: b.works[:0], undo: b.undo[:0], seen: b.seen[:0], watched: b.watched[:0], fall: b.fall[:0], runs: b.runs.reset(), ticks: b.ticks[:0]}
}

// undo is how to put a job back when its pass fails: after was its
// j.after before the pass, set the one the pass gave it.
type undo struct {
	j          *job
	after, set time.Time
}

// fallback is a job's due ticks that another node prefers.
type fallback struct {
	j     *job
	ticks []time.Time
	gap   gap
}

func (b *batch) add(s *Scheduler, j *job, w work) {
	if j.Shards > 1 {
		s.addShards(b, j, w)
		return
	}
	b.addClaim(s, j, w)
}

func (b *batch) addClaim(s *Scheduler, j *job, w work) {
	b.claims = append(b.claims, s.claimParams(j.Name, w.tick, cmp.Or(w.claim, w.trigger), w.shard))
	b.owners = append(b.owners, j)
	b.works = append(b.works, w)
}

// pass claims the ticks that are due and the trigger requests not yet seen,
// in one ledger call, and starts a run goroutine per job with claimed work.
func (s *Scheduler) pass(now time.Time) {
	s.rankShards(now)
	b := s.passBuf.reset()
	defer func() { s.passBuf = b }()
	s.mu.Lock()
	leads := s.isLeader != nil && s.isLeader()
	for len(s.heap) > 0 && !s.heap[0].next.After(now) {
		j := heap.Pop(&s.heap).(*job)
		if j.LeaderOnly && !leads {
			// Not this node's to claim: the ticks stay owed, within the
			// misfire window, and the job is looked at again a poll
			// later, so that a node elected in between takes its tick
			// then, not at the job's next one.
			j.after = later(j.after, now.Add(-j.MisfireWindow))
			j.next = now.Add(s.poll)
			heap.Push(&s.heap, j)
			continue
		}
		upTo := now
		if j.lag {
			upTo = now.Add(-s.pref.delay) // another node's to claim first
		}
		upTo = upTo.Add(j.ahead) // Config.ClaimAhead: the ticks due by then
		all := appendBacklog(b.ticks, j.sched, j.after, upTo, MaxBacklog)
		ticks := all[len(b.ticks):len(all):len(all)] // capped: fallbacks delete from theirs in place
		b.ticks = all
		gap := olderTicks(j.sched, j.after, ticks)
		b.undo = append(b.undo, undo{j, j.after, upTo})
		j.after = upTo
		if s.schedule(j, upTo) {
			heap.Push(&s.heap, j)
		}
		if j.lag {
			b.fall = append(b.fall, fallback{j, ticks, gap})
			continue
		}
		b.gap = b.gap || gap.n > 0
		s.addDue(&b, j, ticks, gap, now)
	}
	for name, st := range s.states {
		j := s.jobs[name]
		if j == nil || (j.LeaderOnly && !leads) || !s.runsHere(j) {
			continue
		}
		for _, tr := range st.Triggers {
			k := triggerKey{name, tr.ID}
			if s.seen[k] {
				continue
			}
			s.seen[k] = true
			b.seen = append(b.seen, k)
			b.add(s, j, requestWork(tr))
		}
	}
	gen := s.pref.gen
	s.mu.Unlock()
	s.flushBroken()
	if len(b.fall) > 0 {
		s.addFallbacks(&b, now)
	}
	if len(b.claims) == 0 {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	res, err := s.ledger.Claim(ctx, b.claims)
	cancel()
	if err == nil && len(res) != len(b.claims) {
		err = fmt.Errorf("the ledger returned %d results for %d claims", len(res), len(b.claims))
	}
	if err != nil {
		s.claimFailed(&b, now, err)
		return
	}
	s.noteStore(nil)
	s.claimFails = 0
	// The ticks are handled now, as the claims return: the store calls
	// since the step read its clock (the polls, the claim) may have taken
	// long, and MisfireAfter counts to handled.
	handled := s.clock.Now()
	b.misfireAgain(handled)

	g := &b.runs
	failed := false
	for i, r := range res {
		j, w := b.owners[i], b.works[i]
		if w.shards > 1 {
			s.shardClaimed(j, w, r)
		}
		switch {
		case r == nil:
			s.emit(Event{Type: EventClaimed, Job: j.Name, Tick: w.tick.UTC(), Trigger: w.trigger, Paused: w.paused, CatchUp: w.catchUp, Late: handled.Sub(w.tick)})
			if w.paused {
				continue
			}
			g.add(j, w)
		case errors.Is(r, ledger.ErrClaimed):
			s.emit(Event{Type: EventClaimedElsewhere, Job: j.Name, Tick: w.tick.UTC(), Trigger: w.trigger, Paused: w.paused})
			switch {
			case w.shards > 1 && w.past:
				// Another node's shard of a backfill or re-run: the
				// watch (shard.go) sees the request through.
				w.elsewhere = true
				g.add(j, w)
			case w.request != "" && w.shards <= 1:
				s.heldElsewhere(j, w, r) // retake.go
			}
		default:
			failed = true
			s.log.Error("schedule: claiming a tick", "node", s.node, "job", j.Name, "tick", w.tick, "err", r)
		}
	}
	if s.pref.marker != nil {
		s.mu.Lock()
		s.marked(gen, now, failed, b.gap)
		s.mu.Unlock()
		defer func() { // once the runs have started
			s.exchangeMarks(now)
			s.nextMark = now.Add(s.poll)
		}()
	}
	if len(g.order) == 0 {
		return
	}
	s.mu.Lock()
	s.active += len(g.order)
	s.mu.Unlock()
	items := g.split()
	for i, j := range g.order {
		go s.execute(j, items[i])
	}
}

// runGroups gathers a pass's claimed work by job, in the order of the
// jobs' first work, for their run goroutines. Its arrays are kept from
// pass to pass; the work itself goes out in one new array per pass (split).
type runGroups struct {
	index map[*job]int // a job's place in order
	order []*job
	count []int  // per job in order, its works
	works []work // in claim order
	of    []int  // per work, its job's place in order
	items [][]work
}

func (g *runGroups) add(j *job, w work) {
	i, ok := g.index[j]
	if !ok {
		if g.index == nil {
			g.index = make(map[*job]int)
		}
		i = len(g.order)
		g.index[j] = i
		g.order = append(g.order, j)
		g.count = append(g.count, 0)
	}
	g.count[i]++
	g.works = append(g.works, w)
	g.of = append(g.of, i)
}

// split returns each job's works, in claim order, as slices of one new
// array, each capped at its end so that an append cannot reach the next.
func (g *runGroups) split() [][]work {
	all := make([]work, len(g.works))
	g.items = g.items[:0]
	at := 0
	for _, n := range g.count {
		g.items = append(g.items, all[at:at:at+n])
		at += n
	}
	for k, w := range g.works {
		i := g.of[k]
		g.items[i] = append(g.items[i], w)
	}
	return g.items
}

// reset empties g for the next pass, keeping its arrays.
func (g runGroups) reset() runGroups {
	clear(g.index)
	clear(g.order) // let removed jobs go
	clear(g.works)
	clear(g.items)
	return runGroups{index: g.index, order: g.order[:0], count: g.count[:0], works: g.works[:0], of: g.of[:0], items: g.items[:0]}
}

// addDue adds a job's due ticks to the pass, and a missed record for the
// ticks older than its backlog (gap). Callers hold s.mu.
func (s *Scheduler) addDue(b *batch, j *job, ticks []time.Time, g gap, now time.Time) {
	s.addTicks(b, j, ticks, now)
	if g.n > 0 && !s.states[j.Name].Paused {
		b.add(s, j, work{tick: g.last, missed: true, gap: g, late: now.Sub(g.last)})
	}
}

// addFallbacks reads the nodes' marks and adds to the pass the due ticks of
// jobs other nodes prefer that their marks do not cover (prefer.go).
func (s *Scheduler) addFallbacks(b *batch, now time.Time) {
	s.exchangeMarks(now)
	s.nextMark = now.Add(s.poll)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range b.fall {
		if f.j.rm.removed {
			continue
		}
		ticks := slices.DeleteFunc(f.ticks, func(t time.Time) bool { return s.covered(f.j, t) })
		if f.gap.n > 0 && s.covered(f.j, f.gap.last) {
			f.gap = gap{}
		}
		s.addDue(b, f.j, ticks, f.gap, now)
	}
}

// addTicks turns a job's due ticks into claims: on-time ticks run, missed
// ones go to the misfire policy, and a paused job's ticks are claimed only so
// that no node takes them for misfires later. Callers hold s.mu.
func (s *Scheduler) addTicks(b *batch, j *job, ticks []time.Time, now time.Time) {
	if s.states[j.Name].Paused {
		for _, t := range ticks {
			b.add(s, j, work{tick: t, paused: true})
		}
		return
	}
	late := 0
	for _, t := range ticks {
		if now.Sub(t) > j.MisfireAfter {
			late++
		}
	}
	from := j.runFrom(late)
	for i, t := range ticks {
		b.add(s, j, work{tick: t, late: now.Sub(t), missed: i < from, catchUp: i >= from && i < late})
	}
}

// runFrom applies the job's misfire policy to its due ticks, oldest first,
// of which the first late are more than MisfireAfter late: the ticks
// before the index it returns are missed, those from it up to late run
// as catch-up runs, and the rest are on time.
func (j *job) runFrom(late int) int {
	switch j.Misfire {
	case MisfireOnce:
		return max(late-1, 0)
	case MisfireCatchUp:
		return max(late-j.CatchUpMax, 0)
	}
	return late
}

// scheduled reports whether w is a scheduled tick the misfire policy
// decides on: not a trigger request, not claimed while paused, and not the
// record of the ticks older than the backlog.
func (w *work) scheduled() bool {
	return w.trigger == "" && w.request == "" && !w.paused && w.gap.n == 0
}

// misfireAgain applies the misfire policy again to the pass's plain jobs'
// scheduled ticks, as handled at now, once the claims have returned: the
// pass decided at the time it began, and a ledger slow to answer (a store
// coming back from an outage) makes a tick that was on time then late
// now. The ticks of one job are next to each other in b.works (addTicks).
// Sharded jobs keep the pass's decision: their shards are watched from
// it (shard.go).
func (b *batch) misfireAgain(now time.Time) {
	for i := 0; i < len(b.works); {
		j := b.owners[i]
		k := i
		for k < len(b.works) && b.owners[k] == j && b.works[k].scheduled() {
			k++
		}
		if k == i || j.Shards > 1 {
			i = max(k, i+1)
			continue
		}
		j.misfire(now, b.works[i:k])
		i = k
	}
}

// misfire applies the job's misfire policy again, as handled at now, to
// ws, scheduled ticks of j in tick order: it sets each one's lateness and
// whether it is missed or a catch-up run.
func (j *job) misfire(now time.Time, ws []work) {
	late := 0
	for _, w := range ws {
		if now.Sub(w.tick) > j.MisfireAfter {
			late++
		}
	}
	from := j.runFrom(late)
	for n := range ws {
		ws[n].late = now.Sub(ws[n].tick)
		ws[n].missed, ws[n].catchUp = n < from, n >= from && n < late
	}
}

// claimFailed puts a failed pass back, to be tried again after a backoff
// of up to five seconds; the claims are repeated with the same token, so
// those the failed call made are ours.
func (s *Scheduler) claimFailed(b *batch, now time.Time, err error) {
	s.noteStore(err)
	s.claimFails++
	backoff := min(time.Duration(s.claimFails)*500*time.Millisecond, 5*time.Second)
	s.retryAt = now.Add(backoff)
	s.log.Error("schedule: claiming ticks failed, will retry", "node", s.node, "claims", len(b.claims), "retry_in", backoff, "err", err)
	s.mu.Lock()
	defer s.flushBroken()
	defer s.mu.Unlock()
	for _, u := range b.undo {
		if !u.j.after.Equal(u.set) || u.j.rm.removed {
			continue
		}
		u.j.after = u.after
		ok := s.schedule(u.j, u.after)
		switch {
		case u.j.idx >= 0 && ok:
			heap.Fix(&s.heap, u.j.idx)
		case u.j.idx >= 0:
			heap.Remove(&s.heap, u.j.idx)
		case ok:
			heap.Push(&s.heap, u.j)
		}
	}
	for _, k := range b.seen {
		delete(s.seen, k)
	}
	// The pass will claim these ticks again, with the misfire policy as
	// it then finds them. Watched meanwhile, a free node would claim
	// their shards itself once the store answered (pollShards) and run
	// them; the pass's claim of the same shards, under this node's token,
	// then succeeded again, and the shard was handled twice: run, and
	// recorded missed as well (seen after a PostgreSQL outage), or run
	// twice.
	for _, k := range b.watched {
		delete(s.shards.watch, k)
	}
}

// appendBacklog appends to dst the newest n ticks of sched in (after,
// now], oldest first, and returns the result: a pass keeps one array for
// its jobs' ticks. When there are very many it looks at a shorter stretch
// before now instead of walking them all.
func appendBacklog(dst []time.Time, sched Schedule, after, now time.Time, n int) []time.Time {
	base := len(dst)
	for {
		ticks := dst[:base]
		walked := 0
		t := sched.Next(after)
		for !t.IsZero() && !t.After(now) && walked <= 16*n {
			ticks = append(ticks, t)
			if len(ticks)-base > 2*n {
				ticks = append(ticks[:base], ticks[len(ticks)-n:]...)
			}
			walked++
			t = sched.Next(t)
		}
		if walked <= 16*n {
			return append(ticks[:base], ticks[max(len(ticks)-n, base):]...)
		}
		dst = ticks[:base] // keep the array grown
		after = now.Add(-now.Sub(after) / 8)
	}
}

// addDeadline cancels a run's context with cause at the given time.
func (s *Scheduler) addDeadline(at time.Time, cancel context.CancelCauseFunc, cause error) *deadline {
	d := &deadline{at: at, cancel: cancel, cause: cause}
	s.mu.Lock()
	s.deadlines[d] = struct{}{}
	s.mu.Unlock()
	s.poke()
	return d
}

func (s *Scheduler) removeDeadline(d *deadline) {
	s.mu.Lock()
	delete(s.deadlines, d)
	s.mu.Unlock()
}

func (s *Scheduler) fireDeadlines(now time.Time) {
	var due []*deadline
	s.mu.Lock()
	for d := range s.deadlines {
		if !now.Before(d.at) {
			due = append(due, d)
			delete(s.deadlines, d)
		}
	}
	s.mu.Unlock()
	for _, d := range due {
		d.cancel(d.cause)
	}
}

// runDone is called by each run goroutine as it exits.
func (s *Scheduler) runDone() {
	s.mu.Lock()
	s.active--
	s.checkIdle()
	s.mu.Unlock()
}

// jobHeap orders jobs by their next tick.
type jobHeap []*job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h jobHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *jobHeap) Push(x any) {
	j := x.(*job)
	j.idx = len(*h)
	*h = append(*h, j)
}
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	j.idx = -1
	return j
}

// claimParams is this Scheduler's claim of the ledger key (job, tick,
// trigger, shard).
func (s *Scheduler) claimParams(job string, tick time.Time, trigger string, shard int) ledger.ClaimParams {
	return ledger.ClaimParams{Job: job, Tick: tick, Trigger: trigger, Shard: shard, Node: s.node, Token: s.token, Retain: s.retention}
}

// claimOne claims one ledger key in its own call. held is the key's
// per-claim result: nil when this Scheduler holds the claim, a
// *ledger.ClaimedError when another does; err is the call's failure.
func (s *Scheduler) claimOne(ctx context.Context, job string, tick time.Time, trigger string, shard int) (held, err error) {
	return s.claimSingle(ctx, s.claimParams(job, tick, trigger, shard))
}

// claimSingle makes the one claim p in its own call, as claimOne.
func (s *Scheduler) claimSingle(ctx context.Context, p ledger.ClaimParams) (held, err error) {
	res, err := s.ledger.Claim(ctx, []ledger.ClaimParams{p})
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("the ledger returned %d results for 1 claim", len(res))
	}
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/redisstore"
	"github.com/tasklock/tasklock/schedule"
)

// P5: the scheduler. Three schedule.Scheduler instances ("nodes") in this
// process, each with its own go-redis client (counted), Locker and
// redisstore.Store, all on one private redis-server, run the same jobs
// "@every 1s"; every handler records (job, tick, node, fence) in an
// in-memory oracle and returns at once.

// schedNodes is the number of Schedulers sharing the ledger.
const schedNodes = 3

// schedParams are P5's sizes, from -quick.
type schedParams struct {
	jobs   []int         // one measurement per entry, in order
	warmup time.Duration // from Start to the first tick counted
	window time.Duration // ticks counted: window/1s of them per job
	drain  time.Duration // after the window, at most this long for its last ticks to run
}

func newSchedParams(cfg config) schedParams {
	p := schedParams{jobs: []int{10000, p5ScaleJobs, 1000}, warmup: 5 * time.Second, window: 10 * time.Second, drain: 7 * time.Second}
	if cfg.quick {
		p = schedParams{jobs: []int{1000}, warmup: 3 * time.Second, window: 5 * time.Second, drain: 7 * time.Second}
	}
	if len(cfg.p5Jobs) > 0 {
		p.jobs = cfg.p5Jobs
	}
	return p
}

// schedCounter is a go-redis hook that counts what one node's client sends,
// like counter, and sorts it by what it is for: the job lock's scripts
// (obtain, release: EVALSHA sent alone), the job-state poll (HGETALL),
// claim pipelines (scripts only) and history pipelines (scripts and SADD).
type schedCounter struct {
	single, pipelines, piped atomic.Int64

	lockScripts, statePolls, otherSingle atomic.Int64
	claimPipes, claimScripts             atomic.Int64
	recordPipes, otherPipes              atomic.Int64

	fails callFailures // calls that returned an error (redis.Nil and NOSCRIPT aside)
}

func (h *schedCounter) failed(err error) {
	if err == nil || err == redis.Nil || strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return // NOSCRIPT: redisstore sends EVAL next
	}
	h.fails.note(err)
}

// callFailures counts a client's failed calls and keeps the first one's error.
type callFailures struct {
	n     atomic.Int64
	first atomic.Pointer[string]
}

func (f *callFailures) note(err error) {
	if f.n.Add(1) == 1 {
		s := err.Error()
		f.first.Store(&s)
	}
}

// addTo adds f's count to *n, and its first error to *first unless one is
// there already.
func (f *callFailures) addTo(n *int64, first *string) {
	*n += f.n.Load()
	if e := f.first.Load(); e != nil && *first == "" {
		*first = *e
	}
}

func (h *schedCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *schedCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.single.Add(1)
		switch cmd.Name() {
		case "evalsha", "eval":
			h.lockScripts.Add(1)
		case "hgetall":
			h.statePolls.Add(1)
		default:
			h.otherSingle.Add(1)
		}
		err := next(ctx, cmd)
		h.failed(err)
		return err
	}
}

func (h *schedCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		h.piped.Add(int64(len(cmds)))
		scripts, sadd, setup := 0, false, false
		for _, c := range cmds {
			switch c.Name() {
			case "evalsha", "eval":
				scripts++
			case "sadd":
				sadd = true
			case "hello", "client":
				setup = true
			}
		}
		switch {
		case setup:
			// A new connection's HELLO and CLIENT SETINFO: Redis 7.0
			// answers the latter with an error go-redis ignores.
			h.otherPipes.Add(1)
			return next(ctx, cmds)
		case sadd:
			h.recordPipes.Add(1)
		case scripts == len(cmds):
			h.claimPipes.Add(1)
			h.claimScripts.Add(int64(scripts))
		default:
			h.otherPipes.Add(1)
		}
		err := next(ctx, cmds)
		h.failed(err)
		return err
	}
}

// schedCounts is a snapshot of the counters of every node, summed: the
// go-redis hooks' (P5), or the SQL clients' statements and round trips on
// the wire (P5-sql), and the Lockers' events.
type schedCounts struct {
	single, pipelines, piped                                         int64
	lockScripts, statePolls, otherSingle                             int64
	claimPipes, claimScripts, recordPipes, otherPipes                int64
	stmts, trips                                                     int64
	obtained, notObtained, released, renewed, lost, started, warning int64
}

// roundTrips is Redis's commands and pipelines, or the SQL round trips
// counted on the wire (none for SQLite, which has no wire).
func (c schedCounts) roundTrips() int64 { return c.single + c.pipelines + c.trips }

func (c schedCounts) minus(o schedCounts) schedCounts {
	return schedCounts{
		c.single - o.single, c.pipelines - o.pipelines, c.piped - o.piped,
		c.lockScripts - o.lockScripts, c.statePolls - o.statePolls, c.otherSingle - o.otherSingle,
		c.claimPipes - o.claimPipes, c.claimScripts - o.claimScripts, c.recordPipes - o.recordPipes, c.otherPipes - o.otherPipes,
		c.stmts - o.stmts, c.trips - o.trips,
		c.obtained - o.obtained, c.notObtained - o.notObtained, c.released - o.released, c.renewed - o.renewed,
		c.lost - o.lost, c.started - o.started, c.warning - o.warning,
	}
}

// schedEvents counts the Lockers' events, all nodes together.
type schedEvents struct {
	obtained, notObtained, released, renewed, lost atomic.Int64
}

func (e *schedEvents) on(ev tasklock.Event) {
	switch ev.Type {
	case tasklock.EventObtained:
		e.obtained.Add(1)
	case tasklock.EventNotObtained:
		e.notObtained.Add(1)
	case tasklock.EventReleased:
		e.released.Add(1)
	case tasklock.EventRenewed:
		e.renewed.Add(1)
	case tasklock.EventLost:
		e.lost.Add(1)
	}
}

// warnCounter is a slog.Handler that counts the warnings and errors of the
// Schedulers and Lockers and keeps the first, instead of printing one per
// job when something goes wrong.
type warnCounter struct {
	n     *atomic.Int64
	first *atomic.Pointer[string]
}

func (h warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h warnCounter) Handle(_ context.Context, r slog.Record) error {
	if h.n.Add(1) == 1 {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		s := b.String()
		h.first.Store(&s)
	}
	return nil
}

func (h warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnCounter) WithGroup(string) slog.Handler      { return h }

// schedSlot is what the oracle knows of one (job, tick), or of one
// (job, tick, shard) for a sharded job.
type schedSlot struct {
	runs  atomic.Int32
	node  atomic.Int32 // 1-based node of the first run
	late  atomic.Int64 // handler start − tick, of the first run
	fence atomic.Uint64
}

// schedOracle records every handler call: the ticks from base on, one slot
// per (job, tick, shard).
type schedOracle struct {
	base    int64 // unix second of tick 0
	ticks   int
	shards  []int       // per job: its shard-runs per tick, 1 when not sharded
	first   []int       // per job: the index of its first slot
	slots   []schedSlot // first[job] + tick*shards[job] + shard
	started atomic.Int64
	dups    atomic.Int64 // runs of a (job, tick) that had run already
	outside atomic.Int64 // runs of ticks outside the slots, or of triggers
	catchUp atomic.Int64
}

func (o *schedOracle) record(job, node int, run schedule.Run) {
	now := time.Now()
	o.started.Add(1)
	if run.CatchUp {
		o.catchUp.Add(1)
	}
	off := run.Tick.Unix() - o.base
	if run.Trigger != "" || off < 0 || off >= int64(o.ticks) {
		o.outside.Add(1)
		return
	}
	if run.Shard < 0 || run.Shard >= o.shards[job] {
		o.outside.Add(1)
		return
	}
	sl := o.slot(job, int(off), run.Shard)
	if sl.runs.Add(1) > 1 {
		o.dups.Add(1)
		return
	}
	sl.late.Store(int64(now.Sub(run.Tick)))
	sl.node.Store(int32(node + 1))
	sl.fence.Store(run.Fence)
}

// newSchedOracle makes the slots of ticks ticks of jobs with these shard
// counts (0 or 1: not sharded).
func newSchedOracle(base int64, ticks int, shards []int) *schedOracle {
	o := &schedOracle{base: base, ticks: ticks, shards: make([]int, len(shards)), first: make([]int, len(shards))}
	n := 0
	for j, sh := range shards {
		o.shards[j] = max(sh, 1)
		o.first[j] = n
		n += ticks * o.shards[j]
	}
	o.slots = make([]schedSlot, n)
	return o
}

func (o *schedOracle) slot(job, tick, shard int) *schedSlot {
	return &o.slots[o.first[job]+tick*o.shards[job]+shard]
}

// schedResult is one P5 measurement.
type schedResult struct {
	id               string  // P5, P5-features, P5-shard, P5-sql
	env              *sqlEnv // P5-sql: the store; nil on Redis
	tripsCounted     bool    // P5-sql: round trips counted on the wire (not on SQLite)
	jobs             int
	ahead            time.Duration  // P5: Config.ClaimAhead
	units            int            // shard-runs per tick, all jobs (jobs, when none is sharded)
	cats             []string       // the kinds of job, in order (P5-features)
	catJobs          map[string]int // jobs per kind
	catLate          map[string][]time.Duration
	catMissed        map[string]int
	loadBefore       string        // the 1-minute load average before the measurement
	loadAfter        string        // and after
	server           string        // redis-server's version (P5-sql: the SQL store's)
	startup          time.Duration // New, Add and Start of the three nodes
	window           time.Duration // wall time counted (round trips, runs, CPU)
	ticks            int           // ticks per job in the window
	late             []time.Duration
	runs             int64 // handler calls started in the wall window
	ran              int   // window (job, tick, shard) slots that ran
	missed           int   // window (job, tick, shard) slots that never ran
	dups             int64 // duplicate runs, whole measurement
	outside          int64
	catchUp          int64
	fenceOrder       int // window slots whose fence is not above the (job, shard)'s previous tick's
	fenceOrderNode   int // … of them, those run on the node that ran that previous tick
	perNode          [schedNodes]int
	c                schedCounts // in the wall window
	clientCPU        time.Duration
	serverCPU        time.Duration
	cpuKnown         bool
	cmdStats         []cmdStat // redis-server's commandstats over the window, most time first
	goroutines       int       // largest NumGoroutine rise over the baseline, sampled every 20 ms in the window
	warmupGoroutines int       // the same during the warm-up (the first pass runs up to 5 ticks per job, split among the nodes)
	heapPerJob       float64   // median of the samples, after GC, three nodes together
	heapSample       []float64 // per job
	statuses         map[string]int
	histErr          error
	warnings         int64
	storeErrs        int64 // calls to Redis that failed, whole measurement
	firstStoreErr    string
	shutdown         time.Duration // Shutdown of the three nodes, in parallel
	shutdownErr      error         // it timed out (30 s)
	firstWarn        string
	err              error
}

// name is the measurement's id, and its store for P5-sql.
func (r *schedResult) name() string {
	if r.env != nil {
		return r.id + " " + string(r.env.kind)
	}
	return r.id
}

// rtPerRun is round trips per run in the window.
func (r *schedResult) rtPerRun() float64 {
	if r.runs == 0 {
		return 0
	}
	return float64(r.c.roundTrips()) / float64(r.runs)
}

func (r *schedResult) cpuPerRun() (client, server float64) {
	if !r.cpuKnown || r.runs == 0 {
		return 0, 0
	}
	n := float64(r.runs)
	return float64(r.clientCPU.Microseconds()) / n, float64(r.serverCPU.Microseconds()) / n
}

// runP5 runs a P5 measurement per entry of p.jobs, each on a fresh
// redis-server, stopped once done.
func runP5(ctx context.Context, cfg config, add func(func())) []*schedResult {
	p := newSchedParams(cfg)
	var out []*schedResult
	type size struct {
		jobs  int
		ahead time.Duration
	}
	var sizes []size
	for i, n := range p.jobs {
		sizes = append(sizes, size{n, 0})
		if i == 0 && cfg.p5Ahead > 0 {
			// Second, before a larger size's garbage and server load.
			sizes = append(sizes, size{n, cfg.p5Ahead})
		}
	}
	for _, sz := range sizes {
		n := sz.jobs
		r := &schedResult{id: "P5", jobs: n, ahead: sz.ahead, loadBefore: loadAvg()}
		out = append(out, r)
		srv, err := startServer(ctx, func(s *server) { add(s.stop) })
		if err != nil {
			r.err = fmt.Errorf("P5 (%d jobs): %w", n, err)
			progress("%v", r.err)
			continue
		}
		r.server = srv.version
		progress("P5: redis-server %s on %s, %d jobs @every 1s on %d nodes", srv.version, srv.addr, n, schedNodes)
		spec := plainSpec(n)
		spec.ahead = sz.ahead
		spec.prefer = cfg.p5Prefer && sz.ahead == 0 // Config refuses both
		if err := measureSched(ctx, &redisBackend{srv: srv}, p, spec, r); err != nil {
			r.err = fmt.Errorf("P5 (%d jobs): %w", n, err)
		}
		srv.stop()
		r.loadAfter = loadAvg()
		if r.err != nil {
			progress("%v", r.err)
		}
	}
	return out
}

// schedNode is one Scheduler with what it is built on.
type schedNode struct {
	st schedStore
	lk *tasklock.Locker
	s  *schedule.Scheduler
}

// schedStore is what a node is built on: the Locker's store, which is
// also the ledger and the NodeLister.
type schedStore interface {
	driver.Store
	driver.Lister
	ledger.Ledger
}

// schedBackend is the store a P5 measurement runs on: it builds each
// node's store on a client of the node's own, counts what those clients
// send, and reads the server's CPU and statistics. redisBackend is P5's,
// sqlBackend P5-sql's (schedsql.go).
type schedBackend interface {
	// open builds node i's store (i = 0, 1, 2, in order).
	open(ctx context.Context, i int) (schedStore, error)
	// warm opens the clients' connections, before the baseline.
	warm(ctx context.Context)
	// count adds what the clients have sent so far to c.
	count(c *schedCounts)
	// failed returns how many calls to the store failed, and the first.
	failed() (int64, string)
	// serverCPU returns the server's CPU time (0 for a store in
	// lockbench's process).
	serverCPU() (time.Duration, bool)
	// resetStats resets the server's statistics at the window's start
	// and returns what reads them at its end; nil when it has none.
	resetStats(ctx context.Context) func(context.Context) []cmdStat
	// close closes the clients, once the nodes are closed.
	close()
}

// redisBackend is P5's store: per node a go-redis client (default
// options, a counting hook) and a redisstore.Store on it, all on srv.
type redisBackend struct {
	srv   *server
	nodes []redisNode
}

type redisNode struct {
	c *redis.Client
	h *schedCounter
}

func (b *redisBackend) open(context.Context, int) (schedStore, error) {
	nd := redisNode{c: newClient(b.srv.addr), h: &schedCounter{}}
	nd.c.AddHook(nd.h)
	b.nodes = append(b.nodes, nd)
	st, err := redisstore.New(nd.c, nil)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// warm opens 20 connections per client, 5 PINGs on each.
func (b *redisBackend) warm(ctx context.Context) {
	var wg sync.WaitGroup
	for _, nd := range b.nodes {
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					_ = nd.c.Ping(ctx).Err()
				}
			}()
		}
	}
	wg.Wait()
}

func (b *redisBackend) count(c *schedCounts) {
	for _, nd := range b.nodes {
		h := nd.h
		c.single += h.single.Load()
		c.pipelines += h.pipelines.Load()
		c.piped += h.piped.Load()
		c.lockScripts += h.lockScripts.Load()
		c.statePolls += h.statePolls.Load()
		c.otherSingle += h.otherSingle.Load()
		c.claimPipes += h.claimPipes.Load()
		c.claimScripts += h.claimScripts.Load()
		c.recordPipes += h.recordPipes.Load()
		c.otherPipes += h.otherPipes.Load()
	}
}

func (b *redisBackend) failed() (n int64, first string) {
	for _, nd := range b.nodes {
		nd.h.fails.addTo(&n, &first)
	}
	return n, first
}

func (b *redisBackend) serverCPU() (time.Duration, bool) { return b.srv.cpu() }

// resetStats resets redis-server's commandstats (CONFIG RESETSTAT), on a
// client of its own, not counted.
func (b *redisBackend) resetStats(ctx context.Context) func(context.Context) []cmdStat {
	stats := newClient(b.srv.addr)
	if err := stats.ConfigResetStat(ctx).Err(); err != nil {
		_ = stats.Close()
		return nil
	}
	return func(ctx context.Context) []cmdStat {
		defer stats.Close()
		return readCmdStats(ctx, stats)
	}
}

func (b *redisBackend) close() {
	for _, nd := range b.nodes {
		_ = nd.c.Close()
	}
}

// schedSpec is what a P5 variant runs: its jobs (job i's fields but Name
// and Handler, and its kind) and the Schedulers' extra configuration.
type schedSpec struct {
	jobs   int
	job    func(i int, names []string) (schedule.Job, string)
	pools  map[string]int
	lister bool          // Config.NodeLister: the nodes rank themselves to spread shards
	prefer bool          // Config.PreferredNodes
	ahead  time.Duration // Config.ClaimAhead
}

// plainSpec is P5's: n plain jobs.
func plainSpec(n int) schedSpec {
	return schedSpec{jobs: n, job: func(int, []string) (schedule.Job, string) { return schedule.Job{}, "plain" }}
}

// measureSched runs one P5 measurement on b's store: three nodes, spec's
// jobs, the oracle's verdict on the window's ticks, into r.
func measureSched(ctx context.Context, b schedBackend, p schedParams, spec schedSpec, r *schedResult) error {
	n := r.jobs
	var (
		ev        schedEvents
		warnings  atomic.Int64
		firstWarn atomic.Pointer[string]
	)
	logger := slog.New(warnCounter{&warnings, &firstWarn})
	nodes := make([]*schedNode, schedNodes)
	g0 := runtime.NumGoroutine()
	defer func() {
		// Shut down what is left (after a failure; a second Shutdown
		// only waits again), close, and wait for the run goroutines a
		// Shutdown that timed out left behind, so that they do not run
		// into the next measurement.
		for _, nd := range nodes {
			if nd == nil {
				continue
			}
			if nd.s != nil {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_ = nd.s.Shutdown(sctx)
				cancel()
			}
			if nd.lk != nil {
				_ = nd.lk.Close()
			}
		}
		b.close()
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && runtime.NumGoroutine() > g0+20; {
			time.Sleep(100 * time.Millisecond)
		}
	}()
	for i := range nodes {
		st, err := b.open(ctx, i)
		if err != nil {
			return err
		}
		nd := &schedNode{st: st}
		nodes[i] = nd
		if nd.lk, err = tasklock.New(st, &tasklock.Config{OnEvent: ev.on, Logger: logger}); err != nil {
			return err
		}
	}

	// The caller's part exists before the baseline: names, handlers, the
	// oracle, the clients' connections.
	start := time.Now()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p5-%05d", i)
	}
	jobs := make([]schedule.Job, n)
	kinds := make([]string, n)
	shards := make([]int, n)
	r.catJobs, r.catLate, r.catMissed = map[string]int{}, map[string][]time.Duration{}, map[string]int{}
	for i := range jobs {
		jobs[i], kinds[i] = spec.job(i, names)
		jobs[i].Name = names[i]
		shards[i] = jobs[i].Shards
		if r.catJobs[kinds[i]] == 0 {
			r.cats = append(r.cats, kinds[i])
		}
		r.catJobs[kinds[i]]++
		r.units += max(shards[i], 1)
	}
	o := newSchedOracle(start.Unix()-10, int((p.warmup+p.window+p.drain)/time.Second)+40, shards)
	handlers := make([][]func(context.Context, schedule.Run) error, schedNodes)
	for nd := range handlers {
		handlers[nd] = make([]func(context.Context, schedule.Run) error, n)
		for j := range n {
			handlers[nd][j] = func(_ context.Context, run schedule.Run) error {
				o.record(j, nd, run)
				return nil
			}
		}
	}
	b.warm(ctx)
	heap0 := heapAfterGC()
	g0 = runtime.NumGoroutine()

	t0 := time.Now()
	for i, nd := range nodes {
		sc := &schedule.Config{Node: fmt.Sprintf("node-%d", i+1), Logger: logger, Pools: spec.pools, PreferredNodes: spec.prefer, ClaimAhead: spec.ahead}
		if spec.lister {
			sc.NodeLister = nd.st
		}
		s, err := schedule.New(nd.lk, nd.st, sc)
		if err != nil {
			return err
		}
		nd.s = s
		for j := range n {
			// MisfireWindow = MisfireAfter (5 s, the least allowed):
			// a node starting on an empty ledger looks back 5 ticks, not
			// the default hour's 100 (MaxBacklog).
			jb := jobs[j]
			jb.Schedule, jb.Handler, jb.MisfireWindow = "@every 1s", handlers[i][j], schedule.DefaultMisfireAfter
			err := s.Add(jb)
			if err != nil {
				return err
			}
		}
	}
	for _, nd := range nodes {
		if err := nd.s.Start(ctx); err != nil {
			return err
		}
	}
	r.startup = time.Since(t0)

	snap := func() schedCounts {
		var c schedCounts
		b.count(&c)
		c.obtained, c.notObtained, c.released = ev.obtained.Load(), ev.notObtained.Load(), ev.released.Load()
		c.renewed, c.lost = ev.renewed.Load(), ev.lost.Load()
		c.started, c.warning = o.started.Load(), warnings.Load()
		return c
	}
	maxG := 0
	sampleUntil := func(t time.Time) {
		for time.Now().Before(t) {
			maxG = max(maxG, runtime.NumGoroutine()-g0)
			time.Sleep(min(20*time.Millisecond, max(time.Until(t), 0)))
		}
	}

	// The window: the ticks w0, w0+1s, …; counted over the same wall time.
	// It begins p.warmup after the start, and at least 2 s after the nodes
	// have started: on a loaded machine, New, Add and Start of 10,000 jobs
	// can take longer than the warm-up.
	w0 := start.Add(p.warmup)
	if ready := time.Now().Add(2 * time.Second); ready.After(w0) {
		w0 = ready
	}
	w0 = w0.Truncate(time.Second).Add(time.Second)
	r.ticks = int(p.window / time.Second)
	if int(w0.Unix()-o.base)+r.ticks > o.ticks {
		return fmt.Errorf("the nodes took %v to start, too long for the oracle's %d ticks", r.startup, o.ticks)
	}
	w1 := w0.Add(time.Duration(r.ticks) * time.Second)
	sampleUntil(w0)
	r.warmupGoroutines, maxG = maxG, 0
	c0 := snap()
	cpu0, ok0 := selfCPU()
	srv0, ok1 := b.serverCPU()
	readStats := b.resetStats(ctx)
	sampleUntil(w1)
	r.goroutines = maxG
	c1 := snap()
	cpu1, ok2 := selfCPU()
	srv1, ok3 := b.serverCPU()
	if readStats != nil {
		r.cmdStats = readStats(ctx)
	}
	r.window = w1.Sub(w0)
	r.c = c1.minus(c0)
	r.runs = r.c.started
	r.clientCPU, r.serverCPU, r.cpuKnown = cpu1-cpu0, srv1-srv0, ok0 && ok1 && ok2 && ok3
	progress("%s (%d jobs): %d runs, %d round trips in %v", r.name(), n, r.runs, r.c.roundTrips(), r.window)

	// Let the window's last ticks run, up to p.drain.
	first, last := int(w0.Unix()-o.base), int(w0.Unix()-o.base)+r.ticks
	allRan := func() bool {
		for j := range n {
			for t := first; t < last; t++ {
				for sh := range o.shards[j] {
					if o.slot(j, t, sh).runs.Load() == 0 {
						return false
					}
				}
			}
		}
		return true
	}
	for end := time.Now().Add(p.drain); time.Now().Before(end) && !allRan(); {
		time.Sleep(200 * time.Millisecond)
	}

	// Heap while the jobs keep ticking.
	for i := range 3 {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		r.heapSample = append(r.heapSample, float64(int64(heapAfterGC())-int64(heap0))/float64(n))
	}
	s := slices.Clone(r.heapSample)
	slices.Sort(s)
	r.heapPerJob = s[len(s)/2]

	// The oracle's verdict on the window's ticks, taken before Shutdown,
	// which may take long when the nodes are behind.
	r.late = make([]time.Duration, 0, r.units*r.ticks)
	for j := range n {
		for sh := range o.shards[j] {
			var prev uint64
			var prevNode int32
			for t := first; t < last; t++ {
				sl := o.slot(j, t, sh)
				if sl.runs.Load() == 0 {
					r.missed++
					r.catMissed[kinds[j]]++
					continue
				}
				r.ran++
				late := time.Duration(sl.late.Load())
				r.late = append(r.late, late)
				r.catLate[kinds[j]] = append(r.catLate[kinds[j]], late)
				nd := sl.node.Load()
				if nd >= 1 && int(nd) <= schedNodes {
					r.perNode[nd-1]++
				}
				f := sl.fence.Load()
				if f <= prev {
					r.fenceOrder++
					if nd == prevNode {
						r.fenceOrderNode++
					}
				}
				prev, prevNode = f, nd
			}
		}
	}
	r.dups, r.outside, r.catchUp = o.dups.Load(), o.outside.Load(), o.catchUp.Load()
	r.warnings = warnings.Load()
	r.storeErrs, r.firstStoreErr = b.failed()
	if w := firstWarn.Load(); w != nil {
		r.firstWarn = *w
	}

	// All three at once, as a fleet being stopped; a node's Shutdown
	// waits for its run goroutines, a backlog included.
	t1 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			errs[i] = nd.s.Shutdown(sctx)
			cancel()
		}()
	}
	wg.Wait()
	r.shutdown = time.Since(t1)
	for _, err := range errs {
		if err != nil && r.shutdownErr == nil {
			r.shutdownErr = err
		}
	}

	// What the ledger recorded for the window's ticks, by status.
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	recs, err := nodes[0].st.Runs(hctx, ledger.RunQuery{From: w0, To: w1})
	if err != nil {
		r.histErr = err
	} else {
		r.statuses = map[string]int{}
		for _, rec := range recs {
			r.statuses[string(rec.Status)]++
		}
	}
	progress("%s (%d jobs): lateness p99 %v, %d missed, %d duplicates, %.2f round trips per run",
		r.name(), n, percentile(r.late, 0.99), r.missed, r.dups, r.rtPerRun())
	return nil
}

// cmdStat is one line of redis-server's INFO commandstats.
type cmdStat struct {
	name  string
	calls int64
	usec  int64
}

// readCmdStats reads INFO commandstats, most time first; nil when it
// cannot. Commands run by scripts are counted on their own lines as well
// as in the script's (evalsha).
func readCmdStats(ctx context.Context, c *redis.Client) []cmdStat {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil
	}
	var out []cmdStat
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		st := cmdStat{name: strings.TrimPrefix(name, "cmdstat_")}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b cmdStat) int { return cmp.Compare(b.usec, a.usec) })
	return out
}

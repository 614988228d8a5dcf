// Command lockbench measures tasklock against the raw Redis floor, redsync v4
// and bsm/redislock on one private redis-server, and each SQL store against
// a raw upsert floor, ShedLock's algorithm and the library users would pick
// instead (pglock on PostgreSQL, go-mysql-lock on MariaDB) on private
// PostgreSQL and MariaDB servers and a SQLite file, in one run, and prints a
// Markdown report with the targets of DESIGN.md ("Performance targets"):
//
//	P1  64 goroutines, distinct keys: Obtain+Release pairs/s
//	P1-1  one goroutine's Obtain+Release pairs/s (extend.go)
//	P2  allocations per Obtain+Release pair
//	Extend  extends/s of held locks at 1 and 64 goroutines, and
//	    allocations per extend (extend.go)
//	P3  16 goroutines on one key, blocking obtain → release: acquisitions/s
//	    and release → next holder handoff latency
//	P4  10,000 locks kept alive: store round trips per renewal cycle,
//	    goroutines, heap per held lock
//	P5  the scheduler: 10,000 jobs @every 1s on 3 nodes sharing one
//	    redisstore ledger: tick lateness, duplicate and missed ticks, store
//	    round trips per run (sched*.go)
//	P5-features, P5-shard  the same with the scheduler's features on:
//	    10,000 jobs, some dependent, in pools, with MaxConcurrent or
//	    sharded; 100 jobs of 32 shards (schedfeatures*.go)
//	P1-sql, P3-sql, P4-sql  the same per SQL store: 16 goroutines and 1;
//	    16 goroutines on one key, and 8 contenders with clients of their
//	    own on one key (the handoff rows); 1,000 locks kept alive
//	P5-sql  P5 on pgstore and sqlitestore: 1,000 jobs @every 1s on 3
//	    nodes, ledger and locks on the same store (schedsql*.go)
//	P1-etcd, P3-etcd, P4-etcd (and -zk, -redlock)  tasklock against etcd's
//	    concurrency.Mutex, go-zookeeper's zk.Lock and redsync on three
//	    nodes: 16 goroutines; 16 goroutines on one key; requests to keep
//	    10,000 locks alive for one TTL (coord*.go)
//	sem-redis, sem-etcd, failover-redis, failover-postgres, failover-etcd,
//	P4-permits  the lock kinds: 64 goroutines on one semaphore of 8
//	    permits against a hand-written Lua semaphore and etcd's
//	    concurrency recipe; a SIGKILLed leader's follower elected, against
//	    concurrency.Election on etcd; 10,000 permits kept alive (kinds*.go)
//	curves  P1 at 1, 4, 16, 64 and 256 goroutines, P4 at 1,000, 10,000
//	    and 100,000 locks, as tables and drawn into curves.svg (curves*.go)
//
// Run it from the bench module: go run ./cmd/lockbench [-quick]. It needs
// redis-server, postgres and initdb, mariadbd and mariadb-install-db, etcd,
// and java with the ZooKeeper jars (make servers installs them). See
// bench/README.md for what each number means.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// config is one run's parameters.
type config struct {
	p1Duration   time.Duration // measured time of one P1 run
	p3Duration   time.Duration // measured time of one P3 run
	warmup       time.Duration // before each P1 or P3 run
	rounds       int           // P1 and P3 repeat this often, alternating order
	p1Goroutines int
	p2Pairs      int
	p3Goroutines int
	p4Locks      int
	quick        bool
	only         map[string]bool // empty: all
	p5Jobs       []int           // -p5jobs: P5's sizes instead of its defaults
	p5Prefer     bool            // -p5prefer: P5 with schedule.Config.PreferredNodes
	p5Ahead      time.Duration   // -p5ahead: one more P5 measurement, with schedule.Config.ClaimAhead

	// The SQL part.
	sqlDuration   time.Duration // measured time per implementation in P1-sql (slices) and P3-sql (over sqlP3Rounds runs)
	sqlP3Rounds   int
	sqlGoroutines int // P1-sql and P3-sql
	sqlP4Locks    int
	sqlP4TTL      time.Duration
	stores        map[storeKind]bool // empty: all
	heapProfile   string             // -heapprofile
}

func (c config) runs(id string) bool { return len(c.only) == 0 || c.only[id] }

func (c config) runsStore(k storeKind) bool { return len(c.stores) == 0 || c.stores[k] }

var (
	redisIDs = []string{"P1", "P1-1", "P2", "EXTEND", "P3", "P4"}
	sqlIDs   = []string{"P1-SQL", "P3-SQL", "P4-SQL", "P5-SQL"}
)

// sqlIDsOn are the SQL measurements that run on store k: P5-sql only on
// p5SQLKinds.
func sqlIDsOn(k storeKind) []string {
	if slices.Contains(p5SQLKinds, k) {
		return sqlIDs
	}
	return slices.DeleteFunc(slices.Clone(sqlIDs), func(id string) bool { return id == "P5-SQL" })
}

// parseOnly reads -only: measurement ids (P1 … P5, P1-sql … P5-sql),
// the groups "redis" and "sql", and SQL store names (postgres, mysql,
// sqlite), which restrict the SQL measurements to those stores (alone, they
// select every SQL measurement).
func parseOnly(only string, cfg *config) error {
	cfg.only, cfg.stores = map[string]bool{}, map[storeKind]bool{}
	for _, id := range strings.Split(only, ",") {
		switch id = strings.ToUpper(strings.TrimSpace(id)); id {
		case "":
		case "P1", "P1-1", "P2", "EXTEND", "P3", "P4", "P5", "P5-FEATURES", "P5-SHARD", "P1-SQL", "P3-SQL", "P4-SQL", "P5-SQL":
			cfg.only[id] = true
		case "REDIS":
			for _, x := range redisIDs {
				cfg.only[x] = true
			}
			cfg.only["P5"] = true
			for _, x := range p5Variants {
				cfg.only[x] = true
			}
		case "SQL":
			for _, x := range sqlIDs {
				cfg.only[x] = true
			}
		case "POSTGRES", "POSTGRESQL", "PG":
			cfg.stores[kindPG] = true
		case "MYSQL", "MARIADB":
			cfg.stores[kindMySQL] = true
		case "SQLITE":
			cfg.stores[kindSQLite] = true
		default:
			if !addCoordOnly(cfg.only, id) && !addKindsOnly(cfg.only, id) && !addCurvesOnly(cfg.only, id) {
				return fmt.Errorf("lockbench: -only: unknown measurement or store %q (P1, P1-1, P2, Extend, P3, P4, P5, P5-features, P5-shard, P1-sql, P3-sql, P4-sql, P5-sql, redis, sql, postgres, mysql, sqlite, %s, %s, curves)", id, coordOnlyHelp, kindsOnlyHelp)
			}
		}
	}
	if len(cfg.stores) > 0 {
		sqlAsked := false
		for _, x := range sqlIDs {
			sqlAsked = sqlAsked || cfg.only[x]
		}
		if !sqlAsked {
			for _, x := range sqlIDs {
				cfg.only[x] = true
			}
		}
	}
	return nil
}

func main() {
	var (
		cfg         config
		duration    time.Duration
		only        string
		cpuProfile  string
		memProfile  string
		heapProfile string
		leader      string
		curvesChild string
		p5Jobs      string
	)
	flag.DurationVar(&duration, "duration", 3*time.Second, "measured time per round of each implementation in P1 (taken in slices of 0.5 s) and P3 (one run, after a 0.5 s warm-up)")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds of P1 and P3; the implementations take turns, in reverse order every other turn")
	flag.DurationVar(&cfg.sqlDuration, "sqlduration", 3*time.Second, "measured time per implementation and SQL store in P1-sql (taken in slices of 0.5 s) and P3-sql (in two runs)")
	flag.BoolVar(&cfg.quick, "quick", false, "short smoke run (about a minute): one round, P1 runs of 0.5 s and P3 runs of 0.8 s\n(unless -duration is given), 300 pairs for P2, no warm-up cycle in P4,\n1,000 jobs for 5 s in P5 (instead of 10,000, 30,000 and 1,000 for 10 s),\n1,000 jobs in P5-features (instead of 10,000), 20 jobs of 32 shards in P5-shard (instead of 100);\nSQL: 0.5 s per implementation (unless -sqlduration is given), 200 locks of TTL 1.5 s in P4-sql,\n200 jobs for 5 s in P5-sql (instead of 1,000 for 10 s)")
	flag.StringVar(&only, "only", "", "comma-separated measurements to run: P1, P1-1, P2, Extend, P3, P4, P5, P5-features, P5-shard, P1-sql, P3-sql, P4-sql, P5-sql (PostgreSQL and SQLite), or the groups redis and sql;\nSQL store names (postgres, mysql, sqlite) restrict the SQL measurements to those stores;\n"+coordOnlyHelp+";\n"+kindsOnlyHelp+";\ncurves: the scaling curves of P1 and P4, drawn into curves.svg (default all)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&memProfile, "memprofile", "", "record every allocation (MemProfileRate=1, which slows the run) and write an allocs profile to this file")
	flag.StringVar(&heapProfile, "heapprofile", "", "write the live heap to this file in P4, while the locks are held\n(and to this file .postgres, .mysql, .sqlite in P4-sql, while tasklock holds them)")
	flag.DurationVar(&cfg.p5Ahead, "p5ahead", 500*time.Millisecond, "one more P5 measurement, at P5's first size, with schedule.Config.ClaimAhead: each job's tick claimed, its lock taken, this long before the tick (at most 1s; 0: none)")
	flag.BoolVar(&cfg.p5Prefer, "p5prefer", false, "P5 with schedule.Config.PreferredNodes: each job's tick claimed by its preferred node, the others 1 s later as a fallback")
	flag.StringVar(&p5Jobs, "p5jobs", "", "comma-separated job counts of P5's measurements, in order (e.g. 10000,30000), instead of 10,000, 30,000 and 1,000 (-quick: 1,000)")
	flag.StringVar(&leader, "failover-child", "", "internal: run as the leader process of the failover measurements, with this JSON spec")
	flag.StringVar(&curvesChild, "curves-child", "", "internal: run one size of the P4 curve in a process of its own, with this JSON spec, and print its result as JSON")
	flag.Parse()
	if leader != "" {
		os.Exit(runFailoverChild(leader))
	}
	if curvesChild != "" {
		os.Exit(runCurvesChild(curvesChild))
	}

	cfg.p1Duration, cfg.p3Duration, cfg.warmup = duration, duration, 500*time.Millisecond
	cfg.p1Goroutines, cfg.p2Pairs, cfg.p3Goroutines, cfg.p4Locks = 64, 5000, 16, 10000
	cfg.sqlGoroutines, cfg.sqlP4Locks, cfg.sqlP4TTL = 16, 1000, 3*time.Second
	if cfg.quick {
		cfg.warmup, cfg.rounds, cfg.p2Pairs = 200*time.Millisecond, 1, 300
		if !flagSet("duration") {
			cfg.p1Duration, cfg.p3Duration = 500*time.Millisecond, 800*time.Millisecond
		}
		if !flagSet("sqlduration") {
			cfg.sqlDuration = 500 * time.Millisecond
		}
		cfg.sqlP4Locks, cfg.sqlP4TTL = 200, 1500*time.Millisecond
	}
	for _, f := range strings.FieldsFunc(p5Jobs, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "lockbench: -p5jobs: %q is not a positive number of jobs\n", f)
			os.Exit(2)
		}
		cfg.p5Jobs = append(cfg.p5Jobs, n)
	}
	if duration <= 0 || cfg.rounds < 1 || cfg.sqlDuration <= 0 {
		fmt.Fprintln(os.Stderr, "lockbench: -duration and -sqlduration must be positive and -rounds at least 1")
		os.Exit(2)
	}
	cfg.sqlP3Rounds = 2
	if cfg.sqlDuration < time.Second {
		cfg.sqlP3Rounds = 1
	}
	if err := parseOnly(only, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	if memProfile != "" {
		runtime.MemProfileRate = 1
	}
	cfg.heapProfile = heapProfile
	if err := run(cfg, cpuProfile, memProfile, heapProfile); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// cleanups are what must run however lockbench ends: the servers' stops.
type cleanups struct {
	mu  sync.Mutex
	fns []func()
}

func (c *cleanups) add(f func()) {
	c.mu.Lock()
	c.fns = append(c.fns, f)
	c.mu.Unlock()
}

// run runs them, last added first; each runs once, however often run is
// called (every stop is idempotent).
func (c *cleanups) run() {
	c.mu.Lock()
	fns := slices.Clone(c.fns)
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func run(cfg config, cpuProfile, memProfile, heapProfile string) error {
	ctx := context.Background()
	// On SIGINT or SIGTERM, kill the servers before exiting: they run in
	// their own process groups, so the terminal's signal does not reach
	// them.
	var cl cleanups
	defer cl.run()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		cl.run()
		fmt.Fprintf(os.Stderr, "lockbench: %v\n", sig)
		os.Exit(130)
	}()

	needRedis := false
	for _, id := range redisIDs {
		needRedis = needRedis || cfg.runs(id)
	}
	// The SQL stores with a measurement to run: MariaDB is not started
	// for P5-sql alone.
	var kinds []storeKind
	for _, k := range sqlKinds {
		if !cfg.runsStore(k) {
			continue
		}
		for _, id := range sqlIDsOn(k) {
			if cfg.runs(id) {
				kinds = append(kinds, k)
				break
			}
		}
	}

	rep := &report{cfg: cfg, started: time.Now()}
	load0 := loadAvg()
	var (
		srv  *server
		envs []*sqlEnv
		err  error
	)
	if needRedis {
		srv, err = startServer(ctx, func(s *server) { cl.add(s.stop) })
		if err != nil {
			return err
		}
		rep.server = srv.version
		progress("redis-server %s on %s", srv.version, srv.addr)
	}
	if len(kinds) > 0 {
		envs = startSQL(ctx, kinds, cl.add)
		rep.sqlEnvs = envs
		for _, e := range envs {
			if e.err != nil {
				progress("%s: %v", e.title, e.err)
			} else if e.srv != nil {
				progress("%s %s on %s", e.title, e.version, e.srv.addr)
			} else {
				progress("%s %s in %s", e.title, e.version, e.path)
			}
		}
	}

	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("lockbench: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("lockbench: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	if cfg.runs("P1") {
		if rep.p1, err = runP1(ctx, srv, cfg); err != nil {
			return err
		}
	}
	if cfg.runs("P2") {
		if rep.p2, err = runP2(ctx, srv.addr, cfg.p2Pairs); err != nil {
			return err
		}
	}
	if cfg.runs("P1-1") {
		if rep.p1one, err = runP1One(ctx, srv, cfg); err != nil {
			return err
		}
	}
	if cfg.runs("EXTEND") {
		if rep.extend, err = runExtend(ctx, srv, cfg); err != nil {
			return err
		}
	}
	if cfg.runs("P3") {
		if rep.p3, err = runP3(ctx, srv.addr, cfg); err != nil {
			return err
		}
	}
	if cfg.runs("P4") {
		if rep.p4, err = runP4(ctx, srv, cfg.p4Locks, p4TTL, cfg.quick, heapProfile); err != nil {
			return err
		}
	}
	if srv != nil {
		srv.stop()
	}
	if cfg.runs("P5") {
		rep.p5 = runP5(ctx, cfg, cl.add)
		for _, r := range rep.p5 {
			rep.server = cmp.Or(rep.server, r.server)
		}
	}
	rep.p5x = runP5Variants(ctx, cfg, cl.add)
	for _, r := range rep.p5x {
		rep.server = cmp.Or(rep.server, r.server)
	}
	// Each SQL store in turn, its server stopped once done with, so that
	// an idle server does not share the CPUs with the next one's run.
	failed := append(p5Failures(rep.p5), p5Failures(rep.p5x)...)
	for _, e := range envs {
		if e.err != nil {
			failed = append(failed, e.title+": "+e.err.Error())
			continue
		}
		if cfg.runs("P1-SQL") {
			for _, n := range []int{cfg.sqlGoroutines, 1} {
				r := runP1SQL(ctx, e, cfg, n)
				rep.p1sql = append(rep.p1sql, r)
				if r.err != nil {
					failed = append(failed, r.err.Error())
				}
			}
		}
		if cfg.runs("P3-SQL") {
			r := runP3SQL(ctx, e, cfg, cfg.sqlGoroutines, false)
			rep.p3sql = append(rep.p3sql, r)
			h := runP3SQL(ctx, e, cfg, sqlHandoffContenders, true)
			rep.handoffSQL = append(rep.handoffSQL, h)
			for _, x := range []*sqlP3Result{r, h} {
				if x.err != nil {
					failed = append(failed, x.err.Error())
				}
			}
		}
		if cfg.runs("P4-SQL") {
			r := runP4SQL(ctx, e, cfg)
			rep.p4sql = append(rep.p4sql, r)
			for _, x := range r.res {
				if x.err != nil {
					failed = append(failed, fmt.Sprintf("P4-sql %s %s: %v", e.kind, x.name, x.err))
				}
			}
		}
		if cfg.runs("P5-SQL") && slices.Contains(p5SQLKinds, e.kind) {
			r := runP5SQL(ctx, e, cfg)
			rep.p5sql = append(rep.p5sql, r)
			if r.err != nil {
				failed = append(failed, r.err.Error())
			}
		}
		e.close()
	}
	coord := runCoord(ctx, cfg, cl.add)
	failed = append(failed, coord.failures()...)
	lockKinds := runKinds(ctx, cfg, cl.add)
	failed = append(failed, lockKinds.failures()...)
	curves := runCurves(ctx, cfg, cl.add)
	failed = append(failed, curves.failures()...)
	rep.elapsed = time.Since(rep.started)
	if load1 := loadAvg(); load0 != "" && load1 != "" {
		rep.load = fmt.Sprintf(" Load average (1 min) %s before, %s after.", load0, load1)
	}
	rep.write(os.Stdout)
	coord.write(os.Stdout)
	lockKinds.write(os.Stdout)
	curves.write(os.Stdout)

	if memProfile != "" {
		f, err := os.Create(memProfile)
		if err != nil {
			return fmt.Errorf("lockbench: %w", err)
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return fmt.Errorf("lockbench: %w", err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("lockbench: not everything could run:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}

// progress reports on stderr, so that stdout holds only the report.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "lockbench: "+format+"\n", args...)
}

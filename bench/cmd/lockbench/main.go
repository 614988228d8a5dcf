// Command lockbench measures tasklock against the raw Redis floor, redsync v4
// and bsm/redislock on one private redis-server, in one run, and prints a
// Markdown report with the targets of DESIGN.md ("Performance targets"):
//
//	P1  64 goroutines, distinct keys: Obtain+Release pairs/s
//	P2  allocations per Obtain+Release pair
//	P3  16 goroutines on one key, blocking obtain → release: acquisitions/s
//	    and release → next holder handoff latency
//	P4  10,000 locks kept alive: store round trips per renewal cycle,
//	    goroutines, heap per held lock
//
// Run it from the bench module: go run ./cmd/lockbench [-quick]. It needs
// redis-server on PATH. See bench/README.md for what each number means.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
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
}

func (c config) runs(id string) bool { return len(c.only) == 0 || c.only[id] }

func main() {
	var (
		cfg         config
		duration    time.Duration
		only        string
		cpuProfile  string
		memProfile  string
		heapProfile string
	)
	flag.DurationVar(&duration, "duration", 3*time.Second, "measured time per round of each implementation in P1 (taken in slices of 0.5 s) and P3 (one run, after a 0.5 s warm-up)")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds of P1 and P3; the implementations take turns, in reverse order every other turn")
	flag.BoolVar(&cfg.quick, "quick", false, "short smoke run (about 10 s): one round, P1 runs of 0.5 s and P3 runs of 0.8 s\n(unless -duration is given), 300 pairs for P2, no warm-up cycle in P4")
	flag.StringVar(&only, "only", "", "comma-separated measurements to run, e.g. P1,P2 (default all)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&memProfile, "memprofile", "", "record every allocation (MemProfileRate=1, which slows the run) and write an allocs profile to this file")
	flag.StringVar(&heapProfile, "heapprofile", "", "write the live heap to this file in P4, while the locks are held")
	flag.Parse()

	cfg.p1Duration, cfg.p3Duration, cfg.warmup = duration, duration, 500*time.Millisecond
	cfg.p1Goroutines, cfg.p2Pairs, cfg.p3Goroutines, cfg.p4Locks = 64, 5000, 16, 10000
	if cfg.quick {
		cfg.warmup, cfg.rounds, cfg.p2Pairs = 200*time.Millisecond, 1, 300
		if !flagSet("duration") {
			cfg.p1Duration, cfg.p3Duration = 500*time.Millisecond, 800*time.Millisecond
		}
	}
	if duration <= 0 || cfg.rounds < 1 {
		fmt.Fprintln(os.Stderr, "lockbench: -duration must be positive and -rounds at least 1")
		os.Exit(2)
	}
	cfg.only = map[string]bool{}
	for _, id := range strings.Split(only, ",") {
		if id = strings.ToUpper(strings.TrimSpace(id)); id != "" {
			if id != "P1" && id != "P2" && id != "P3" && id != "P4" {
				fmt.Fprintf(os.Stderr, "lockbench: -only: unknown measurement %q (P1, P2, P3, P4)\n", id)
				os.Exit(2)
			}
			cfg.only[id] = true
		}
	}

	if memProfile != "" {
		runtime.MemProfileRate = 1
	}
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

func run(cfg config, cpuProfile, memProfile, heapProfile string) error {
	ctx := context.Background()
	// On SIGINT or SIGTERM, kill the server before exiting: it runs in its
	// own process group, so the terminal's signal does not reach it.
	var current atomic.Pointer[server]
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		if s := current.Load(); s != nil {
			s.stop()
		}
		fmt.Fprintf(os.Stderr, "lockbench: %v\n", sig)
		os.Exit(130)
	}()
	srv, err := startServer(ctx, func(s *server) { current.Store(s) })
	if err != nil {
		return err
	}
	defer srv.stop()

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

	rep := &report{cfg: cfg, server: srv.version, started: time.Now()}
	load0 := loadAvg()
	progress("redis-server %s on %s", srv.version, srv.addr)
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
	if cfg.runs("P3") {
		if rep.p3, err = runP3(ctx, srv.addr, cfg); err != nil {
			return err
		}
	}
	if cfg.runs("P4") {
		if rep.p4, err = runP4(ctx, srv.addr, cfg.p4Locks, cfg.quick, heapProfile); err != nil {
			return err
		}
	}
	rep.elapsed = time.Since(rep.started)
	if load1 := loadAvg(); load0 != "" && load1 != "" {
		rep.load = fmt.Sprintf(" Load average (1 min) %s before, %s after.", load0, load1)
	}
	rep.write(os.Stdout)

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
	return nil
}

// progress reports on stderr, so that stdout holds only the report.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "lockbench: "+format+"\n", args...)
}

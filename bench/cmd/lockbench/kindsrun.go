package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The lock kinds part (issue 13, item 8): tasklock's semaphores and leader
// election side by side with what users would write instead, on private
// servers started for it, in one run.
//
//	sem-redis, sem-etcd  64 goroutines on one semaphore of 8 permits:
//	                     Acquire+Release pairs/s against a hand-written Lua
//	                     semaphore on Redis and a semaphore built on etcd's
//	                     concurrency.Session (kindssem.go)
//	failover-redis, failover-postgres, failover-etcd
//	                     the leader SIGKILLed: kill → follower elected, on
//	                     etcd also for concurrency.Election (kindsfailover.go)
//	P4-permits           10,000 semaphore permits kept alive through one
//	                     Locker on Redis: round trips per renewal cycle,
//	                     against 10,000 mutexes in the same run
//	                     (kindspermits.go)

// The -only ids of the part (upper case, as parseOnly compares them).
const (
	idSemRedis         = "SEM-REDIS"
	idSemEtcd          = "SEM-ETCD"
	idFailoverRedis    = "FAILOVER-REDIS"
	idFailoverPostgres = "FAILOVER-POSTGRES"
	idFailoverEtcd     = "FAILOVER-ETCD"
	idPermits          = "P4-PERMITS"
)

var (
	semIDs      = []string{idSemRedis, idSemEtcd}
	failoverIDs = []string{idFailoverRedis, idFailoverPostgres, idFailoverEtcd}
	kindsIDs    = append(append(append([]string(nil), semIDs...), failoverIDs...), idPermits)
)

// kindsOnlyHelp lists the -only words of this part.
const kindsOnlyHelp = "sem-redis, sem-etcd, failover-redis, failover-postgres, failover-etcd, P4-permits, the groups sem, failover, or kinds (all six)"

// addKindsOnly adds what the -only word id (upper case) selects of this
// part to only and reports whether id was one of its words.
func addKindsOnly(only map[string]bool, id string) bool {
	var ids []string
	switch id {
	case "KINDS":
		ids = kindsIDs
	case "SEM":
		ids = semIDs
	case "FAILOVER":
		ids = failoverIDs
	default:
		for _, x := range kindsIDs {
			if id == x {
				ids = []string{x}
			}
		}
	}
	for _, x := range ids {
		only[x] = true
	}
	return len(ids) > 0
}

// semPermits is the number of permits of the semaphore the 64 goroutines
// share in sem-redis and sem-etcd: few enough that most of the goroutines
// wait at any moment (56 of 64), so that a pair pays for waiting and being
// woken, the part of a semaphore a mutex benchmark does not show; more
// than one, so that holders come and go concurrently and the store keeps a
// set of holders, not one; and a limit of the size users give such a
// semaphore ("at most 8 exports at once").
const semPermits = 8

// kindsParams are the part's sizes, from -quick.
type kindsParams struct {
	goroutines int           // sem: on one key
	slices     int           // sem: per implementation
	warmup     time.Duration // sem: before each implementation's first slice
	ttl        time.Duration // failover: the leadership's lease (etcd: the session TTL too)
	repeats    int           // failover: kills per store
	permits    int           // P4-permits: permits held (and mutexes, for the ratio)
	permitTTL  time.Duration // P4-permits: lease; renewed every third of it
}

func newKindsParams(cfg config) kindsParams {
	p := kindsParams{goroutines: 64, slices: 6, warmup: 500 * time.Millisecond,
		ttl: 2 * time.Second, repeats: 5, permits: 10000, permitTTL: p4TTL}
	if cfg.quick {
		p.slices, p.warmup, p.ttl, p.repeats, p.permits, p.permitTTL = 1, 200*time.Millisecond, time.Second, 2, 2000, 1500*time.Millisecond
	}
	return p
}

// kindsEnv is the part's private servers: each nil when no measurement
// selected needs it, or when it could not be started (its error is kept).
type kindsEnv struct {
	redis *server
	etcd  *server
	pg    *sqlServer
	errs  map[string]error // "redis", "etcd", "postgres": could not start
}

func (e *kindsEnv) stop() {
	if e.redis != nil {
		e.redis.stop()
	}
	if e.etcd != nil {
		e.etcd.stop()
	}
	if e.pg != nil {
		e.pg.stop()
	}
}

// describe lists the servers that run.
func (e *kindsEnv) describe() string {
	var out []string
	if e.redis != nil {
		out = append(out, "redis-server "+e.redis.version+" (no persistence)")
	}
	if e.pg != nil {
		out = append(out, "PostgreSQL "+e.pg.version+" (fsync off)")
	}
	if e.etcd != nil {
		out = append(out, "etcd "+e.etcd.version+" (one member, heartbeat 10 ms, election timeout 100 ms, --unsafe-no-fsync)")
	}
	return strings.Join(out, "; ")
}

// kindsReport is the part's section of the report.
type kindsReport struct {
	params  kindsParams
	quick   bool
	env     *kindsEnv
	sem     []*semResult
	fail    *failoverResult
	permits *permitsResult
	elapsed time.Duration
	summary targets
}

// runKinds runs what cfg selects of the part; nil when nothing is.
func runKinds(ctx context.Context, cfg config, add func(func())) *kindsReport {
	var ids []string
	for _, id := range kindsIDs {
		if cfg.runs(id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	start := time.Now()
	wants := func(xs ...string) bool {
		for _, x := range xs {
			if cfg.runs(x) {
				return true
			}
		}
		return false
	}
	r := &kindsReport{params: newKindsParams(cfg), quick: cfg.quick}
	r.env = startKinds(ctx, add,
		wants(idSemRedis, idFailoverRedis, idPermits),
		wants(idSemEtcd, idFailoverEtcd),
		wants(idFailoverPostgres))
	e := r.env
	defer e.stop()
	for name, err := range e.errs {
		progress("kinds: %s: %v", name, err)
	}
	progress("kinds: %s", e.describe())

	for _, m := range []struct {
		id, store, server string
		srv               *server
		impls             []semImpl
	}{
		{idSemRedis, "Redis", "redis", e.redis, semRedisImpls},
		{idSemEtcd, "etcd", "etcd", e.etcd, semEtcdImpls},
	} {
		if !cfg.runs(m.id) {
			continue
		}
		res := &semResult{id: m.id, store: m.store}
		r.sem = append(r.sem, res)
		if m.srv == nil {
			res.err = e.errs[m.server]
			continue
		}
		r.runSem(ctx, res, m.impls, m.srv.cpu)
	}
	if wants(failoverIDs...) {
		r.fail = r.runFailover(ctx, cfg)
	}
	if cfg.runs(idPermits) {
		if e.redis == nil {
			r.permits = &permitsResult{err: e.errs["redis"]}
		} else {
			r.permits = runPermits(ctx, e.redis, r.params)
		}
	}
	r.elapsed = time.Since(start)
	return r
}

// startKinds starts the servers asked for, in parallel.
func startKinds(ctx context.Context, add func(func()), redis, etcd, pg bool) *kindsEnv {
	e := &kindsEnv{errs: map[string]error{}}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	start := func(want bool, name string, f func() error) {
		if !want {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				mu.Lock()
				e.errs[name] = err
				mu.Unlock()
			}
		}()
	}
	started := func(s *server) { add(s.stop) }
	start(redis, "redis", func() (err error) {
		e.redis, err = startServer(ctx, started)
		return err
	})
	start(etcd, "etcd", func() (err error) {
		e.etcd, err = startEtcd(ctx, started)
		return err
	})
	start(pg, "postgres", func() (err error) {
		e.pg, err = startPostgres(ctx, func(s *sqlServer) { add(s.stop) })
		return err
	})
	wg.Wait()
	return e
}

// failures lists what could not run.
func (r *kindsReport) failures() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, s := range r.sem {
		if s.err != nil {
			out = append(out, fmt.Sprintf("%s: %v", strings.ToLower(s.id), s.err))
		}
	}
	if r.fail != nil {
		for _, s := range r.fail.stores {
			if s.err != nil {
				out = append(out, fmt.Sprintf("failover-%s %s: %v", s.store, s.impl, s.err))
			}
		}
	}
	if r.permits != nil {
		if r.permits.err != nil {
			out = append(out, fmt.Sprintf("P4-permits: %v", r.permits.err))
		}
		for _, h := range r.permits.holds {
			for _, err := range []error{h.err, h.releaseErr} {
				if err != nil {
					out = append(out, fmt.Sprintf("P4-permits %s: %v", h.name, err))
				}
			}
		}
	}
	return out
}

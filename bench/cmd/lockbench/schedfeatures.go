package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tasklock/tasklock/schedule"
)

// P5-features and P5-shard: P5's harness (three nodes in this process on
// one private redis-server, jobs "@every 1s", an oracle per (job, tick,
// shard)) with the scheduler's issue-14 features on.
//
// P5-features: 10,000 jobs, of which every 10th (i mod 10 = 9) waits for
// the job before it (Job.After, Within 4 s), every 10th (i mod 10 = 3) is in
// one of 4 pools (Config.Pools, 1,000 permits each for 250 jobs), every 10th
// (i mod 10 = 5) has MaxConcurrent 2, and every 1,000th (i mod 1000 = 7) has
// 8 shards; the rest are plain, as in P5.
//
// P5-shard: 100 jobs of 32 shards each: 3,200 shard-runs a second.

// The P5-features mix.
const (
	featPools      = 4
	featPoolSize   = 1000
	featMaxConc    = 2
	featShards     = 8
	featWithin     = 4 * time.Second
	shardJobShards = 32
)

// featuresSpec is P5-features' mix over n jobs.
func featuresSpec(n int) schedSpec {
	pools := map[string]int{}
	for i := range featPools {
		pools[fmt.Sprintf("pool-%d", i)] = featPoolSize
	}
	return schedSpec{
		jobs:   n,
		pools:  pools,
		lister: true,
		job: func(i int, names []string) (schedule.Job, string) {
			switch {
			case i%1000 == 7:
				return schedule.Job{Shards: featShards}, fmt.Sprintf("sharded (%d shards)", featShards)
			case i%10 == 9:
				return schedule.Job{After: []string{names[i-1]}, Within: featWithin}, "dependent (After the job before)"
			case i%10 == 3:
				return schedule.Job{Pool: fmt.Sprintf("pool-%d", (i/10)%featPools)}, "in a pool"
			case i%10 == 5:
				return schedule.Job{MaxConcurrent: featMaxConc}, fmt.Sprintf("MaxConcurrent %d", featMaxConc)
			}
			return schedule.Job{}, "plain"
		},
	}
}

// shardSpec is P5-shard's: n jobs of shardJobShards shards.
func shardSpec(n int) schedSpec {
	return schedSpec{
		jobs:   n,
		lister: true,
		job: func(int, []string) (schedule.Job, string) {
			return schedule.Job{Shards: shardJobShards}, fmt.Sprintf("%d shards", shardJobShards)
		},
	}
}

// p5Variants are the variants' ids, in the order they run.
var p5Variants = []string{"P5-FEATURES", "P5-SHARD"}

// runP5Variants runs the P5 variants asked for, each on a fresh
// redis-server, stopped once done.
func runP5Variants(ctx context.Context, cfg config, add func(func())) []*schedResult {
	p := newSchedParams(cfg)
	var out []*schedResult
	for _, id := range p5Variants {
		if !cfg.runs(id) {
			continue
		}
		var spec schedSpec
		name := "P5-features"
		switch id {
		case "P5-FEATURES":
			spec = featuresSpec(10000)
			if cfg.quick {
				spec = featuresSpec(1000)
			}
		case "P5-SHARD":
			name = "P5-shard"
			spec = shardSpec(100)
			if cfg.quick {
				spec = shardSpec(20)
			}
		}
		r := &schedResult{id: name, jobs: spec.jobs, loadBefore: loadAvg()}
		out = append(out, r)
		srv, err := startServer(ctx, func(s *server) { add(s.stop) })
		if err != nil {
			r.err = fmt.Errorf("%s (%d jobs): %w", name, spec.jobs, err)
			progress("%v", r.err)
			continue
		}
		r.server = srv.version
		progress("%s: redis-server %s on %s, %d jobs @every 1s on %d nodes", name, srv.version, srv.addr, spec.jobs, schedNodes)
		if err := measureSched(ctx, &redisBackend{srv: srv}, p, spec, r); err != nil {
			r.err = fmt.Errorf("%s (%d jobs): %w", name, spec.jobs, err)
		}
		srv.stop()
		r.loadAfter = loadAvg()
		if r.err != nil {
			progress("%v", r.err)
		}
	}
	return out
}

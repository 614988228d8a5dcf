package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tasklock/tasklock/pgstore"
	"github.com/tasklock/tasklock/sqlitestore"
)

// P5-sql: P5's harness (three schedule.Scheduler nodes in this process,
// plain jobs "@every 1s", the oracle per (job, tick)) on pgstore, on the
// run's private PostgreSQL, and on sqlitestore, on the run's SQLite file
// shared by the three nodes. Each node's store is both its Locker's store
// and its ledger, on a pool of its own.

// P5-sql's sizes: jobs per measurement, one measurement per store.
const (
	p5SQLJobs      = 1000
	p5SQLQuickJobs = 200
)

// p5SQLKinds are the stores P5-sql runs on, in sqlKinds' order.
var p5SQLKinds = []storeKind{kindPG, kindSQLite}

// p5SQLTable is P5-sql's lock table, apart from the other measurements':
// the ledger's tables are named after it, so each measurement starts on
// an empty ledger.
const p5SQLTable = "lockbench_p5"

// sqlBackend is P5-sql's schedBackend: per node a pool of sqlPoolSize
// connections (pgx; database/sql with sqlitestore's pragmas), whose
// statements and round trips on the wire a sqlCounter counts, and a
// pgstore or sqlitestore Store on it.
type sqlBackend struct {
	e     *sqlEnv
	nodes []sqlNode
}

type sqlNode struct {
	c     *sqlCounter
	warm  func(context.Context) error
	close func()
}

func (b *sqlBackend) open(ctx context.Context, _ int) (schedStore, error) {
	nd := sqlNode{c: &sqlCounter{}}
	switch b.e.kind {
	case kindPG:
		pool, err := pgPool(ctx, b.e, nd.c, sqlPoolSize)
		if err != nil {
			return nil, err
		}
		nd.warm = func(ctx context.Context) error { return warmPgx(ctx, pool, sqlPoolSize) }
		nd.close = pool.Close
		b.nodes = append(b.nodes, nd)
		st, err := pgstore.New(pool, &pgstore.Options{Table: p5SQLTable, Migrate: true})
		if err != nil {
			return nil, err
		}
		return st, nil
	case kindSQLite:
		db := sqliteDB(b.e, nd.c, sqlPoolSize)
		nd.warm = func(ctx context.Context) error { return warmSQL(ctx, db, sqlPoolSize) }
		nd.close = func() { _ = db.Close() }
		b.nodes = append(b.nodes, nd)
		st, err := sqlitestore.New(db, &sqlitestore.Options{Table: p5SQLTable, Migrate: true})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	return nil, fmt.Errorf("lockbench: P5-sql does not run on %s", b.e.kind)
}

// warm opens every pool's connections and runs warmQueries queries on
// each. A failure here shows again in the measurement, where it counts.
func (b *sqlBackend) warm(ctx context.Context) {
	for _, nd := range b.nodes {
		_ = nd.warm(ctx)
	}
}

func (b *sqlBackend) count(c *schedCounts) {
	for _, nd := range b.nodes {
		c.stmts += nd.c.stmts.Load()
		c.trips += nd.c.trips.Load()
	}
}

func (b *sqlBackend) failed() (n int64, first string) {
	for _, nd := range b.nodes {
		nd.c.fails.addTo(&n, &first)
	}
	return n, first
}

// serverCPU is the postmaster's and its backends' CPU time; SQLite's work
// is in lockbench's own.
func (b *sqlBackend) serverCPU() (time.Duration, bool) { return b.e.cpu() }

// resetStats: none. PostgreSQL's per-statement statistics need
// pg_stat_statements preloaded, which the run's server is not.
func (b *sqlBackend) resetStats(context.Context) func(context.Context) []cmdStat { return nil }

func (b *sqlBackend) close() {
	for _, nd := range b.nodes {
		nd.close()
	}
}

// network says whether round trips are counted: on the wire, so not on
// SQLite.
func (b *sqlBackend) network() bool { return b.e.kind != kindSQLite }

// runP5SQL runs P5-sql on e's store, which must be one of p5SQLKinds.
func runP5SQL(ctx context.Context, e *sqlEnv, cfg config) *schedResult {
	p := newSchedParams(cfg)
	n := p5SQLJobs
	if cfg.quick {
		n = p5SQLQuickJobs
	}
	r := &schedResult{id: "P5-sql", env: e, jobs: n, server: e.version, loadBefore: loadAvg()}
	progress("P5-sql: %s %s, %d jobs @every 1s on %d nodes", e.title, e.version, n, schedNodes)
	b := &sqlBackend{e: e}
	r.tripsCounted = b.network()
	if err := measureSched(ctx, b, p, plainSpec(n), r); err != nil {
		r.err = fmt.Errorf("P5-sql %s (%d jobs): %w", e.kind, n, err)
		progress("%v", r.err)
	}
	r.loadAfter = loadAvg()
	return r
}

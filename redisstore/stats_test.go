package redisstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// TestRollupCost: RecordRuns adds one ledger_stats.lua call per batch, of
// a few increments for a batch of one minute, however many records it
// holds; the test measures the server's time for that call and for the
// batch's record script (SLOWLOG with a threshold of 0 records every
// command's duration) and logs both.
func TestRollupCost(t *testing.T) {
	d := singleDeployment(t)
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := context.Background()
	tick := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	batch := func(b int) []ledger.RunRecord {
		rs := make([]ledger.RunRecord, 500)
		for i := range rs {
			st := ledger.RunOK
			if i%50 == 0 {
				st = ledger.RunFailed
			}
			tk := tick.Add(time.Duration(b) * time.Second)
			rs[i] = ledger.RunRecord{Job: fmt.Sprintf("job%03d", i), Tick: tk, Attempt: 1, Node: "n1", Status: st,
				Start: tk.Add(time.Duration(i%40) * time.Millisecond), End: tk.Add(time.Second)}
		}
		return rs
	}
	rc := s.rollupCall(batch(0))
	// ok and failed, and the 6 lateness buckets from 0 to 39 ms.
	if n := (len(rc.args) - 1) / 3; n != 8 {
		t.Errorf("a batch of one minute is %d increments, want 8", n)
	}
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "slowlog-max-len", "1024").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ConfigSet(context.Background(), "slowlog-log-slower-than", "10000") })
	var rollup, record []time.Duration
	for b := range 21 {
		if err := c.Do(ctx, "slowlog", "reset").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordRuns(ctx, batch(b)); err != nil {
			t.Fatal(err)
		}
		log, err := c.SlowLogGet(ctx, 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		if b == 0 {
			continue // the scripts were loaded: EVAL, not EVALSHA
		}
		for _, e := range log {
			if len(e.Args) < 2 || e.Args[0] != "evalsha" {
				continue
			}
			switch e.Args[1] {
			case rollupScript.sha:
				rollup = append(rollup, e.Duration)
			case recordScript.sha:
				record = append(record, e.Duration)
			}
		}
	}
	if len(rollup) != 20 || len(record) != 20 {
		t.Fatalf("saw %d rollup and %d record calls, want 20 each", len(rollup), len(record))
	}
	slices.Sort(rollup)
	slices.Sort(record)
	t.Logf("server time per 500-record batch, median (min-max): record script %v (%v-%v), rollup script %v (%v-%v)",
		record[10], record[0], record[19], rollup[10], rollup[0], rollup[19])
	// The rollups of those batches: 20 seconds of one minute.
	st, err := s.RunStats(ctx, ledger.StatsQuery{From: tick, To: tick.Add(time.Minute), Bucket: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Buckets[0].Counts; got[ledger.RunOK] != 21*490 || got[ledger.RunFailed] != 21*10 {
		t.Errorf("counts %v, want ok %d failed %d", got, 21*490, 21*10)
	}
}

// BenchmarkRollupCall: the Go side of the rollups, adding up a batch of
// 500 records of one second into the script's increments (no server).
func BenchmarkRollupCall(b *testing.B) {
	s := &Store{prefix: "bench:"}
	tick := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	rs := make([]ledger.RunRecord, 500)
	for i := range rs {
		st := ledger.RunOK
		if i%50 == 0 {
			st = ledger.RunFailed
		}
		rs[i] = ledger.RunRecord{Job: fmt.Sprintf("job%03d", i), Tick: tick, Attempt: 1, Status: st, Start: tick.Add(time.Duration(i%40) * time.Millisecond)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if s.rollupCall(rs) == nil {
			b.Fatal("no call")
		}
	}
}

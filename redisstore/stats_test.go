package redisstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// TestRollupCost: on one node the record script keeps the rollups of its
// batch itself; the test measures the server's time for a 500-record
// batch's call (SLOWLOG with a threshold of 0 records every command's
// duration), logs it, and checks the counts.
func TestRollupCost(t *testing.T) {
	d := singleDeployment(t)
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := context.Background()
	tick := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "slowlog-max-len", "1024").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ConfigSet(context.Background(), "slowlog-log-slower-than", "10000") })
	var record []time.Duration
	for b := range 21 {
		if err := c.Do(ctx, "slowlog", "reset").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordRuns(ctx, statsBatch(tick.Add(time.Duration(b)*time.Second))); err != nil {
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
			if len(e.Args) >= 2 && e.Args[0] == "evalsha" && e.Args[1] == recordScript.sha {
				record = append(record, e.Duration)
			}
		}
	}
	if len(record) != 20 {
		t.Fatalf("saw %d record calls, want 20", len(record))
	}
	slices.Sort(record)
	t.Logf("server time per 500-record batch with its rollups, median (min-max): %v (%v-%v)", record[10], record[0], record[19])
	checkCounts(t, s, tick, 21*490, 21*10)
}

// statsBatch is 500 final records of 500 jobs at tick, 10 of them failed.
func statsBatch(tick time.Time) []ledger.RunRecord {
	rs := make([]ledger.RunRecord, 500)
	for i := range rs {
		st := ledger.RunOK
		if i%50 == 0 {
			st = ledger.RunFailed
		}
		rs[i] = ledger.RunRecord{Job: fmt.Sprintf("job%03d", i), Tick: tick, Attempt: 1, Node: "n1", Status: st,
			Start: tick.Add(time.Duration(i%40) * time.Millisecond), End: tick.Add(time.Second)}
	}
	return rs
}

// checkCounts fails unless RunStats counts ok and failed records in the
// minute from tick, and as many first attempts' lateness.
func checkCounts(t *testing.T, s *Store, tick time.Time, ok, failed int64) {
	t.Helper()
	st, err := s.RunStats(context.Background(), ledger.StatsQuery{From: tick, To: tick.Add(time.Minute), Bucket: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b := st.Buckets[0]
	if b.Counts[ledger.RunOK] != ok || b.Counts[ledger.RunFailed] != failed {
		t.Errorf("counts %v, want ok %d failed %d", b.Counts, ok, failed)
	}
	var late int64
	for _, n := range b.Lateness {
		late += n
	}
	if late != ok+failed {
		t.Errorf("lateness histogram %v holds %d records, want %d", b.Lateness, late, ok+failed)
	}
}

// TestRollupRetried: a RecordRuns repeated after an error, in part or in
// whole, counts each record once, on one node and on a Cluster; a record
// written again with another outcome (the later write wins) counts as that
// outcome only.
func TestRollupRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    func(*testing.T) deployment
	}{{"single", singleDeployment}, {"cluster", clusterDeployment}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, tc.d(t).newClient(t), nil)
			ctx := context.Background()
			tick := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
			rs := statsBatch(tick)
			running := slices.Clone(rs[:100])
			for i := range running {
				running[i].Status, running[i].End = ledger.RunRunning, time.Time{}
			}
			for _, batch := range [][]ledger.RunRecord{running, running, rs[:300], rs, rs[250:], rs} {
				if err := s.RecordRuns(ctx, batch); err != nil {
					t.Fatal(err)
				}
			}
			checkCounts(t, s, tick, 490, 10)
			// Job 1's record, ok, settled again as interrupted.
			r := rs[1]
			r.Status = ledger.RunInterrupted
			for range 2 {
				if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
					t.Fatal(err)
				}
			}
			st, err := s.RunStats(ctx, ledger.StatsQuery{From: tick, To: tick.Add(time.Minute), Bucket: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			want := map[ledger.RunStatus]int64{ledger.RunOK: 489, ledger.RunFailed: 10, ledger.RunInterrupted: 1}
			if got := st.Buckets[0].Counts; !maps.Equal(got, want) {
				t.Errorf("counts %v, want %v", got, want)
			}
		})
	}
}

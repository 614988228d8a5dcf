package ledgertest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// testRunStats: RunStats counts every record in the window once, with its
// latest status, per bucket, and histograms the first attempts' lateness;
// checked against counts made here from the records written.
// RecentStatuses lists each job's newest statuses in Runs' order.
func testRunStats(t *testing.T, l ledger.Ledger) {
	st, ok := l.(ledger.Stats)
	if !ok {
		t.Skipf("%T does not implement ledger.Stats: the dashboard samples its newest records", l)
	}
	ctx := ctxT(t, 30*time.Second)
	from := tick0.Add(time.Hour)
	q := ledger.StatsQuery{From: from, To: from.Add(10 * time.Minute), Bucket: 2 * time.Minute}
	statuses := []ledger.RunStatus{ledger.RunOK, ledger.RunFailed, ledger.RunTimeout, ledger.RunLost, ledger.RunSkipped, ledger.RunMissed, ledger.RunInterrupted}
	lates := []time.Duration{0, 3 * time.Millisecond, 40 * time.Millisecond, 150 * time.Millisecond, 700 * time.Millisecond, 2 * time.Second, 10 * time.Minute, -time.Millisecond}
	var rs []ledger.RunRecord
	// Records from 1 minute before the window to 1 minute after it, every
	// 7 seconds, three jobs; some retried, some never started.
	for i := 0; ; i++ {
		tick := from.Add(-time.Minute + time.Duration(i)*7*time.Second)
		if tick.After(q.To.Add(time.Minute)) {
			break
		}
		for j := range 3 {
			r := ledger.RunRecord{Job: fmt.Sprintf("stats-%d", j), Tick: tick, Attempt: 1, Node: "n1",
				Status: statuses[(i+j)%len(statuses)]}
			if r.Status == ledger.RunSkipped || r.Status == ledger.RunMissed {
				r.Attempt = 0
			} else {
				r.Start = tick.Add(lates[(i*3+j)%len(lates)])
				r.End = r.Start.Add(time.Second)
			}
			rs = append(rs, r)
			if r.Status == ledger.RunFailed && j == 0 {
				r2 := r
				r2.Attempt, r2.Status, r2.Start = 2, ledger.RunOK, tick.Add(30*time.Second)
				rs = append(rs, r2)
			}
		}
	}
	// One record written as running first, then replaced by its outcome:
	// it counts once, as the outcome.
	running := ledger.RunRecord{Job: "stats-r", Tick: from.Add(90 * time.Second), Attempt: 1, Node: "n1", Status: ledger.RunRunning, Start: from.Add(90*time.Second + 4*time.Millisecond)}
	if err := l.RecordRuns(ctx, []ledger.RunRecord{running}); err != nil {
		t.Fatal(err)
	}
	running.Status, running.End = ledger.RunLost, running.Start.Add(time.Second)
	rs = append(rs, running)
	for range 2 { // the second time as a RecordRuns repeated after an error: each record still counts once
		for chunk := range slices.Chunk(rs, 50) {
			if err := l.RecordRuns(ctx, chunk); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The oracle: counted here, record by record.
	n := 5
	want := make([]map[ledger.RunStatus]int64, n)
	wantLate := make([]ledger.Lateness, n)
	for _, r := range rs {
		if r.Tick.Before(q.From) || !r.Tick.Before(q.To) {
			continue
		}
		b := int(r.Tick.Sub(q.From) / q.Bucket)
		if want[b] == nil {
			want[b] = map[ledger.RunStatus]int64{}
		}
		want[b][r.Status]++
		if !r.Start.IsZero() && r.Attempt <= 1 {
			late, k := r.Start.Sub(r.Tick), 0
			for k < len(ledger.LatenessBounds) && late > ledger.LatenessBounds[k] {
				k++
			}
			wantLate[b][k]++
		}
	}
	got, err := st.RunStats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sampled {
		t.Error("RunStats says Sampled")
	}
	if len(got.Buckets) != n {
		t.Fatalf("%d buckets, want %d", len(got.Buckets), n)
	}
	for i, b := range got.Buckets {
		if at := q.From.Add(time.Duration(i) * q.Bucket); !b.At.Equal(at) {
			t.Errorf("bucket %d at %v, want %v", i, b.At, at)
		}
		if !maps.Equal(b.Counts, want[i]) {
			t.Errorf("bucket %d counts %v, want %v", i, b.Counts, want[i])
		}
		if b.Lateness != wantLate[i] {
			t.Errorf("bucket %d lateness %v, want %v", i, b.Lateness, wantLate[i])
		}
	}
	// A window with nothing in it.
	empty, err := st.RunStats(ctx, ledger.StatsQuery{From: tick0.Add(-day), To: tick0.Add(-day + time.Hour), Bucket: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.Buckets) != 1 || empty.Buckets[0].Counts != nil || empty.Buckets[0].Lateness.Count() != 0 {
		t.Errorf("empty window: %+v", empty.Buckets)
	}
	if _, err := st.RunStats(ctx, ledger.StatsQuery{From: from.Add(time.Second), To: q.To, Bucket: time.Minute}); err == nil {
		t.Error("RunStats with From not a whole minute: no error")
	}

	// RecentStatuses: the oracle is Runs.
	jobs := []string{"stats-0", "stats-1", "stats-r", "stats-none"}
	recent, err := st.RecentStatuses(ctx, jobs, 7)
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range jobs {
		runs, err := l.Runs(ctx, ledger.RunQuery{Job: job, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		var want []ledger.RunStatus
		for _, r := range runs {
			want = append(want, r.Status)
		}
		if g, ok := recent[job]; !slices.Equal(g, want) || ok != (len(want) > 0) {
			t.Errorf("RecentStatuses %s = %v (present %v), want %v", job, g, ok, want)
		}
	}
	if _, err := st.RecentStatuses(ctx, jobs, 0); err == nil {
		t.Error("RecentStatuses with n 0: no error")
	}
}

// testLatestRuns: LatestRuns gives each job's first record in Runs' order,
// without its output, across more jobs than one statement names.
func testLatestRuns(t *testing.T, l ledger.Ledger) {
	lt, ok := l.(ledger.Latest)
	if !ok {
		t.Skipf("%T does not implement ledger.Latest: the dashboard reads each job's last run alone", l)
	}
	ctx := ctxT(t, 30*time.Second)
	var (
		rs   []ledger.RunRecord
		jobs []string
	)
	for j := range 250 {
		job := fmt.Sprintf("latest-%03d", j)
		jobs = append(jobs, job)
		for i := range j%4 + 1 {
			r := ledger.RunRecord{Job: job, Tick: tick0.Add(time.Duration(i) * time.Second), Attempt: 1, Node: "n1",
				Status: ledger.RunOK, Output: "out", Start: tick0.Add(time.Duration(i) * time.Second), End: tick0.Add(time.Duration(i)*time.Second + time.Millisecond)}
			rs = append(rs, r)
			if j%5 == 0 {
				r.Attempt, r.Status, r.Error = 2, ledger.RunFailed, "exit status 1"
				rs = append(rs, r)
			}
			if j%7 == 0 {
				r.Shard, r.Shards = 1, 2
				rs = append(rs, r)
			}
		}
	}
	for chunk := range slices.Chunk(rs, 100) {
		if err := l.RecordRuns(ctx, chunk); err != nil {
			t.Fatal(err)
		}
	}
	asked := append(slices.Clone(jobs), "latest-none")
	got, err := lt.LatestRuns(ctx, asked)
	if err != nil {
		t.Fatal(err)
	}
	byJob := map[string]ledger.RunRecord{}
	for _, r := range got {
		if _, dup := byJob[r.Job]; dup {
			t.Errorf("LatestRuns gave %s twice", r.Job)
		}
		byJob[r.Job] = r
	}
	if _, ok := byJob["latest-none"]; ok || len(byJob) != len(jobs) {
		t.Errorf("LatestRuns gave %d jobs (latest-none among them: %v), want %d", len(byJob), ok, len(jobs))
	}
	for _, job := range jobs {
		runs, err := l.Runs(ctx, ledger.RunQuery{Job: job, Limit: 1})
		if err != nil || len(runs) != 1 {
			t.Fatalf("Runs %s: %v, %v", job, runs, err)
		}
		want := runs[0]
		want.Output = ""
		g := byJob[job]
		if g.Key() != want.Key() || g.Status != want.Status || g.Error != want.Error || g.Node != want.Node || g.Shards != want.Shards ||
			!g.Start.Equal(want.Start) || !g.End.Equal(want.End) || g.Output != "" {
			t.Errorf("LatestRuns %s = %+v, want %+v", job, g, want)
		}
	}
	if _, err := lt.LatestRuns(ctx, make([]string, ledger.MaxRecent+1)); err == nil {
		t.Errorf("LatestRuns of %d jobs: no error", ledger.MaxRecent+1)
	}
}

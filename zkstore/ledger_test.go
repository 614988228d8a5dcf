package zkstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
)

// TestLedgerConformance runs ledgertest against the shared
// server, one root per test.
func TestLedgerConformance(t *testing.T) {
	_, c := shared(t)
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger { return newStore(t, c, testSession, nil) })
}

// The ledger's subtree is no key's: Leases does not list it, and Acquire,
// ForceRelease and Leases of keys named like it leave it alone.
func TestLedgerApartFromLocks(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if res, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "j", Tick: tick, Node: "n", Token: "t", Retain: time.Hour}}); err != nil || res[0] != nil {
		t.Fatal(res, err)
	}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{{Job: "j", Tick: tick, Attempt: 1, Status: ledger.RunOK}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "j", Op: ledger.JobPause}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{ledgerName, "%ledger/claims", "%", ledgerName + "/jobs"} {
		if esc := escapeName(key); esc == ledgerName || strings.HasPrefix(esc, ledgerName+"/") {
			t.Fatalf("key %q escapes to %q, the ledger's node", key, esc)
		}
		mustAcquire(t, s, key, token(), "me", time.Second)
		if err := s.ForceRelease(ctx, key); err != nil {
			t.Fatalf("ForceRelease(%q): %v", key, err)
		}
	}
	ls, err := s.Leases(ctx, "")
	if err != nil || len(ls) != 0 {
		t.Fatalf("Leases = %+v, %v; want none (the ledger is no lock)", ls, err)
	}
	kids, _, err := c.Children(s.Root())
	if err != nil || !slices.Contains(kids, ledgerName) {
		t.Fatalf("Root's children %q, %v: no %s", kids, err, ledgerName)
	}
	res, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "j", Tick: tick, Node: "m", Token: "u", Retain: time.Hour}})
	if err != nil || !errors.Is(res[0], ledger.ErrClaimed) {
		t.Fatalf("claim after lock traffic: %v, %v", res, err)
	}
	if st, err := s.JobStates(ctx); err != nil || len(st) != 1 || !st[0].Paused {
		t.Fatalf("JobStates = %+v, %v", st, err)
	}
	if rs, err := s.Runs(ctx, ledger.RunQuery{}); err != nil || len(rs) != 1 {
		t.Fatalf("Runs = %+v, %v", rs, err)
	}
}

// Claim and Prune decide retention by the server's clock: the claim
// node's ctime against the mtime of a write. The claim's time is its
// node's ctime, and an expired claim is taken over by another token even
// before Prune runs; a takeover and a prune racing on one job delete no
// live claim.
func TestLedgerClaimTimes(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// Long enough that the second claim comes within it on a busy machine
	// (200 ms did not at load 21).
	const retain = 2 * time.Second
	p := ledger.ClaimParams{Job: "j", Tick: tick, Node: "a", Token: "ta", Retain: retain}
	if res, err := s.Claim(ctx, []ledger.ClaimParams{p}); err != nil || res[0] != nil {
		t.Fatal(res, err)
	}
	_, st, err := c.Get(s.claimPath("j", tick, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	q := p
	q.Node, q.Token, q.Retain = "b", "tb", time.Hour
	res, err := s.Claim(ctx, []ledger.ClaimParams{q})
	var ce *ledger.ClaimedError
	if err != nil || !errors.As(res[0], &ce) || ce.Node != "a" || !ce.At.Equal(time.UnixMilli(st.Ctime)) {
		t.Fatalf("claim within retention = %v, %v; want claimed by a at %v", res, err, time.UnixMilli(st.Ctime))
	}
	waitFor(t, retain+10*time.Second, "the claim taken over", func() bool {
		res, err := s.Claim(ctx, []ledger.ClaimParams{q})
		return err == nil && res[0] == nil
	})
	_, st2, err := c.Get(s.claimPath("j", tick, "", 0))
	if err != nil || st2.Ctime < st.Ctime+retain.Milliseconds() {
		t.Fatalf("taken over claim's ctime %d, first %d (%v)", st2.Ctime, st.Ctime, err)
	}
	// Prune leaves the live claim and deletes only expired ones.
	short := []ledger.ClaimParams{
		{Job: "j", Tick: tick.Add(time.Second), Node: "a", Token: "ta", Retain: time.Millisecond},
		{Job: "k", Tick: tick, Node: "a", Token: "ta", Retain: time.Millisecond},
	}
	if res, err := s.Claim(ctx, short); err != nil || res[0] != nil || res[1] != nil {
		t.Fatal(res, err)
	}
	pruned := 0 // once the server's clock passes the 1 ms retention
	waitFor(t, 5*time.Second, "Prune deleting the 2 expired claims", func() bool {
		pr, err := s.Prune(ctx, ledger.PruneParams{})
		if err != nil {
			t.Fatal(err)
		}
		pruned += pr.Claims
		return pruned >= 2
	})
	if pruned != 2 {
		t.Fatalf("Prune deleted %d claims; want 2", pruned)
	}
	q.Token = "tc"
	res, err = s.Claim(ctx, []ledger.ClaimParams{q})
	if err != nil || !errors.As(res[0], &ce) || ce.Node != "b" {
		t.Fatalf("after Prune: %v, %v; want still claimed by b", res, err)
	}
}

// Runs reads only the records Limit needs, and Recorded is the node's
// mtime.
func TestLedgerRunsRecorded(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := ledger.RunRecord{Job: "a/b", Tick: tick, Trigger: "x%y", Attempt: 3, Status: ledger.RunOK}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	path := s.runsDir() + "/" + escapeName(r.Job) + "/" + runName(r.Key())
	_, st, err := c.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Runs(ctx, ledger.RunQuery{Job: "a/b"})
	if err != nil || len(rs) != 1 || rs[0].Key() != r.Key() || !rs[0].Recorded.Equal(time.UnixMilli(st.Mtime)) {
		t.Fatalf("Runs = %+v, %v; want the record, Recorded %v", rs, err, time.UnixMilli(st.Mtime))
	}
	if k, ok := parseRunName(r.Job, runName(r.Key())); !ok || k != r.Key() {
		t.Fatalf("parseRunName = %+v, %v", k, ok)
	}
	// A job's container node goes with its last record (the server removes
	// it), and the ledger works on.
	if _, err := s.Prune(ctx, ledger.PruneParams{KeepPerJob: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
}

// Concurrent trigger requests from several Stores all land: the job
// states node is written version-checked.
func TestLedgerStatesConcurrent(t *testing.T) {
	t.Parallel()
	z, c := shared(t)
	s := newStore(t, c, testSession, nil)
	other := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s.Root()})
	ctx := ctxT(t)
	errc := make(chan error, 20)
	for i := range 20 {
		st := s
		if i%2 == 1 {
			st = other
		}
		go func() {
			_, err := st.SetJobState(context.Background(), ledger.JobStateParams{Job: "j", Op: ledger.JobTrigger, Trigger: string(rune('a' + i))})
			errc <- err
		}()
	}
	for range 20 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	sts, err := s.JobStates(ctx)
	if err != nil || len(sts) != 1 || len(sts[0].Triggers) != 20 {
		t.Fatalf("JobStates = %+v, %v; want 20 triggers", sts, err)
	}
}

// Registrations: kept apart from the job states node; Since to the
// nanosecond, before 1970 too; names a path cannot hold as they are; two
// Stores registering a new job at once both read back the one that won.
func TestLedgerRegistrations(t *testing.T) {
	t.Parallel()
	z, c := shared(t)
	s := newStore(t, c, testSession, nil)
	other := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s.Root()})
	ctx := ctxT(t)
	since := time.Date(2030, 1, 1, 0, 0, 0, 123456789, time.UTC)
	old := time.Date(1960, 5, 1, 0, 0, 0, 7, time.UTC)
	for i, job := range []string{".", "..", "a/b", "%", "\xff", "j"} {
		at := since
		if i%2 == 1 {
			at = old
		}
		st, err := s.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: "\x00/" + job, Since: at})
		if err != nil || st.Job != job || st.Spec != "\x00/"+job || !st.Since.Equal(at) {
			t.Fatalf("register %q = %+v, %v", job, st, err)
		}
	}
	if _, _, err := c.Get(s.statesNode()); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("registering wrote the job states node: %v", err)
	}
	sts, err := other.Jobs(ctx)
	if err != nil || len(sts) != 6 {
		t.Fatalf("Jobs = %+v, %v; want 6 jobs", sts, err)
	}
	for _, st := range sts {
		if st.Spec != "\x00/"+st.Job {
			t.Fatalf("Jobs lists %+v", st)
		}
	}
	for round := range 10 {
		job := string(rune('a' + round))
		res := make(chan ledger.JobState, 2)
		errc := make(chan error, 2)
		start := make(chan struct{})
		for i, st := range []*Store{s, other} {
			go func() {
				<-start
				r, err := st.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: "@hourly",
					Since: since.Add(time.Duration(i) * time.Millisecond)})
				res <- r
				errc <- err
			}()
		}
		close(start)
		a, b := <-res, <-res
		for range 2 {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		if a.Spec != "@hourly" || b.Spec != "@hourly" || !a.Since.Equal(b.Since) {
			t.Fatalf("round %d: %+v and %+v", round, a, b)
		}
	}
}

// TestLedgerRunningIndex: the sweep's query of every job's running records
// lists the markers and reads the records they name, no job's history
// (50 jobs × 10 records, 3 running): one request for the list and one per
// marker, plus one multi per stale marker, which goes; a record written
// final takes its marker with it.
func TestLedgerRunningIndex(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	var d countingDialer
	// The longest session the server allows: no ping falls in the window
	// counted here.
	c := connectVia(t, z.Addr(), testserver.ZooKeeperMaxSessionTimeout, d.dial)
	s := newStore(t, c, testserver.ZooKeeperMaxSessionTimeout, nil)
	ctx := ctxT(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(job string, k int, st ledger.RunStatus) ledger.RunRecord {
		return ledger.RunRecord{Job: job, Tick: tick.Add(time.Duration(k) * time.Second), Trigger: "t-%/x", Attempt: 1, Status: st}
	}
	var rs []ledger.RunRecord
	for j := range 50 {
		for k := range 10 {
			rs = append(rs, run(fmt.Sprintf("job-%d/%%", j), k, ledger.RunOK))
		}
	}
	rs = append(rs, run("job-7/%", 10, ledger.RunRunning), run("job-9/%", 11, ledger.RunRunning),
		run("job-9/%", 12, ledger.RunRunning), run("job-20/%", 13, ledger.RunRunning))
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{run("job-9/%", 11, ledger.RunInterrupted)}); err != nil {
		t.Fatal(err)
	}
	markers, _, err := c.Children(s.runningDir())
	if err != nil || len(markers) != 3 {
		t.Fatalf("markers %q, %v; want the 3 running records'", markers, err)
	}
	// Stale markers: one whose record ended without its removal, one of a
	// record gone (as after a prune), one of a job with no records left.
	ended := run("job-3/%", 1, ledger.RunOK)
	for _, k := range []ledger.RunKey{ended.Key(), run("job-3/%", 99, "").Key(), run("gone", 1, "").Key()} {
		if _, err := c.Create(s.runningDir()+"/"+runningName(k.Job, k), nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	sweep := func() ([]ledger.RunRecord, int64) {
		t.Helper()
		w0 := d.writes.Load()
		got, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return got, d.writes.Load() - w0
	}
	got, reqs := sweep()
	var keys []string
	for _, r := range got {
		if r.Status != ledger.RunRunning {
			t.Errorf("Runs(running) returned %+v", r)
		}
		keys = append(keys, fmt.Sprintf("%s@%d", r.Job, r.Tick.Unix()-tick.Unix()))
	}
	if want := []string{"job-20/%@13", "job-9/%@12", "job-7/%@10"}; !slices.Equal(keys, want) {
		t.Fatalf("Runs(running) = %q, want %q", keys, want)
	}
	// A list, 6 reads, a multi for the ended record's and for the gone
	// one's markers, two for the gone job's (its node is missing too).
	t.Logf("Runs(running) over %d records, 6 markers (3 stale): %d requests", len(rs), reqs)
	if want := int64(1 + 6 + 1 + 1 + 2); reqs != want {
		t.Errorf("Runs(running) sent %d requests, want %d", reqs, want)
	}
	markers, _, err = c.Children(s.runningDir())
	if err != nil || len(markers) != 3 {
		t.Fatalf("markers after the sweep %q, %v; want the 3 running records'", markers, err)
	}
	if _, _, err := c.Get(s.runsDir() + "/gone"); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("dropping a marker left the gone job's node: %v", err)
	}
	got, reqs = sweep()
	if len(got) != 3 || reqs != 1+3 {
		t.Errorf("second sweep: %d records in %d requests, want 3 in 4", len(got), reqs)
	}
	// A run of job-1: its running record and marker in one request, its
	// final record and the marker's delete in one.
	for _, st := range []ledger.RunStatus{ledger.RunRunning, ledger.RunOK} {
		w0 := d.writes.Load()
		if err := s.RecordRuns(ctx, []ledger.RunRecord{run("job-1/%", 20, st)}); err != nil {
			t.Fatal(err)
		}
		if n := d.writes.Load() - w0; n != 1 {
			t.Errorf("recording a %s record took %d requests, want 1", st, n)
		}
	}
	// Limit and the keys of q apply.
	if got, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning, Limit: 1}); err != nil || len(got) != 1 || got[0].Job != "job-20/%" {
		t.Errorf("Runs(running, Limit 1) = %+v, %v", got, err)
	}
	if got, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning, To: tick.Add(11 * time.Second)}); err != nil || len(got) != 1 || got[0].Job != "job-7/%" {
		t.Errorf("Runs(running, To 11 s) = %+v, %v", got, err)
	}
}

// A marker is never dropped for a record written running again meanwhile:
// dropMarker checks the version read, or that the record is still missing.
func TestLedgerRunningMarkerRace(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	r := ledger.RunRecord{Job: "j", Tick: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Attempt: 1, Status: ledger.RunOK}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	path := s.runsDir() + "/j/" + runName(r.Key())
	marker := s.runningDir() + "/" + runningName(r.Job, r.Key())
	_, final, err := c.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	r.Status = ledger.RunRunning
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	s.dropMarker(marker, path, final) // read final before the running write
	if ok, _, err := c.Exists(marker); err != nil || !ok {
		t.Fatalf("marker of a record running again dropped: %v, %v", ok, err)
	}
	if err := c.Delete(path, -1); err != nil {
		t.Fatal(err)
	}
	// Read missing, then written running again before the drop.
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	s.dropMarker(marker, path, nil)
	if ok, _, err := c.Exists(marker); err != nil || !ok {
		t.Fatalf("marker of a record created again dropped: %v, %v", ok, err)
	}
	if rs, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning}); err != nil || len(rs) != 1 {
		t.Fatalf("Runs(running) = %+v, %v", rs, err)
	}
	r.Status = ledger.RunFailed
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.Exists(marker); err != nil || ok {
		t.Fatalf("marker after the final record: %v, %v; want gone", ok, err)
	}
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
)

func TestLedgerSingle(t *testing.T) {
	t.Parallel()
	runLedger(t, singleDeployment(t))
}

func TestLedgerCluster(t *testing.T) {
	t.Parallel()
	runLedger(t, clusterDeployment(t))
}

// runLedger runs the ledger conformance suite and this store's own ledger
// tests against d.
func runLedger(t *testing.T, d deployment) {
	t.Run("Conformance", func(t *testing.T) {
		ledgertest.Run(t, func(t *testing.T) ledger.Ledger { return newStore(t, d.newClient(t), nil) })
	})
	t.Run("RoundTrips", func(t *testing.T) { testLedgerRoundTrips(t, d) })
	t.Run("OddNames", func(t *testing.T) { testLedgerOddNames(t, d) })
	t.Run("NoScript", func(t *testing.T) { testLedgerNoScript(t, d) })
	t.Run("KeepPerJobWithinTick", func(t *testing.T) { testLedgerKeepWithinTick(t, d) })
	t.Run("RunningIndex", func(t *testing.T) { testLedgerRunningIndex(t, d) })
	t.Run("LegacyData", func(t *testing.T) { testLedgerLegacyData(t, d) })
	t.Run("ShardKeys", func(t *testing.T) { testLedgerShardKeys(t, d) })
	t.Run("PruneKeepsTicks", func(t *testing.T) { testLedgerPruneKeepsTicks(t, d) })
	t.Run("CatalogRoundTrips", func(t *testing.T) { testCatalogRoundTrips(t, d) })
	t.Run("CatalogOddNames", func(t *testing.T) { testCatalogOddNames(t, d) })
}

// testLedgerRunningIndex: the sweep's query of every job's running records
// reads the running set and those records, no job's history; a member
// whose record ended or is gone is dropped.
func testLedgerRunningIndex(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	const jobs = 200
	var rs []ledger.RunRecord
	for j := range jobs {
		for k := range 5 {
			rs = append(rs, ledger.RunRecord{Job: fmt.Sprintf("job-%d", j), Tick: ledgerTick.Add(time.Duration(k) * time.Second), Attempt: 1, Status: ledger.RunOK})
		}
	}
	run := func(job string, k int, st ledger.RunStatus) ledger.RunRecord {
		return ledger.RunRecord{Job: job, Tick: ledgerTick.Add(time.Duration(k) * time.Second), Attempt: 1, Status: st}
	}
	rs = append(rs, run("job-7", 10, ledger.RunRunning), run("job-9", 11, ledger.RunRunning), run("job-9", 12, ledger.RunRunning))
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{run("job-9", 11, ledger.RunInterrupted)}); err != nil {
		t.Fatal(err)
	}
	// A member whose record is gone, as after a prune, and one whose
	// record ended without the member's removal (a removal that failed).
	if err := c.SAdd(ctx, s.runningKey(), runningMember("gone", runMember(ledgerTick, 0, 1, "")), runningMember("job-3", runMember(ledgerTick, 0, 1, ""))).Err(); err != nil {
		t.Fatal(err)
	}
	cmds := &cmdHook{}
	c.AddHook(cmds)
	got, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	sent, _ := cmds.take()
	if len(got) != 2 || got[0].Job != "job-9" || got[1].Job != "job-7" || got[0].Status != ledger.RunRunning {
		t.Fatalf("Runs(running) = %+v, want job-9's at 12 s and job-7's", got)
	}
	for _, name := range sent {
		if name == "evalsha" || name == "eval" {
			t.Fatalf("Runs(running) ran a script, reading histories: %v", sent)
		}
	}
	if len(sent) > 6 {
		t.Errorf("Runs(running) sent %d commands (%v), want a few whatever the number of jobs", len(sent), sent)
	}
	left, err := c.SMembers(ctx, s.runningKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 {
		t.Errorf("running set after the read: %q, want the two running records' members", left)
	}
}

// cmdHook records the commands a client sends and the pipelines it sends
// them in.
type cmdHook struct {
	mu        sync.Mutex
	cmds      []string
	pipelines int
}

func (h *cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		for _, c := range cmds {
			h.cmds = append(h.cmds, c.Name())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns what was sent since the last take, and forgets it.
func (h *cmdHook) take() (cmds []string, pipelines int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cmds, pipelines = h.cmds, h.pipelines
	h.cmds, h.pipelines = nil, 0
	return cmds, pipelines
}

var ledgerTick = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// testLedgerRoundTrips: a claim of many ticks of many jobs is one pipeline
// whose script calls each stay in one hash slot; JobStates is one command;
// a job's runs are one script call.
func testLedgerRoundTrips(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	const jobs, ticks = 300, 4
	var ps []ledger.ClaimParams
	for j := range jobs {
		for k := range ticks {
			ps = append(ps, ledger.ClaimParams{Job: fmt.Sprintf("job-%d", j), Tick: ledgerTick.Add(time.Duration(k) * time.Second),
				Node: "n1", Token: "t1", Retain: time.Hour})
		}
	}
	// Warm the script caches, so the counts below are of one call.
	if _, err := s.Claim(ctx, ps[:1]); err != nil {
		t.Fatal(err)
	}
	hook := &countHook{}
	cmds := &cmdHook{}
	c.AddHook(hook)
	c.AddHook(cmds)
	hook.reset()
	res, err := s.Claim(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if e != nil {
			t.Fatalf("claim %d: %v", i, e)
		}
	}
	evalsha, eval, pipelines, keys := hook.snapshot()
	t.Logf("%s: claimed %d ticks: %d EVALSHA, %d EVAL, %d pipelines", d.name, len(ps), evalsha, eval, pipelines)
	if pipelines != 1 || eval != 0 {
		t.Errorf("%d pipelines and %d EVAL, want 1 pipeline and no EVAL", pipelines, eval)
	}
	if !d.cluster && evalsha != (len(ps)+scriptChunk-1)/scriptChunk {
		t.Errorf("%d EVALSHA for %d claims, want one per %d", evalsha, len(ps), scriptChunk)
	}
	for _, ks := range keys {
		for _, k := range ks[1:] {
			if d.cluster && slot(k) != slot(ks[0]) {
				t.Fatalf("one script call spans slots %d and %d", slot(ks[0]), slot(k))
			}
		}
	}
	// Claiming them again with another token reports every holder.
	for i := range ps {
		ps[i].Token, ps[i].Node = "t2", "n2"
	}
	res, err = s.Claim(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		var ce *ledger.ClaimedError
		if !errors.As(e, &ce) || ce.Node != "n1" || time.Since(ce.At).Abs() > time.Minute {
			t.Fatalf("claim %d by another token: %v (%+v)", i, e, ce)
		}
	}

	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "job-1", Op: ledger.JobPause}); err != nil {
		t.Fatal(err)
	}
	var rs []ledger.RunRecord
	for j := range 20 {
		rs = append(rs, ledger.RunRecord{Job: fmt.Sprintf("job-%d", j), Tick: ledgerTick, Attempt: 1, Status: ledger.RunOK})
	}
	cmds.take()
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	// On a Cluster the rollups' changes follow the records (stats.go).
	if got, pipelines := cmds.take(); (pipelines != 1 && !d.cluster) || (pipelines != 2 && d.cluster) {
		t.Errorf("RecordRuns of %d records: %d pipelines (%v), want 1 (2 on a Cluster)", len(rs), pipelines, got)
	}
	sts, err := s.JobStates(ctx)
	if err != nil || len(sts) != 1 || sts[0].Job != "job-1" || !sts[0].Paused {
		t.Fatalf("JobStates = %+v, %v", sts, err)
	}
	if got, _ := cmds.take(); len(got) != 1 {
		t.Errorf("JobStates sent %v, want one command", got)
	}
	// Registered jobs stay out of the hash JobStates reads. Warm the
	// script cache of the node that holds the registrations first: on a
	// Cluster it may not have run the script yet (EVALSHA, then EVAL).
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "job-0", Op: ledger.JobRegister, Spec: "* * * * *", Since: ledgerTick}); err != nil {
		t.Fatal(err)
	}
	cmds.take()
	for j := range 50 {
		if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: fmt.Sprintf("job-%d", j), Op: ledger.JobRegister,
			Spec: "* * * * *", Since: ledgerTick}); err != nil {
			t.Fatal(err)
		}
		if got, pipelines := cmds.take(); pipelines != 1 || len(got) != 2 {
			t.Fatalf("register sent %v in %d pipelines, want 2 commands in 1", got, pipelines)
		}
	}
	if n, err := c.HLen(ctx, s.stateKey()).Result(); err != nil || n != 1 {
		t.Fatalf("the job state hash has %d fields after registering 50 jobs, %v; want 1", n, err)
	}
	cmds.take()
	if sts, err := s.Jobs(ctx); err != nil || len(sts) != 50 {
		t.Fatalf("Jobs = %d jobs, %v; want 50", len(sts), err)
	}
	if got, pipelines := cmds.take(); pipelines != 1 || len(got) != 2 {
		t.Errorf("Jobs sent %v in %d pipelines, want 2 commands in 1", got, pipelines)
	}
	if got, err := s.Runs(ctx, ledger.RunQuery{Job: "job-3"}); err != nil || len(got) != 1 {
		t.Fatalf("Runs of one job = %+v, %v", got, err)
	}
	if got, pipelines := cmds.take(); len(got) != 1 || pipelines != 1 {
		t.Errorf("Runs of one job sent %v in %d pipelines, want one command", got, pipelines)
	}
	if got, err := s.Runs(ctx, ledger.RunQuery{Limit: 5}); err != nil || len(got) != 5 {
		t.Fatalf("Runs of every job = %d records, %v", len(got), err)
	}
	if got, _ := cmds.take(); len(got) != 1+20 {
		t.Errorf("Runs of every job sent %d commands, want SMEMBERS and one per job", len(got))
	}
	// The ledger's keys are not leases.
	if ls, err := s.Leases(ctx, ""); err != nil || len(ls) != 0 {
		t.Fatalf("Leases with only ledger keys = %+v, %v", ls, err)
	}
}

// testLedgerOddNames: job names, triggers, tokens and nodes with braces,
// colons, newlines and bytes that are not UTF-8 are kept exactly, on every
// deployment.
func testLedgerOddNames(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	names := []string{"}lead", "a}b{c", "x{y}", "{}", "with:colons:", "nl\nnl", "\xff\xfe", "é"}
	for i, job := range names {
		trigger := names[(i+1)%len(names)]
		p := ledger.ClaimParams{Job: job, Tick: ledgerTick, Trigger: trigger, Node: names[(i+2)%len(names)],
			Token: names[(i+3)%len(names)], Retain: time.Hour}
		res, err := s.Claim(ctx, []ledger.ClaimParams{p, p})
		if err != nil || res[0] != nil || res[1] != nil {
			t.Fatalf("claim %q/%q: %v, %v", job, trigger, res, err)
		}
		q := p
		q.Token = "other"
		res, err = s.Claim(ctx, []ledger.ClaimParams{q})
		var ce *ledger.ClaimedError
		if err != nil || !errors.As(res[0], &ce) || ce.Node != p.Node {
			t.Fatalf("claim %q/%q by another token: %v, %v", job, trigger, res, err)
		}

		r := ledger.RunRecord{Job: job, Tick: ledgerTick, Trigger: trigger, Attempt: 2, Node: p.Node, Fence: 1<<64 - 1,
			Start: ledgerTick.Add(time.Millisecond), Status: ledger.RunFailed, Error: "e:" + job, Output: "3:abc" + trigger}
		if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Runs(ctx, ledger.RunQuery{Job: job, Status: ledger.RunFailed})
		if err != nil || len(got) != 1 {
			t.Fatalf("runs of %q: %+v, %v", job, got, err)
		}
		g := got[0]
		r.Recorded = g.Recorded
		if g.Job != r.Job || !g.Tick.Equal(r.Tick) || g.Trigger != r.Trigger || g.Attempt != r.Attempt || g.Node != r.Node ||
			g.Fence != r.Fence || !g.Start.Equal(r.Start) || !g.End.IsZero() || g.Status != r.Status || g.Error != r.Error || g.Output != r.Output {
			t.Fatalf("record of %q:\n got  %+v\n want %+v", job, g, r)
		}

		st, err := s.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobTrigger, Trigger: trigger})
		if err != nil || len(st.Triggers) != 1 || st.Triggers[0].ID != trigger {
			t.Fatalf("trigger %q of %q: %+v, %v", trigger, job, st, err)
		}
		spec := "1:" + trigger + ":" + job
		st, err = s.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: spec, Since: ledgerTick})
		if err != nil || st.Spec != spec || !st.Since.Equal(ledgerTick) || len(st.Triggers) != 1 {
			t.Fatalf("register %q as %q: %+v, %v", job, spec, st, err)
		}
	}
	all, err := s.Jobs(ctx)
	if err != nil || len(all) != len(names) {
		t.Fatalf("Jobs = %+v, %v; want %d jobs", all, err, len(names))
	}
	for _, st := range all {
		if !strings.HasSuffix(st.Spec, ":"+st.Job) || len(st.Triggers) != 1 {
			t.Fatalf("Jobs lists %+v", st)
		}
	}
	sts, err := s.JobStates(ctx)
	if err != nil || len(sts) != len(names) {
		t.Fatalf("JobStates = %+v, %v; want %d jobs", sts, err, len(names))
	}
	if rs, err := s.Runs(ctx, ledger.RunQuery{}); err != nil || len(rs) != len(names) {
		t.Fatalf("Runs of every job = %d records, %v; want %d", len(rs), err, len(names))
	}
}

// testLedgerNoScript: after SCRIPT FLUSH every ledger call loads its script
// again.
func testLedgerNoScript(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	forEachMaster(t, c, func(c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
	res, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "j", Tick: ledgerTick, Token: "t", Retain: time.Hour}})
	if err != nil || res[0] != nil {
		t.Fatalf("Claim after SCRIPT FLUSH: %v, %v", res, err)
	}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{{Job: "j", Tick: ledgerTick, Attempt: 1, Status: ledger.RunOK}}); err != nil {
		t.Fatalf("RecordRuns after SCRIPT FLUSH: %v", err)
	}
	if rs, err := s.Runs(ctx, ledger.RunQuery{}); err != nil || len(rs) != 1 {
		t.Fatalf("Runs after SCRIPT FLUSH: %v, %v", rs, err)
	}
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "j", Op: ledger.JobTrigger, Trigger: "x"}); err != nil {
		t.Fatalf("SetJobState after SCRIPT FLUSH: %v", err)
	}
	st, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "j", Op: ledger.JobRegister, Spec: "@daily", Since: ledgerTick})
	if err != nil || st.Spec != "@daily" || len(st.Triggers) != 1 {
		t.Fatalf("register after SCRIPT FLUSH: %+v, %v", st, err)
	}
	forEachMaster(t, c, func(c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
	res2, err := s.Prune(ctx, ledger.PruneParams{KeepPerJob: 1, TriggersOlderThan: time.Hour})
	if err != nil || res2 != (ledger.PruneResult{}) {
		t.Fatalf("Prune after SCRIPT FLUSH: %+v, %v", res2, err)
	}
}

// testLedgerKeepWithinTick: KeepPerJob cuts inside one tick in the listing
// order (trigger ascending, then shard ascending as numbers, then attempt
// descending), comparing triggers by bytes whatever the server's locale.
func testLedgerKeepWithinTick(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	var rs []ledger.RunRecord
	for _, trig := range []string{"", "B", "a", "ab", "\xff"} {
		for _, shard := range []int{0, 10, 2} {
			for attempt := 1; attempt <= 11; attempt += 5 {
				rs = append(rs, ledger.RunRecord{Job: "k", Tick: ledgerTick, Trigger: trig, Shard: shard, Attempt: attempt, Status: ledger.RunOK})
			}
		}
	}
	rs = append(rs, ledger.RunRecord{Job: "k", Tick: ledgerTick.Add(-time.Second), Attempt: 1, Status: ledger.RunOK})
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	all, err := s.Runs(ctx, ledger.RunQuery{Job: "k"})
	if err != nil || len(all) != len(rs) {
		t.Fatalf("Runs = %d records, %v", len(all), err)
	}
	for _, keep := range []int{40, 25, 7} {
		res, err := s.Prune(ctx, ledger.PruneParams{KeepPerJob: keep})
		if err != nil || res.Runs != len(all)-keep {
			t.Fatalf("Prune to %d = %+v, %v; want %d runs deleted", keep, res, err, len(all)-keep)
		}
		kept, err := s.Runs(ctx, ledger.RunQuery{Job: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(runKeys(kept)) != fmt.Sprint(runKeys(all[:keep])) {
			t.Fatalf("kept\n %v\nwant\n %v", runKeys(kept), runKeys(all[:keep]))
		}
		all = kept
	}
}

func runKeys(rs []ledger.RunRecord) []ledger.RunKey {
	out := make([]ledger.RunKey, len(rs))
	for i, r := range rs {
		out[i] = r.Key()
	}
	return out
}

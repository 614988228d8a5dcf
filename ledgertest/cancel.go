package ledgertest

import (
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// testCancelRequests: a JobCancel request is kept among the job's trigger
// requests with the run it names (Tick, or RunTrigger, and Shard), shows in
// JobStates, is added once per ID, is removed by JobTriggerDone, and is
// pruned like a trigger request.
func testCancelRequests(t *testing.T, l ledger.Ledger) {
	ctx := ctxT(t, 10*time.Second)
	set := func(p ledger.JobStateParams) ledger.JobState {
		t.Helper()
		st, err := l.SetJobState(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	tick := tickN(7)
	set(ledger.JobStateParams{Job: "cx", Op: ledger.JobCancel, Trigger: "c1", Tick: tick, Shard: 3})
	set(ledger.JobStateParams{Job: "cx", Op: ledger.JobCancel, Trigger: "c1", Tick: tick, Shard: 3}) // once per ID
	mustSet(t, l, "cx", ledger.JobTrigger, "now1")
	// A run trigger ID with the characters stores use as separators.
	runTrigger := "rerun-s:ab/cd@1:2"
	st := set(ledger.JobStateParams{Job: "cx", Op: ledger.JobCancel, Trigger: "c2", RunTrigger: runTrigger})
	if len(st.Triggers) != 3 {
		t.Fatalf("SetJobState returned %+v, want 3 requests", st.Triggers)
	}
	got := stateOf(t, l, "cx").Triggers
	if len(got) != 3 || got[0].ID != "c1" || got[1].ID != "now1" || got[2].ID != "c2" {
		t.Fatalf("JobStates shows %+v, want c1, now1, c2 in order", got)
	}
	if tr := got[0]; !tr.Cancel || !tr.Tick.Equal(tick) || tr.RunTrigger != "" || tr.Shard != 3 || tr.Rerun {
		t.Fatalf("cancel of a tick's run: %+v, want Cancel, Tick %v, Shard 3", tr, tick)
	}
	if tr := got[1]; tr.Cancel || tr.RunTrigger != "" || tr.Shard != 0 || !tr.Tick.IsZero() {
		t.Fatalf("trigger-now beside cancels: %+v, want no cancel fields", tr)
	}
	if tr := got[2]; !tr.Cancel || !tr.Tick.IsZero() || tr.RunTrigger != runTrigger || tr.Shard != 0 {
		t.Fatalf("cancel of a trigger's run: %+v, want Cancel, RunTrigger %q, Shard 0", tr, runTrigger)
	}
	if st, ok := findState(t, "Jobs", mustJobs(t, l), "cx"); !ok || len(st.Triggers) != 3 || !st.Triggers[2].Cancel {
		t.Fatalf("Jobs shows %+v, want the 3 requests with the cancels", st)
	}

	mustSet(t, l, "cx", ledger.JobTriggerDone, "c1")
	if got := stateOf(t, l, "cx").Triggers; len(got) != 2 || got[0].ID != "now1" || got[1].ID != "c2" {
		t.Fatalf("after done c1: %+v, want now1 and c2", got)
	}
	// Prune drops cancel requests older than TriggersOlderThan, and no others.
	time.Sleep(time.Second) // let the store's clock age them
	set(ledger.JobStateParams{Job: "cx", Op: ledger.JobCancel, Trigger: "c3", Tick: tick})
	if _, err := l.Prune(ctx, ledger.PruneParams{TriggersOlderThan: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := stateOf(t, l, "cx").Triggers; len(got) != 1 || got[0].ID != "c3" || !got[0].Cancel || got[0].Shard != 0 {
		t.Fatalf("after prune: %+v, want c3 pending", got)
	}
	mustSet(t, l, "cx", ledger.JobTriggerDone, "c3")
	if got := stateOf(t, l, "cx"); len(got.Triggers) != 0 {
		t.Fatalf("final state %+v, want no request", got)
	}

	for _, bad := range []ledger.JobStateParams{
		{Job: "cx", Op: ledger.JobCancel, Trigger: "b"},                                      // names no run
		{Job: "cx", Op: ledger.JobCancel, Trigger: "b", Tick: tick, RunTrigger: "x"},         // names two
		{Job: "cx", Op: ledger.JobCancel, Tick: tick},                                        // no ID
		{Job: "cx", Op: ledger.JobCancel, Trigger: "b", Tick: tick.Add(time.Millisecond)},    // not a whole second
		{Job: "cx", Op: ledger.JobCancel, Trigger: "b", Tick: tick, Shard: ledger.MaxShards}, // shard out of range
		{Job: "cx", Op: ledger.JobCancel, Trigger: "b", RunTrigger: "x", Shard: -1},          // shard out of range
	} {
		if _, err := l.SetJobState(ctx, bad); err == nil {
			t.Errorf("SetJobState(%+v) succeeded, want an error", bad)
		}
	}
}

func mustJobs(t *testing.T, l ledger.Ledger) []ledger.JobState {
	t.Helper()
	sts, err := l.Jobs(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

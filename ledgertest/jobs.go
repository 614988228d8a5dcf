package ledgertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// jobOf returns job's state as Jobs lists it, and whether it is listed.
func jobOf(t *testing.T, l ledger.Ledger, job string) (ledger.JobState, bool) {
	t.Helper()
	sts, err := l.Jobs(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return findState(t, "Jobs", sts, job)
}

func register(t *testing.T, l ledger.Ledger, job, spec string, since time.Time) ledger.JobState {
	t.Helper()
	st, err := l.SetJobState(ctxT(t, 10*time.Second), ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: spec, Since: since})
	if err != nil {
		t.Fatalf("register %q %q: %v", job, spec, err)
	}
	if st.Job != job {
		t.Fatalf("register returned the state of %q, want %q", st.Job, job)
	}
	return st
}

// testRegisterJobs: the first registration of a spec sets Since, later ones
// read it back; a changed spec moves Since; pause and triggers are kept.
func testRegisterJobs(t *testing.T, l ledger.Ledger) {
	since := tick0.Add(123 * time.Millisecond)
	st := register(t, l, "r", "*/5 * * * *", since)
	if st.Spec != "*/5 * * * *" || !st.Since.Equal(since) {
		t.Fatalf("first register: %+v, want Spec %q Since %v", st, "*/5 * * * *", since)
	}
	if st.Paused || len(st.Triggers) != 0 {
		t.Fatalf("register changed pause or triggers: %+v", st)
	}
	// Another node registers the same spec later: the first Since stands.
	st = register(t, l, "r", "*/5 * * * *", since.Add(time.Hour))
	if !st.Since.Equal(since) {
		t.Fatalf("second register of the same spec: Since %v, want the first %v", st.Since, since)
	}
	got, ok := jobOf(t, l, "r")
	if !ok || got.Spec != "*/5 * * * *" || !got.Since.Equal(since) {
		t.Fatalf("Jobs shows %+v (listed %v), want the registration", got, ok)
	}
	// Pause keeps the registration, and register keeps the pause.
	mustSet(t, l, "r", ledger.JobPause, "")
	mustSet(t, l, "r", ledger.JobTrigger, "tr")
	st = register(t, l, "r", "*/5 * * * *", since.Add(2*time.Hour))
	if !st.Paused || len(st.Triggers) != 1 || !st.Since.Equal(since) {
		t.Fatalf("register on a paused, triggered job: %+v", st)
	}
	// A changed spec starts again from its own Since.
	since2 := since.Add(24 * time.Hour)
	st = register(t, l, "r", "0 * * * *", since2)
	if st.Spec != "0 * * * *" || !st.Since.Equal(since2) || !st.Paused {
		t.Fatalf("register of a changed spec: %+v, want Spec %q Since %v and still paused", st, "0 * * * *", since2)
	}
	if got, _ := jobOf(t, l, "r"); got.Spec != "0 * * * *" || !got.Since.Equal(since2) || !got.Paused || len(got.Triggers) != 1 {
		t.Fatalf("Jobs after the change: %+v", got)
	}
	// JobStates still shows the pause.
	if !stateOf(t, l, "r").Paused {
		t.Fatal("JobStates lost the pause of a registered job")
	}
	// Registered and otherwise default: listed by Jobs.
	register(t, l, "plain", "@every 1m", since)
	if got, ok := jobOf(t, l, "plain"); !ok || got.Paused || got.Spec != "@every 1m" {
		t.Fatalf("Jobs shows %+v (listed %v) for a registered job in the default state", got, ok)
	}
	// Pruning the old requests keeps it: its registration is no request
	// (memstore dropped every state without a pause or a request, and a
	// re-run an hour later found the job not registered).
	if _, err := l.Prune(ctxT(t, 10*time.Second), ledger.PruneParams{TriggersOlderThan: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got, ok := jobOf(t, l, "plain"); !ok || got.Spec != "@every 1m" || !got.Since.Equal(since) {
		t.Fatalf("Jobs shows %+v (listed %v) after a prune of the requests, want the registration kept", got, ok)
	}
	// Invalid registrations are refused.
	for _, p := range []ledger.JobStateParams{
		{Job: "bad", Op: ledger.JobRegister, Since: since},
		{Job: "bad", Op: ledger.JobRegister, Spec: "* * * * *"},
		{Job: "bad", Op: ledger.JobRegister, Spec: strings.Repeat("x", ledger.MaxSpecLen+1), Since: since},
	} {
		if _, err := l.SetJobState(ctxT(t, 10*time.Second), p); err == nil {
			t.Errorf("SetJobState(%+v) succeeded", p)
		}
	}
	if _, ok := jobOf(t, l, "bad"); ok {
		t.Fatal("a refused registration left a job behind")
	}
}

// testJobsAndForget: Jobs lists paused, triggered and registered jobs;
// JobForget removes every part of a job's state and no other job's.
func testJobsAndForget(t *testing.T, l ledger.Ledger) {
	register(t, l, "a", "* * * * *", tick0)
	mustSet(t, l, "a", ledger.JobPause, "")
	mustSet(t, l, "a", ledger.JobTrigger, "x")
	mustSet(t, l, "b", ledger.JobPause, "")
	mustSet(t, l, "c", ledger.JobTrigger, "y")
	for _, j := range []string{"a", "b", "c"} {
		if _, ok := jobOf(t, l, j); !ok {
			t.Fatalf("Jobs does not list %q", j)
		}
	}
	for range 2 { // idempotent
		st, err := l.SetJobState(ctxT(t, 10*time.Second), ledger.JobStateParams{Job: "a", Op: ledger.JobForget})
		if err != nil {
			t.Fatal(err)
		}
		if st.Job != "a" || st.Paused || len(st.Triggers) != 0 || st.Spec != "" || !st.Since.IsZero() {
			t.Fatalf("forget returned %+v, want the default state", st)
		}
	}
	if got, ok := jobOf(t, l, "a"); ok {
		t.Fatalf("Jobs still lists a forgotten job: %+v", got)
	}
	if st := stateOf(t, l, "a"); st.Paused || len(st.Triggers) != 0 {
		t.Fatalf("JobStates still shows the forgotten job's state: %+v", st)
	}
	if _, ok := jobOf(t, l, "b"); !ok {
		t.Fatal("forgetting a forgot b")
	}
	// A forgotten job registers afresh.
	if st := register(t, l, "a", "* * * * *", tick0.Add(time.Hour)); !st.Since.Equal(tick0.Add(time.Hour)) {
		t.Fatalf("registering a forgotten job kept the old Since: %+v", st)
	}
}

// testRunningRecords: a running record is replaced by the attempt's outcome
// under the same key, and a Status query finds the running ones.
func testRunningRecords(t *testing.T, l ledger.Ledger) {
	mustRecord(t, l, run("x", 1, 1, ledger.RunRunning), run("x", 2, 1, ledger.RunRunning), run("y", 1, 1, ledger.RunOK))
	sameKeys(t, "running", mustRuns(t, l, ledger.RunQuery{Status: ledger.RunRunning}), "x/2//1", "x/1//1")
	mustRecord(t, l, run("x", 1, 1, ledger.RunInterrupted))
	sameKeys(t, "running after one ended", mustRuns(t, l, ledger.RunQuery{Status: ledger.RunRunning}), "x/2//1")
	sameKeys(t, "interrupted", mustRuns(t, l, ledger.RunQuery{Status: ledger.RunInterrupted}), "x/1//1")
	sameKeys(t, "all of x", mustRuns(t, l, ledger.RunQuery{Job: "x"}), "x/2//1", "x/1//1")
	if !ledger.RunOK.Final() || !ledger.RunInterrupted.Final() || ledger.RunRunning.Final() {
		t.Fatal("RunStatus.Final is wrong")
	}
}

// testRegisterBatch: a ledger.Registrar registers like SetJobState, job by
// job — a first Since set, the same spec read back, a changed spec moved —
// and refuses a batch with an invalid item before it registers any. Skipped
// for a ledger without the capability.
func testRegisterBatch(t *testing.T, l ledger.Ledger) {
	r, ok := l.(ledger.Registrar)
	if !ok {
		t.Skipf("%T does not implement ledger.Registrar (optional)", l)
	}
	since := tick0.Add(7 * time.Millisecond)
	register(t, l, "same", "@every 1m", since)
	register(t, l, "changed", "@every 1m", since)
	mustSet(t, l, "changed", ledger.JobPause, "")
	later := since.Add(time.Hour)
	ps := []ledger.JobStateParams{
		{Job: "same", Spec: "@every 1m", Since: later},
		{Job: "changed", Spec: "@every 2m", Since: later},
	}
	for i := range 600 { // more than one script chunk of the Redis store
		ps = append(ps, ledger.JobStateParams{Job: fmt.Sprintf("new-%03d", i), Spec: "@hourly", Since: later})
	}
	sts, err := r.RegisterJobs(ctxT(t, 20*time.Second), ps)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != len(ps) {
		t.Fatalf("%d registrations for %d jobs", len(sts), len(ps))
	}
	for i, st := range sts {
		want := later
		if ps[i].Job == "same" {
			want = since
		}
		if st.Job != ps[i].Job || st.Spec != ps[i].Spec || !st.Since.Equal(want) {
			t.Fatalf("registration %d: %+v, want Job %q Spec %q Since %v", i, st, ps[i].Job, ps[i].Spec, want)
		}
	}
	// What Jobs reads agrees, and the pause stayed.
	if got, _ := jobOf(t, l, "changed"); got.Spec != "@every 2m" || !got.Since.Equal(later) || !got.Paused {
		t.Fatalf("Jobs after the batch: %+v", got)
	}
	if got, ok := jobOf(t, l, "new-599"); !ok || got.Spec != "@hourly" {
		t.Fatalf("Jobs shows %+v (listed %v) for the batch's last job", got, ok)
	}
	bad := []ledger.JobStateParams{{Job: "fine", Spec: "@hourly", Since: since}, {Job: "bad", Spec: "", Since: since}}
	if _, err := r.RegisterJobs(ctxT(t, 10*time.Second), bad); err == nil {
		t.Fatal("RegisterJobs with an empty Spec succeeded")
	}
	if _, ok := jobOf(t, l, "fine"); ok {
		t.Fatal("a refused batch registered its valid item")
	}
}

// CheckMigratedCancels checks a ledger that a store's migration brought
// from a schema without cancel requests, after the test stored job "j"'s
// trigger-now request "now" and its re-run of tick, "past", the old way:
// both are still requests to run, unchanged, and a cancel request of
// tick's shard 2 is kept beside them. Each SQL store's migration test
// calls it.
func CheckMigratedCancels(t *testing.T, l ledger.Ledger, tick time.Time) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: "j", Op: ledger.JobCancel, Trigger: "c", Tick: tick, Shard: 2}); err != nil {
		t.Fatal(err)
	}
	sts, err := l.JobStates(ctx)
	if err != nil || len(sts) != 1 || len(sts[0].Triggers) != 3 {
		t.Fatalf("JobStates after migrating = %+v, %v; want j's 3 requests", sts, err)
	}
	trs := sts[0].Triggers
	if trs[0].ID != "now" || trs[0].Cancel || trs[1].ID != "past" || trs[1].Cancel || !trs[1].Rerun || !trs[1].Tick.Equal(tick) {
		t.Fatalf("migrated requests = %+v, want now and past as they were, not cancels", trs[:2])
	}
	if tr := trs[2]; tr.ID != "c" || !tr.Cancel || tr.Shard != 2 || !tr.Tick.Equal(tick) {
		t.Fatalf("cancel request = %+v", tr)
	}
}

// Package ledgertest is the conformance suite every ledger.Ledger passes,
// beside the lock contract's storetest. A store's tests call Run with a
// function that returns a fresh, empty ledger (its own key prefix, table or
// database), backed by a real server:
//
//	func TestLedgerConformance(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T) ledger.Ledger { return newStore(t) })
//	}
//
// The suite checks what package ledger promises: a claim is made once, also
// under concurrency; retention and record ages are measured by the store's
// clock; times round-trip; records are replaced by RunKey and listed in
// order, page by page; job state changes are idempotent; a cancelled
// context fails every call.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// NewLedger returns a fresh, empty ledger for one test.
type NewLedger func(t *testing.T) ledger.Ledger

// Run runs the suite (claims, run history, job state, pruning) against
// ledgers made by newLedger. Retention tests wait on the store's clock for
// about a second each.
func Run(t *testing.T, newLedger NewLedger) {
	tests := []struct {
		name string
		fn   func(t *testing.T, l ledger.Ledger)
	}{
		{"ClaimOnceUnderConcurrency", testClaimOnce},
		{"ClaimKeyParts", testClaimKeyParts},
		{"ClaimSameTokenAgain", testClaimSameToken},
		{"ClaimRetention", testClaimRetention},
		{"RecordRunsUpserts", testRecordUpsert},
		{"RecordRunsLargeOutput", testLargeOutput},
		{"RunsQueries", testRunsQueries},
		{"RunsPagination", testRunsPagination},
		{"PruneByCount", testPruneByCount},
		{"PruneByAge", testPruneByAge},
		{"PauseState", testPauseState},
		{"Triggers", testTriggers},
		{"CancelledContext", testLedgerCancelled},
		{"RegisterJobs", testRegisterJobs},
		{"RegisterJobsBatch", testRegisterBatch},
		{"Marks", testMarks},
		{"JobsAndForget", testJobsAndForget},
		{"RunningRecords", testRunningRecords},
		{"ShardClaims", testShardClaims},
		{"ShardRecords", testShardRecords},
		{"TriggerTicks", testTriggerTicks},
		{"CancelRequests", testCancelRequests},
		{"CatalogVersions", testCatalogVersions},
		{"CatalogConcurrentUpdates", testCatalogConcurrent},
		{"CatalogAudit", testCatalogAudit},
		{"RunStats", testRunStats},
		{"LatestRuns", testLatestRuns},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case has a ledger of its own
			tc.fn(t, newLedger(t))
		})
	}
}

// ctxT returns a context that ends after d or when the test ends.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// tick0 is the first tick the ledger tests use: far from any real clock, so
// that nothing depends on when the suite runs.
var tick0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

func tickN(i int) time.Time { return tick0.Add(time.Duration(i) * time.Second) }

const day = 24 * time.Hour

func claim(job string, tick time.Time, trigger, node, token string) ledger.ClaimParams {
	return ledger.ClaimParams{Job: job, Tick: tick, Trigger: trigger, Node: node, Token: token, Retain: day}
}

func mustClaim(t *testing.T, l ledger.Ledger, ps ...ledger.ClaimParams) []error {
	t.Helper()
	res, err := l.Claim(ctxT(t, 10*time.Second), ps)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if len(res) != len(ps) {
		t.Fatalf("Claim returned %d results for %d claims", len(res), len(ps))
	}
	return res
}

func wantClaimed(t *testing.T, what string, err error, byNode string) {
	t.Helper()
	var ce *ledger.ClaimedError
	if !errors.As(err, &ce) || !errors.Is(err, ledger.ErrClaimed) {
		t.Fatalf("%s: result %v, want a *ClaimedError matching ErrClaimed", what, err)
	}
	if ce.Node != "" && ce.Node != byNode {
		t.Fatalf("%s: ClaimedError.Node = %q, want %q", what, ce.Node, byNode)
	}
}

// testClaimOnce: 8 claimers race for the same 64 ticks in batches of
// different sizes and orders; every tick is claimed exactly once, and the
// losers are told who won.
func testClaimOnce(t *testing.T, l ledger.Ledger) {
	const claimers, ticks = 8, 64
	var (
		mu     sync.Mutex
		winner = make(map[int]string)
		losers = make(map[int][]error)
		wg     sync.WaitGroup
		start  = make(chan struct{})
		errc   = make(chan error, claimers)
	)
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("node-%d", c)
			order := rand.Perm(ticks)
			batch := 1 + c%4*5 // 1, 6, 11, 16 claims per call
			<-start
			for len(order) > 0 {
				n := min(batch, len(order))
				ps := make([]ledger.ClaimParams, n)
				for i, k := range order[:n] {
					ps[i] = claim("once", tickN(k), "", node, "token-"+node)
				}
				res, err := l.Claim(context.Background(), ps)
				if err == nil && len(res) != n {
					err = fmt.Errorf("%d results for %d claims", len(res), n)
				}
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				for i, k := range order[:n] {
					if res[i] == nil {
						if w, dup := winner[k]; dup {
							errc <- fmt.Errorf("tick %d claimed by both %s and %s", k, w, node)
						}
						winner[k] = node
					} else {
						losers[k] = append(losers[k], res[i])
					}
				}
				mu.Unlock()
				order = order[n:]
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for k := range ticks {
		w, ok := winner[k]
		if !ok {
			t.Fatalf("tick %d claimed by nobody", k)
		}
		if len(losers[k]) != claimers-1 {
			t.Fatalf("tick %d: %d losing claims, want %d", k, len(losers[k]), claimers-1)
		}
		for _, err := range losers[k] {
			wantClaimed(t, fmt.Sprintf("tick %d", k), err, w)
		}
	}
}

// testClaimKeyParts: job, tick and trigger each make a key distinct.
func testClaimKeyParts(t *testing.T, l ledger.Ledger) {
	if res, err := l.Claim(ctxT(t, 10*time.Second), nil); err != nil || len(res) != 0 {
		t.Fatalf("Claim(nil) = %v, %v; want no results and no error", res, err)
	}
	res := mustClaim(t, l,
		claim("a", tickN(0), "", "n1", "t1"),
		claim("b", tickN(0), "", "n1", "t1"),
		claim("a", tickN(1), "", "n1", "t1"),
		claim("a", tickN(0), "trig-1", "n1", "t1"),
		claim("a", tickN(0), "trig-2", "n1", "t1"),
		claim("a", tickN(0).Add(time.Millisecond), "", "n1", "t1"),
	)
	for i, err := range res {
		if err != nil {
			t.Fatalf("claim %d of distinct keys: %v", i, err)
		}
	}
	res = mustClaim(t, l,
		claim("a", tickN(0), "", "n2", "t2"),
		claim("a", tickN(0), "trig-1", "n2", "t2"),
		claim("a", tickN(2), "", "n2", "t2"),
	)
	wantClaimed(t, "same tick", res[0], "n1")
	wantClaimed(t, "same trigger", res[1], "n1")
	if res[2] != nil {
		t.Fatalf("new tick: %v", res[2])
	}
	// The same tick given in another location is the same instant.
	ny, err := time.LoadLocation("America/New_York")
	if err == nil {
		res = mustClaim(t, l, claim("a", tickN(0).In(ny), "", "n3", "t3"))
		wantClaimed(t, "same instant, other location", res[0], "n1")
	}
}

// testClaimSameToken: repeating a claim with the token that holds it
// succeeds, so a call that failed midway may be repeated.
func testClaimSameToken(t *testing.T, l ledger.Ledger) {
	first := mustClaim(t, l, claim("j", tickN(0), "", "n1", "t1"))
	again := mustClaim(t, l, claim("j", tickN(0), "", "n1", "t1"), claim("j", tickN(1), "", "n1", "t1"))
	if first[0] != nil || again[0] != nil || again[1] != nil {
		t.Fatalf("claims by the holding token = %v, %v; want nil", first, again)
	}
	other := mustClaim(t, l, claim("j", tickN(1), "", "n2", "t2"))
	wantClaimed(t, "other token", other[0], "n1")
}

// testClaimRetention: a claim holds at least Retain by the store's clock,
// and may be made again after it.
func testClaimRetention(t *testing.T, l ledger.Ledger) {
	const retain = 300 * time.Millisecond
	p := claim("retained", tickN(0), "", "n1", "t1")
	p.Retain = retain
	start := time.Now()
	if res := mustClaim(t, l, p); res[0] != nil {
		t.Fatal(res[0])
	}
	q := claim("retained", tickN(0), "", "n2", "t2")
	for {
		res := mustClaim(t, l, q)
		el := time.Since(start)
		if res[0] == nil {
			if el < retain-10*time.Millisecond {
				t.Fatalf("claimed again %v after the first claim, within its retention %v", el, retain)
			}
			break
		}
		wantClaimed(t, "within retention", res[0], "n1")
		if el > retain+5*time.Second {
			t.Fatalf("still claimed %v after a claim retained for %v", el, retain)
		}
		time.Sleep(20 * time.Millisecond) // sampling interval
	}
	// A long-retained claim survives Prune.
	if res := mustClaim(t, l, claim("kept", tickN(0), "", "n1", "t1")); res[0] != nil {
		t.Fatal(res[0])
	}
	if _, err := l.Prune(ctxT(t, 10*time.Second), ledger.PruneParams{}); err != nil {
		t.Fatal(err)
	}
	res := mustClaim(t, l, claim("kept", tickN(0), "", "n2", "t2"))
	wantClaimed(t, "after Prune", res[0], "n1")
}

func run(job string, i, attempt int, status ledger.RunStatus) ledger.RunRecord {
	start := tickN(i).Add(1500 * time.Millisecond)
	r := ledger.RunRecord{
		Job: job, Tick: tickN(i), Attempt: attempt, Node: "n1", Fence: uint64(i + 1),
		Start: start, End: start.Add(250 * time.Millisecond), Status: status,
	}
	if status != ledger.RunOK {
		r.Error = "boom " + job
	}
	return r
}

func mustRecord(t *testing.T, l ledger.Ledger, rs ...ledger.RunRecord) {
	t.Helper()
	if err := l.RecordRuns(ctxT(t, 10*time.Second), rs); err != nil {
		t.Fatalf("RecordRuns: %v", err)
	}
}

func mustRuns(t *testing.T, l ledger.Ledger, q ledger.RunQuery) []ledger.RunRecord {
	t.Helper()
	rs, err := l.Runs(ctxT(t, 10*time.Second), q)
	if err != nil {
		t.Fatalf("Runs(%+v): %v", q, err)
	}
	return rs
}

// keys renders records as job/tick/trigger/attempt for comparisons.
func keys(rs []ledger.RunRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%s/%d/%s/%d", r.Job, int(r.Tick.Sub(tick0)/time.Second), r.Trigger, r.Attempt)
	}
	return out
}

func sameKeys(t *testing.T, what string, got []ledger.RunRecord, want ...string) {
	t.Helper()
	g := keys(got)
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("%s:\n got  %v\n want %v", what, g, want)
	}
}

func testRecordUpsert(t *testing.T, l ledger.Ledger) {
	before := time.Now()
	r := run("up", 0, 1, ledger.RunFailed)
	r.Output = "line 1\nline 2\n"
	r.Trigger = ""
	mustRecord(t, l, r)
	r.Status, r.Error, r.Output = ledger.RunOK, "", "all good"
	mustRecord(t, l, r, run("up", 0, 2, ledger.RunOK))
	rs := mustRuns(t, l, ledger.RunQuery{Job: "up"})
	sameKeys(t, "after upsert", rs, "up/0//2", "up/0//1")
	got := rs[1]
	if got.Status != ledger.RunOK || got.Error != "" || got.Output != "all good" {
		t.Fatalf("record not replaced: %+v", got)
	}
	if !got.Tick.Equal(r.Tick) || got.Node != "n1" || got.Fence != 1 {
		t.Fatalf("record fields changed: %+v", got)
	}
	if d := got.Start.Sub(r.Start).Abs(); d >= time.Millisecond {
		t.Fatalf("Start = %v, want %v (millisecond precision)", got.Start, r.Start)
	}
	if d := got.End.Sub(r.End).Abs(); d >= time.Millisecond {
		t.Fatalf("End = %v, want %v", got.End, r.End)
	}
	// Recorded comes from the store's clock, which runs near ours.
	if got.Recorded.IsZero() || got.Recorded.Before(before.Add(-time.Minute)) || got.Recorded.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Recorded = %v, want the store's now (about %v)", got.Recorded, before)
	}
	// A trigger run is its own record.
	tr := run("up", 0, 1, ledger.RunOK)
	tr.Trigger = "trig"
	mustRecord(t, l, tr)
	sameKeys(t, "with trigger", mustRuns(t, l, ledger.RunQuery{Job: "up"}), "up/0//2", "up/0//1", "up/0/trig/1")
}

// LargeOutput is the output size a store must keep per run record: the
// default of `tasklock serve`'s output_max (64 KiB), with room for the cut
// marker schedule puts between the head and the tail.
const LargeOutput = 64<<10 + 64

// largeOutput is n bytes of varied text, lines of multi-byte runes among
// them, that ends with a line naming i.
func largeOutput(i, n int) string {
	b := make([]byte, 0, n)
	for l := 0; len(b) < n; l++ {
		b = fmt.Appendf(b, "record %d line %d: ünïcödé ✓ %x\n", i, l, l*7919)
	}
	end := fmt.Sprintf("\nend of record %d\n", i)
	b = b[:n-len(end)]
	for len(b) > 0 && b[len(b)-1]&0xC0 == 0x80 { // no rune cut at the end
		b = b[:len(b)-1]
	}
	for len(b)+len(end) < n {
		b = append(b, '.')
	}
	return string(b) + end
}

// testLargeOutput records, in one call, more 64 KiB outputs than fit in
// one request of some stores (etcd refuses requests over 1.5 MiB,
// ZooKeeper over 1 MiB) and reads every one back intact.
func testLargeOutput(t *testing.T, l ledger.Ledger) {
	const n = 24 // 24 × 64 KiB: 1.5 MiB and more
	rs := make([]ledger.RunRecord, n)
	for i := range rs {
		rs[i] = run("big", i, 1, ledger.RunFailed)
		rs[i].Output = largeOutput(i, LargeOutput)
	}
	mustRecord(t, l, rs...)
	got := mustRuns(t, l, ledger.RunQuery{Job: "big"})
	if len(got) != n {
		t.Fatalf("read %d records back, want %d", len(got), n)
	}
	for _, g := range got {
		i := int(g.Tick.Sub(tick0) / time.Second)
		if want := largeOutput(i, LargeOutput); g.Output != want {
			t.Fatalf("record %d: output of %d bytes read back, want the %d recorded (first difference at byte %d)", i, len(g.Output), len(want), firstDiff(g.Output, want))
		}
	}
	// One record alone, read by itself.
	one := mustRuns(t, l, ledger.RunQuery{Job: "big", From: tickN(5), To: tickN(6)})
	if len(one) != 1 || one[0].Output != largeOutput(5, LargeOutput) {
		t.Fatalf("record 5 alone: %d records, output intact %v", len(one), len(one) == 1 && one[0].Output == largeOutput(5, LargeOutput))
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// seedRuns records, for jobs a and b, ticks 0..9: attempt 1 of every tick,
// a second attempt for every third, statuses varying.
func seedRuns(t *testing.T, l ledger.Ledger) {
	var rs []ledger.RunRecord
	statuses := []ledger.RunStatus{ledger.RunOK, ledger.RunFailed, ledger.RunTimeout, ledger.RunSkipped, ledger.RunMissed, ledger.RunLost}
	for _, job := range []string{"a", "b"} {
		for i := range 10 {
			rs = append(rs, run(job, i, 1, statuses[i%len(statuses)]))
			if i%3 == 0 {
				rs = append(rs, run(job, i, 2, ledger.RunOK))
			}
		}
	}
	mustRecord(t, l, rs...)
}

func testRunsQueries(t *testing.T, l ledger.Ledger) {
	seedRuns(t, l)
	sameKeys(t, "job a, ticks [3, 7)", mustRuns(t, l, ledger.RunQuery{Job: "a", From: tickN(3), To: tickN(7)}),
		"a/6//2", "a/6//1", "a/5//1", "a/4//1", "a/3//2", "a/3//1")
	sameKeys(t, "every job, ticks [8, ∞)", mustRuns(t, l, ledger.RunQuery{From: tickN(8)}),
		"a/9//2", "a/9//1", "b/9//2", "b/9//1", "a/8//1", "b/8//1")
	sameKeys(t, "job b, failed", mustRuns(t, l, ledger.RunQuery{Job: "b", Status: ledger.RunFailed}),
		"b/7//1", "b/1//1")
	sameKeys(t, "job a, limit 3", mustRuns(t, l, ledger.RunQuery{Job: "a", Limit: 3}),
		"a/9//2", "a/9//1", "a/8//1")
	sameKeys(t, "job b, ticks before 1", mustRuns(t, l, ledger.RunQuery{Job: "b", To: tickN(1)}),
		"b/0//2", "b/0//1")
	if rs := mustRuns(t, l, ledger.RunQuery{Job: "nope"}); len(rs) != 0 {
		t.Fatalf("unknown job: %d records", len(rs))
	}
	rs := mustRuns(t, l, ledger.RunQuery{Job: "a", From: tickN(2), To: tickN(3)})
	if len(rs) != 1 || rs[0].Status != ledger.RunTimeout || rs[0].Error != "boom a" || rs[0].Fence != 3 {
		t.Fatalf("record fields: %+v", rs)
	}
}

// testRunsPagination: reading page by page with Before returns every
// record once, in order.
func testRunsPagination(t *testing.T, l ledger.Ledger) {
	seedRuns(t, l)
	all := mustRuns(t, l, ledger.RunQuery{})
	if len(all) != 28 {
		t.Fatalf("%d records, want 28", len(all))
	}
	for _, size := range []int{1, 3, 7} {
		var paged []ledger.RunRecord
		q := ledger.RunQuery{Limit: size}
		for range 100 {
			page := mustRuns(t, l, q)
			paged = append(paged, page...)
			if len(page) < size {
				break
			}
			k := page[len(page)-1].Key()
			q.Before = &k
		}
		if fmt.Sprint(keys(paged)) != fmt.Sprint(keys(all)) {
			t.Fatalf("pages of %d:\n got  %v\n want %v", size, keys(paged), keys(all))
		}
	}
}

func testPruneByCount(t *testing.T, l ledger.Ledger) {
	seedRuns(t, l)
	if _, err := l.Prune(ctxT(t, 10*time.Second), ledger.PruneParams{KeepPerJob: 3}); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "kept per job", mustRuns(t, l, ledger.RunQuery{}),
		"a/9//2", "a/9//1", "b/9//2", "b/9//1", "a/8//1", "b/8//1")
}

func testPruneByAge(t *testing.T, l ledger.Ledger) {
	mustRecord(t, l, run("old", 0, 1, ledger.RunOK), run("both", 0, 1, ledger.RunOK))
	time.Sleep(time.Second) // let the store's clock age the first records
	mustRecord(t, l, run("new", 1, 1, ledger.RunOK), run("both", 1, 1, ledger.RunOK))
	if _, err := l.Prune(ctxT(t, 10*time.Second), ledger.PruneParams{RunsOlderThan: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "after pruning by age", mustRuns(t, l, ledger.RunQuery{}), "both/1//1", "new/1//1")
	if _, err := l.Prune(ctxT(t, 10*time.Second), ledger.PruneParams{RunsOlderThan: time.Hour, KeepPerJob: 100}); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, "after a prune that keeps all", mustRuns(t, l, ledger.RunQuery{}), "both/1//1", "new/1//1")
}

func stateOf(t *testing.T, l ledger.Ledger, job string) ledger.JobState {
	t.Helper()
	sts, err := l.JobStates(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := findState(t, "JobStates", sts, job)
	return st
}

// findState returns job's state in sts, listed by the method named what,
// and whether it is there; the default state when it is not.
func findState(t *testing.T, what string, sts []ledger.JobState, job string) (ledger.JobState, bool) {
	t.Helper()
	var found *ledger.JobState
	for i := range sts {
		if sts[i].Job == job {
			if found != nil {
				t.Fatalf("%s lists %q twice", what, job)
			}
			found = &sts[i]
		}
	}
	if found == nil {
		return ledger.JobState{Job: job}, false
	}
	return *found, true
}

func mustSet(t *testing.T, l ledger.Ledger, job string, op ledger.JobStateOp, trigger string) ledger.JobState {
	t.Helper()
	st, err := l.SetJobState(ctxT(t, 10*time.Second), ledger.JobStateParams{Job: job, Op: op, Trigger: trigger})
	if err != nil {
		t.Fatalf("SetJobState(%q, %d, %q): %v", job, op, trigger, err)
	}
	if st.Job != job {
		t.Fatalf("SetJobState returned the state of %q, want %q", st.Job, job)
	}
	return st
}

func testPauseState(t *testing.T, l ledger.Ledger) {
	if st := stateOf(t, l, "p"); st.Paused || len(st.Triggers) != 0 {
		t.Fatalf("initial state %+v, want running with nothing pending", st)
	}
	for range 2 { // idempotent
		if st := mustSet(t, l, "p", ledger.JobPause, ""); !st.Paused {
			t.Fatalf("after pause: %+v", st)
		}
	}
	mustSet(t, l, "q", ledger.JobPause, "")
	if !stateOf(t, l, "p").Paused || !stateOf(t, l, "q").Paused {
		t.Fatal("JobStates does not show both jobs paused")
	}
	for range 2 {
		if st := mustSet(t, l, "p", ledger.JobResume, ""); st.Paused {
			t.Fatalf("after resume: %+v", st)
		}
	}
	if stateOf(t, l, "p").Paused || !stateOf(t, l, "q").Paused {
		t.Fatal("resuming p changed q, or did not resume p")
	}
}

func testTriggers(t *testing.T, l ledger.Ledger) {
	before := time.Now()
	mustSet(t, l, "j", ledger.JobTrigger, "t1")
	mustSet(t, l, "j", ledger.JobTrigger, "t1") // a repeated request is one request
	st := mustSet(t, l, "j", ledger.JobTrigger, "t2")
	if len(st.Triggers) != 2 || st.Triggers[0].ID != "t1" || st.Triggers[1].ID != "t2" {
		t.Fatalf("triggers %+v, want t1 then t2", st.Triggers)
	}
	for _, tr := range st.Triggers {
		if tr.At.Before(before.Add(-time.Minute)) || tr.At.After(time.Now().Add(time.Minute)) {
			t.Fatalf("trigger At = %v, want the store's now (about %v)", tr.At, before)
		}
	}
	if st.Triggers[1].At.Before(st.Triggers[0].At) {
		t.Fatalf("triggers out of order: %+v", st.Triggers)
	}
	got := stateOf(t, l, "j")
	if len(got.Triggers) != 2 || !got.Triggers[0].At.Equal(st.Triggers[0].At) {
		t.Fatalf("JobStates shows %+v, want %+v", got.Triggers, st.Triggers)
	}
	// The At a store returned claims the same key when passed back.
	res := mustClaim(t, l, claim("j", got.Triggers[0].At, "t1", "n1", "tok1"))
	res2 := mustClaim(t, l, claim("j", st.Triggers[0].At, "t1", "n2", "tok2"))
	if res[0] != nil {
		t.Fatal(res[0])
	}
	wantClaimed(t, "trigger claimed twice", res2[0], "n1")

	mustSet(t, l, "j", ledger.JobTriggerDone, "t1")
	mustSet(t, l, "j", ledger.JobTriggerDone, "t1")
	mustSet(t, l, "j", ledger.JobTriggerDone, "never-requested")
	if got := stateOf(t, l, "j"); len(got.Triggers) != 1 || got.Triggers[0].ID != "t2" {
		t.Fatalf("after done: %+v, want t2 pending", got.Triggers)
	}
	// Pausing keeps the pending triggers, and the other way round.
	mustSet(t, l, "j", ledger.JobPause, "")
	if got := stateOf(t, l, "j"); !got.Paused || len(got.Triggers) != 1 {
		t.Fatalf("paused with a trigger: %+v", got)
	}
	mustSet(t, l, "j", ledger.JobResume, "")

	// Prune drops requests older than TriggersOlderThan, and no others.
	time.Sleep(time.Second) // let the store's clock age t2
	mustSet(t, l, "j", ledger.JobTrigger, "t3")
	if _, err := l.Prune(ctxT(t, 10*time.Second), ledger.PruneParams{TriggersOlderThan: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := stateOf(t, l, "j"); len(got.Triggers) != 1 || got.Triggers[0].ID != "t3" {
		t.Fatalf("after prune: %+v, want t3 pending", got.Triggers)
	}
	mustSet(t, l, "j", ledger.JobTriggerDone, "t3")
	if got := stateOf(t, l, "j"); got.Paused || len(got.Triggers) != 0 {
		t.Fatalf("final state %+v, want the default", got)
	}
}

func testLedgerCancelled(t *testing.T, l ledger.Ledger) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := []ledger.ClaimParams{claim("c", tickN(0), "", "n1", "t1")}
	if _, err := l.Claim(ctx, p); err == nil {
		t.Error("Claim with a cancelled ctx succeeded")
	}
	if err := l.RecordRuns(ctx, []ledger.RunRecord{run("c", 0, 1, ledger.RunOK)}); err == nil {
		t.Error("RecordRuns with a cancelled ctx succeeded")
	}
	if _, err := l.Runs(ctx, ledger.RunQuery{}); err == nil {
		t.Error("Runs with a cancelled ctx succeeded")
	}
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: "c", Op: ledger.JobPause}); err == nil {
		t.Error("SetJobState with a cancelled ctx succeeded")
	}
	if _, err := l.JobStates(ctx); err == nil {
		t.Error("JobStates with a cancelled ctx succeeded")
	}
	if _, err := l.Jobs(ctx); err == nil {
		t.Error("Jobs with a cancelled ctx succeeded")
	}
	if _, err := l.Prune(ctx, ledger.PruneParams{}); err == nil {
		t.Error("Prune with a cancelled ctx succeeded")
	}
	// Nothing was claimed by the cancelled call.
	if res := mustClaim(t, l, p...); res[0] != nil {
		t.Fatalf("claim after a cancelled Claim: %v", res[0])
	}
}

package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// shardKeys renders records as job/tick/trigger/shard/attempt.
func shardKeys(rs []ledger.RunRecord) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%s/%d/%s/s%d/%d", r.Job, r.Tick.Sub(tick0)/time.Second, r.Trigger, r.Shard, r.Attempt)
	}
	return fmt.Sprint(out)
}

// testShardClaims: the shard is part of a claim's key. Every shard of a
// tick is claimed once under concurrency, shards of one tick never collide,
// and shard 0 is the unsharded claim.
func testShardClaims(t *testing.T, l ledger.Ledger) {
	const claimers, shards = 6, 16
	var (
		mu     sync.Mutex
		winner = make(map[int]string)
		wg     sync.WaitGroup
	)
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := fmt.Sprintf("tok%d", c)
			// Claimers of one parity ask for the even shards, the others
			// for the odd ones, each in its own order: a store that left
			// the shard out of the key would let one parity win nothing.
			var ps []ledger.ClaimParams
			for s := range shards {
				p := claim("sh", tickN(0), "", "n"+tok, tok)
				p.Shard = (s + c*5) % shards
				if p.Shard%2 == c%2 {
					ps = append(ps, p)
				}
			}
			res, err := l.Claim(ctxT(t, 10*time.Second), ps)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i, r := range res {
				switch {
				case r == nil:
					if w, ok := winner[ps[i].Shard]; ok {
						t.Errorf("shard %d claimed by %s and %s", ps[i].Shard, w, tok)
					}
					winner[ps[i].Shard] = tok
				case !errors.Is(r, ledger.ErrClaimed):
					t.Errorf("shard %d: %v", ps[i].Shard, r)
				}
			}
		}()
	}
	wg.Wait()
	if len(winner) != shards {
		t.Fatalf("%d of %d shards claimed: %v", len(winner), shards, winner)
	}
	// The winners hold their shards; another tick's shard 3 is free.
	p := claim("sh", tickN(0), "", "n-late", "late")
	p.Shard = 3
	q := claim("sh", tickN(1), "", "n-late", "late")
	q.Shard = 3
	res := mustClaim(t, l, p, q)
	wantClaimed(t, "shard 3 claimed again", res[0], "n"+winner[3])
	if res[1] != nil {
		t.Fatalf("shard 3 of another tick: %v", res[1])
	}
	// An out-of-range shard is refused by Check.
	bad := claim("sh", tickN(2), "", "n1", "tok")
	bad.Shard = ledger.MaxShards
	if err := bad.Check(); err == nil {
		t.Fatal("Check accepted Shard = MaxShards")
	}
}

// testShardRecords: records are kept per shard, replaced by the whole key,
// listed with shards ascending, and carry Shards.
func testShardRecords(t *testing.T, l ledger.Ledger) {
	var rs []ledger.RunRecord
	for s := range 3 {
		r := run("sr", 0, 1, ledger.RunRunning)
		r.Shard, r.Shards = 2-s, 3
		rs = append(rs, r)
	}
	unsharded := run("sr", 1, 1, ledger.RunOK)
	rs = append(rs, unsharded)
	mustRecord(t, l, rs...)
	// Shard 1 fails and is run again; shard 2 ends ok.
	f := run("sr", 0, 1, ledger.RunFailed)
	f.Shard, f.Shards = 1, 3
	again := run("sr", 0, 2, ledger.RunOK)
	again.Shard, again.Shards = 1, 3
	ok := run("sr", 0, 1, ledger.RunOK)
	ok.Shard, ok.Shards = 2, 3
	mustRecord(t, l, f, again, ok)

	got := mustRuns(t, l, ledger.RunQuery{Job: "sr"})
	want := "[sr/1//s0/1 sr/0//s0/1 sr/0//s1/2 sr/0//s1/1 sr/0//s2/1]"
	if g := shardKeys(got); g != want {
		t.Fatalf("listing:\n got  %s\n want %s", g, want)
	}
	for _, r := range got {
		wantShards := 3
		if r.Tick.Equal(tickN(1)) {
			wantShards = 0
		}
		if r.Shards != wantShards && !(wantShards == 0 && r.Shards == 1) {
			t.Fatalf("%s: Shards = %d, want %d", shardKeys([]ledger.RunRecord{r}), r.Shards, wantShards)
		}
	}
	st := map[string]ledger.RunStatus{}
	for _, r := range got {
		st[shardKeys([]ledger.RunRecord{r})] = r.Status
	}
	if st["[sr/0//s0/1]"] != ledger.RunRunning || st["[sr/0//s1/1]"] != ledger.RunFailed || st["[sr/0//s2/1]"] != ledger.RunOK {
		t.Fatalf("statuses after replace: %v", st)
	}
	// Pages continue after a key that has a shard.
	var paged []ledger.RunRecord
	var before *ledger.RunKey
	for range 10 {
		page := mustRuns(t, l, ledger.RunQuery{Job: "sr", Limit: 2, Before: before})
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		k := page[len(page)-1].Key()
		before = &k
	}
	if g := shardKeys(paged); g != want {
		t.Fatalf("paged listing:\n got  %s\n want %s", g, want)
	}
	// The running query sees the shard that is still running.
	if g := shardKeys(mustRuns(t, l, ledger.RunQuery{Status: ledger.RunRunning})); g != "[sr/0//s0/1]" {
		t.Fatalf("running records: %s", g)
	}
}

// testTriggerTicks: a trigger request carries the past tick to run and
// whether to run it again; a trigger-now carries neither.
func testTriggerTicks(t *testing.T, l ledger.Ledger) {
	ctx := ctxT(t, 10*time.Second)
	past := tickN(-3600)
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: "bf", Op: ledger.JobTrigger, Trigger: "b1", Tick: past}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: "bf", Op: ledger.JobTrigger, Trigger: "r1", Tick: past.Add(time.Minute), Rerun: true}); err != nil {
		t.Fatal(err)
	}
	mustSet(t, l, "bf", ledger.JobTrigger, "now1")
	got := stateOf(t, l, "bf").Triggers
	if len(got) != 3 {
		t.Fatalf("triggers %+v, want 3", got)
	}
	byID := map[string]ledger.TriggerRequest{}
	for _, tr := range got {
		byID[tr.ID] = tr
	}
	if tr := byID["b1"]; !tr.Tick.Equal(past) || tr.Rerun {
		t.Fatalf("backfill request %+v, want Tick %v and no Rerun", tr, past)
	}
	if tr := byID["r1"]; !tr.Tick.Equal(past.Add(time.Minute)) || !tr.Rerun {
		t.Fatalf("re-run request %+v, want Tick %v and Rerun", tr, past.Add(time.Minute))
	}
	if tr := byID["now1"]; !tr.Tick.IsZero() || tr.Rerun {
		t.Fatalf("trigger-now %+v, want no Tick and no Rerun", tr)
	}
	for _, id := range []string{"b1", "r1", "now1"} {
		mustSet(t, l, "bf", ledger.JobTriggerDone, id)
	}
	if got := stateOf(t, l, "bf").Triggers; len(got) != 0 {
		t.Fatalf("after done: %+v", got)
	}
	bad := ledger.JobStateParams{Job: "bf", Op: ledger.JobTrigger, Trigger: "x", Rerun: true}
	if err := bad.Check(); err == nil {
		t.Fatal("Check accepted Rerun without a Tick")
	}
}

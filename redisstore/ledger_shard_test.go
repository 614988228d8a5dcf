package redisstore

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/ledger"
)

// testLedgerLegacyData: claims, run records and trigger requests written
// before shards and past ticks existed, in the exact form that version
// wrote them, read back as shard 0 and trigger-now requests; and shard 0 is
// still written in that form, so nothing migrates.
func testLedgerLegacyData(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	us := strconv.FormatInt(ledgerTick.UnixMicro(), 10)
	at := strconv.FormatInt(ledgerTick.Add(time.Minute).UnixMicro(), 10)
	base := s.prefix + "ledger:{job:old}"
	// A claim of (old, tick, "") by token t1 on node n1.
	if err := c.Set(ctx, base+":claim:"+us+":", "2:t1"+at+":n1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	// A record of (old, tick, "", attempt 1): ok on n1 with fence 7.
	member := us + ":1:"
	if err := c.ZAdd(ctx, base+":runs", redis.Z{Score: float64(ledgerTick.UnixMicro()), Member: member}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, base+":recs", member, at+":2:ok2:n10:0:1:70:0:").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.SAdd(ctx, s.jobsKey(), "old").Err(); err != nil {
		t.Fatal(err)
	}
	// A pending trigger-now request t9 and a paused job.
	if err := c.HSet(ctx, s.stateKey(), "old", "1:"+at+":2:t9").Err(); err != nil {
		t.Fatal(err)
	}

	res, err := s.Claim(ctx, []ledger.ClaimParams{
		{Job: "old", Tick: ledgerTick, Node: "n2", Token: "t2", Retain: time.Hour},
		{Job: "old", Tick: ledgerTick, Shard: 1, Node: "n2", Token: "t2", Retain: time.Hour},
		{Job: "old", Tick: ledgerTick, Node: "n1", Token: "t1", Retain: time.Hour},
	})
	var ce *ledger.ClaimedError
	if err != nil || !errors.As(res[0], &ce) || ce.Node != "n1" || !ce.At.Equal(ledgerTick.Add(time.Minute)) || res[1] != nil || res[2] != nil {
		t.Fatalf("claims beside an old claim: %v, %v; want shard 0 held by n1 (again by t1), shard 1 free", res, err)
	}
	rs, err := s.Runs(ctx, ledger.RunQuery{Job: "old"})
	if err != nil || len(rs) != 1 {
		t.Fatalf("Runs of old = %+v, %v", rs, err)
	}
	if r := rs[0]; r.Shard != 0 || r.Shards != 0 || r.Attempt != 1 || r.Status != ledger.RunOK || r.Node != "n1" || r.Fence != 7 ||
		!r.Recorded.Equal(ledgerTick.Add(time.Minute)) || !r.Tick.Equal(ledgerTick) {
		t.Fatalf("old record read as %+v", r)
	}
	sts, err := s.JobStates(ctx)
	if err != nil || len(sts) != 1 || !sts[0].Paused || len(sts[0].Triggers) != 1 {
		t.Fatalf("JobStates = %+v, %v", sts, err)
	}
	if tr := sts[0].Triggers[0]; tr.ID != "t9" || !tr.Tick.IsZero() || tr.Rerun || !tr.At.Equal(ledgerTick.Add(time.Minute)) {
		t.Fatalf("old trigger request read as %+v", tr)
	}

	// Shard 0 is written as before: the same keys, members and values.
	if _, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "new", Tick: ledgerTick, Trigger: "tr", Node: "n", Token: "t", Retain: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, s.prefix+"ledger:{job:new}:claim:"+us+":tr").Result(); err != nil || n != 1 {
		t.Fatalf("shard 0's claim is not at the old key: %d, %v", n, err)
	}
	r := ledger.RunRecord{Job: "new", Tick: ledgerTick, Attempt: 1, Node: "n1", Fence: 7, Status: ledger.RunOK}
	sharded := r
	sharded.Shard, sharded.Shards = 2, 3
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r, sharded}); err != nil {
		t.Fatal(err)
	}
	recs, err := c.HGetAll(ctx, s.prefix+"ledger:{job:new}:recs").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9]+:2:ok2:n10:0:1:70:0:$`).MatchString(recs[us+":1:"]) {
		t.Fatalf("shard 0's record is not stored as before: %q", recs)
	}
	if _, ok := recs[us+"/2:1:"]; !ok || len(recs) != 2 {
		t.Fatalf("records %q, want shard 2's under %q", recs, us+"/2:1:")
	}
	// The state hash keeps a trigger-now as before.
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "new", Op: ledger.JobTrigger, Trigger: "now"}); err != nil {
		t.Fatal(err)
	}
	v, err := c.HGet(ctx, s.stateKey(), "new").Result()
	if err != nil || !regexp.MustCompile(`^0:[0-9]+:3:now$`).MatchString(v) {
		t.Fatalf("trigger-now stored as %q, %v; want 0:at:3:now", v, err)
	}
}

// testLedgerShardKeys: the shards and triggers of one tick are distinct
// claims and records, whatever bytes the triggers hold.
func testLedgerShardKeys(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	triggers := []string{"", "x", "/3:x", "3:x", ":", "/", "/3", "3"}
	shards := []int{0, 3, 13, ledger.MaxShards - 1}
	var ps []ledger.ClaimParams
	var rs []ledger.RunRecord
	for i, trig := range triggers {
		for _, sh := range shards {
			tok := fmt.Sprintf("t%d/%d", i, sh)
			ps = append(ps, ledger.ClaimParams{Job: "j", Tick: ledgerTick, Trigger: trig, Shard: sh, Node: tok, Token: tok, Retain: time.Hour})
			rs = append(rs, ledger.RunRecord{Job: "j", Tick: ledgerTick, Trigger: trig, Shard: sh, Shards: ledger.MaxShards, Attempt: 1, Node: tok, Status: ledger.RunOK})
		}
	}
	res, err := s.Claim(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if e != nil {
			t.Fatalf("claim %q shard %d collided: %v", ps[i].Trigger, ps[i].Shard, e)
		}
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Runs(ctx, ledger.RunQuery{Job: "j"})
	if err != nil || len(got) != len(rs) {
		t.Fatalf("Runs = %d records, %v; want %d", len(got), err, len(rs))
	}
	for _, r := range got {
		if r.Node != fmt.Sprintf("t%d/%d", indexOf(triggers, r.Trigger), r.Shard) || r.Shards != ledger.MaxShards {
			t.Fatalf("record %+v read back under another key", r)
		}
	}
	bad := ledger.RunRecord{Job: "j", Tick: ledgerTick, Shard: -1, Attempt: 1, Status: ledger.RunOK}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{bad}); err == nil {
		t.Fatal("RecordRuns stored Shard -1")
	}
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// testLedgerPruneKeepsTicks: pruning old trigger requests rewrites the
// job's state and keeps the others' Tick and Rerun.
func testLedgerPruneKeepsTicks(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	// A request received in 2020, in the form of the version before
	// backfills.
	old := strconv.FormatInt(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(), 10)
	if err := c.HSet(ctx, s.stateKey(), "bf", "0:"+old+":3:old").Err(); err != nil {
		t.Fatal(err)
	}
	past := ledgerTick.Add(-time.Hour)
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "bf", Op: ledger.JobTrigger, Trigger: "re", Tick: past, Rerun: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "bf", Op: ledger.JobTrigger, Trigger: "fill", Tick: past.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Prune(ctx, ledger.PruneParams{TriggersOlderThan: time.Hour})
	if err != nil || res.Triggers != 1 {
		t.Fatalf("Prune = %+v, %v; want 1 trigger request deleted", res, err)
	}
	sts, err := s.JobStates(ctx)
	if err != nil || len(sts) != 1 || len(sts[0].Triggers) != 2 {
		t.Fatalf("JobStates after prune = %+v, %v", sts, err)
	}
	re, fill := sts[0].Triggers[0], sts[0].Triggers[1]
	if re.ID != "re" || !re.Tick.Equal(past) || !re.Rerun || fill.ID != "fill" || !fill.Tick.Equal(past.Add(time.Minute)) || fill.Rerun {
		t.Fatalf("requests after prune: %+v", sts[0].Triggers)
	}
}

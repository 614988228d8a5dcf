package redisstore

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
)

// TestLedgerClaimArgs: a batch of claims with one token, node and
// retention (one scheduler's pass) sends the three once, not once per
// claim; a batch that mixes them still claims each with its own.
func TestLedgerClaimArgs(t *testing.T) {
	t.Parallel()
	d := singleDeployment(t)
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	hook := &countHook{}
	c.AddHook(hook)
	claim := func(job string, k int, node, token string, retain time.Duration) ledger.ClaimParams {
		return ledger.ClaimParams{Job: job, Tick: ledgerTick.Add(time.Duration(k) * time.Second), Node: node, Token: token, Retain: retain}
	}
	var pass []ledger.ClaimParams
	for k := range 5 {
		pass = append(pass, claim("a", k, "n1", "t1", time.Hour))
	}
	res, err := s.Claim(ctx, pass)
	if err != nil || len(res) != 5 {
		t.Fatalf("Claim = %v, %v", res, err)
	}
	for i, e := range res {
		if e != nil {
			t.Fatalf("claim %d: %v", i, e)
		}
	}
	if len(hook.shaArgs) != 1 {
		t.Fatalf("%d EVALSHAs, want 1", len(hook.shaArgs))
	}
	// evalsha, sha, numkeys, 5 keys, then ARGV.
	if args := hook.shaArgs[0]; len(args) != 3+5+3 || args[8] != "t1" || args[9] != "n1" || args[10] != int64(3600000) {
		t.Fatalf("EVALSHA args %v: want token, node and retention once", args)
	}

	mixed := []ledger.ClaimParams{
		claim("a", 0, "n1", "t1", time.Hour),   // held by t1 already
		claim("a", 1, "n2", "t2", time.Hour),   // held by t1: n1 has it
		claim("a", 9, "n2", "t2", time.Minute), // free
		claim("b", 0, "n1", "t1", time.Second), // free
	}
	res, err = s.Claim(ctx, mixed)
	var ce *ledger.ClaimedError
	if err != nil || res[0] != nil || !errors.As(res[1], &ce) || ce.Node != "n1" || res[2] != nil || res[3] != nil {
		t.Fatalf("mixed Claim = %v, %v; want nil, claimed by n1, nil, nil", res, err)
	}
	for i, want := range []time.Duration{time.Minute, time.Second} {
		p := mixed[2+i]
		ttl, err := c.PTTL(ctx, s.claimKey(p.Job, micros(p.Tick), "", 0)).Result()
		if err != nil || ttl <= 0 || ttl > want {
			t.Fatalf("claim %d's PTTL = %v, %v; want its own retention %v", 2+i, ttl, err, want)
		}
	}
	for i, p := range mixed[2:] {
		v, err := c.Get(ctx, s.claimKey(p.Job, micros(p.Tick), "", 0)).Result()
		if err != nil || !strings.HasPrefix(v, "2:"+p.Token) || !strings.HasSuffix(v, ":"+p.Node) {
			t.Fatalf("claim %d's value = %q, %v; want its own token and node", 2+i, v, err)
		}
	}
}

// TestLedgerClaimBeforeSetNXGet: where SET does not take NX and GET
// together (Redis before 7.0, a syntax error), the claim script falls back
// to SET NX and GET, with the same replies.
func TestLedgerClaimBeforeSetNXGet(t *testing.T) {
	t.Parallel()
	d := singleDeployment(t)
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	// The same script with an option this server rejects as a syntax
	// error, as Redis 6 rejects GET beside NX.
	src := strings.Replace(ledgerClaimSrc, "'NX', 'GET',", "'NX', 'NOTANOPTION',", 1)
	if src == ledgerClaimSrc {
		t.Fatal("ledger_claim.lua has no SET NX GET")
	}
	old := newLuaScript(src)
	held := s.claimKey("j", 1, "", 0)
	if _, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "j", Tick: time.UnixMicro(1), Node: "n1", Token: "t1", Retain: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Get(ctx, held).Result()
	if err != nil {
		t.Fatal(err)
	}
	free := s.claimKey("j", 2, "", 0)
	res, err := old.Eval(ctx, c, []string{held, free}, "t2", "n2", 60000).Slice()
	if err != nil || len(res) != 2 || res[0] != v || res[1] != int64(1) {
		t.Fatalf("fallback claims = %v, %v; want %q, 1", res, err, v)
	}
	res, err = old.Eval(ctx, c, []string{held, free}, "t1", "n1", 60000, "t2", "n2", 60000).Slice()
	if err != nil || len(res) != 2 || res[0] != int64(1) || res[1] != int64(1) {
		t.Fatalf("fallback claims again by their holders = %v, %v; want 1, 1", res, err)
	}
	// Any other error is the call's, as before.
	if err := c.HSet(ctx, s.claimKey("j", 3, "", 0), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []*luaScript{claimScript, old} {
		err := sc.Eval(ctx, c, []string{s.claimKey("j", 3, "", 0)}, "t1", "n1", 60000).Err()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("a claim on a hash: %v, want WRONGTYPE", err)
		}
	}
}

// TestLedgerRecordCommands: a new run record costs its script an HSETNX
// and two ZADDs, no HGET; writing it again (its outcome after its running
// record) an HSETNX, an HGET, an HSET and the ZADD of its record time,
// not the runs index's again.
func TestLedgerRecordCommands(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	c := closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	rec := func(job string, st ledger.RunStatus) ledger.RunRecord {
		return ledger.RunRecord{Job: job, Tick: ledgerTick, Attempt: 1, Node: "n1", Fence: 3,
			Start: ledgerTick.Add(time.Millisecond), Status: st}
	}
	// Warm the script cache, so the counts below are of EVALSHA alone.
	if err := s.RecordRuns(ctx, []ledger.RunRecord{rec("warm", ledger.RunOK)}); err != nil {
		t.Fatal(err)
	}
	stats := func() map[string]int {
		t.Helper()
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, l := range strings.Split(info, "\r\n") {
			name, rest, ok := strings.Cut(l, ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(calls)
		}
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	stats()
	jobs := []string{"a", "b", "c"}
	var rs []ledger.RunRecord
	for _, j := range jobs {
		rs = append(rs, rec(j, ledger.RunRunning))
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if got := stats(); got["hget"] != 0 || got["hsetnx"] != 3 || got["hset"] != 0 || got["zadd"] != 6 {
		t.Fatalf("new records: %v; want hsetnx 3, zadd 6, no hget or hset", got)
	}
	for i := range rs {
		rs[i].Status, rs[i].End = ledger.RunOK, ledgerTick.Add(time.Second)
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if got := stats(); got["hget"] != 3 || got["hsetnx"] != 3 || got["hset"] != 3 || got["zadd"] != 3 {
		t.Fatalf("records written again: %v; want hsetnx 3, hget 3, hset 3, zadd 3", got)
	}
	for _, j := range jobs {
		got, err := s.Runs(ctx, ledger.RunQuery{Job: j})
		if err != nil || len(got) != 1 || got[0].Status != ledger.RunOK || !got[0].End.Equal(ledgerTick.Add(time.Second)) {
			t.Fatalf("Runs of %s = %+v, %v; want its ok record", j, got, err)
		}
	}
	st, err := s.RunStats(ctx, ledger.StatsQuery{From: ledgerTick, To: ledgerTick.Add(time.Hour), Bucket: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Buckets) != 1 || len(st.Buckets[0].Counts) != 1 || st.Buckets[0].Counts[ledger.RunOK] != 3+1 {
		t.Fatalf("RunStats = %+v; want 4 ok (3 and the warm-up's), nothing else", st)
	}
}

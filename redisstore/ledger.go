package redisstore

import (
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Ledger = (*Store)(nil)

//go:embed ledger_claim.lua
var ledgerClaimSrc string

//go:embed ledger_record.lua
var ledgerRecordSrc string

//go:embed ledger_runs.lua
var ledgerRunsSrc string

//go:embed ledger_prune.lua
var ledgerPruneSrc string

//go:embed ledger_state.lua
var ledgerStateSrc string

//go:embed ledger_register.lua
var ledgerRegisterSrc string

var (
	claimScript    = newLuaScript(ledgerClaimSrc)
	recordScript   = newLuaScript(ledgerRollupSrc + ledgerRecordSrc)
	runsScript     = newLuaScript(ledgerRunsSrc)
	pruneScript    = newLuaScript(ledgerPruneSrc)
	stateScript    = newLuaScript(ledgerStateSrc)
	registerScript = newLuaScript(ledgerRegisterSrc)
)

// The ledger's keys. A job's keys share the hash tag "job:"+job (never
// empty, whatever the job's name), so one script can touch them all on a
// Cluster; they start with Prefix+"ledger:", so no lock key (Prefix+"{")
// is ever one of them and Leases never lists them.

// jobBase returns the start of every key of job: Prefix+"ledger:{job:"+job+"}".
func (s *Store) jobBase(job string) string {
	return s.prefix + "ledger:{job:" + job + "}"
}

// claimKey returns the key of the claim of (job, tick, trigger, shard),
// tick in unix microseconds: ...:claim:tick:trigger for shard 0 (the key of
// every claim made before shards existed) and ...:claim:tick/shard:trigger
// for the others. The tick is digits, so what follows them tells the two
// forms apart whatever the trigger holds.
func (s *Store) claimKey(job string, tick int64, trigger string, shard int) string {
	return s.jobBase(job) + ":claim:" + tickShard(tick, shard) + ":" + trigger
}

// tickShard returns tick in unix microseconds, followed by "/"+shard when
// shard is not 0: the start of a claim's key and of a run member.
func tickShard(tick int64, shard int) string {
	t := strconv.FormatInt(tick, 10)
	if shard == 0 {
		return t
	}
	return t + "/" + strconv.Itoa(shard)
}

// runKeys returns job's runs index, records hash and record-time index.
func (s *Store) runKeys(job string) (runs, recs, recorded string) {
	b := s.jobBase(job)
	return b + ":runs", b + ":recs", b + ":recorded"
}

// jobsKey is the set of the jobs that ever recorded a run.
func (s *Store) jobsKey() string { return s.prefix + "ledger:jobs" }

// runningKey is the set of the running records (ledger.RunRunning), as job
// + "\x00" + run member: the sweep every scheduler makes every few seconds
// reads them without reading every job's history. It may hold members whose
// record is no longer running (Runs drops those), never lack one whose
// record is running: RecordRuns adds a member in the pipeline before the
// record's script, and removes it only with a final record.
func (s *Store) runningKey() string { return s.prefix + "ledger:running" }

func runningMember(job, member string) string { return job + "\x00" + member }

// stateKey is the hash of job states (paused, pending trigger requests).
func (s *Store) stateKey() string { return s.prefix + "ledger:state" }

// specsKey is the hash of job registrations (spec, since); see
// ledger_register.lua.
func (s *Store) specsKey() string { return s.prefix + "ledger:specs" }

// ledgerErr wraps err as the error of ledger operation op.
func ledgerErr(op string, err error) error {
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// micros is t as unix microseconds, the unit of every time the ledger
// keeps.
func micros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros is the UTC time of unix microseconds us.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// Claim implements ledger.Ledger. It runs ledger_claim.lua once per Cluster
// hash slot (or per 500 claims on one node), all in one pipeline: one round
// trip per node. Each claim is a key with a PX expiry of its Retain, set
// by Redis, so expired claims go by themselves.
func (s *Store) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("claim", err)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ps))
	for i, p := range ps {
		if err := p.Check(); err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		keys[i] = s.claimKey(p.Job, micros(p.Tick), p.Trigger, p.Shard)
	}
	calls := s.groupCalls(claimScript, len(ps), func(i int) string { return keys[i] })
	for _, c := range calls {
		c.keys = make([]string, len(c.idx))
		for j, i := range c.idx {
			c.keys[j] = keys[i]
		}
		c.args = claimArgs(ps, c.idx)
	}
	op := fmt.Sprintf("claim %d ticks", len(ps))
	if err := s.runCalls(ctx, calls, nil); err != nil {
		return nil, ledgerErr(op, err)
	}
	out := make([]error, len(ps))
	for _, c := range calls {
		res, err := c.cmd.Slice()
		if err != nil {
			return nil, ledgerErr(op, err)
		}
		if len(res) != len(c.idx) {
			return nil, ledgerErr(op, fmt.Errorf("%d results for %d claims", len(res), len(c.idx)))
		}
		for j, r := range res {
			if v, ok := r.(string); ok {
				out[c.idx[j]] = parseClaim(v)
			}
		}
	}
	return out, nil
}

// claimArgs returns the ARGV of ledger_claim.lua for the claims idx of ps:
// token, node and retention once when every one of them has the same
// three (the scheduler's case: one node's pass), else three per claim.
func claimArgs(ps []ledger.ClaimParams, idx []int) []any {
	p0 := &ps[idx[0]]
	same := true
	for _, i := range idx[1:] {
		if p := &ps[i]; p.Token != p0.Token || p.Node != p0.Node || millis(p.Retain) != millis(p0.Retain) {
			same = false
			break
		}
	}
	if same {
		return []any{p0.Token, p0.Node, millis(p0.Retain)}
	}
	args := make([]any, 0, 3*len(idx))
	for _, i := range idx {
		args = append(args, ps[i].Token, ps[i].Node, millis(ps[i].Retain))
	}
	return args
}

// parseClaim turns a claim's value, #token:token at:node, into the
// *ledger.ClaimedError for it; the fields it cannot read stay zero.
func parseClaim(v string) *ledger.ClaimedError {
	ce := &ledger.ClaimedError{}
	i := strings.IndexByte(v, ':')
	if i < 0 {
		return ce
	}
	n, err := strconv.Atoi(v[:i])
	if err != nil || n < 0 || i+1+n > len(v) {
		return ce
	}
	rest := v[i+1+n:]
	j := strings.IndexByte(rest, ':')
	if j < 0 {
		return ce
	}
	if at, err := strconv.ParseInt(rest[:j], 10, 64); err == nil {
		ce.At = fromMicros(at)
	}
	ce.Node = rest[j+1:]
	return ce
}

// A run record is kept as the field runMember(key) of the job's records
// hash, its value at:body, where at is when Redis recorded it and body
// holds the fields not in the member, each as len:bytes (appendField):
// status first (ledger_runs.lua reads it), then node, error, output, fence,
// start and end (times in unix microseconds, "" when zero), and Shards
// when it is not 0. Records written before shards existed have seven
// fields and read back with Shards 0.

// runMember returns the member of a run in its job's keys:
// tick:attempt:trigger for shard 0 (as every record written before shards
// existed) and tick/shard:attempt:trigger for the others, tick in unix
// microseconds.
func runMember(tick time.Time, shard, attempt int, trigger string) string {
	return tickShard(micros(tick), shard) + ":" + strconv.Itoa(attempt) + ":" + trigger
}

func appendField(b []byte, f string) []byte {
	b = strconv.AppendInt(b, int64(len(f)), 10)
	b = append(b, ':')
	return append(b, f...)
}

func timeField(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(micros(t), 10)
}

// encodeRun returns the body of r's record.
func encodeRun(r *ledger.RunRecord) string {
	b := make([]byte, 0, 64+len(r.Node)+len(r.Error)+len(r.Output))
	b = appendField(b, string(r.Status))
	b = appendField(b, r.Node)
	b = appendField(b, r.Error)
	b = appendField(b, r.Output)
	b = appendField(b, strconv.FormatUint(r.Fence, 10))
	b = appendField(b, timeField(r.Start))
	b = appendField(b, timeField(r.End))
	if r.Shards != 0 {
		b = appendField(b, strconv.Itoa(r.Shards))
	}
	return string(b)
}

// errRecord is returned for a stored record this version cannot read.
var errRecord = errors.New("malformed run record")

// parseRunMember reads the key of job's record stored as member
// (runMember).
func parseRunMember(job, member string) (ledger.RunKey, error) {
	k := ledger.RunKey{Job: job}
	parts := strings.SplitN(member, ":", 3)
	if len(parts) != 3 {
		return k, errRecord
	}
	ts, sh, sharded := strings.Cut(parts[0], "/")
	tick, err1 := strconv.ParseInt(ts, 10, 64)
	attempt, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return k, errRecord
	}
	if sharded {
		n, err := strconv.Atoi(sh)
		if err != nil || n <= 0 {
			return k, errRecord
		}
		k.Shard = n
	}
	k.Tick, k.Attempt, k.Trigger = fromMicros(tick), attempt, parts[2]
	return k, nil
}

// decodeRun reads the record of job stored as member with value v.
func decodeRun(job, member, v string) (ledger.RunRecord, error) {
	r := ledger.RunRecord{Job: job}
	k, err := parseRunMember(job, member)
	at, body, ok := strings.Cut(v, ":")
	recorded, err3 := strconv.ParseInt(at, 10, 64)
	if err != nil || err3 != nil || !ok {
		return r, errRecord
	}
	r.Tick, r.Shard, r.Attempt, r.Trigger, r.Recorded = k.Tick, k.Shard, k.Attempt, k.Trigger, fromMicros(recorded)
	var f [8]string
	for i := range f {
		if i == 7 && body == "" {
			break // written without Shards
		}
		n, rest, ok := strings.Cut(body, ":")
		l, err := strconv.Atoi(n)
		if !ok || err != nil || l < 0 || l > len(rest) {
			return r, errRecord
		}
		f[i], body = rest[:l], rest[l:]
	}
	if f[7] != "" {
		n, err := strconv.Atoi(f[7])
		if err != nil || n < 0 {
			return r, errRecord
		}
		r.Shards = n
	}
	r.Status, r.Node, r.Error, r.Output = ledger.RunStatus(f[0]), f[1], f[2], f[3]
	fence, err := strconv.ParseUint(f[4], 10, 64)
	if err != nil {
		return r, errRecord
	}
	r.Fence = fence
	for i, t := range []*time.Time{&r.Start, &r.End} {
		if f[5+i] == "" {
			continue
		}
		us, err := strconv.ParseInt(f[5+i], 10, 64)
		if err != nil {
			return r, errRecord
		}
		*t = fromMicros(us)
	}
	return r, nil
}

// RecordRuns implements ledger.Ledger. It runs ledger_record.lua once per
// Cluster hash slot (or per 500 records on one node) and adds the jobs to
// the jobs set, all in one pipeline: one round trip per node. Recorded is
// Redis's TIME. The script keeps the per-minute rollups of RunStats too,
// but on a Cluster, where they are in another hash slot: there it returns
// the changes, which ledger_stats.lua applies in a second round trip.
func (s *Store) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return ledgerErr("record runs", err)
	}
	if len(rs) == 0 {
		return nil
	}
	seen := make(map[string]bool, 1)
	jobs := make([]any, 0, 1)
	for i := range rs {
		if rs[i].Job == "" || rs[i].Tick.IsZero() {
			return errors.New("redisstore: record runs: empty Job or zero Tick")
		}
		if rs[i].Shard < 0 || rs[i].Shard >= ledger.MaxShards {
			return fmt.Errorf("redisstore: record run %q: Shard %d is not in [0, %d)", rs[i].Job, rs[i].Shard, ledger.MaxShards)
		}
		if !seen[rs[i].Job] {
			seen[rs[i].Job] = true
			jobs = append(jobs, rs[i].Job)
		}
	}
	calls := s.groupCalls(recordScript, len(rs), func(i int) string { return s.jobBase(rs[i].Job) })
	for _, c := range calls {
		c.keys = make([]string, 0, 3*len(c.idx)+1)
		c.args = make([]any, 0, 1+3*len(c.idx))
		c.args = append(c.args, int64(RollupRetention/time.Second))
		h := rollupHours{base: 3 * len(c.idx)}
		for _, i := range c.idx {
			r := &rs[i]
			runs, recs, recorded := s.runKeys(r.Job)
			c.keys = append(c.keys, runs, recs, recorded)
			x := int64(0) // on a Cluster the rollups are in another slot: the script returns the changes
			if s.cluster == nil {
				x = h.add(s, r)
			}
			c.args = append(c.args, runMember(r.Tick, r.Shard, r.Attempt, r.Trigger), encodeRun(r), x)
		}
		if s.cluster == nil {
			c.keys = append(c.keys, h.keys...)
		}
	}
	var running, ended []any
	for i := range rs {
		m := runningMember(rs[i].Job, runMember(rs[i].Tick, rs[i].Shard, rs[i].Attempt, rs[i].Trigger))
		if rs[i].Status == ledger.RunRunning {
			running = append(running, m)
		} else {
			ended = append(ended, m)
		}
	}
	op := fmt.Sprintf("record %d runs", len(rs))
	var side []*redis.IntCmd
	err := s.runCalls(ctx, calls, func(pipe redis.Pipeliner) {
		side = append(side, pipe.SAdd(ctx, s.jobsKey(), jobs...))
		if len(running) > 0 {
			side = append(side, pipe.SAdd(ctx, s.runningKey(), running...))
		}
	})
	for _, c := range side {
		if err == nil {
			err = c.Err()
		}
	}
	for _, c := range calls {
		if err == nil {
			err = c.cmd.Err()
		}
	}
	if err == nil && s.cluster != nil {
		err = s.recordRollups(ctx, rs, calls)
	}
	if err == nil && len(ended) > 0 {
		// After the records, once they all succeeded: a member goes only
		// once its record is final.
		err = s.client.SRem(ctx, s.runningKey(), ended...).Err()
	}
	if err != nil {
		return ledgerErr(op, err)
	}
	return nil
}

// recordRollups applies to the rollups, on a Cluster, the changes the
// record calls returned: one ledger_stats.lua call for them all.
func (s *Store) recordRollups(ctx context.Context, rs []ledger.RunRecord, calls []*scriptCall) error {
	var changes []rollupChange
	for _, c := range calls {
		res, err := c.cmd.Slice()
		if err != nil {
			return err
		}
		for j := 0; j+1 < len(res); j += 2 {
			i, ok1 := res[j].(int64)
			was, ok2 := res[j+1].(string)
			if !ok1 || !ok2 || i < 1 || int(i) > len(c.idx) {
				return fmt.Errorf("the record script returned %v", res)
			}
			changes = append(changes, rollupChange{&rs[c.idx[i-1]], was})
		}
	}
	if len(changes) == 0 {
		return nil
	}
	rc := s.rollupCall(changes)
	if err := s.runCalls(ctx, []*scriptCall{rc}, nil); err != nil {
		return err
	}
	return rc.cmd.Err()
}

// Runs implements ledger.Ledger. With q.Job it runs ledger_runs.lua on the
// job's keys: one round trip. Without, it reads the jobs set and then runs
// the script for every job in one pipeline: two round trips (per node).
// The script filters by tick range and status at the server and returns
// no more than q.Limit records per job plus the rest of the last tick it
// reached; the store merges, sorts and cuts.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("runs", err)
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("redisstore: runs: negative Limit %d", q.Limit)
	}
	if q.Status == ledger.RunRunning && q.Job == "" {
		return s.runningRuns(ctx, q)
	}
	jobs := []string{q.Job}
	if q.Job == "" {
		var err error
		if jobs, err = s.client.SMembers(ctx, s.jobsKey()).Result(); err != nil {
			return nil, ledgerErr("runs", err)
		}
	}
	out, err := s.jobsRuns(ctx, jobs, q)
	if err != nil {
		return nil, ledgerErr("runs", err)
	}
	slices.SortFunc(out, func(a, b ledger.RunRecord) int { return a.Key().Compare(b.Key()) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// jobsRuns reads the records that q selects of each job of jobs, in one
// pipeline of runsScript calls, each job's in Runs' order.
func (s *Store) jobsRuns(ctx context.Context, jobs []string, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	args := runsArgs(&q)
	calls := make([]*scriptCall, len(jobs))
	for i, job := range jobs {
		runs, recs, _ := s.runKeys(job)
		calls[i] = &scriptCall{script: runsScript, keys: []string{runs, recs}, args: args}
	}
	if err := s.runCalls(ctx, calls, nil); err != nil {
		return nil, err
	}
	var out []ledger.RunRecord
	for i, c := range calls {
		res, err := c.cmd.StringSlice()
		if err != nil {
			return nil, err
		}
		for j := 0; j+1 < len(res); j += 2 {
			r, err := decodeRun(jobs[i], res[j], res[j+1])
			if err != nil {
				return nil, fmt.Errorf("job %q, run %q: %w", jobs[i], res[j], err)
			}
			if q.Before == nil || r.Key().Compare(*q.Before) > 0 {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// runningRuns is Runs for every job's running records: it reads the
// members of runningKey and then those records, one HMGET per job, and
// drops the members whose record is gone or final.
func (s *Store) runningRuns(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	members, err := s.client.SMembers(ctx, s.runningKey()).Result()
	if err != nil {
		return nil, ledgerErr("runs", err)
	}
	byJob := map[string][]string{}
	var stale []any
	for _, m := range members {
		job, member, ok := strings.Cut(m, "\x00")
		if !ok {
			stale = append(stale, m)
			continue
		}
		byJob[job] = append(byJob[job], member)
	}
	jobs := slices.Sorted(maps.Keys(byJob))
	cmds := make([]*redis.SliceCmd, len(jobs))
	if len(jobs) > 0 {
		pipe := s.client.Pipeline()
		for i, job := range jobs {
			_, recs, _ := s.runKeys(job)
			cmds[i] = pipe.HMGet(ctx, recs, byJob[job]...)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, ledgerErr("runs", err)
		}
	}
	var out []ledger.RunRecord
	for i, job := range jobs {
		vs, err := cmds[i].Result()
		if err != nil {
			return nil, ledgerErr("runs", err)
		}
		for j, v := range vs {
			member := byJob[job][j]
			text, ok := v.(string)
			if !ok {
				stale = append(stale, runningMember(job, member))
				continue
			}
			r, err := decodeRun(job, member, text)
			if err != nil {
				return nil, ledgerErr("runs", fmt.Errorf("job %q, run %q: %w", job, member, err))
			}
			if r.Status != ledger.RunRunning {
				stale = append(stale, runningMember(job, member))
				continue
			}
			if q.Matches(&r) {
				out = append(out, r)
			}
		}
	}
	if len(stale) > 0 {
		// Best effort: a member left behind costs a read at the next sweep.
		_ = s.client.SRem(ctx, s.runningKey(), stale...).Err()
	}
	slices.SortFunc(out, func(a, b ledger.RunRecord) int { return a.Key().Compare(b.Key()) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// runsArgs returns ledger_runs.lua's arguments for q.
func runsArgs(q *ledger.RunQuery) []any {
	hi, lo, uncounted := "+inf", "-inf", ""
	if !q.To.IsZero() {
		hi = "(" + strconv.FormatInt(micros(q.To), 10)
	}
	if q.Before != nil {
		b := micros(q.Before.Tick)
		if q.To.IsZero() || b < micros(q.To) {
			hi = strconv.FormatInt(b, 10)
		}
		uncounted = strconv.FormatInt(b, 10)
	}
	if !q.From.IsZero() {
		lo = strconv.FormatInt(micros(q.From), 10)
	}
	return []any{hi, lo, string(q.Status), q.Limit, uncounted}
}

// stateOps names the JobStateOps for ledger_state.lua.
var stateOps = map[ledger.JobStateOp]string{
	ledger.JobPause:       "pause",
	ledger.JobResume:      "resume",
	ledger.JobTrigger:     "trigger",
	ledger.JobCancel:      "trigger",
	ledger.JobTriggerDone: "done",
}

// SetJobState implements ledger.Ledger in one pipeline: ledger_state.lua
// changes the job's field of the state hash and returns the new state, and
// an HMGET reads the job's registration; for JobRegister,
// ledger_register.lua changes the registration and an HMGET reads the
// state; JobForget is an HDEL of each. On a Cluster the two hashes may be
// on two nodes: one round trip to each. A trigger request's At is Redis's
// TIME; Since is kept in microseconds.
func (s *Store) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobState{}, ledgerErr("set job state", err)
	}
	if err := p.Check(); err != nil {
		return ledger.JobState{}, fmt.Errorf("redisstore: %w", err)
	}
	what := fmt.Sprintf("set job state %q", p.Job)
	if p.Op == ledger.JobForget {
		pipe := s.client.Pipeline()
		dels := []*redis.IntCmd{pipe.HDel(ctx, s.stateKey(), p.Job), pipe.HDel(ctx, s.specsKey(), p.Job)}
		err := execPipe(ctx, pipe)
		for _, d := range dels {
			if err == nil {
				err = d.Err()
			}
		}
		if err != nil {
			return ledger.JobState{}, ledgerErr(what, err)
		}
		return ledger.JobState{Job: p.Job}, nil
	}
	var (
		call  *scriptCall
		other *redis.SliceCmd
		state func() (string, error) // the state hash's field
		spec  func() (string, error) // the registration hash's field
	)
	if p.Op == ledger.JobRegister {
		call = &scriptCall{script: registerScript, keys: []string{s.specsKey()},
			args: []any{p.Job, p.Spec, micros(p.Since)}}
		state = func() (string, error) { return fieldOrDefault(other, "0") }
		spec = func() (string, error) { return call.cmd.Text() }
	} else {
		call = &scriptCall{script: stateScript, keys: []string{s.stateKey()},
			args: []any{stateOps[p.Op], p.Job, p.Trigger, triggerTick(&p)}}
		state = func() (string, error) { return call.cmd.Text() }
		spec = func() (string, error) { return fieldOrDefault(other, "") }
	}
	err := s.runCalls(ctx, []*scriptCall{call}, func(pipe redis.Pipeliner) {
		if p.Op == ledger.JobRegister {
			other = pipe.HMGet(ctx, s.stateKey(), p.Job)
		} else {
			other = pipe.HMGet(ctx, s.specsKey(), p.Job)
		}
	})
	if err != nil {
		return ledger.JobState{}, ledgerErr(what, err)
	}
	sv, err := state()
	if err != nil {
		return ledger.JobState{}, ledgerErr(what, err)
	}
	st, err := decodeState(p.Job, sv)
	if err != nil {
		return ledger.JobState{}, ledgerErr(what, err)
	}
	rv, err := spec()
	if err == nil {
		err = decodeSpec(&st, rv)
	}
	if err != nil {
		return ledger.JobState{}, ledgerErr(what, err)
	}
	return st, nil
}

// fieldOrDefault returns the value an HMGET of one field read, or def when
// the field does not exist. (HMGET rather than HGET: when a pipeline's
// first command fails, as HGET of a missing field does with redis.Nil,
// go-redis sets that error on every command of the pipeline.)
func fieldOrDefault(c *redis.SliceCmd, def string) (string, error) {
	vs, err := c.Result()
	if err != nil {
		return "", err
	}
	if len(vs) != 1 {
		return "", fmt.Errorf("HMGET returned %d values for one field", len(vs))
	}
	switch v := vs[0].(type) {
	case nil:
		return def, nil
	case string:
		return v, nil
	default:
		return "", fmt.Errorf("HMGET returned a %T", v)
	}
}

// decodeSpec sets st's registration from a field of the registration
// hash, since .. ':' .. spec; "" leaves it unset.
func decodeSpec(st *ledger.JobState, v string) error {
	if v == "" {
		return nil
	}
	at, spec, ok := strings.Cut(v, ":")
	us, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || spec == "" {
		return fmt.Errorf("malformed job registration %q", v)
	}
	st.Spec, st.Since = spec, fromMicros(us)
	return nil
}

// triggerTick returns the tick part of p's trigger request as
// ledger_state.lua keeps it: "" for a trigger-now, otherwise "@" and the
// tick in unix microseconds, and "r" for a re-run; for a cancel request,
// "c", the shard, "." and the run's trigger ID in hex after the tick (if
// any), so that the part holds no ':'.
func triggerTick(p *ledger.JobStateParams) string {
	if p.Op != ledger.JobTrigger && p.Op != ledger.JobCancel {
		return ""
	}
	tr := p.Request()
	t := ""
	if !tr.Tick.IsZero() {
		t = "@" + strconv.FormatInt(micros(tr.Tick), 10)
	}
	if tr.Rerun {
		t += "r"
	}
	if tr.Cancel {
		t += "c" + strconv.Itoa(tr.Shard) + "." + hex.EncodeToString([]byte(tr.RunTrigger))
	}
	return t
}

// decodeTick sets tr's Tick, Rerun and cancel fields from a tick part as
// triggerTick makes it.
func decodeTick(tr *ledger.TriggerRequest, part string) bool {
	part, cancel, isCancel := strings.Cut(part, "c")
	if isCancel {
		n, h, ok := strings.Cut(cancel, ".")
		shard, err1 := strconv.Atoi(n)
		run, err2 := hex.DecodeString(h)
		if !ok || err1 != nil || err2 != nil || shard < 0 {
			return false
		}
		tr.Cancel, tr.Shard, tr.RunTrigger = true, shard, string(run)
	}
	if part == "" {
		return true
	}
	tick, ok := strings.CutPrefix(part, "@")
	tick, tr.Rerun = strings.CutSuffix(tick, "r")
	tu, err := strconv.ParseInt(tick, 10, 64)
	if !ok || err != nil {
		return false
	}
	tr.Tick = fromMicros(tu)
	return true
}

// decodeState reads a job's state as ledger_state.lua keeps it.
func decodeState(job, v string) (ledger.JobState, error) {
	st := ledger.JobState{Job: job}
	if v == "" {
		return st, errors.New("empty job state")
	}
	st.Paused = v[0] == '1'
	for rest := v[1:]; rest != ""; {
		var at, n string
		var ok1, ok2 bool
		at, rest, ok1 = strings.Cut(strings.TrimPrefix(rest, ":"), ":")
		n, rest, ok2 = strings.Cut(rest, ":")
		digits := strings.IndexFunc(at, func(r rune) bool { return r != '-' && (r < '0' || r > '9') })
		if digits < 0 {
			digits = len(at)
		}
		at, tick := at[:digits], at[digits:]
		us, err1 := strconv.ParseInt(at, 10, 64)
		l, err2 := strconv.Atoi(n)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || l < 0 || l > len(rest) {
			return st, fmt.Errorf("malformed job state %q", v)
		}
		tr := ledger.TriggerRequest{ID: rest[:l], At: fromMicros(us)}
		if !decodeTick(&tr, tick) {
			return st, fmt.Errorf("malformed job state %q", v)
		}
		st.Triggers = append(st.Triggers, tr)
		rest = rest[l:]
	}
	return st, nil
}

// JobStates implements ledger.Ledger with one HGETALL of the state hash,
// which holds only the jobs not in the default state.
func (s *Store) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("job states", err)
	}
	m, err := s.client.HGetAll(ctx, s.stateKey()).Result()
	if err != nil {
		return nil, ledgerErr("job states", err)
	}
	out := make([]ledger.JobState, 0, len(m))
	for job, v := range m {
		st, err := decodeState(job, v)
		if err != nil {
			return nil, ledgerErr("job states", fmt.Errorf("job %q: %w", job, err))
		}
		out = append(out, st)
	}
	return out, nil
}

// Jobs implements ledger.Ledger with an HGETALL of the state hash and one
// of the registration hash, in one pipeline.
func (s *Store) Jobs(ctx context.Context) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("jobs", err)
	}
	pipe := s.client.Pipeline()
	states, specs := pipe.HGetAll(ctx, s.stateKey()), pipe.HGetAll(ctx, s.specsKey())
	err := execPipe(ctx, pipe)
	var sm, rm map[string]string
	if err == nil {
		sm, err = states.Result()
	}
	if err == nil {
		rm, err = specs.Result()
	}
	if err != nil {
		return nil, ledgerErr("jobs", err)
	}
	index := make(map[string]int, len(sm))
	out := make([]ledger.JobState, 0, len(sm)+len(rm))
	for job, v := range sm {
		st, err := decodeState(job, v)
		if err != nil {
			return nil, ledgerErr("jobs", fmt.Errorf("job %q: %w", job, err))
		}
		index[job] = len(out)
		out = append(out, st)
	}
	for job, v := range rm {
		i, ok := index[job]
		if !ok {
			i = len(out)
			out = append(out, ledger.JobState{Job: job})
		}
		if err := decodeSpec(&out[i], v); err != nil {
			return nil, ledgerErr("jobs", fmt.Errorf("job %q: %w", job, err))
		}
	}
	return out, nil
}

// Prune implements ledger.Ledger. Claims expire by themselves (PX), so it
// deletes none and reports none. It reads the jobs set and prunes trigger
// requests (ledger_state.lua) in one pipeline, then runs ledger_prune.lua
// for every job in a second: two round trips (per node) when run records
// are pruned, one otherwise.
func (s *Store) Prune(ctx context.Context, p ledger.PruneParams) (ledger.PruneResult, error) {
	var res ledger.PruneResult
	if err := ctx.Err(); err != nil {
		return res, ledgerErr("prune", err)
	}
	if p.RunsOlderThan < 0 || p.KeepPerJob < 0 || p.TriggersOlderThan < 0 {
		return res, errors.New("redisstore: prune: negative parameter")
	}
	pruneRuns := p.RunsOlderThan > 0 || p.KeepPerJob > 0
	var calls []*scriptCall
	if p.TriggersOlderThan > 0 {
		calls = append(calls, &scriptCall{script: stateScript, keys: []string{s.stateKey()},
			args: []any{"prune", p.TriggersOlderThan.Microseconds(), ""}})
	}
	var members *redis.StringSliceCmd
	err := s.runCalls(ctx, calls, func(pipe redis.Pipeliner) {
		if pruneRuns {
			members = pipe.SMembers(ctx, s.jobsKey())
		}
	})
	if err != nil {
		return res, ledgerErr("prune", err)
	}
	if len(calls) > 0 {
		n, err := calls[0].cmd.Int()
		if err != nil {
			return res, ledgerErr("prune trigger requests", err)
		}
		res.Triggers = n
	}
	if !pruneRuns {
		return res, nil
	}
	jobs, err := members.Result()
	if err != nil {
		return res, ledgerErr("prune", err)
	}
	calls = make([]*scriptCall, len(jobs))
	for i, job := range jobs {
		runs, recs, recorded := s.runKeys(job)
		calls[i] = &scriptCall{script: pruneScript, keys: []string{runs, recs, recorded},
			args: []any{p.RunsOlderThan.Microseconds(), p.KeepPerJob}}
	}
	if err := s.runCalls(ctx, calls, nil); err != nil {
		return res, ledgerErr("prune runs", err)
	}
	for i, c := range calls {
		n, err := c.cmd.Int()
		if err != nil {
			return res, ledgerErr(fmt.Sprintf("prune runs of %q", jobs[i]), err)
		}
		res.Runs += n
	}
	return res, nil
}

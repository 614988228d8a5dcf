package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Stats = (*Store)(nil)

//go:embed ledger_stats.lua
var ledgerStatsSrc string

//go:embed ledger_recent.lua
var ledgerRecentSrc string

var (
	rollupScript = newLuaScript(ledgerStatsSrc)
	recentScript = newLuaScript(ledgerRecentSrc)
)

// RollupRetention is how long the per-minute rollups of RunStats are kept
// after their last write: longer than the longest window the dashboard
// asks for (7 days).
const RollupRetention = 8 * 24 * time.Hour

// rollupKey is the hash of the rollups of the hour that starts at unix
// second hour: fields minute:status and minute:L<lateness bucket>, minute
// 0 to 59 within the hour. Every rollup key has the hash tag {stats}, so
// one script updates a batch's hours on a Cluster.
func (s *Store) rollupKey(hour int64) string {
	return s.prefix + "ledger:{stats}:" + strconv.FormatInt(hour, 10)
}

// rollupIncr is one increment of a rollup batch: the minute (unix
// seconds) of a tick and a status, or with late >= 0 a lateness bucket.
type rollupIncr struct {
	minute int64
	status ledger.RunStatus
	late   int
	n      int64
}

// rollupCall returns the ledger_stats.lua call that adds the final records
// of rs to the rollups — the batch added up first, so it is a few
// increments for a batch of one minute — or nil when rs holds none.
// A running record is not counted: its outcome is, when it is recorded.
// The increments are found by a scan of those made so far (a batch has
// few), so a record costs no allocation.
func (s *Store) rollupCall(rs []ledger.RunRecord) *scriptCall {
	var incr []rollupIncr
	add := func(minute int64, st ledger.RunStatus, late int) {
		for k := range incr {
			if c := &incr[k]; c.minute == minute && c.late == late && c.status == st {
				c.n++
				return
			}
		}
		incr = append(incr, rollupIncr{minute, st, late, 1})
	}
	for i := range rs {
		r := &rs[i]
		if !r.Status.Final() {
			continue
		}
		sec := r.Tick.Unix()
		minute := sec - ((sec%60)+60)%60
		add(minute, r.Status, -1)
		if late, ok := r.Lateness(); ok {
			add(minute, "", ledger.LatenessBucket(late))
		}
	}
	if len(incr) == 0 {
		return nil
	}
	c := &scriptCall{script: rollupScript, args: make([]any, 0, 1+3*len(incr))}
	c.args = append(c.args, int64(RollupRetention/time.Second))
	keyIdx := make(map[int64]int, 1)
	for _, in := range incr {
		hour := in.minute - ((in.minute%3600)+3600)%3600
		k, ok := keyIdx[hour]
		if !ok {
			c.keys = append(c.keys, s.rollupKey(hour))
			k = len(c.keys)
			keyIdx[hour] = k
		}
		field := strconv.FormatInt((in.minute-hour)/60, 10) + ":"
		if in.late >= 0 {
			field += "L" + strconv.Itoa(in.late)
		} else {
			field += string(in.status)
		}
		c.args = append(c.args, k, field, in.n)
	}
	return c
}

// RunStats implements ledger.Stats from the per-minute rollups that
// RecordRuns keeps beside the records (one ledger_stats.lua call per
// batch): one HGETALL per hour of the window, in one pipeline, whatever
// the number of records. The rollups count what was recorded: a final
// record counts when it is written, so a record written again with a
// final status (a RecordRuns repeated after an error) counts again, and
// pruning records does not uncount them; rollups expire
// RollupRetention after their hour's last write.
func (s *Store) RunStats(ctx context.Context, q ledger.StatsQuery) (ledger.RunStats, error) {
	if err := ctx.Err(); err != nil {
		return ledger.RunStats{}, ledgerErr("run stats", err)
	}
	if err := q.Check(); err != nil {
		return ledger.RunStats{}, fmt.Errorf("redisstore: %w", err)
	}
	out := ledger.NewRunStats(q)
	first := q.From.Unix() - q.From.Unix()%3600
	var hours []int64
	var cmds []*redis.MapStringStringCmd
	pipe := s.client.Pipeline()
	for h := first; h < q.To.Unix(); h += 3600 {
		hours = append(hours, h)
		cmds = append(cmds, pipe.HGetAll(ctx, s.rollupKey(h)))
	}
	if err := execPipe(ctx, pipe); err != nil {
		return ledger.RunStats{}, ledgerErr("run stats", err)
	}
	for i, c := range cmds {
		m, err := c.Result()
		if err != nil {
			return ledger.RunStats{}, ledgerErr("run stats", err)
		}
		for f, v := range m {
			minute, what, ok := strings.Cut(f, ":")
			mi, err1 := strconv.ParseInt(minute, 10, 64)
			n, err2 := strconv.ParseInt(v, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				continue
			}
			t := time.Unix(hours[i]+60*mi, 0).UTC()
			if b, ok := strings.CutPrefix(what, "L"); ok {
				if k, err := strconv.Atoi(b); err == nil {
					out.AddLateness(&q, t, k, n)
				}
				continue
			}
			out.AddCount(&q, t, ledger.RunStatus(what), n)
		}
	}
	return out, nil
}

// RecentStatuses implements ledger.Stats: ledger_recent.lua on each job's
// keys, all in one pipeline (one round trip per node), each reading about
// n records' statuses and nothing else of them.
func (s *Store) RecentStatuses(ctx context.Context, jobs []string, n int) (map[string][]ledger.RunStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("recent statuses", err)
	}
	if err := ledger.CheckRecent(jobs, n); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	calls := make([]*scriptCall, len(jobs))
	for i, job := range jobs {
		runs, recs, _ := s.runKeys(job)
		calls[i] = &scriptCall{script: recentScript, keys: []string{runs, recs}, args: []any{n}}
	}
	out := make(map[string][]ledger.RunStatus)
	if len(calls) == 0 {
		return out, nil
	}
	if err := s.runCalls(ctx, calls, nil); err != nil {
		return nil, ledgerErr("recent statuses", err)
	}
	for i, c := range calls {
		res, err := c.cmd.StringSlice()
		if err != nil {
			return nil, ledgerErr("recent statuses", err)
		}
		recs := make([]ledger.KeyedStatus, 0, len(res)/2)
		for j := 0; j+1 < len(res); j += 2 {
			k, err := parseRunMember(jobs[i], res[j])
			if err != nil {
				return nil, ledgerErr("recent statuses", fmt.Errorf("job %q, run %q: %w", jobs[i], res[j], err))
			}
			recs = append(recs, ledger.KeyedStatus{Key: k, Status: ledger.RunStatus(res[j+1])})
		}
		if len(recs) == 0 {
			continue
		}
		m := map[string][]ledger.RunStatus{}
		ledger.GroupRecent(m, recs)
		out[jobs[i]] = m[jobs[i]][:min(n, len(m[jobs[i]]))]
	}
	return out, nil
}

// LatestRuns implements ledger.Latest with one pipeline of the runs script,
// one call a job (on a Cluster, a pipeline per node).
func (s *Store) LatestRuns(ctx context.Context, jobs []string) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("latest runs", err)
	}
	if err := ledger.CheckLatest(jobs); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	rs, err := s.jobsRuns(ctx, jobs, ledger.RunQuery{Limit: 1})
	if err != nil {
		return nil, ledgerErr("latest runs", err)
	}
	// The script's limit counts ticks: a tick's records come whole.
	var out []ledger.RunRecord
	for i, r := range rs {
		switch {
		case i > 0 && r.Job == out[len(out)-1].Job:
			if r.Key().Compare(out[len(out)-1].Key()) < 0 {
				r.Output = ""
				out[len(out)-1] = r
			}
		default:
			r.Output = ""
			out = append(out, r)
		}
	}
	return out, nil
}

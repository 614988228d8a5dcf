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

// rollupField is a rollup hash's field of tick t: its minute in the hour,
// then suffix.
type rollupField struct {
	hour  int64
	field string
}

// rollupCall returns the ledger_stats.lua call that adds the final records
// of rs to the rollups — the batch added up first, so it is a few
// increments for a batch of one minute — or nil when rs holds none.
// A running record is not counted: its outcome is, when it is recorded.
func (s *Store) rollupCall(rs []ledger.RunRecord) *scriptCall {
	var (
		incr  map[rollupField]int64
		order []rollupField
	)
	add := func(t time.Time, suffix string) {
		sec := t.Unix()
		hour := sec - sec%3600
		if sec < 0 && sec%3600 != 0 {
			hour -= 3600
		}
		f := rollupField{hour, strconv.FormatInt((sec-hour)/60, 10) + suffix}
		if incr == nil {
			incr = make(map[rollupField]int64, 4)
		}
		if _, ok := incr[f]; !ok {
			order = append(order, f)
		}
		incr[f]++
	}
	for i := range rs {
		r := &rs[i]
		if !r.Status.Final() {
			continue
		}
		add(r.Tick, ":"+string(r.Status))
		if late, ok := r.Lateness(); ok {
			add(r.Tick, ":L"+strconv.Itoa(ledger.LatenessBucket(late)))
		}
	}
	if len(order) == 0 {
		return nil
	}
	c := &scriptCall{script: rollupScript, args: make([]any, 0, 1+3*len(order))}
	c.args = append(c.args, int64(RollupRetention/time.Second))
	keyIdx := make(map[int64]int, 1)
	for _, f := range order {
		k, ok := keyIdx[f.hour]
		if !ok {
			c.keys = append(c.keys, s.rollupKey(f.hour))
			k = len(c.keys)
			keyIdx[f.hour] = k
		}
		c.args = append(c.args, k, f.field, incr[f])
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

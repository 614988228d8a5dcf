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

//go:embed ledger_rollup.lua
var ledgerRollupSrc string

//go:embed ledger_recent.lua
var ledgerRecentSrc string

var (
	rollupScript = newLuaScript(ledgerRollupSrc + ledgerStatsSrc)
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

// rollupHours collects the rollup hashes of one script call: their keys,
// which go after the call's other keys (the first at KEYS[base+1]).
type rollupHours struct {
	base int
	keys []string
	idx  map[int64]int // hour -> index in KEYS
}

// add returns where r counts in the rollups, packed as ledger_rollup.lua
// takes it: the index in KEYS of its hour's hash * 4096 + its minute
// within the hour * 64 + its lateness bucket + 1 (0 for none).
func (h *rollupHours) add(s *Store, r *ledger.RunRecord) int64 {
	sec := r.Tick.Unix()
	hour := sec - ((sec%3600)+3600)%3600
	k, ok := h.idx[hour]
	if !ok {
		if h.idx == nil {
			h.idx = make(map[int64]int, 1)
		}
		h.keys = append(h.keys, s.rollupKey(hour))
		k = h.base + len(h.keys)
		h.idx[hour] = k
	}
	late := 0
	if d, ok := r.Lateness(); ok {
		late = ledger.LatenessBucket(d) + 1
	}
	return int64(k)*4096 + (sec-hour)/60*64 + int64(late)
}

// rollupChange is a record whose write changed its status, as
// ledger_record.lua returns it on a Cluster.
type rollupChange struct {
	r   *ledger.RunRecord
	was string // the status it had, "" for no record
}

// rollupCall returns the ledger_stats.lua call that applies changes to
// the rollups.
func (s *Store) rollupCall(changes []rollupChange) *scriptCall {
	var h rollupHours
	c := &scriptCall{script: rollupScript, args: make([]any, 0, 1+3*len(changes))}
	c.args = append(c.args, int64(RollupRetention/time.Second))
	for _, ch := range changes {
		c.args = append(c.args, h.add(s, ch.r), ch.was, string(ch.r.Status))
	}
	c.keys = h.keys
	return c
}

// RunStats implements ledger.Stats from the per-minute rollups that
// RecordRuns keeps beside the records (ledger_rollup.lua): one HGETALL per
// hour of the window, in one pipeline, whatever the number of records. A
// record counts once, with the status it has now, however many times it
// is written. Pruning records does not uncount them; rollups expire
// RollupRetention after their hour's last write. On a Cluster the rollups
// are written in a second round trip after the records: a RecordRuns whose
// records were stored but which failed before that (its reply lost, the
// process ended) leaves them uncounted, and repeating it does not count
// them.
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
	for _, r := range rs {
		r.Output = ""
		if n := len(out); n > 0 && out[n-1].Job == r.Job {
			if r.Key().Compare(out[n-1].Key()) < 0 {
				out[n-1] = r
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

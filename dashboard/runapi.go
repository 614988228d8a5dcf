package dashboard

import (
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// ListOutputMax is how many bytes of a run's output /api/runs sends per
// run: its last ListOutputMax bytes, with "output_truncated": true when
// there was more. GET /api/run sends the whole stored output.
const ListOutputMax = 2048

// truncateOutputs cuts each run's output to its last ListOutputMax bytes
// (at a rune boundary), marking the ones cut.
func truncateOutputs(rs []*apijson.Run) {
	for _, r := range rs {
		if len(r.Output) <= ListOutputMax {
			continue
		}
		i := len(r.Output) - ListOutputMax
		for i < len(r.Output) && !utf8.RuneStart(r.Output[i]) {
			i++
		}
		r.Output, r.OutputTruncated = r.Output[i:], true
	}
}

// setIDs sets each run's ID, the key GET /api/run?id= reads it by.
func setIDs(rs []*apijson.Run) {
	for _, r := range rs {
		r.ID = encodeCursor(ledger.RunKey{Job: r.Job, Tick: r.Tick, Trigger: r.Trigger, Shard: r.Shard, Attempt: r.Attempt})
	}
}

// runLock is what /api/run says of the lock a run held: its key, the
// fence the run held it with, its holder now, and the lock's events as
// the run's record shows them.
type runLock struct {
	Key   string `json:"key"`
	Fence uint64 `json:"fence"`
	// Held is the lease on Key now (any holder), null when none is held or
	// the store cannot list locks.
	Held *apijson.Lock `json:"held"`
	// Events are the lock's events during the run, from its record: taken
	// with the fence at the start, and released, lost or left (a node that
	// stopped) at the end.
	Events []lockEvent `json:"events"`
}

// lockEvent is one event of a run's lock.
type lockEvent struct {
	At    *time.Time `json:"at"`
	Event string     `json:"event"` // taken, released, lost, expired, held
	Node  string     `json:"node"`
	Fence uint64     `json:"fence"`
	Note  string     `json:"note,omitempty"`
}

// runKeyOf reads the run a request names: id= (a run's "id") or job=,
// tick=, trigger=, shard= and attempt=.
func runKeyOf(r *http.Request) (ledger.RunKey, error) {
	q := r.URL.Query()
	if id := q.Get("id"); id != "" {
		k, err := decodeCursor(id)
		if err != nil {
			return ledger.RunKey{}, errors.New("id: not the id of a run from /api/runs")
		}
		return *k, nil
	}
	k := ledger.RunKey{Job: q.Get("job"), Trigger: q.Get("trigger")}
	if k.Job == "" {
		return k, errors.New("job: want the job's name (or id: a run's id)")
	}
	t, err := time.Parse(time.RFC3339Nano, q.Get("tick"))
	if err != nil {
		return k, errors.New("tick: want the run's tick, an RFC 3339 time such as 2025-01-02T15:04:05Z")
	}
	k.Tick = t.UTC()
	for _, p := range []struct {
		name string
		v    *int
		min  int
		max  int
	}{{"shard", &k.Shard, 0, ledger.MaxShards - 1}, {"attempt", &k.Attempt, 0, math.MaxInt32}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < p.min || n > p.max {
			return k, errors.New(p.name + ": want a whole number from " + strconv.Itoa(p.min) + " to " + strconv.Itoa(p.max))
		}
		*p.v = n
	}
	return k, nil
}

// run is GET /api/run?id= (or ?job=&tick=&trigger=&shard=&attempt=): one
// run record with its whole stored output, the other attempts of the same
// tick and shard (outputs cut as in /api/runs), and its lock.
func (h *handler) run(w http.ResponseWriter, r *http.Request) {
	if h.ledger == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no schedule ledger")
		return
	}
	k, err := runKeyOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	// A second on: a store may keep ticks to the millisecond.
	tick := k.Tick.Truncate(time.Millisecond)
	all, err := h.ledger.Runs(ctx, ledger.RunQuery{Job: k.Job, From: tick, To: tick.Add(time.Second)})
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	var tickRecs, attempts []ledger.RunRecord
	found := -1
	for _, rec := range all {
		if rec.Trigger != k.Trigger || rec.Tick.Sub(k.Tick).Abs() >= time.Millisecond {
			continue
		}
		tickRecs = append(tickRecs, rec)
		if rec.Shard != k.Shard {
			continue
		}
		if rec.Attempt == k.Attempt {
			found = len(attempts)
		}
		attempts = append(attempts, rec)
	}
	if found < 0 {
		writeError(w, http.StatusNotFound, "no run of job "+strconv.Quote(k.Job)+" at "+k.Tick.Format(time.RFC3339Nano)+
			" (trigger "+strconv.Quote(k.Trigger)+", shard "+strconv.Itoa(k.Shard)+", attempt "+strconv.Itoa(k.Attempt)+"): pruned, or never recorded")
		return
	}
	rec := attempts[found]
	// Tick status and ids over the whole tick; outputs cut but for the run.
	views := apijson.FromRuns(tickRecs)
	setIDs(views)
	var run *apijson.Run
	others := make([]*apijson.Run, 0, len(attempts))
	for _, v := range views {
		if v.Shard != k.Shard {
			continue
		}
		if v.Attempt == k.Attempt {
			run = v
			continue
		}
		others = append(others, v)
	}
	truncateOutputs(others)
	slices.SortFunc(others, func(a, b *apijson.Run) int { return a.Attempt - b.Attempt })
	lock := runLock{Key: h.lockKey(rec, h.configured()[rec.Job]), Fence: rec.Fence, Events: lockEvents(rec)}
	if h.lister != nil {
		ls, err := h.lister.Leases(ctx, lock.Key)
		if err != nil {
			h.storeError(w, r, err)
			return
		}
		for _, l := range ls {
			if l.Key == lock.Key {
				v := apijson.FromLease(l)
				lock.Held = &v
				break
			}
		}
	}
	out := map[string]any{"run": run, "attempts": others, "lock": lock, "lateness_ms": nil, "duration_ms": nil}
	if !rec.Start.IsZero() {
		out["lateness_ms"] = rec.Start.Sub(rec.Tick).Milliseconds()
		if !rec.End.IsZero() {
			out["duration_ms"] = rec.End.Sub(rec.Start).Milliseconds()
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// lockKey is the key of the lock rec's run held: the job's (schedule's
// KeyPrefix + job), its shard's for a sharded job (+ "/shard/N"), or the
// semaphore's of a configured job with MaxConcurrent (+ "/running").
func (h *handler) lockKey(rec ledger.RunRecord, j schedule.Job) string {
	k := h.opts.KeyPrefix + rec.Job
	switch {
	case rec.Shards > 1:
		k += "/shard/" + strconv.Itoa(rec.Shard)
	case j.MaxConcurrent > 0:
		k += "/running"
	}
	return k
}

// lockEvents are the events of rec's lock that its record shows.
func lockEvents(rec ledger.RunRecord) []lockEvent {
	out := []lockEvent{}
	if rec.Start.IsZero() || rec.Fence == 0 {
		return out
	}
	start := rec.Start
	out = append(out, lockEvent{At: &start, Event: "taken", Node: rec.Node, Fence: rec.Fence})
	var end *time.Time
	if !rec.End.IsZero() {
		e := rec.End
		end = &e
	}
	switch rec.Status {
	case ledger.RunRunning:
		out = append(out, lockEvent{Event: "held", Node: rec.Node, Fence: rec.Fence, Note: "the run is under way"})
	case ledger.RunLost:
		out = append(out, lockEvent{At: end, Event: "lost", Node: rec.Node, Fence: rec.Fence, Note: lostNote(rec.Error)})
	case ledger.RunInterrupted:
		// Not at end: that is when another node noticed the node had
		// stopped; the lock expires lock_ttl after the node's last
		// renewal, which no record shows (Held says if it still holds).
		out = append(out, lockEvent{Event: "expired", Node: rec.Node, Fence: rec.Fence,
			Note: "the node stopped before recording the outcome; the lock expires lock_ttl after the node's last renewal"})
	default:
		out = append(out, lockEvent{At: end, Event: "released", Node: rec.Node, Fence: rec.Fence})
	}
	return out
}

// lostNote is the part of a lost run's error that says how the lock was
// lost, or a general note.
func lostNote(errText string) string {
	if errText != "" && strings.Contains(strings.ToLower(errText), "lock") {
		return errText
	}
	return "the lock was lost while the handler ran"
}

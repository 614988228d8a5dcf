package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/buildinfo"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// Page sizes.
const (
	defaultPage = 100
	maxPage     = 1000
	nextTicks   = 3
)

// callTimeout bounds the store calls of one request.
const callTimeout = 10 * time.Second

// info is GET /api/info.
func (h *handler) info(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{
		"node": h.opts.Node, "version": h.opts.Version, "store": h.storeURL, "build": buildinfo.Get(),
		"read_only": h.opts.Token == "", "logged_in": false, "public_read": h.opts.Token != "" && h.opts.PublicRead,
		"can": map[string]bool{"ledger": h.ledger != nil, "list": h.lister != nil, "release": h.releaser != nil},
	}
	if _, s, ok := h.session(r); ok {
		out["logged_in"] = true
		out["csrf"] = s.csrf
	}
	writeJSON(w, http.StatusOK, out)
}

// pageLimit reads the limit parameter.
func pageLimit(r *http.Request, def int) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > maxPage {
		return 0, errors.New("limit: want a whole number from 1 to " + strconv.Itoa(maxPage))
	}
	return n, nil
}

// running is one holder of a job's lock.
type running struct {
	Node        string `json:"node"`
	Fence       uint64 `json:"fence"`
	ExpiresInMS int64  `json:"expires_in_ms"`
	HeldForMS   *int64 `json:"held_for_ms"`
}

// jobView is one job of /api/jobs.
type jobView struct {
	apijson.Job
	Configured bool        `json:"configured"`
	Schedule   string      `json:"schedule,omitempty"`
	TimeZone   string      `json:"timezone,omitempty"`
	NextTicks  []time.Time `json:"next_ticks"`
	Running    []running   `json:"running"`
	ScheduleEr string      `json:"schedule_error,omitempty"`
	// Definition is the configured job's definition, sent only when the
	// request names one job (name=).
	Definition *definition `json:"definition,omitempty"`
	// Recent are the statuses of the job's newest runs, newest first, with
	// recent=N (ledger.Stats.RecentStatuses); left out without it.
	Recent []ledger.RunStatus `json:"recent,omitempty"`
}

// configured returns the configured jobs by name.
func (h *handler) configured() map[string]schedule.Job {
	if h.opts.Jobs == nil {
		return nil
	}
	js := h.opts.Jobs()
	m := make(map[string]schedule.Job, len(js))
	for _, j := range js {
		m[j.Name] = j
	}
	return m
}

// recentRuns reads the newest run records in one query, at most once per
// recentTTL for all requests, and remembers each job's newest one (without
// output) for later pages.
func (h *handler) recentRuns(ctx context.Context, jobs int) ([]ledger.RunRecord, error) {
	n := h.opts.RecentRuns
	if n == 0 {
		n = defaultRecentRuns
	}
	h.recentMu.Lock()
	defer h.recentMu.Unlock()
	now := h.clock.Now()
	// A run the summary saw (and told the pages about) is never older
	// than the recent runs a page then reads: else a page re-rendered for
	// a run's outcome could show the read from just before it, and keep it
	// until the next change.
	stale := h.recentStale.Swap(false)
	if !stale && h.recent != nil && h.recentN == n && now.Sub(h.recentAt) < recentTTL && now.Sub(h.recentAt) >= 0 {
		return h.recent, nil
	}
	runs, err := h.ledger.Runs(ctx, ledger.RunQuery{Limit: n})
	if err != nil {
		if stale {
			h.recentStale.Store(true)
		}
		return nil, err
	}
	h.recent, h.recentAt, h.recentN = runs, now, n
	h.lastMu.Lock()
	defer h.lastMu.Unlock()
	for _, r := range runs {
		h.noteLastRun(r)
	}
	if len(h.lastRun) > 4*maxJobsRemembered {
		clear(h.lastRun)
	}
	if len(h.noRuns) > 4*maxJobsRemembered {
		clear(h.noRuns)
	}
	return runs, nil
}

// recentTTL is how long a read of the recent runs serves other requests.
const recentTTL = time.Second

// defaultRecentRuns is Options.RecentRuns when unset: enough for the last
// runs of most jobs on a page, cheap enough to read every second (a
// million-row SQLite ledger returns 10,000 records in about 200 ms).
const defaultRecentRuns = 1000

// pageLastRuns reads, for the jobs of a page whose last run the recent
// runs did not show, each job's newest record: with ledger.Latest in one
// call per ledger.MaxRecent jobs, otherwise one indexed query per job, 16
// at a time. A page costs at most its size in small reads, however long
// the history is.
func (h *handler) pageLastRuns(ctx context.Context, names []string) error {
	var missing []string
	h.lastMu.Lock()
	now := h.clock.Now()
	for _, n := range names {
		if _, ok := h.lastRun[n]; ok {
			continue
		}
		if at, ok := h.noRuns[n]; ok && now.Sub(at) < recentTTL && now.Sub(at) >= 0 {
			continue
		}
		missing = append(missing, n)
	}
	h.lastMu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	if lt, ok := h.ledger.(ledger.Latest); ok {
		return h.latestRuns(ctx, lt, missing, now)
	}
	sem := make(chan struct{}, 16)
	errs := make([]error, len(missing))
	var wg sync.WaitGroup
	for i, n := range missing {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rs, err := h.ledger.Runs(ctx, ledger.RunQuery{Job: n, Limit: 1})
			if err != nil {
				errs[i] = err
				return
			}
			h.lastMu.Lock()
			defer h.lastMu.Unlock()
			if len(rs) == 0 {
				h.noRuns[n] = now
				return
			}
			h.noteLastRun(rs[0])
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// noteLastRun remembers r, without its output, as its job's last run
// unless a newer one is known. A record of the run already remembered (the
// same key) replaces it unless it would take a final status back to
// running, which the history never does: else a run seen while running
// stayed "running" on every page after it ended. Callers hold lastMu.
func (h *handler) noteLastRun(r ledger.RunRecord) {
	old, ok := h.lastRun[r.Job]
	if ok {
		c := r.Key().Compare(old.Key())
		if c > 0 || (c == 0 && old.Status.Final() && !r.Status.Final()) {
			return
		}
	}
	r.Output = ""
	h.lastRun[r.Job] = r
}

// latestRuns is pageLastRuns through ledger.Latest.
func (h *handler) latestRuns(ctx context.Context, lt ledger.Latest, missing []string, now time.Time) error {
	for chunk := range slices.Chunk(missing, ledger.MaxRecent) {
		rs, err := lt.LatestRuns(ctx, chunk)
		if err != nil {
			return err
		}
		h.lastMu.Lock()
		for _, r := range rs {
			h.noteLastRun(r)
		}
		for _, n := range chunk {
			if _, ok := h.lastRun[n]; !ok {
				h.noRuns[n] = now
			}
		}
		h.lastMu.Unlock()
	}
	return nil
}

// maxJobsRemembered bounds the last-run memory (it is cleared past 4× it).
const maxJobsRemembered = 25000

// jobs is GET /api/jobs?q=&name=&after=&limit=: the jobs sorted by name,
// one page, with one Runs, one JobStates and one Leases call whatever the
// page's size.
func (h *handler) jobs(w http.ResponseWriter, r *http.Request) {
	if h.ledger == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no schedule ledger")
		return
	}
	q := r.URL.Query()
	var nTicks int
	limit, err := pageLimit(r, defaultPage)
	if err == nil {
		nTicks, err = ticksParam(r)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	nRecent, err := recentParam(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	conf := h.configured()
	// The three store calls run at once.
	var (
		states           []ledger.JobState
		leases           []driver.Lease
		errS, errR, errL error
		wg               sync.WaitGroup
	)
	wg.Go(func() { states, errS = h.ledger.Jobs(ctx) })
	wg.Go(func() { _, errR = h.recentRuns(ctx, len(conf)) })
	if h.lister != nil {
		wg.Go(func() { leases, errL = h.lister.Leases(ctx, h.opts.KeyPrefix) })
	}
	wg.Wait()
	if err := errors.Join(errS, errR, errL); err != nil {
		h.storeError(w, r, err)
		return
	}
	h.noteLeases(leases, false)

	byState := make(map[string]ledger.JobState, len(states))
	names := make([]string, 0, len(conf)+len(states))
	for n := range conf {
		names = append(names, n)
	}
	for _, st := range states {
		byState[st.Job] = st
		if _, ok := conf[st.Job]; !ok {
			names = append(names, st.Job)
		}
	}
	if conf == nil {
		h.lastMu.Lock()
		for n := range h.lastRun {
			if _, ok := byState[n]; !ok {
				names = append(names, n)
			}
		}
		h.lastMu.Unlock()
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if name := q.Get("name"); name != "" {
		names = slices.DeleteFunc(names, func(n string) bool { return n != name })
	}
	if f := strings.ToLower(q.Get("q")); f != "" {
		names = slices.DeleteFunc(names, func(n string) bool { return !strings.Contains(strings.ToLower(n), f) })
	}
	total := len(names)
	if after := q.Get("after"); after != "" {
		i, _ := slices.BinarySearch(names, after)
		for i < len(names) && names[i] <= after {
			i++
		}
		names = names[i:]
	}
	next := ""
	if len(names) > limit {
		names = names[:limit]
		next = names[limit-1]
	}

	var (
		recent        map[string][]ledger.RunStatus
		errLast, errN error
		wgPage        sync.WaitGroup
	)
	wgPage.Go(func() { errLast = h.pageLastRuns(ctx, names) })
	if st, ok := h.ledger.(ledger.Stats); ok && nRecent > 0 {
		wgPage.Go(func() { recent, errN = st.RecentStatuses(ctx, names, nRecent) })
	}
	wgPage.Wait()
	if err := errors.Join(errLast, errN); err != nil {
		h.storeError(w, r, err)
		return
	}
	holders := map[string][]driver.Lease{}
	for _, l := range leases {
		name := strings.TrimPrefix(l.Key, h.opts.KeyPrefix)
		holders[name] = append(holders[name], l)
	}
	now := h.clock.Now()
	children := apijson.Children(maps.Values(conf))
	out := make([]jobView, 0, len(names))
	h.lastMu.Lock()
	for _, n := range names {
		v := jobView{Job: apijson.Job{Job: n, State: apijson.StateOK, Triggers: []apijson.Trigger{}}, NextTicks: []time.Time{}, Running: []running{}}
		if st, ok := byState[n]; ok {
			v.Job = apijson.FromState(st)
		}
		if lr, ok := h.lastRun[n]; ok {
			v.LastRun = apijson.FromRun(lr)
		}
		v.Children = children[n]
		v.Recent = recent[n]
		if j, ok := conf[n]; ok {
			v.Configured, v.Schedule, v.TimeZone = true, j.Schedule, j.TimeZone
			v.After = j.After
			if q.Get("name") != "" {
				v.Definition = h.defOf(j)
			}
			ticks, err := h.next(j, now, nTicks)
			if err != nil {
				v.ScheduleEr = err.Error()
				v.SetBroken("its schedule cannot be read: " + err.Error())
			} else if len(ticks) == 0 {
				v.SetBroken("its schedule gives no tick after " + now.UTC().Format(time.RFC3339))
			}
			v.NextTicks = ticks
		} else if v.Spec != "" {
			v.SetBroken(apijson.SpecBroken(v.Spec, now))
		}
		for _, l := range holders[n] {
			v.Running = append(v.Running, running{Node: l.Owner, Fence: l.Fence, ExpiresInMS: l.TTL.Milliseconds(), HeldForMS: h.heldFor(l, now)})
		}
		out = append(out, v)
	}
	h.lastMu.Unlock()
	for i := range out {
		if lr := out[i].LastRun; lr != nil && lr.Shards > 1 {
			lr.TickStatus = h.tickStatus(lr)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out, "total": total, "next": next})
}

// tickStatus is the overall status of a sharded job's last tick
// (schedule.TickStatus), from the recent runs' records of that tick with
// the last run in place of its own record, which may be newer.
func (h *handler) tickStatus(lr *apijson.Run) string {
	last := ledger.RunRecord{Shard: lr.Shard, Shards: lr.Shards, Attempt: lr.Attempt, Status: ledger.RunStatus(lr.Status)}
	rs := []ledger.RunRecord{last}
	h.recentMu.Lock()
	for _, r := range h.recent {
		if r.Job == lr.Job && r.Tick.Equal(lr.Tick) && r.Trigger == lr.Trigger && (r.Shard != last.Shard || r.Attempt != last.Attempt) {
			rs = append(rs, r)
		}
	}
	h.recentMu.Unlock()
	return string(schedule.TickStatus(rs))
}

// next returns j's next n ticks after now, parsing its spec once.
func (h *handler) next(j schedule.Job, now time.Time, n int) ([]time.Time, error) {
	key := j.Schedule + "\x00" + j.TimeZone
	h.schedMu.Lock()
	s, ok := h.scheds[key]
	h.schedMu.Unlock()
	if !ok {
		var loc *time.Location
		if j.TimeZone != "" {
			l, err := time.LoadLocation(j.TimeZone)
			if err != nil {
				return []time.Time{}, err
			}
			loc = l
		}
		p, err := schedule.Parse(j.Schedule, loc)
		if err != nil {
			return []time.Time{}, err
		}
		s = p
		h.schedMu.Lock()
		if len(h.scheds) > 4*maxJobsRemembered {
			clear(h.scheds)
		}
		h.scheds[key] = s
		h.schedMu.Unlock()
	}
	out := make([]time.Time, 0, n)
	t := now
	for range n {
		if t = s.Next(t); t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out, nil
}

// noteLeases remembers when each lease was first listed; complete says the
// listing held every lease, so the ones not in it are forgotten.
func (h *handler) noteLeases(ls []driver.Lease, complete bool) {
	now := h.clock.Now()
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	live := make(map[leaseID]bool, len(ls))
	for _, l := range ls {
		id := leaseID{l.Key, l.Fence}
		live[id] = true
		if _, ok := h.firstSeen[id]; !ok {
			h.firstSeen[id] = now
		}
	}
	if complete || len(h.firstSeen) > 4*maxJobsRemembered {
		for id := range h.firstSeen {
			if !live[id] {
				delete(h.firstSeen, id)
			}
		}
	}
}

// heldFor is how long l has been held at least, as seen by this dashboard
// (nil when it was first seen just now).
func (h *handler) heldFor(l driver.Lease, now time.Time) *int64 {
	h.seenMu.Lock()
	t, ok := h.firstSeen[leaseID{l.Key, l.Fence}]
	h.seenMu.Unlock()
	if !ok || !now.After(t) {
		return nil
	}
	ms := now.Sub(t).Milliseconds()
	return &ms
}

// cursor is the opaque form of a RunKey in /api/runs.
type cursor struct {
	Job     string `json:"j"`
	Tick    int64  `json:"t"` // unix nanoseconds
	Trigger string `json:"g,omitempty"`
	Shard   int    `json:"s,omitempty"`
	Attempt int    `json:"a"`
}

func encodeCursor(k ledger.RunKey) string {
	b, _ := json.Marshal(cursor{Job: k.Job, Tick: k.Tick.UnixNano(), Trigger: k.Trigger, Shard: k.Shard, Attempt: k.Attempt})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (*ledger.RunKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var c cursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Job == "" || c.Shard < 0 || c.Shard >= ledger.MaxShards {
		return nil, errors.New("before: not a cursor from a previous page's next")
	}
	return &ledger.RunKey{Job: c.Job, Tick: time.Unix(0, c.Tick).UTC(), Trigger: c.Trigger, Shard: c.Shard, Attempt: c.Attempt}, nil
}

// parseTime reads an RFC 3339 time parameter.
func parseTime(q map[string][]string, name string) (time.Time, error) {
	v := ""
	if vs := q[name]; len(vs) > 0 {
		v = vs[0]
	}
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, errors.New(name + ": want an RFC 3339 time such as 2025-01-02T15:04:05Z")
	}
	return t, nil
}

// runs is GET /api/runs?job=&status=&from=&to=&limit=&before=: run records
// newest first, one page and the cursor of the next.
func (h *handler) runs(w http.ResponseWriter, r *http.Request) {
	if h.ledger == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no schedule ledger")
		return
	}
	qs := r.URL.Query()
	limit, err := pageLimit(r, 50)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	q := ledger.RunQuery{Job: qs.Get("job"), Status: ledger.RunStatus(qs.Get("status")), Limit: limit + 1}
	switch q.Status {
	case "", ledger.RunOK, ledger.RunFailed, ledger.RunTimeout, ledger.RunLost, ledger.RunInterrupted, ledger.RunCancelled,
		ledger.RunSkipped, ledger.RunMissed, ledger.RunRunning:
	default:
		writeError(w, http.StatusBadRequest, "status: want ok, failed, timeout, lost, cancelled, interrupted, skipped, missed or running")
		return
	}
	if q.From, err = parseTime(qs, "from"); err == nil {
		q.To, err = parseTime(qs, "to")
	}
	if err == nil && qs.Get("before") != "" {
		q.Before, err = decodeCursor(qs.Get("before"))
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	rs, err := h.ledger.Runs(ctx, q)
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	next := ""
	if len(rs) > limit {
		rs = rs[:limit]
		next = encodeCursor(rs[limit-1].Key())
	}
	runs, err := apijson.FromRunsOf(ctx, h.ledger, rs)
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	setIDs(runs)
	truncateOutputs(runs)
	writeJSON(w, http.StatusOK, map[string]any{"runs": runs, "next": next})
}

// lockView is one lock of /api/locks.
type lockView struct {
	apijson.Lock
	HeldForMS *int64 `json:"held_for_ms"`
}

// locks is GET /api/locks?prefix=&after=&limit=: the live locks sorted by
// key, one page.
func (h *handler) locks(w http.ResponseWriter, r *http.Request) {
	if h.lister == nil {
		writeError(w, http.StatusNotImplemented, "this store cannot list its locks")
		return
	}
	q := r.URL.Query()
	limit, err := pageLimit(r, defaultPage)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	prefix := q.Get("prefix")
	ls, err := h.lister.Leases(ctx, prefix)
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	h.noteLeases(ls, prefix == "")
	slices.SortFunc(ls, func(a, b driver.Lease) int { return strings.Compare(a.Key, b.Key) })
	total := len(ls)
	if after := q.Get("after"); after != "" {
		i, _ := slices.BinarySearchFunc(ls, after, func(l driver.Lease, k string) int { return strings.Compare(l.Key, k) })
		for i < len(ls) && ls[i].Key <= after {
			i++
		}
		ls = ls[i:]
	}
	next := ""
	if len(ls) > limit {
		ls = ls[:limit]
		next = ls[limit-1].Key
	}
	now := h.clock.Now()
	out := make([]lockView, len(ls))
	for i, l := range ls {
		out[i] = lockView{Lock: apijson.FromLease(l), HeldForMS: h.heldFor(l, now)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"locks": out, "total": total, "next": next})
}

// nodeView is one node of /api/nodes.
type nodeView struct {
	Node        string     `json:"node"`
	Alive       bool       `json:"alive"`
	LastSeen    *time.Time `json:"last_seen"`
	Version     string     `json:"version,omitempty"`
	Fence       uint64     `json:"fence,omitempty"`
	ExpiresInMS int64      `json:"expires_in_ms,omitempty"`
	// Leader marks the node that leads the fleet (it holds the lease of
	// Options.LeaderKey); LeaderTerm is its term, the lease's fence.
	Leader     bool   `json:"leader,omitempty"`
	LeaderTerm uint64 `json:"leader_term,omitempty"`
}

// leaderView is the fleet's leader in /api/nodes.
type leaderView struct {
	Node        string `json:"node"` // the election lease's owner name
	Term        uint64 `json:"term"`
	ExpiresInMS int64  `json:"expires_in_ms"`
}

// leader reads the holder of the leader election's lease; nil when no one
// holds it.
func (h *handler) leader(ctx context.Context) (*leaderView, error) {
	ls, err := h.lister.Leases(ctx, h.opts.LeaderKey)
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		if l.Key == h.opts.LeaderKey && l.Mode == driver.ModeMutex && !l.Waiting {
			return &leaderView{Node: l.Owner, Term: l.Fence, ExpiresInMS: l.TTL.Milliseconds()}, nil
		}
	}
	return nil, nil
}

// nodes is GET /api/nodes: the live nodes (holding their node lock) and
// the nodes seen in the recent runs, sorted by name, and the fleet's
// leader (null when none), whose node is marked. A node's last_seen is
// its node lock's last renewal — the lease's TTL less its remaining time —
// as this dashboard last saw it, or the latest time a run of it shows it
// alive, whichever is later: a node that was killed shows as gone once its
// lease ends, last seen at its last heartbeat. A leader that was killed
// stays the leader until its election lease ends, like its node lock.
func (h *handler) nodes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	byName := map[string]*nodeView{}
	now := h.clock.Now().UTC()
	var leader *leaderView
	if h.lister != nil {
		ls, err := h.lister.Leases(ctx, h.opts.NodeKeyPrefix)
		if err == nil {
			leader, err = h.leader(ctx)
		}
		if err != nil {
			h.storeError(w, r, err)
			return
		}
		h.nodeMu.Lock()
		for _, l := range ls {
			name, version := parseNodeOwner(l.Owner)
			if name == "" {
				name = strings.TrimPrefix(l.Key, h.opts.NodeKeyPrefix)
			}
			renewed := now.Add(-max(h.opts.NodeLeaseTTL-l.TTL, 0))
			if old, ok := h.nodeSeen[name]; ok && old.After(renewed) && !old.After(now) {
				renewed = old
			}
			h.nodeSeen[name] = renewed
			byName[name] = &nodeView{Node: name, Alive: true, LastSeen: &renewed, Version: version, Fence: l.Fence, ExpiresInMS: l.TTL.Milliseconds()}
		}
		for name, seen := range h.nodeSeen {
			if byName[name] == nil {
				byName[name] = &nodeView{Node: name, LastSeen: &seen}
			}
		}
		if len(h.nodeSeen) > maxJobsRemembered {
			clear(h.nodeSeen)
		}
		h.nodeMu.Unlock()
	}
	if h.ledger != nil {
		rs, err := h.recentRuns(ctx, len(h.configured()))
		if err != nil {
			h.storeError(w, r, err)
			return
		}
		for _, rr := range rs {
			if rr.Node == "" {
				continue
			}
			// The node was alive at the end of a run it recorded; a
			// running or interrupted record shows only its start (another
			// node wrote the interrupted one).
			seen := rr.End
			if !rr.Status.Final() || rr.Status == ledger.RunInterrupted {
				seen = rr.Start
			}
			if seen.IsZero() {
				if rr.Status == ledger.RunInterrupted {
					continue
				}
				seen = rr.Recorded
			}
			seen = seen.UTC()
			v := byName[rr.Node]
			if v == nil {
				v = &nodeView{Node: rr.Node}
				byName[rr.Node] = v
			}
			if v.LastSeen == nil || seen.After(*v.LastSeen) {
				v.LastSeen = &seen
			}
		}
	}
	out := make([]*nodeView, 0, len(byName))
	for _, v := range byName {
		out = append(out, v)
	}
	if leader != nil {
		if v := byName[leader.Node]; v != nil {
			v.Leader, v.LeaderTerm = true, leader.Term
		}
	}
	slices.SortFunc(out, func(a, b *nodeView) int { return strings.Compare(a.Node, b.Node) })
	writeJSON(w, http.StatusOK, map[string]any{"nodes": out, "leader": leader})
}

// setState is POST /api/jobs/{name}/trigger|pause|resume: the job's state
// after the change. A trigger of a job that looks removed from every node
// is refused unless forced (refuseRemoved, actapi.go).
func (h *handler) setState(op ledger.JobStateOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.ledger == nil {
			writeError(w, http.StatusNotImplemented, "this store keeps no schedule ledger")
			return
		}
		name := r.PathValue("name")
		if conf := h.configured(); conf != nil {
			if _, ok := conf[name]; !ok {
				writeError(w, http.StatusNotFound, "no job named "+strconv.Quote(name)+" is configured")
				return
			}
		} else if name == "" || len(name) > schedule.MaxJobName {
			writeError(w, http.StatusBadRequest, "invalid job name")
			return
		}
		p := ledger.JobStateParams{Job: name, Op: op}
		note, force := "", false
		if op == ledger.JobTrigger {
			p.Trigger = newTriggerID()
			var ok bool
			if note, force, ok = readTrigger(w, r); !ok { // actapi.go
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
		defer cancel()
		if op == ledger.JobTrigger && h.refuseRemoved(ctx, w, r, name, force) {
			return
		}
		st, err := h.ledger.SetJobState(ctx, p)
		if err != nil {
			h.storeError(w, r, err)
			return
		}
		h.sum.invalidate()
		detail := ""
		if p.Trigger != "" {
			detail = apijson.TriggerDetail(p.Trigger, note)
		}
		h.audit(ctx, r, name, opAction[op], detail)
		job := apijson.FromState(st)
		job.LastRun = h.lastRunOf(ctx, name)
		out := map[string]any{"job": job}
		if p.Trigger != "" {
			out["trigger"] = p.Trigger
		}
		if note != "" {
			out["note"] = note
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// lastRunOf is job's last run as /api/jobs shows it, read now: one query
// (a state change is rare), which the pages' cache notes too. When the
// query fails it is the newest run this dashboard has seen (the answer is
// about the change made, which succeeded); nil when there is none. The
// cache alone answered with the run of the last page view, minutes old.
func (h *handler) lastRunOf(ctx context.Context, job string) *apijson.Run {
	rs, err := h.ledger.Runs(ctx, ledger.RunQuery{Job: job, Limit: 1})
	h.lastMu.Lock()
	if err == nil && len(rs) > 0 {
		h.noteLastRun(rs[0])
	}
	r, ok := h.lastRun[job]
	h.lastMu.Unlock()
	if !ok {
		return nil
	}
	lr := apijson.FromRun(r)
	if lr.Shards > 1 {
		lr.TickStatus = h.tickStatus(lr)
	}
	return lr
}

// newTriggerID is a new trigger request's ID: random, unique.
func newTriggerID() string { return rand.Text() }

// opAction names the audit action of each state change.
var opAction = map[ledger.JobStateOp]string{ledger.JobPause: "pause", ledger.JobResume: "resume", ledger.JobTrigger: "trigger"}

// release is POST /api/locks/{key}/release: deletes the lease whoever holds
// it; 404 when it is not held.
func (h *handler) release(w http.ResponseWriter, r *http.Request) {
	if h.releaser == nil {
		writeError(w, http.StatusNotImplemented, "this store cannot release locks by force")
		return
	}
	key := r.PathValue("key")
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	err := h.releaser.ForceRelease(ctx, key)
	switch {
	case errors.Is(err, driver.ErrNotHeld):
		writeError(w, http.StatusNotFound, strconv.Quote(key)+" is not held")
		return
	case err != nil:
		h.storeError(w, r, err)
		return
	}
	h.sum.invalidate()
	writeJSON(w, http.StatusOK, apijson.Released{Released: key})
}

package schedule

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// Preferred nodes (Config.PreferredNodes), with a ledger that keeps claim
// marks (ledger.Marker).
//
// Without marks every node claims every tick of every job at the tick: N
// claims per tick on N nodes, all but one in vain. With them a plain job's
// tick (preferable) is claimed at the tick only by the job's preferred
// node — the highest rendezvous hash of (node, job) over the live nodes —
// and by the other nodes fallbackDelay later, as a fallback, unless the
// preferred node's mark says it claimed the tick. So a dead, paused or
// slow preferred node costs lateness, never a tick.
//
// A node's mark says: "under view V, every tick in [From, Through] of
// every job I prefer under V is claimed". V is a hash of the live nodes —
// those whose marks the ledger keeps (a node writes its mark every poll
// interval and after every pass), this one included — and of the
// preferable jobs with their specs: two nodes with the same V prefer the
// same node for every job, and have the same jobs. A node trusts a mark for
// tick t of job j only when the mark's node is j's preferred node under
// the node's own view, the mark's view is that view, and From ≤ t ≤
// Through. A claim succeeds once per tick, so a fallback claim made in
// vain costs only work; what must never happen is two nodes each leaving a
// tick to the other, and it cannot: a node leaves a tick only to a mark
// that says the tick is claimed. Nodes that see different live nodes (one
// has not yet seen a node come or go) or have different jobs (a rolling
// deploy) have different views, trust none of each other's marks, and
// claim as fallbacks. A node leaves a job to another at all (claims it
// only as a fallback) only while that node's last mark has its own view;
// otherwise it claims at the tick, as without marks, so a disagreement
// costs claims, not lateness.
//
// A node writes its mark after the claim call has returned every result,
// in a round trip of its own (one per pass, not per job): written in the
// claim call's pipeline, a claim chunk that failed beside a mark that did
// not would say more than was claimed.
//
// Through is a tick instant: the pass at that instant, by the node's
// clock, claimed every preferred job's ticks up to it. A skewed clock
// makes a node claim early or late; it never makes a mark say more than
// was claimed. From is when the node adopted the view (its next pass
// claims the ticks of the jobs it newly prefers), moved past any tick a
// pass could not claim. A view changes when a node comes or goes or a job
// is added, removed or found broken; until its next pass under the new
// view a node's mark covers nothing.
//
// Jobs left out (not preferable), claimed at the tick by every node that
// runs them as before: sharded jobs (their shards spread by rank),
// LeaderOnly jobs (only the leader claims them), jobs restricted to nodes
// with labels (Job.Nodes: a node does not know the others' labels), and
// broken ones. Trigger requests are claimed by every node as before.

// fallbackDelay is how long after a tick the nodes that do not prefer its
// job claim it, when the preferred node's mark does not cover it: twice
// the poll interval (1s by default), the time in which every node obeys a
// state change. The preferred node claims at the tick and writes its mark
// at once after, so it has that long, less a round trip, before the others
// claim in its place; a slower pass costs fallback claims, not ticks.
func (s *Scheduler) fallbackDelay() time.Duration { return 2 * s.poll }

// prefs is a Scheduler's view of the live nodes and their marks. Guarded
// by Scheduler.mu; marker, delay and ttl are set by New.
type prefs struct {
	marker ledger.Marker // nil: every node claims every tick at the tick
	delay  time.Duration // fallbackDelay
	ttl    time.Duration // how long the ledger keeps this node's mark

	nodes []string // the live nodes, sorted, this one included; nil: not known, every job is preferred here
	view  string   // hash of nodes and of the preferable jobs
	gen   int      // counts adoptions of a view: a pass under an older one does not advance through
	stale bool     // the jobs changed since view was made: trust no mark until it is made again
	// This node's mark under view: from adoption (or past a tick a pass
	// could not claim) through the last pass that claimed every preferred
	// tick; through before from: it covers nothing.
	from, through time.Time
	marks         map[string]ledger.ClaimMark // every node's mark, by node, as last read
	// agree are the other nodes whose last mark has this node's view: a
	// job one of them prefers waits for its mark; one that another node
	// prefers is claimed here at the tick, as without marks.
	agree map[string]bool
}

// preferable reports whether j's ticks are claimed at the tick by its
// preferred node only. Callers hold s.mu.
func preferable(j *job) bool {
	return j.Shards <= 1 && !j.LeaderOnly && len(j.Nodes) == 0 && j.broken == ""
}

// preferred returns the node among nodes that prefers job: the highest
// rendezvous hash, so that a node coming or going moves only its share of
// the jobs.
func preferred(nodes []string, job string) string {
	var best string
	var top uint64
	for i, n := range nodes {
		h := fnv.New64a()
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(job))
		x := mix64(h.Sum64())
		if i == 0 || x > top {
			best, top = n, x
		}
	}
	return best
}

// mix64 spreads the bits of FNV's sum (splitmix64's finaliser): FNV alone
// leaves names that differ in their last byte close together.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// setPreference sets whether j is claimed at the tick here or as a
// fallback, under the current view. Callers hold s.mu.
func (s *Scheduler) setPreference(j *job) {
	j.owner = ""
	if s.pref.nodes != nil && preferable(j) {
		j.owner = preferred(s.pref.nodes, j.Name)
	}
	j.lag = j.owner != "" && j.owner != s.node && s.pref.agree[j.owner]
}

// schedule sets j.next to when a pass looks at j's first tick after t: the
// tick itself, fallbackDelay after it when another node prefers j, or
// Config.ClaimAhead before it for a plain job. It reports whether there is
// one (setNext). Callers hold s.mu.
func (s *Scheduler) schedule(j *job, t time.Time) bool {
	ok := s.setNext(j, t)
	switch {
	case ok && j.lag:
		j.next = j.next.Add(s.pref.delay)
	case ok:
		j.next = j.next.Add(-j.ahead)
	}
	return ok
}

// jobsChanged notes that the jobs changed: the view is made again before
// any mark is trusted. Callers hold s.mu.
func (s *Scheduler) jobsChanged() { s.pref.stale = true }

// adopt makes the view of nodes and the current jobs this node's, from
// now; agreeOn then moves the jobs. Callers hold s.mu.
func (s *Scheduler) adopt(nodes []string, now time.Time) {
	p := &s.pref
	var jobs []*job
	for _, j := range s.jobs {
		if preferable(j) {
			jobs = append(jobs, j)
		}
	}
	slices.SortFunc(jobs, func(a, b *job) int { return strings.Compare(a.Name, b.Name) })
	h := sha256.New()
	var n [8]byte
	put := func(v string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		h.Write([]byte(v))
	}
	for _, node := range nodes {
		put(node)
	}
	put("")
	for _, j := range jobs {
		put(j.Name)
		put(specOf(j))
	}
	p.nodes, p.view, p.stale = nodes, hex.EncodeToString(h.Sum(nil)[:16]), false
	p.gen++
	p.from, p.through = now, time.Time{}
}

// agreeOn sets the nodes whose marks have this node's view and moves every
// job whose preference changed with them or with the view in the heap.
// Callers hold s.mu.
func (s *Scheduler) agreeOn(adopted bool) {
	p := &s.pref
	agree := make(map[string]bool)
	for n, m := range p.marks {
		if n != s.node && m.View == p.view && !p.stale {
			agree[n] = true
		}
	}
	if !adopted && maps.Equal(agree, p.agree) {
		return
	}
	p.agree = agree
	moved := false
	for _, j := range s.jobs {
		lag := j.lag
		s.setPreference(j)
		if j.lag != lag && j.idx >= 0 {
			s.schedule(j, j.after)
			moved = true
		}
	}
	if moved {
		heap.Init(&s.heap)
	}
}

// markTTL is how long the ledger keeps a node's mark: as long as the node
// lease, so a stopped node leaves the others' views when its lease ends,
// and at least four poll intervals, so a live node never does.
func markTTL(nodeTTL, poll time.Duration) time.Duration { return max(nodeTTL, 4*poll) }

// exchangeMarks writes this node's mark and reads every node's, and adopts
// a new view when the live nodes or the jobs changed. Loop only.
func (s *Scheduler) exchangeMarks(now time.Time) {
	p := &s.pref
	if p.marker == nil {
		return
	}
	s.mu.Lock()
	if p.stale && p.nodes != nil {
		s.adopt(p.nodes, now)
		s.agreeOn(true)
	}
	m := ledger.ClaimMark{Node: s.node, View: p.view, From: p.from, Through: p.through}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	ms, err := p.marker.Mark(ctx, m, p.ttl)
	cancel()
	if err != nil {
		// The marks read before stay true: a mark only ever says what was
		// claimed. Only the view may be out of date meanwhile.
		s.log.Error("schedule: exchanging claim marks", "node", s.node, "err", err)
		return
	}
	marks := make(map[string]ledger.ClaimMark, len(ms))
	nodes := []string{s.node}
	for _, x := range ms {
		marks[x.Node] = x
		nodes = append(nodes, x.Node)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	s.mu.Lock()
	p.marks = marks
	adopted := !slices.Equal(nodes, p.nodes) || p.stale
	if adopted {
		s.adopt(nodes, now)
	}
	s.agreeOn(adopted)
	s.mu.Unlock()
}

// dropMark lets this node's mark go at once, so that the others stop
// counting it among the live nodes. Called once the loop is gone.
func (s *Scheduler) dropMark() {
	p := &s.pref
	if p.marker == nil {
		return
	}
	s.mu.Lock()
	m := ledger.ClaimMark{Node: s.node, View: p.view, From: p.from, Through: p.through}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if _, err := p.marker.Mark(ctx, m, time.Millisecond); err != nil {
		s.log.Warn("schedule: dropping the claim mark", "node", s.node, "err", err)
	}
}

// covered reports whether the mark of j's preferred node says tick t of j
// is claimed (see above). Callers hold s.mu.
func (s *Scheduler) covered(j *job, t time.Time) bool {
	p := &s.pref
	if p.stale || !j.lag {
		return false
	}
	m, ok := p.marks[j.owner]
	return ok && m.View == p.view && !t.Before(m.From) && !t.After(m.Through)
}

// marked advances this node's mark after a pass that began under view gen
// made every claim it sent: every preferred tick up to now is claimed,
// unless a claim failed (failed) or ticks older than the backlog were left
// unclaimed (gap). Callers hold s.mu.
func (s *Scheduler) marked(gen int, now time.Time, failed, gap bool) {
	p := &s.pref
	if p.gen != gen || p.stale || p.nodes == nil {
		return
	}
	switch {
	case failed:
		p.from = later(p.from, now.Add(time.Nanosecond))
	case gap:
		p.from = later(p.from, now)
	}
	p.through = now
}

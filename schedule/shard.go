package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
)

// A sharded job (Job.Shards = N > 1) turns each tick into N shard-runs,
// each claimed with the key (job, tick, trigger, shard) once across the
// fleet:
//
//   - Spread: at the tick, a node ranks itself among the live nodes (the
//     sorted names of the node leases, itself included): rank r of L. It
//     claims the shards k with k mod L = r, at most ceil(N/L), and runs
//     them at once, each holding its shard lock (job key + "/shard/" + k).
//   - The rest: every node watches the tick's shards (shardTick). From one
//     poll interval after the tick, a node with no shard-run of the job
//     under way claims a shard that no one has claimed, one at a time, so
//     that shards a node missed (it was not in the others' list of live
//     nodes, or could not list them) are taken by whoever is free.
//   - Retake: a shard with no outcome (its latest attempt has no record,
//     or a running or interrupted one) whose claim is held by a node that
//     no longer holds its node lease is taken over by a free node with a
//     retake claim: the same job, tick and shard, Trigger = the tick's
//     trigger + "~" + the stopped node. Every taker of one stopped node's
//     shard contends on that one key; if the taker stops too, the next
//     one claims with its name. The retaken run waits for the stopped
//     node's shard lock to expire and is recorded under the tick's own
//     key with the next attempt number; the stopped node's running record
//     is settled interrupted by the taker as it claims (takeShard), or
//     by a sweep (sweep.go) if one comes first.
//   - Requests: a trigger-now, backfill or re-run request of a sharded job
//     stays in the ledger until a node watching its tick sees every shard
//     done and removes it, so that every node sees it and claims its
//     shards as at a scheduled tick. A re-run's shard is done once it has
//     an attempt after the request's base (backfill.go); the watch is
//     keyed by the claim's Trigger, so a re-run's is not the tick's own.
//     Its records are the tick's, though: the tick's own watch leaves a
//     shard whose latest attempt is after the base of a backfill or
//     re-run watched on the node to that one's watch. A backfill or
//     re-run that runs a shard before the schedule has claimed the tick
//     (startPast) holds the shard's key of the tick too: the schedule's
//     claim of it fails, and the tick's watch leaves it by that rule.

// shardState is a Scheduler's view of its sharded jobs' ticks. Guarded by
// Scheduler.mu, but for rank and of, which only the loop uses.
type shardState struct {
	rank, of int                    // this node's rank among the of live nodes; of = 0: not known, claim none at the tick
	busy     map[string]int         // job name -> shard-runs claimed here and not yet ended
	watch    map[tickKey]*shardTick // the ticks whose shards are not all done
	jobs     int                    // how many of the Scheduler's jobs are sharded: none, and a pass looks no further
}

type tickKey struct {
	job     string
	tick    int64 // UnixNano
	trigger string
}

// shardTick is one tick of a sharded job that this node watches until
// every shard has an outcome.
type shardTick struct {
	j        *job
	w        work      // the tick's work, shard unset
	requests []string  // the trigger requests it answers, removed once every shard is done
	ready    time.Time // from when free nodes claim the rest
	next     time.Time // when to look again
	until    time.Time // forgotten after
	// Per shard.
	mine   map[int]bool   // claimed by this node
	holder map[int]string // the live node that holds the shard's current claim key
	chain  map[int]string // the Trigger of that key: the tick's or a retake's
}

// maxRetakeChain bounds the retake claims one look makes for one shard.
const maxRetakeChain = 8

// shardKey is the lock key of one shard of a job with lock key key.
func shardKey(key string, shard int) string {
	return key + "/shard/" + strconv.Itoa(shard)
}

// validateShards checks Job.Shards.
func validateShards(j Job, keyPrefix string) error {
	switch {
	case j.Shards < 0 || j.Shards > ledger.MaxShards:
		return badJob(j.Name, "Job.Shards", fmt.Sprintf("%d is not within [0, %d]", j.Shards, ledger.MaxShards), nil)
	case j.Shards > 1 && j.LeaderOnly:
		return badJob(j.Name, "Job.Shards", "set with LeaderOnly: a leader-only job runs on one node, shards spread over many", nil)
	case j.Shards <= 1:
		return nil
	}
	if err := tasklock.ValidateKey(shardKey(keyPrefix+j.Name, j.Shards-1)); err != nil {
		reason := err.Error()
		var oe *tasklock.OptionError
		if errors.As(err, &oe) {
			reason = oe.Reason
		}
		return badJob(j.Name, "Job.Name", "makes an invalid shard lock key: "+reason, err)
	}
	return nil
}

// keyOf is the watch's key of a sharded tick: by its claim's Trigger, so
// that a backfill or re-run of a tick is watched apart from the tick.
func keyOf(j *job, w work) tickKey {
	return tickKey{job: j.Name, tick: w.tick.UnixNano(), trigger: cmp.Or(w.claim, w.trigger)}
}

// rankShards sets this node's rank among the live nodes before a pass
// that claims shards. Loop only.
func (s *Scheduler) rankShards(now time.Time) {
	s.mu.Lock()
	if s.shards.jobs == 0 {
		s.mu.Unlock()
		return // no sharded job: nothing to spread, and no scan of every job per pass
	}
	need := false
	for i := 0; len(s.heap) > 0 && !s.heap[0].next.After(now) && i < len(s.heap); i++ {
		if j := s.heap[i]; j.Shards > 1 && !j.next.After(now) {
			need = true
			break
		}
	}
	for name, st := range s.states {
		if j := s.jobs[name]; !need && j != nil && j.Shards > 1 {
			for _, tr := range st.Triggers {
				if !s.seen[triggerKey{name, tr.ID}] {
					need = true
				}
			}
		}
	}
	s.mu.Unlock()
	if !need {
		return
	}
	rank, of := 0, 1
	if s.lister != nil {
		// A listing up to sweepEvery old (the sweep lists every
		// sweepEvery): a listing costs the store a pass over every key,
		// and the rank only spreads the shards (the claims keep each
		// shard-run to one node); a shard of a node that started or
		// stopped since is claimed by a free node a poll later.
		live, ok := s.recentNodes(s.sweepEvery)
		if !ok {
			ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
			var err error
			live, err = s.listNodes(ctx)
			cancel()
			if err != nil {
				// Claim none now: free nodes take them a poll later.
				s.log.Error("schedule: listing the node leases to spread shards", "node", s.node, "err", err)
				live = nil
			}
		}
		if live == nil {
			rank, of = 0, 0
		} else {
			names := []string{s.node}
			for n := range live {
				names = append(names, n)
			}
			slices.Sort(names)
			names = slices.Compact(names)
			rank, of = slices.Index(names, s.node), len(names)
		}
	}
	s.shards.rank, s.shards.of = rank, of
}

// addShards adds this node's shards of a sharded job's tick to the pass
// and watches the tick. A paused job's ticks are claimed whole: nothing
// runs. Callers hold s.mu.
func (s *Scheduler) addShards(b *batch, j *job, w work) {
	w.shards = j.Shards
	if w.paused {
		for k := range j.Shards {
			w.shard = k
			b.addClaim(s, j, w)
		}
		return
	}
	if s.shards.of > 0 {
		for k := s.shards.rank; k < j.Shards; k += s.shards.of {
			w.shard = k
			b.addClaim(s, j, w)
		}
	}
	key := keyOf(j, w)
	if s.shards.watch == nil {
		s.shards.watch = make(map[tickKey]*shardTick)
	}
	if e := s.shards.watch[key]; e != nil {
		if w.request != "" && !slices.Contains(e.requests, w.request) {
			e.requests = append(e.requests, w.request) // another backfill of the tick
		}
		return
	}
	now := s.clock.Now()
	ready := now.Add(s.poll)
	if w.request != "" {
		// The nodes see a request up to a poll apart (pollStates): the
		// last to see it still claims its shards before the rest go.
		ready = ready.Add(s.poll)
	}
	w.shard = 0
	e := &shardTick{
		j: j, w: w, ready: ready, next: ready, until: now.Add(s.retention / 2),
		mine: make(map[int]bool), holder: make(map[int]string), chain: make(map[int]string),
	}
	if w.request != "" {
		e.requests = []string{w.request}
	}
	s.shards.watch[key] = e
	b.watched = append(b.watched, key)
}

// requestTaken removes the trigger request that claimed work answers,
// unless it is a sharded tick's: that one is removed once every shard is
// done (pollShards), so that every node claims its shards meanwhile.
func (s *Scheduler) requestTaken(j *job, w work) {
	if w.request != "" && w.shards <= 1 {
		s.triggerDone(j.Name, w.request)
	}
}

// shardClaimed notes the result of a pass's claim of a shard.
func (s *Scheduler) shardClaimed(j *job, w work, r error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.shards.watch[keyOf(j, w)]
	var ce *ledger.ClaimedError
	switch {
	case r == nil && !w.paused:
		s.busyShards(j.Name, 1)
		if e != nil {
			e.mine[w.shard] = true
		}
	case e != nil && errors.As(r, &ce):
		e.holder[w.shard] = ce.Node
	}
}

// busyShards counts n more (or fewer) shard-runs of job under way here.
// Callers hold s.mu.
func (s *Scheduler) busyShards(job string, n int) {
	if s.shards.busy == nil {
		s.shards.busy = make(map[string]int)
	}
	s.shards.busy[job] += n
	if s.shards.busy[job] <= 0 {
		delete(s.shards.busy, job)
	}
}

// shardsEnded notes that n shard-runs of j ended here: the node may be
// free to take more of the job's shards, so its ticks are looked at again.
func (s *Scheduler) shardsEnded(j *job, n int) {
	s.mu.Lock()
	s.busyShards(j.Name, -n)
	if s.shards.busy[j.Name] == 0 {
		now := s.clock.Now()
		for _, e := range s.shards.watch {
			if e.j.Name == j.Name {
				e.next = later(e.ready, now)
			}
		}
	}
	s.mu.Unlock()
	s.poke()
}

// executeShards handles a sharded job's claimed shard-runs: missed ones
// are recorded in one call, the others run tick after tick, the shards of
// one tick at once; a tick that is not a catch-up run starts only within
// MisfireAfter, as in execute.
func (s *Scheduler) executeShards(j *job, items []work) {
	var missed []ledger.RunRecord
	var late []time.Duration
	var runs []work
	for _, w := range items {
		switch {
		case w.elsewhere: // another node's shard of a backfill or re-run; never counted busy
			continue
		case !w.missed:
			runs = append(runs, w)
			continue
		}
		reason := fmt.Sprintf("schedule: tick missed: handled %v late, misfire policy %s", w.late.Round(time.Millisecond), j.Misfire)
		missed = append(missed, s.notRun(j, w, ledger.RunMissed, reason))
		late = append(late, w.late)
	}
	if len(missed) > 0 {
		s.record(missed...)
		for i := range missed {
			s.emit(recordEvent(EventMissed, &missed[i], late[i]))
		}
		s.shardsEnded(j, len(missed))
	}
	onTime := func(w work) bool { return w.scheduled() && !w.catchUp && !w.retake }
	if j.Overlap == OverlapAllow {
		// As execute: an on-time tick's shard-runs start at once, not
		// after the catch-up runs before them.
		var allowed sync.WaitGroup
		defer allowed.Wait()
		for _, w := range runs {
			if onTime(w) {
				allowed.Go(func() {
					s.runTick(j, w)
					s.shardsEnded(j, 1)
				})
			}
		}
		runs = slices.DeleteFunc(runs, onTime)
	}
	for i := 0; i < len(runs); {
		n := i + 1
		for n < len(runs) && runs[n].tick.Equal(runs[i].tick) && runs[n].trigger == runs[i].trigger {
			n++
		}
		w := runs[i]
		if late := s.clock.Now().Sub(w.tick); onTime(w) && i > 0 && late > j.MisfireAfter {
			// As execute: a tick whose turn came past MisfireAfter,
			// after the shard-runs of an earlier tick, is skipped.
			for _, w := range runs[i:n] {
				s.skip(j, w, 1+w.attempts, queuedReason(j, runs[i-1].tick, late))
				s.shardsEnded(j, 1)
			}
			i = n
			continue
		}
		var wg sync.WaitGroup
		for _, w := range runs[i:n] {
			wg.Go(func() {
				s.runTick(j, w)
				s.shardsEnded(j, 1)
			})
		}
		wg.Wait()
		i = n
	}
}

// obtainShard takes a shard-run's lock, once; a retake waits up to the
// lock's TTL and a poll for the stopped node's lock to expire.
func (s *Scheduler) obtainShard(j *job, w work) (*tasklock.Lock, error) {
	key := shardKey(j.key, w.shard)
	o := j.lockOptions(s.node)
	if w.past {
		// A backfill or re-run waits for the shard's run in progress, as
		// obtainPast waits for the job's lock; a retake of one waits
		// for the stopped node's lock to expire the same way.
		return s.lk.Obtain(s.runCtx, key, o)
	}
	timeout := storeTimeout
	if w.retake {
		o.Wait = j.Lock.TTL + s.poll
		timeout += o.Wait
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if w.retake {
		return s.lk.Obtain(ctx, key, o)
	}
	return s.lk.TryObtain(ctx, key, o)
}

// shardsAgain is the line pollShards logs when reading sharded ticks'
// history works again after it failed.
const shardsAgain = "schedule: reading sharded ticks' history again"

// pollShards looks at the watched ticks that are due: it forgets those
// whose shards all have an outcome, and when this node is free claims one
// unclaimed shard or takes over one of a stopped node. Loop only.
func (s *Scheduler) pollShards(now time.Time) {
	s.mu.Lock()
	var due []*shardTick
	var floors map[tickKey]int // a scheduled tick's key -> the lowest base of its backfills and re-runs watched here
	for k, e := range s.shards.watch {
		switch {
		case now.After(e.until):
			delete(s.shards.watch, k)
			continue
		case !now.Before(e.next):
			due = append(due, e)
		}
		if e.w.past {
			if floors == nil {
				floors = make(map[tickKey]int)
			}
			k.trigger = ""
			if f, ok := floors[k]; !ok || e.w.attempts < f {
				floors[k] = e.w.attempts
			}
		}
	}
	s.mu.Unlock()
	if len(due) == 0 {
		return
	}
	slices.SortFunc(due, func(a, b *shardTick) int { return a.w.tick.Compare(b.w.tick) })
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	alive := s.shardAlive()
	for _, e := range due {
		// A whole second: stores may keep ticks to the second.
		rs, err := s.ledger.Runs(ctx, ledger.RunQuery{Job: e.j.Name, From: e.w.tick, To: e.w.tick.Add(time.Second)})
		// Logged once, then once a minute while the store fails: it is
		// read every poll.
		s.noteStore(err)
		if err == nil {
			s.shardsFail.Log(s.log, now, nil, "", shardsAgain, "node", s.node)
		} else {
			s.shardsFail.Log(s.log, now, err, "schedule: reading a sharded tick's history", shardsAgain,
				"node", s.node, "job", e.j.Name, "tick", e.w.tick)
			s.mu.Lock()
			e.next = now.Add(s.poll)
			s.mu.Unlock()
			continue
		}
		latest := latestShards(rs, e.w.tick, e.w.trigger)
		floor, hasPast := floors[keyOf(e.j, e.w)]
		open := make([]int, 0, e.w.shards)
		for k := range e.w.shards {
			// A backfill's or re-run's shard is done once attempted
			// after its base (attempts), a backfill's also when the
			// shard ran before it (a backfill runs what did not run:
			// what is missed or skipped up to the base). Their records
			// share the scheduled tick's key: for the tick's own watch,
			// a shard whose latest attempt is after the base of one
			// watched here is left to that one's watch, lest both take
			// it over from a stopped node.
			r, ok := latest[k]
			if hasPast && !e.w.past && r.Attempt > floor {
				continue
			}
			isOpen := !ok || !r.Status.Final() || r.Status == ledger.RunInterrupted
			if ok && e.w.past && r.Attempt <= e.w.attempts {
				isOpen = e.w.rerun || r.Status == ledger.RunSkipped || r.Status == ledger.RunMissed
			}
			if isOpen {
				open = append(open, k)
			}
		}
		if len(open) == 0 {
			s.mu.Lock()
			delete(s.shards.watch, keyOf(e.j, e.w))
			requests := e.requests
			s.mu.Unlock()
			for _, id := range requests {
				s.triggerDone(e.j.Name, id)
			}
			continue
		}
		s.lookAtShards(ctx, e, open, latest, alive, now)
	}
}

// latestShards is the latest attempt's record of each shard among the
// records of tick and trigger in rs.
func latestShards(rs []ledger.RunRecord, tick time.Time, trigger string) map[int]ledger.RunRecord {
	latest := make(map[int]ledger.RunRecord)
	for _, r := range rs {
		if r.Trigger != trigger || !r.Tick.Equal(tick) {
			continue
		}
		if l, ok := latest[r.Shard]; !ok || r.Attempt > l.Attempt {
			latest[r.Shard] = r
		}
	}
	return latest
}

// lookAtShards claims, when this node is free, the first of the open
// shards that no live node holds, and sets when to look at the tick
// again.
func (s *Scheduler) lookAtShards(ctx context.Context, e *shardTick, open []int, latest map[int]ledger.RunRecord, alive func(context.Context, string) bool, now time.Time) {
	isAlive := func(node string) bool {
		return node != s.node && (alive == nil || alive(ctx, node))
	}
	s.mu.Lock()
	free := s.shards.busy[e.j.Name] == 0 && !now.Before(e.ready)
	s.mu.Unlock()
	waiting := false // a shard no live node holds waits for this node to be free
	next := now.Add(s.sweepEvery)
	for _, k := range open {
		s.mu.Lock()
		mine, holder := e.mine[k], e.holder[k]
		s.mu.Unlock()
		if mine {
			continue
		}
		if holder != "" && isAlive(holder) {
			// Look again when the holder's lease as listed could end:
			// if it stopped, its shard is taken a poll after that.
			if until, ok := s.nodes.live[holder]; ok {
				next = earliest(next, until.Add(s.poll))
			}
			continue
		}
		if !free {
			waiting = true
			continue
		}
		if s.takeShard(ctx, e, k, latest[k], isAlive) {
			free = false
		}
	}
	s.mu.Lock()
	if waiting || free {
		e.next = now.Add(s.poll)
	} else {
		e.next = next // every open shard is held by a live node (or this one)
	}
	s.mu.Unlock()
}

// takeShard claims shard k of a watched tick, following the retake chain
// past stopped nodes, and runs it when the claim is this node's. It
// reports whether it did. last is the shard's latest record: on a retake,
// when it is the stopped node's running record, it is settled interrupted
// at once, not at the next sweep, so that the history never shows the
// stopped run as running beside the one that took it over.
func (s *Scheduler) takeShard(ctx context.Context, e *shardTick, k int, last ledger.RunRecord, isAlive func(string) bool) bool {
	orig := cmp.Or(e.w.claim, e.w.trigger) // the Trigger of the tick's claim key
	s.mu.Lock()
	trig := cmp.Or(e.chain[k], orig)
	s.mu.Unlock()
	tried := make(map[string]bool)
	for range maxRetakeChain {
		held, err := s.claimOne(ctx, e.j.Name, e.w.tick, trig, k)
		if err != nil {
			s.log.Error("schedule: claiming a shard", "node", s.node, "job", e.j.Name, "tick", e.w.tick, "shard", k, "err", err)
			return false
		}
		var ce *ledger.ClaimedError
		switch {
		case held == nil:
			retake := trig != orig
			if retake && last.Status == ledger.RunRunning && tried[last.Node] {
				s.settle([]ledger.RunRecord{s.interrupted(last, s.clock.Now(),
					"node %q stopped before it recorded the outcome: its node lease ended (noticed by %q, which took over the shard)")})
			}
			s.runShard(e, k, max(last.Attempt, e.w.attempts), retake)
			return true
		case !errors.As(held, &ce):
			s.log.Error("schedule: claiming a shard", "node", s.node, "job", e.j.Name, "tick", e.w.tick, "shard", k, "err", held)
			return false
		case ce.Node == "" || isAlive(ce.Node) || tried[ce.Node]:
			// Held by a live node (or one this look cannot tell about).
			s.mu.Lock()
			e.holder[k], e.chain[k] = ce.Node, trig
			s.mu.Unlock()
			return false
		}
		// Held by a stopped node, or by an earlier process of this one:
		// take it over.
		tried[ce.Node] = true
		trig = retakeTrigger(orig, ce.Node)
	}
	return false
}

// retakeTrigger is the Trigger of the retake claim of a stopped node's
// claim with Trigger orig: every taker contends on it (a shard's here, a
// request's in retake.go).
func retakeTrigger(orig, stopped string) string { return orig + "~" + stopped }

// runShard starts a run of shard k of a watched tick that this node just
// claimed.
func (s *Scheduler) runShard(e *shardTick, k, attempts int, retake bool) {
	w := e.w
	w.shard, w.attempts, w.retake = k, attempts, retake
	if retake {
		// A retake goes on with a run that started in time: it runs,
		// whatever this node's first look at the tick said. (A node
		// that started after the tick saw it late, and would record
		// the shard-run missed, though another node began it.)
		w.missed = false
	}
	s.mu.Lock()
	e.mine[k] = true
	s.busyShards(e.j.Name, 1)
	s.active++
	s.mu.Unlock()
	if retake {
		s.log.Info("schedule: took over a shard of a stopped node", "node", s.node, "job", e.j.Name, "tick", w.tick, "shard", k)
	}
	s.emit(Event{Type: EventClaimed, Job: e.j.Name, Tick: w.tick.UTC(), Trigger: w.trigger, Shard: k, Shards: w.shards, CatchUp: w.catchUp, Late: s.clock.Now().Sub(w.tick)})
	go s.execute(e.j, []work{w})
}

// TickStatus is the overall status of one tick (or trigger-now request)
// of a job from its history records: every record of one Job, Tick and
// Trigger, any shards and attempts, as Ledger.Runs returns them. The
// latest attempt of each shard counts: RunRunning while any shard runs, or
// while fewer shards have a record than the job's shard count (Shards)
// says; RunOK when every shard is ok; otherwise the worst of the shards'
// statuses, from the worst: failed, timeout, lost, interrupted, missed,
// skipped. For a job that is not sharded it is its latest attempt's
// status. It returns "" for no records.
func TickStatus(rs []ledger.RunRecord) ledger.RunStatus {
	if len(rs) == 0 {
		return ""
	}
	latest := make(map[int]ledger.RunRecord)
	shards := 1
	for _, r := range rs {
		shards = max(shards, r.Shards)
		if l, ok := latest[r.Shard]; !ok || r.Attempt > l.Attempt {
			latest[r.Shard] = r
		}
	}
	worst := ledger.RunOK
	for _, r := range latest {
		if r.Status == ledger.RunRunning {
			return ledger.RunRunning
		}
		if severity(r.Status) > severity(worst) {
			worst = r.Status
		}
	}
	if len(latest) < shards {
		return ledger.RunRunning
	}
	return worst
}

// severity orders the final statuses for TickStatus, worst highest.
func severity(st ledger.RunStatus) int {
	switch st {
	case ledger.RunOK:
		return 0
	case ledger.RunSkipped:
		return 1
	case ledger.RunMissed:
		return 2
	case ledger.RunInterrupted:
		return 3
	case ledger.RunLost:
		return 4
	case ledger.RunTimeout:
		return 5
	}
	return 6 // failed, or unknown
}

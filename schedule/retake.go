package schedule

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/tasklock/tasklock/ledger"
)

// A trigger-now, backfill or re-run request of a plain job is run by the
// node whose claim of it wins (pass); that node removes the request from
// the ledger as the run starts. A node whose claim of it fails leaves the
// request alone and keeps it here, with the node that holds the claim:
// should that node stop before it starts the run (killed, or shut down
// with the request still queued behind a run of the job), the request
// would otherwise stay pending with no node to run it. Every sweep
// (NodeLeaseTTL/3), a node looks at the requests it keeps whose holder no
// longer holds its node lease (or is an earlier process of this node) and
// takes them over with a retake claim, as a stopped node's shard is
// (shard.go): the same job and tick, Trigger = the request's claim + "~" +
// the stopped node. Every taker of one stopped node's request contends on
// that one key; if the taker stops too, the next one claims with its name.
// A sharded job's requests stay in the ledger until every shard has run,
// and its watch takes shards over (shard.go).

// heldRequest is a request of a plain job another node claimed first.
type heldRequest struct {
	j      *job
	w      work   // its work, as this node's pass made it
	holder string // the node holding the request's claim, or its latest retake's
}

// heldElsewhere keeps w, a request of j whose claim another node holds
// (held, the claim's result), to take it over should that node stop.
func (s *Scheduler) heldElsewhere(j *job, w work, held error) {
	var ce *ledger.ClaimedError
	if !errors.As(held, &ce) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(map[triggerKey]*heldRequest)
	}
	s.held[triggerKey{j.Name, w.request}] = &heldRequest{j: j, w: w, holder: ce.Node}
}

// retakeRequests takes over the kept requests whose holder stopped: it
// claims each one's retake key and runs the request when the claim is
// this node's. Loop only.
func (s *Scheduler) retakeRequests() {
	s.mu.Lock()
	var rs []*heldRequest
	for k, h := range s.held {
		j := s.jobs[k.job]
		if !hasTrigger(s.states[k.job], k.id) || j == nil || j.Shards > 1 {
			delete(s.held, k) // done, removed, or now sharded (its watch takes requests over)
			continue
		}
		h.j = j // as changed since, if it was
		rs = append(rs, h)
	}
	s.mu.Unlock()
	if len(rs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	// As the shard passes tell: a listing of the node leases the sweep
	// just read serves (another costs the store a pass over every key),
	// unless the holder's lease as listed may have ended since.
	alive := s.shardAlive()
	own := s.holdsOwnLease()
	won := map[*job][]work{}
	for _, h := range rs {
		if h.holder == "" || (h.holder == s.node && !own) || (h.holder != s.node && alive(ctx, h.holder)) {
			continue // held by a live node, or one this look cannot tell about
		}
		trig := retakeTrigger(cmp.Or(h.w.claim, h.w.trigger), h.holder)
		held, err := s.claimOne(ctx, h.j.Name, h.w.tick, trig, 0)
		var ce *ledger.ClaimedError
		switch {
		case err != nil:
			s.log.Error("schedule: taking over a request of a stopped node", "node", s.node, "job", h.j.Name, "request", h.w.request, "err", err)
		case held == nil:
			s.mu.Lock()
			delete(s.held, triggerKey{h.j.Name, h.w.request})
			s.mu.Unlock()
			s.log.Warn("schedule: taking over a request of a stopped node", "node", s.node, "job", h.j.Name, "request", h.w.request, "tick", h.w.tick, "stopped", h.holder)
			won[h.j] = append(won[h.j], h.w)
		case errors.As(held, &ce):
			s.mu.Lock()
			h.holder = ce.Node // a taker: look at it next time
			s.mu.Unlock()
		}
	}
	// Each job's as a pass's claimed work runs (execute): one after
	// another, oldest tick first.
	for j, ws := range won {
		slices.SortStableFunc(ws, func(a, b work) int { return a.tick.Compare(b.tick) })
		s.mu.Lock()
		s.active++
		s.mu.Unlock()
		go s.execute(j, ws)
	}
}

// hasTrigger reports whether the request id is pending in st.
func hasTrigger(st ledger.JobState, id string) bool {
	for _, tr := range st.Triggers {
		if tr.ID == id {
			return true
		}
	}
	return false
}

// stoppingNow reports whether Shutdown has begun.
func (s *Scheduler) stoppingNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

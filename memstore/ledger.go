package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Ledger = (*Store)(nil)

// ledgerState is a Store's tick ledger. It has its own mutex: ledger calls
// never wait for lease calls or the other way round.
type ledgerState struct {
	mu     sync.Mutex
	claims map[claimKey]claimEntry
	runs   map[string]map[runKey]*driver.RunRecord // by job
	states map[string]*driver.JobState
}

// claimKey is (job, tick, trigger) with the tick as Unix seconds and
// nanoseconds: time.Time itself is not a safe map key.
type claimKey struct {
	job     string
	sec     int64
	nsec    int32
	trigger string
}

type claimEntry struct {
	token, node string
	at, expires time.Time
}

type runKey struct {
	claimKey
	attempt int
}

func newClaimKey(job string, tick time.Time, trigger string) claimKey {
	return claimKey{job: job, sec: tick.Unix(), nsec: int32(tick.Nanosecond()), trigger: trigger}
}

// ledger returns the Store's ledger state, made on first use.
func (s *Store) ledger() *ledgerState {
	s.ledgerOnce.Do(func() {
		s.ledgerSt = &ledgerState{
			claims: make(map[claimKey]claimEntry),
			runs:   make(map[string]map[runKey]*driver.RunRecord),
			states: make(map[string]*driver.JobState),
		}
	})
	return s.ledgerSt
}

// now is the store's clock as a wall time in UTC.
func (s *Store) now() time.Time { return s.clock.Now().Round(0).UTC() }

// Claim implements driver.Ledger.
func (s *Store) Claim(ctx context.Context, ps []driver.ClaimParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, nil
	}
	for i := range ps {
		if err := checkClaim(&ps[i]); err != nil {
			return nil, err
		}
	}
	ls := s.ledger()
	res := make([]error, len(ps))
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := s.now()
	for i, p := range ps {
		k := newClaimKey(p.Job, p.Tick, p.Trigger)
		if c, ok := ls.claims[k]; ok && now.Before(c.expires) {
			if c.token != p.Token {
				res[i] = &driver.ClaimedError{Node: c.node, At: c.at}
			}
			continue
		}
		ls.claims[k] = claimEntry{token: p.Token, node: p.Node, at: now, expires: now.Add(p.Retain)}
	}
	return res, nil
}

func checkClaim(p *driver.ClaimParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	return nil
}

// RecordRuns implements driver.Ledger.
func (s *Store) RecordRuns(ctx context.Context, rs []driver.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range rs {
		if rs[i].Job == "" || rs[i].Tick.IsZero() {
			return errors.New("memstore: record run: empty Job or zero Tick")
		}
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := s.now()
	for _, r := range rs {
		r.Recorded = now
		m := ls.runs[r.Job]
		if m == nil {
			m = make(map[runKey]*driver.RunRecord)
			ls.runs[r.Job] = m
		}
		m[runKey{newClaimKey(r.Job, r.Tick, r.Trigger), r.Attempt}] = &r
	}
	return nil
}

// Runs implements driver.Ledger.
func (s *Store) Runs(ctx context.Context, q driver.RunQuery) ([]driver.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("memstore: runs: negative Limit %d", q.Limit)
	}
	ls := s.ledger()
	ls.mu.Lock()
	var out []driver.RunRecord
	add := func(m map[runKey]*driver.RunRecord) {
		for _, r := range m {
			if q.Matches(r) {
				out = append(out, *r)
			}
		}
	}
	if q.Job != "" {
		add(ls.runs[q.Job])
	} else {
		for _, m := range ls.runs {
			add(m)
		}
	}
	ls.mu.Unlock()
	slices.SortFunc(out, func(a, b driver.RunRecord) int { return a.Key().Compare(b.Key()) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// SetJobState implements driver.Ledger.
func (s *Store) SetJobState(ctx context.Context, p driver.JobStateParams) (driver.JobState, error) {
	if err := ctx.Err(); err != nil {
		return driver.JobState{}, err
	}
	if err := p.Check(); err != nil {
		return driver.JobState{}, fmt.Errorf("memstore: %w", err)
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	st := ls.states[p.Job]
	if st == nil {
		st = &driver.JobState{Job: p.Job}
	}
	switch p.Op {
	case driver.JobPause:
		st.Paused = true
	case driver.JobResume:
		st.Paused = false
	case driver.JobTrigger:
		if !slices.ContainsFunc(st.Triggers, func(t driver.TriggerRequest) bool { return t.ID == p.Trigger }) {
			st.Triggers = append(st.Triggers, driver.TriggerRequest{ID: p.Trigger, At: s.now()})
		}
	case driver.JobTriggerDone:
		st.Triggers = slices.DeleteFunc(st.Triggers, func(t driver.TriggerRequest) bool { return t.ID == p.Trigger })
	case driver.JobRegister:
		if st.Spec != p.Spec {
			st.Spec, st.Since = p.Spec, p.Since.Round(0).UTC()
		}
	case driver.JobForget:
		st = &driver.JobState{Job: p.Job}
	}
	if !st.Paused && len(st.Triggers) == 0 && st.Spec == "" {
		delete(ls.states, p.Job)
	} else {
		ls.states[p.Job] = st
	}
	return copyState(st), nil
}

func copyState(st *driver.JobState) driver.JobState {
	c := *st
	c.Triggers = slices.Clone(st.Triggers)
	return c
}

// JobStates implements driver.Ledger.
func (s *Store) JobStates(ctx context.Context) ([]driver.JobState, error) {
	return s.jobStates(ctx, func(st *driver.JobState) bool { return st.Paused || len(st.Triggers) > 0 })
}

// Jobs implements driver.Ledger.
func (s *Store) Jobs(ctx context.Context) ([]driver.JobState, error) {
	return s.jobStates(ctx, func(*driver.JobState) bool { return true })
}

func (s *Store) jobStates(ctx context.Context, keep func(*driver.JobState) bool) ([]driver.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make([]driver.JobState, 0, len(ls.states))
	for _, st := range ls.states {
		if keep(st) {
			out = append(out, copyState(st))
		}
	}
	return out, nil
}

// Prune implements driver.Ledger.
func (s *Store) Prune(ctx context.Context, p driver.PruneParams) (driver.PruneResult, error) {
	if err := ctx.Err(); err != nil {
		return driver.PruneResult{}, err
	}
	if p.RunsOlderThan < 0 || p.KeepPerJob < 0 || p.TriggersOlderThan < 0 {
		return driver.PruneResult{}, errors.New("memstore: prune: negative parameter")
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := s.now()
	var res driver.PruneResult
	for k, c := range ls.claims {
		if !now.Before(c.expires) {
			delete(ls.claims, k)
			res.Claims++
		}
	}
	for job, m := range ls.runs {
		if p.RunsOlderThan > 0 {
			cutoff := now.Add(-p.RunsOlderThan)
			for k, r := range m {
				if r.Recorded.Before(cutoff) {
					delete(m, k)
					res.Runs++
				}
			}
		}
		if p.KeepPerJob > 0 && len(m) > p.KeepPerJob {
			keys := make([]runKey, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, func(a, b runKey) int { return m[a].Key().Compare(m[b].Key()) })
			for _, k := range keys[p.KeepPerJob:] {
				delete(m, k)
				res.Runs++
			}
		}
		if len(m) == 0 {
			delete(ls.runs, job)
		}
	}
	if p.TriggersOlderThan > 0 {
		cutoff := now.Add(-p.TriggersOlderThan)
		for job, st := range ls.states {
			n := len(st.Triggers)
			st.Triggers = slices.DeleteFunc(st.Triggers, func(t driver.TriggerRequest) bool { return t.At.Before(cutoff) })
			res.Triggers += n - len(st.Triggers)
			if !st.Paused && len(st.Triggers) == 0 {
				delete(ls.states, job)
			}
		}
	}
	return res, nil
}

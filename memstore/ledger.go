package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Ledger = (*Store)(nil)

// ledgerState is a Store's tick ledger. It has its own mutex: ledger calls
// never wait for lease calls or the other way round.
type ledgerState struct {
	mu     sync.Mutex
	claims map[claimKey]claimEntry
	runs   map[string]map[runKey]*ledger.RunRecord // by job
	states map[string]*ledger.JobState
	// The catalog (ledger.Catalog): definitions, the last version of every
	// job ever defined, and the audit list, oldest first.
	defs     map[string]ledger.JobDef
	versions map[string]int64
	audit    []ledger.AuditEntry
	marks    map[string]markEntry // ledger.Marker, by node
}

type markEntry struct {
	mark    ledger.ClaimMark
	expires time.Time
}

// claimKey is (job, tick, trigger, shard) with the tick as Unix seconds and
// nanoseconds: time.Time itself is not a safe map key.
type claimKey struct {
	job     string
	sec     int64
	nsec    int32
	trigger string
	shard   int
}

type claimEntry struct {
	token, node string
	at, expires time.Time
}

type runKey struct {
	claimKey
	attempt int
}

func newClaimKey(job string, tick time.Time, trigger string, shard int) claimKey {
	return claimKey{job: job, sec: tick.Unix(), nsec: int32(tick.Nanosecond()), trigger: trigger, shard: shard}
}

// ledger returns the Store's ledger state, made on first use.
func (s *Store) ledger() *ledgerState {
	s.ledgerOnce.Do(func() {
		s.ledgerSt = &ledgerState{
			claims:   make(map[claimKey]claimEntry),
			runs:     make(map[string]map[runKey]*ledger.RunRecord),
			states:   make(map[string]*ledger.JobState),
			defs:     make(map[string]ledger.JobDef),
			versions: make(map[string]int64),
			marks:    make(map[string]markEntry),
		}
	})
	return s.ledgerSt
}

// now is the store's clock as a wall time in UTC.
func (s *Store) now() time.Time { return s.clock.Now().Round(0).UTC() }

// Claim implements ledger.Ledger.
func (s *Store) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
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
		k := newClaimKey(p.Job, p.Tick, p.Trigger, p.Shard)
		if c, ok := ls.claims[k]; ok && now.Before(c.expires) {
			if c.token != p.Token {
				res[i] = &ledger.ClaimedError{Node: c.node, At: c.at}
			}
			continue
		}
		ls.claims[k] = claimEntry{token: p.Token, node: p.Node, at: now, expires: now.Add(p.Retain)}
	}
	return res, nil
}

func checkClaim(p *ledger.ClaimParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	return nil
}

// RecordRuns implements ledger.Ledger.
func (s *Store) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range rs {
		if rs[i].Job == "" || rs[i].Tick.IsZero() {
			return errors.New("memstore: record run: empty Job or zero Tick")
		}
		if rs[i].Shard < 0 || rs[i].Shard >= ledger.MaxShards {
			return fmt.Errorf("memstore: record run %q: Shard %d is not in [0, %d)", rs[i].Job, rs[i].Shard, ledger.MaxShards)
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
			m = make(map[runKey]*ledger.RunRecord)
			ls.runs[r.Job] = m
		}
		m[runKey{newClaimKey(r.Job, r.Tick, r.Trigger, r.Shard), r.Attempt}] = &r
	}
	return nil
}

// Runs implements ledger.Ledger.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("memstore: runs: negative Limit %d", q.Limit)
	}
	ls := s.ledger()
	ls.mu.Lock()
	var out []ledger.RunRecord
	add := func(m map[runKey]*ledger.RunRecord) {
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
	slices.SortFunc(out, func(a, b ledger.RunRecord) int { return a.Key().Compare(b.Key()) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// SetJobState implements ledger.Ledger.
func (s *Store) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobState{}, err
	}
	if err := p.Check(); err != nil {
		return ledger.JobState{}, fmt.Errorf("memstore: %w", err)
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	st := ls.states[p.Job]
	if st == nil {
		st = &ledger.JobState{Job: p.Job}
	}
	switch p.Op {
	case ledger.JobPause:
		st.Paused = true
	case ledger.JobResume:
		st.Paused = false
	case ledger.JobTrigger, ledger.JobCancel:
		if !slices.ContainsFunc(st.Triggers, func(t ledger.TriggerRequest) bool { return t.ID == p.Trigger }) {
			tr := p.Request()
			tr.At = s.now()
			st.Triggers = append(st.Triggers, tr)
		}
	case ledger.JobTriggerDone:
		st.Triggers = slices.DeleteFunc(st.Triggers, func(t ledger.TriggerRequest) bool { return t.ID == p.Trigger })
	case ledger.JobRegister:
		if st.Spec != p.Spec {
			st.Spec, st.Since = p.Spec, p.Since.Round(0).UTC()
		}
	case ledger.JobForget:
		st = &ledger.JobState{Job: p.Job}
	}
	if !st.Paused && len(st.Triggers) == 0 && st.Spec == "" {
		delete(ls.states, p.Job)
	} else {
		ls.states[p.Job] = st
	}
	return copyState(st), nil
}

func copyState(st *ledger.JobState) ledger.JobState {
	c := *st
	c.Triggers = slices.Clone(st.Triggers)
	return c
}

// JobStates implements ledger.Ledger.
func (s *Store) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	return s.jobStates(ctx, func(st *ledger.JobState) bool { return st.Paused || len(st.Triggers) > 0 })
}

// Jobs implements ledger.Ledger.
func (s *Store) Jobs(ctx context.Context) ([]ledger.JobState, error) {
	return s.jobStates(ctx, func(*ledger.JobState) bool { return true })
}

func (s *Store) jobStates(ctx context.Context, keep func(*ledger.JobState) bool) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make([]ledger.JobState, 0, len(ls.states))
	for _, st := range ls.states {
		if keep(st) {
			out = append(out, copyState(st))
		}
	}
	return out, nil
}

// Prune implements ledger.Ledger.
func (s *Store) Prune(ctx context.Context, p ledger.PruneParams) (ledger.PruneResult, error) {
	if err := ctx.Err(); err != nil {
		return ledger.PruneResult{}, err
	}
	if p.RunsOlderThan < 0 || p.KeepPerJob < 0 || p.TriggersOlderThan < 0 {
		return ledger.PruneResult{}, errors.New("memstore: prune: negative parameter")
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := s.now()
	var res ledger.PruneResult
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
			st.Triggers = slices.DeleteFunc(st.Triggers, func(t ledger.TriggerRequest) bool { return t.At.Before(cutoff) })
			res.Triggers += n - len(st.Triggers)
			if !st.Paused && len(st.Triggers) == 0 && st.Spec == "" {
				delete(ls.states, job)
			}
		}
	}
	return res, nil
}

var _ ledger.Registrar = (*Store)(nil)

// RegisterJobs implements ledger.Registrar.
func (s *Store) RegisterJobs(ctx context.Context, ps []ledger.JobStateParams) ([]ledger.JobState, error) {
	if err := ledger.CheckRegister(ps); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	out := make([]ledger.JobState, len(ps))
	for i, p := range ps {
		p.Op = ledger.JobRegister
		st, err := s.SetJobState(ctx, p)
		if err != nil {
			return nil, err
		}
		out[i] = ledger.JobState{Job: st.Job, Spec: st.Spec, Since: st.Since}
	}
	return out, nil
}

var _ ledger.Marker = (*Store)(nil)

// Mark implements ledger.Marker.
func (s *Store) Mark(ctx context.Context, m ledger.ClaimMark, ttl time.Duration) ([]ledger.ClaimMark, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.Check(ttl); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := s.now()
	ls.marks[m.Node] = markEntry{mark: m, expires: now.Add(ttl)}
	out := make([]ledger.ClaimMark, 0, len(ls.marks))
	for node, e := range ls.marks {
		if !now.Before(e.expires) {
			delete(ls.marks, node)
			continue
		}
		out = append(out, e.mark)
	}
	return out, nil
}

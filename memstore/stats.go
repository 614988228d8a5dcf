package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Stats = (*Store)(nil)

// RunStats implements ledger.Stats by going over the records in memory.
func (s *Store) RunStats(ctx context.Context, q ledger.StatsQuery) (ledger.RunStats, error) {
	if err := ctx.Err(); err != nil {
		return ledger.RunStats{}, err
	}
	if err := q.Check(); err != nil {
		return ledger.RunStats{}, fmt.Errorf("memstore: %w", err)
	}
	out := ledger.NewRunStats(q)
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, m := range ls.runs {
		for _, r := range m {
			out.Add(&q, r)
		}
	}
	return out, nil
}

// RecentStatuses implements ledger.Stats.
func (s *Store) RecentStatuses(ctx context.Context, jobs []string, n int) (map[string][]ledger.RunStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ledger.CheckRecent(jobs, n); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make(map[string][]ledger.RunStatus)
	for _, job := range jobs {
		rs := make([]*ledger.RunRecord, 0, len(ls.runs[job]))
		for _, r := range ls.runs[job] {
			rs = append(rs, r)
		}
		if len(rs) == 0 {
			continue
		}
		slices.SortFunc(rs, func(a, b *ledger.RunRecord) int { return a.Key().Compare(b.Key()) })
		sts := make([]ledger.RunStatus, 0, min(n, len(rs)))
		for _, r := range rs[:min(n, len(rs))] {
			sts = append(sts, r.Status)
		}
		out[job] = sts
	}
	return out, nil
}

// LatestRuns implements ledger.Latest.
func (s *Store) LatestRuns(ctx context.Context, jobs []string) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ledger.CheckLatest(jobs); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var out []ledger.RunRecord
	for _, job := range jobs {
		var newest *ledger.RunRecord
		for _, r := range ls.runs[job] {
			if newest == nil || r.Key().Compare(newest.Key()) < 0 {
				newest = r
			}
		}
		if newest != nil {
			r := *newest
			r.Output = ""
			out = append(out, r)
		}
	}
	return out, nil
}

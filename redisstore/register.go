package redisstore

import (
	"context"
	"fmt"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Registrar = (*Store)(nil)

// RegisterJobs implements ledger.Registrar: ledger_register.lua once per
// job, scriptChunk jobs to a pipeline (one round trip each).
func (s *Store) RegisterJobs(ctx context.Context, ps []ledger.JobStateParams) ([]ledger.JobState, error) {
	if err := ledger.CheckRegister(ps); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	out := make([]ledger.JobState, len(ps))
	for from := 0; from < len(ps); from += scriptChunk {
		chunk := ps[from:min(from+scriptChunk, len(ps))]
		calls := make([]*scriptCall, len(chunk))
		for i, p := range chunk {
			calls[i] = &scriptCall{script: registerScript, keys: []string{s.specsKey()},
				args: []any{p.Job, p.Spec, micros(p.Since)}}
		}
		if err := s.runCalls(ctx, calls, nil); err != nil {
			return nil, ledgerErr(fmt.Sprintf("register %d jobs", len(ps)), err)
		}
		for i, c := range calls {
			st := ledger.JobState{Job: chunk[i].Job}
			v, err := c.cmd.Text()
			if err == nil {
				err = decodeSpec(&st, v)
			}
			if err != nil {
				return nil, ledgerErr(fmt.Sprintf("register job %q", chunk[i].Job), err)
			}
			out[from+i] = st
		}
	}
	return out, nil
}

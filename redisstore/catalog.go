package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Catalog = (*Store)(nil)

//go:embed catalog_write.lua
var catalogWriteSrc string

//go:embed catalog_audit.lua
var catalogAuditSrc string

var (
	catalogWriteScript = newLuaScript(catalogWriteSrc)
	catalogAuditScript = newLuaScript(catalogAuditSrc)
)

// The catalog's keys (ledger.Catalog) share the hash tag "catalog", so that
// one script changes a definition and appends its audit entry on a Cluster
// too. No job's key has that tag: theirs is "job:"+J.

// catalogBase returns the start of every catalog key:
// Prefix+"ledger:{catalog}".
func (s *Store) catalogBase() string { return s.prefix + "ledger:{catalog}" }

// catalogKeys returns catalog_write.lua's keys for an entry of job ("" for
// none): the seq counter, the audit entries and index, the definitions and
// versions, and job's audit index.
func (s *Store) catalogKeys(job string) []string {
	b := s.catalogBase()
	keys := []string{b + ":seq", b + ":audit", b + ":audit:all", b + ":defs", b + ":versions"}
	if job != "" {
		keys = append(keys, s.jobAuditKey(job))
	}
	return keys
}

// jobAuditKey is the sorted set of the seqs of job's audit entries.
func (s *Store) jobAuditKey(job string) string { return s.catalogBase() + ":audit:job:" + job }

// PutJobDef implements ledger.Catalog with one call of catalog_write.lua,
// which checks IfVersion, changes the definition and appends the audit
// entry atomically: one round trip. Updated and the entry's At are Redis's
// TIME.
func (s *Store) PutJobDef(ctx context.Context, p ledger.JobDefParams) (ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobDef{}, ledgerErr("put job definition", err)
	}
	if err := p.Check(); err != nil {
		return ledger.JobDef{}, fmt.Errorf("redisstore: %w", err)
	}
	del := "0"
	if p.Delete {
		del = "1"
	}
	call := &scriptCall{script: catalogWriteScript, keys: s.catalogKeys(p.Job),
		args: []any{"put", p.Job, p.Audit.Who, p.Audit.Action, p.Audit.Detail, p.Def, del, p.IfVersion}}
	what := fmt.Sprintf("put job definition %q", p.Job)
	if err := s.runCalls(ctx, []*scriptCall{call}, nil); err != nil {
		return ledger.JobDef{}, ledgerErr(what, err)
	}
	res, err := call.cmd.StringSlice()
	if err != nil {
		return ledger.JobDef{}, ledgerErr(what, err)
	}
	switch {
	case len(res) == 1 && res[0] == "version":
		return ledger.JobDef{}, fmt.Errorf("redisstore: job %q: %w", p.Job, ledger.ErrVersion)
	case len(res) == 1 && res[0] == "nodef":
		return ledger.JobDef{}, fmt.Errorf("redisstore: job %q: %w", p.Job, ledger.ErrNoJobDef)
	case len(res) != 2 || res[0] != "ok":
		return ledger.JobDef{}, ledgerErr(what, fmt.Errorf("unexpected reply %q", res))
	}
	d, err := decodeJobDef(p.Job, res[1])
	if err != nil {
		return ledger.JobDef{}, ledgerErr(what, err)
	}
	d.Deleted = p.Delete
	return d, nil
}

// decodeJobDef reads job's field of the definitions hash,
// version:updated:def.
func decodeJobDef(job, v string) (ledger.JobDef, error) {
	ver, rest, ok1 := strings.Cut(v, ":")
	at, def, ok2 := strings.Cut(rest, ":")
	n, err1 := strconv.ParseInt(ver, 10, 64)
	us, err2 := strconv.ParseInt(at, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || n <= 0 {
		return ledger.JobDef{}, fmt.Errorf("malformed job definition of %q", job)
	}
	return ledger.JobDef{Job: job, Def: def, Version: n, Updated: fromMicros(us)}, nil
}

// JobDefs implements ledger.Catalog with one HGETALL of the definitions
// hash.
func (s *Store) JobDefs(ctx context.Context) ([]ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("job definitions", err)
	}
	m, err := s.client.HGetAll(ctx, s.catalogBase()+":defs").Result()
	if err != nil {
		return nil, ledgerErr("job definitions", err)
	}
	out := make([]ledger.JobDef, 0, len(m))
	for job, v := range m {
		d, err := decodeJobDef(job, v)
		if err != nil {
			return nil, ledgerErr("job definitions", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// AppendAudit implements ledger.Catalog with one call of
// catalog_write.lua. At is Redis's TIME.
func (s *Store) AppendAudit(ctx context.Context, e ledger.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return ledgerErr("append audit entry", err)
	}
	if err := e.Check(); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	call := &scriptCall{script: catalogWriteScript, keys: s.catalogKeys(e.Job),
		args: []any{"append", e.Job, e.Who, e.Action, e.Detail}}
	err := s.runCalls(ctx, []*scriptCall{call}, nil)
	if err == nil {
		err = call.cmd.Err()
	}
	if err != nil {
		return ledgerErr("append audit entry", err)
	}
	return nil
}

// Audit implements ledger.Catalog with one call of catalog_audit.lua,
// which reads the index of every entry, or of q.Job's, from q.Before down
// and at most q.Limit entries.
func (s *Store) Audit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("audit", err)
	}
	if q.Limit < 0 || q.Before < 0 {
		return nil, fmt.Errorf("redisstore: audit: negative Limit %d or Before %d", q.Limit, q.Before)
	}
	index := s.catalogBase() + ":audit:all"
	if q.Job != "" {
		index = s.jobAuditKey(q.Job)
	}
	hi := "+inf"
	if q.Before > 0 {
		hi = "(" + strconv.FormatInt(q.Before, 10)
	}
	call := &scriptCall{script: catalogAuditScript, keys: []string{index, s.catalogBase() + ":audit"}, args: []any{hi, q.Limit}}
	if err := s.runCalls(ctx, []*scriptCall{call}, nil); err != nil {
		return nil, ledgerErr("audit", err)
	}
	res, err := call.cmd.StringSlice()
	if err != nil {
		return nil, ledgerErr("audit", err)
	}
	out := make([]ledger.AuditEntry, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		e, err := decodeAudit(res[i], res[i+1])
		if err != nil {
			return nil, ledgerErr("audit", fmt.Errorf("entry %s: %w", res[i], err))
		}
		out = append(out, e)
	}
	return out, nil
}

// errAudit is returned for a stored audit entry this version cannot read.
var errAudit = errors.New("malformed audit entry")

// decodeAudit reads the audit entry seq stored as v: at, then who, job,
// action and detail, each as len:bytes.
func decodeAudit(seq, v string) (ledger.AuditEntry, error) {
	var e ledger.AuditEntry
	n, err1 := strconv.ParseInt(seq, 10, 64)
	at, body, ok := strings.Cut(v, ":")
	us, err2 := strconv.ParseInt(at, 10, 64)
	if err1 != nil || err2 != nil || !ok {
		return e, errAudit
	}
	e.Seq, e.At = n, fromMicros(us)
	for _, f := range []*string{&e.Who, &e.Job, &e.Action, &e.Detail} {
		ln, rest, ok := strings.Cut(body, ":")
		l, err := strconv.Atoi(ln)
		if !ok || err != nil || l < 0 || l > len(rest) {
			return e, errAudit
		}
		*f, body = rest[:l], rest[l:]
	}
	return e, nil
}

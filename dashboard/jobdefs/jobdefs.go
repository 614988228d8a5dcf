// Package jobdefs changes the jobs defined at run time — kept in a store's
// ledger.Catalog — for the dashboard's job API and `tasklock jobs
// create|update|delete`, so that both check versions and write the audit
// the same way. The definitions are JSON objects of the keys of a job of
// tasklock serve's configuration file; checking them is the caller's.
package jobdefs

import (
	"context"
	"errors"
	"fmt"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/ledger"
)

// Op is what a Change does.
type Op string

// The changes, named as their audit entries' Action.
const (
	Create Op = "create"
	Update Op = "update"
	Delete Op = "delete"
)

// Change is one change of a job defined at run time.
type Change struct {
	Op     Op
	Job    string
	Def    string // the checked definition (Create, Update)
	Cancel bool   // Delete: cancel the job's runs in progress, rather than let them finish
	Who    string // the actor, for the audit: "cli:user@host", "api:token", ...
}

// ErrExists is returned by Apply for a Create of a job that is defined
// already.
var ErrExists = errors.New("jobdefs: a job of that name is defined at run time already")

// ErrNotDefined is returned by Apply for an Update or Delete of a job that
// is not defined at run time; it wraps ledger.ErrNoJobDef.
var ErrNotDefined = fmt.Errorf("jobdefs: %w", ledger.ErrNoJobDef)

// ErrChanged is returned by Apply when another change of the same job
// came between its read and its write; nothing was changed. It wraps
// ledger.ErrVersion.
var ErrChanged = fmt.Errorf("jobdefs: %w; try again", ledger.ErrVersion)

// Result is what Apply did.
type Result struct {
	Def     ledger.JobDef
	Changed bool   // false: an Update to the definition in force, which Apply leaves alone
	Detail  string // the audit entry's Detail
}

// Answer is what c did, in the JSON shape the API and the CLI share.
func (r Result) Answer(c Change) apijson.JobChange {
	return apijson.JobChange{Job: c.Job, Op: string(c.Op), Version: r.Def.Version, Changed: r.Changed, Detail: r.Detail}
}

// Apply makes the change, with its audit entry, in one PutJobDef that
// checks the version it read: two changes of one job at once cannot both
// succeed on the same version.
func Apply(ctx context.Context, cat ledger.Catalog, c Change) (Result, error) {
	if c.Who == "" {
		return Result{}, errors.New("jobdefs: empty Who")
	}
	defs, err := cat.JobDefs(ctx)
	if err != nil {
		return Result{}, err
	}
	var cur *ledger.JobDef
	for i := range defs {
		if defs[i].Job == c.Job {
			cur = &defs[i]
		}
	}
	p := ledger.JobDefParams{Job: c.Job, Def: c.Def, Audit: ledger.AuditEntry{Who: c.Who, Job: c.Job, Action: string(c.Op)}}
	switch c.Op {
	case Create:
		if cur != nil {
			return Result{}, fmt.Errorf("job %q (version %d): %w", c.Job, cur.Version, ErrExists)
		}
		p.IfVersion = -1
		p.Audit.Detail = apijson.DefDiff("", c.Def)
	case Update:
		if cur == nil {
			return Result{}, fmt.Errorf("job %q: %w", c.Job, ErrNotDefined)
		}
		if cur.Def == c.Def {
			return Result{Def: *cur}, nil
		}
		p.IfVersion = cur.Version
		p.Audit.Detail = apijson.DefDiff(cur.Def, c.Def)
	case Delete:
		if cur == nil {
			return Result{}, fmt.Errorf("job %q: %w", c.Job, ErrNotDefined)
		}
		p.Delete, p.Def, p.IfVersion = true, "", cur.Version
		p.Audit.Detail = apijson.DeleteDetail(c.Cancel)
	default:
		return Result{}, fmt.Errorf("jobdefs: unknown Op %q", c.Op)
	}
	d, err := cat.PutJobDef(ctx, p)
	switch {
	case errors.Is(err, ledger.ErrVersion) && c.Op == Create:
		return Result{}, fmt.Errorf("job %q: %w", c.Job, ErrExists)
	case errors.Is(err, ledger.ErrVersion):
		return Result{}, fmt.Errorf("job %q: %w", c.Job, ErrChanged)
	case errors.Is(err, ledger.ErrNoJobDef):
		return Result{}, fmt.Errorf("job %q: %w", c.Job, ErrNotDefined)
	case err != nil:
		return Result{}, err
	}
	return Result{Def: d, Changed: true, Detail: p.Audit.Detail}, nil
}

// Record appends an audit entry for an action that changes no definition
// (pause, resume, trigger), when the store keeps a catalog; a store that
// does not is not an error: it keeps no audit.
func Record(ctx context.Context, store any, e ledger.AuditEntry) error {
	cat, ok := store.(ledger.Catalog)
	if !ok {
		return nil
	}
	e.Detail = apijson.ClipDetail(e.Detail)
	return cat.AppendAudit(ctx, e)
}

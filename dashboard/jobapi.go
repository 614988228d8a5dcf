package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/dashboard/jobdefs"
	"github.com/tasklock/tasklock/ledger"
)

// actor is the audit's Who of a request that passed mutating:
// "api:token" for the bearer token, "api:session:" and the first 12 hex
// digits of the SHA-256 of the session id for a login session (the id
// itself is a secret).
func (h *handler) actor(r *http.Request) string {
	if r.Header.Get("Authorization") != "" {
		return "api:token"
	}
	if id, _, ok := h.session(r); ok {
		sum := sha256.Sum256([]byte(id))
		return "api:session:" + hex.EncodeToString(sum[:6])
	}
	return "api:anonymous"
}

// audit records an action that changes no definition; a failure is
// logged, the action having been done.
func (h *handler) audit(ctx context.Context, r *http.Request, job, action, detail string) {
	err := jobdefs.Record(ctx, h.store, ledger.AuditEntry{Who: h.actor(r), Job: job, Action: action, Detail: detail})
	if err != nil {
		h.log.Warn("dashboard: writing an audit entry failed", "job", job, "action", action, "err", err)
	}
}

// catalogOr501 returns the store's catalog, or answers 501 and nil when it
// keeps none or the job API is off.
func (h *handler) catalogOr501(w http.ResponseWriter) ledger.Catalog {
	cat, ok := h.store.(ledger.Catalog)
	switch {
	case h.opts.DefineJob == nil:
		writeError(w, http.StatusNotImplemented, "jobs cannot be defined through this dashboard (no Options.DefineJob)")
		return nil
	case !ok:
		writeError(w, http.StatusNotImplemented, "this store keeps no catalog of jobs defined at run time")
		return nil
	}
	return cat
}

// defineJob is POST /api/jobs (create; the job's name in the body) and PUT
// /api/jobs/{name} (update): the body is one job, YAML or JSON, with the
// keys of a job of serve's configuration file.
func (h *handler) defineJob(op jobdefs.Op) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cat := h.catalogOr501(w)
		if cat == nil {
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, ledger.MaxJobDef))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, "the job definition is larger than "+strconv.Itoa(ledger.MaxJobDef)+" bytes")
			return
		}
		name, def, err := h.opts.DefineJob(body, r.PathValue("name"))
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if h.opts.FileJob != nil && h.opts.FileJob(name) {
			writeError(w, http.StatusConflict, "job "+strconv.Quote(name)+" is in the configuration file, which is authoritative for its jobs: change it there")
			return
		}
		h.applyJob(w, r, cat, jobdefs.Change{Op: op, Job: name, Def: def, Who: h.actor(r)})
	}
}

// deleteJob is DELETE /api/jobs/{name}[?cancel=1]: the job's runs in
// progress finish, or with cancel=1 are cancelled.
func (h *handler) deleteJob(w http.ResponseWriter, r *http.Request) {
	cat := h.catalogOr501(w)
	if cat == nil {
		return
	}
	cancel := false
	switch v := r.URL.Query().Get("cancel"); v {
	case "", "0", "false":
	case "1", "true":
		cancel = true
	default:
		writeError(w, http.StatusBadRequest, "cancel: want 1 or 0, got "+strconv.Quote(v))
		return
	}
	h.applyJob(w, r, cat, jobdefs.Change{Op: jobdefs.Delete, Job: r.PathValue("name"), Cancel: cancel, Who: h.actor(r)})
}

func (h *handler) applyJob(w http.ResponseWriter, r *http.Request, cat ledger.Catalog, c jobdefs.Change) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	res, err := jobdefs.Apply(ctx, cat, c)
	switch {
	case errors.Is(err, jobdefs.ErrExists):
		writeError(w, http.StatusConflict, "job "+strconv.Quote(c.Job)+" is defined already: PUT /api/jobs/{name} changes it")
		return
	case errors.Is(err, jobdefs.ErrNotDefined):
		writeError(w, http.StatusNotFound, "no job named "+strconv.Quote(c.Job)+" was defined at run time")
		return
	case errors.Is(err, jobdefs.ErrChanged):
		writeError(w, http.StatusConflict, "job "+strconv.Quote(c.Job)+" was changed meanwhile: try again")
		return
	case err != nil:
		h.storeError(w, r, err)
		return
	}
	h.sum.invalidate()
	code := http.StatusOK
	if c.Op == jobdefs.Create {
		code = http.StatusCreated
	}
	writeJSON(w, code, res.Answer(c))
}

// auditList is GET /api/audit?job=&limit=&before=: audit entries newest
// first, one page, and the Seq to pass as before for the next ("" at the
// end).
func (h *handler) auditList(w http.ResponseWriter, r *http.Request) {
	cat, ok := h.store.(ledger.Catalog)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this store keeps no audit")
		return
	}
	limit, err := pageLimit(r, 50)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	q := ledger.AuditQuery{Job: r.URL.Query().Get("job"), Limit: limit + 1}
	if b := r.URL.Query().Get("before"); b != "" {
		if q.Before, err = strconv.ParseInt(b, 10, 64); err != nil || q.Before <= 0 {
			writeError(w, http.StatusBadRequest, "before: want the next of a previous page")
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	es, err := cat.Audit(ctx, q)
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	next := ""
	if len(es) > limit {
		es = es[:limit]
		next = strconv.FormatInt(es[limit-1].Seq, 10)
	}
	out := make([]apijson.Audit, len(es))
	for i, e := range es {
		out[i] = apijson.FromAudit(e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"audit": out, "next": next})
}

// methods registers one handler per method on pattern, answering other
// methods with a JSON 405 (HEAD goes to GET).
func (h *handler) methods(m *http.ServeMux, pattern string, fs map[string]http.HandlerFunc) {
	allow := ""
	for _, meth := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if fs[meth] != nil {
			if allow != "" {
				allow += ", "
			}
			allow += meth
			h.routes = append(h.routes, route{meth, pattern})
		}
	}
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		meth := r.Method
		if meth == http.MethodHead {
			meth = http.MethodGet
		}
		f := fs[meth]
		if f == nil {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed; use "+allow)
			return
		}
		if !checkParams(w, r, meth, pattern) {
			return
		}
		f(w, r)
	})
}

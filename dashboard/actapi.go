package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/internal/jobpresence"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// runRef is the body of POST /api/runs/cancel and /api/runs/retry: the run,
// named by its key as /api/runs lists it (attempt is ignored: the run's
// newest attempt is meant).
type runRef struct {
	Job     string    `json:"job"`
	Tick    time.Time `json:"tick"`
	Trigger string    `json:"trigger"`
	Shard   int       `json:"shard"`
	Attempt int       `json:"attempt"`
	// Force, for a retry, asks for it though its job looks removed from
	// every node (see refuseRemoved).
	Force bool `json:"force"`
}

// readRunRef reads a runRef body, answering 400 naming the field when it
// is not one (501 when the store keeps no ledger). force is the body's
// force, or ?force=1.
func (h *handler) readRunRef(w http.ResponseWriter, r *http.Request) (k ledger.RunKey, force, ok bool) {
	if h.ledger == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no schedule ledger")
		return ledger.RunKey{}, false, false
	}
	if force, ok = forceParam(w, r); !ok {
		return ledger.RunKey{}, false, false
	}
	var ref runRef
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ref); err != nil {
		writeError(w, http.StatusBadRequest, "body: want JSON {\"job\", \"tick\", \"trigger\", \"shard\"} naming a run as /api/runs lists it: "+err.Error())
		return ledger.RunKey{}, false, false
	}
	switch {
	case ref.Job == "" || len(ref.Job) > schedule.MaxJobName:
		writeError(w, http.StatusBadRequest, "job: want a job's name")
	case ref.Tick.IsZero():
		writeError(w, http.StatusBadRequest, "tick: want the run's tick (RFC 3339)")
	case ref.Shard < 0 || ref.Shard >= ledger.MaxShards:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("shard: want 0 to %d", ledger.MaxShards-1))
	default:
		return ledger.RunKey{Job: ref.Job, Tick: ref.Tick.UTC(), Trigger: ref.Trigger, Shard: ref.Shard}, force || ref.Force, true
	}
	return ledger.RunKey{}, false, false
}

// forceParam reads ?force=: 1 or true asks for a trigger or a retry of a
// job that looks removed from every node (see refuseRemoved); 0, false or
// none does not. It answers 400 and reports false for another value.
func forceParam(w http.ResponseWriter, r *http.Request) (force, ok bool) {
	switch v := r.URL.Query().Get("force"); v {
	case "", "0", "false":
		return false, true
	case "1", "true":
		return true, true
	default:
		writeError(w, http.StatusBadRequest, "force: want 1 or 0, got "+strconv.Quote(v))
		return false, false
	}
}

// refuseRemoved answers 409 and reports true when a run of job asked for
// now (a trigger, a retry) would wait, pending, until a node has the job
// again: the ledger shows it registered but looking removed from the
// configuration of every node (jobpresence.Triggerable), as jobs trigger
// refuses it. It never refuses with force, a job of this node
// (Options.Jobs: this node runs it), or a job no node registered, of
// which the ledger cannot tell. A failed store call is answered 503.
func (h *handler) refuseRemoved(ctx context.Context, w http.ResponseWriter, r *http.Request, job string, force bool) bool {
	if force {
		return false
	}
	if _, ok := h.configured()[job]; ok {
		return false
	}
	st, known, err := jobpresence.State(ctx, h.ledger, job)
	if err != nil {
		h.storeError(w, r, err)
		return true
	}
	if !known {
		return false
	}
	ok, why, err := jobpresence.Requestable(ctx, h.ledger, st, h.clock.Now())
	switch {
	case err != nil:
		h.storeError(w, r, err)
		return true
	case ok:
		return false
	}
	writeError(w, http.StatusConflict, jobpresence.Removed(job, why)+
		" (force: true in the body or ?force=1 asks for it anyway; tasklock jobs forget "+job+" drops its state)")
	return true
}

// cancelRun is POST /api/runs/cancel: asks the node running the run to
// stop it (schedule.RequestCancel). 202 with the request's ID and the
// running attempt; 404 when the ledger holds no such run, 409 when it has
// ended.
func (h *handler) cancelRun(w http.ResponseWriter, r *http.Request) {
	k, force, ok := h.readRunRef(w, r)
	if !ok {
		return
	}
	if force {
		writeError(w, http.StatusBadRequest, "force: a cancel takes none (a retry or a trigger does)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	id, last, err := schedule.RequestCancel(ctx, h.ledger, k)
	switch {
	case errors.Is(err, schedule.ErrNoRun):
		writeError(w, http.StatusNotFound, strings.TrimPrefix(err.Error(), "schedule: "))
		return
	case errors.Is(err, schedule.ErrRunEnded):
		writeJSON(w, http.StatusConflict, map[string]any{"error": strings.TrimPrefix(err.Error(), "schedule: "), "run": apijson.FromRun(last)})
		return
	case err != nil:
		h.storeError(w, r, err)
		return
	}
	h.sum.invalidate()
	h.audit(ctx, r, k.Job, "cancel", apijson.RunDetail(k, last.Attempt)+" on node "+last.Node+" (request "+id+")")
	writeJSON(w, http.StatusAccepted, map[string]any{"cancel": id, "run": apijson.FromRun(last)})
}

// retryable lists the final statuses a run may be retried from.
var retryable = map[ledger.RunStatus]bool{
	ledger.RunFailed: true, ledger.RunTimeout: true, ledger.RunLost: true, ledger.RunInterrupted: true, ledger.RunCancelled: true,
}

// retryRun is POST /api/runs/retry: runs a failed run again. A scheduled
// tick's run (trigger "") is re-run as the tick's next attempt
// (schedule.RequestRerun; for a sharded job every shard of the tick runs
// again, as jobs rerun does); a triggered run is triggered again, a new
// run. 202 with the request's ID; 404 for an unknown run, 409 for one
// that is running or did not fail, and, unless forced, for a job that
// looks removed from every node (refuseRemoved).
func (h *handler) retryRun(w http.ResponseWriter, r *http.Request) {
	k, force, ok := h.readRunRef(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	last, err := schedule.NewestAttempt(ctx, h.ledger, k)
	switch {
	case errors.Is(err, schedule.ErrNoRun):
		writeError(w, http.StatusNotFound, strings.TrimPrefix(err.Error(), "schedule: "))
		return
	case err != nil:
		h.storeError(w, r, err)
		return
	case !retryable[last.Status]:
		writeJSON(w, http.StatusConflict, map[string]any{
			"error": fmt.Sprintf("attempt %d of this run is %s: only a failed, timed out, lost, interrupted or cancelled run is retried", last.Attempt, last.Status),
			"run":   apijson.FromRun(last),
		})
		return
	}
	if h.refuseRemoved(ctx, w, r, k.Job, force) {
		return
	}
	out := map[string]any{"job": k.Job}
	var detail string
	if k.Trigger == "" {
		id, err := schedule.RequestRerun(ctx, h.ledger, k.Job, k.Tick, schedule.BackfillOptions{})
		switch {
		case errors.Is(err, schedule.ErrBadRequest), errors.Is(err, schedule.ErrNotRegistered):
			writeError(w, http.StatusConflict, strings.TrimPrefix(err.Error(), "schedule: "))
			return
		case err != nil:
			h.storeError(w, r, err)
			return
		}
		out["rerun"], out["tick"] = id, k.Tick
		detail = apijson.RunDetail(k, last.Attempt) + " " + string(last.Status) + ": re-run as its next attempt (request " + id + ")"
	} else {
		id := newTriggerID()
		if _, err := h.ledger.SetJobState(ctx, ledger.JobStateParams{Job: k.Job, Op: ledger.JobTrigger, Trigger: id}); err != nil {
			h.storeError(w, r, err)
			return
		}
		out["trigger"] = id
		detail = apijson.RunDetail(k, last.Attempt) + " " + string(last.Status) + ": triggered again (trigger " + id + ")"
	}
	h.sum.invalidate()
	h.audit(ctx, r, k.Job, "retry", detail)
	writeJSON(w, http.StatusAccepted, out)
}

// readTrigger reads the optional body {"note": "...", "force": true} of a
// trigger: "" and false for an empty body; force is also set by ?force=1
// (see refuseRemoved). It answers 400 and reports false for anything
// else, or a note longer than apijson.MaxNote bytes or not UTF-8.
func readTrigger(w http.ResponseWriter, r *http.Request) (note string, force, ok bool) {
	if force, ok = forceParam(w, r); !ok {
		return "", false, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<10))
	if err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return "", false, false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return "", force, true
	}
	var in struct {
		Note  string `json:"note"`
		Force bool   `json:"force"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "body: want nothing or JSON {\"note\": \"...\", \"force\": true}: "+err.Error())
		return "", false, false
	}
	note = strings.TrimSpace(in.Note)
	switch {
	case len(note) > apijson.MaxNote:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("note: %d bytes, more than %d", len(note), apijson.MaxNote))
		return "", false, false
	case !utf8.ValidString(note):
		writeError(w, http.StatusBadRequest, "note: not UTF-8")
		return "", false, false
	}
	return note, force || in.Force, true
}

package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tasklock/tasklock/dashboard/apijson"
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
}

// readRunRef reads a runRef body, answering 400 naming the field when it
// is not one (501 when the store keeps no ledger).
func (h *handler) readRunRef(w http.ResponseWriter, r *http.Request) (ledger.RunKey, bool) {
	if h.ledger == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no schedule ledger")
		return ledger.RunKey{}, false
	}
	var ref runRef
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ref); err != nil {
		writeError(w, http.StatusBadRequest, "body: want JSON {\"job\", \"tick\", \"trigger\", \"shard\"} naming a run as /api/runs lists it: "+err.Error())
		return ledger.RunKey{}, false
	}
	switch {
	case ref.Job == "" || len(ref.Job) > schedule.MaxJobName:
		writeError(w, http.StatusBadRequest, "job: want a job's name")
	case ref.Tick.IsZero():
		writeError(w, http.StatusBadRequest, "tick: want the run's tick (RFC 3339)")
	case ref.Shard < 0 || ref.Shard >= ledger.MaxShards:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("shard: want 0 to %d", ledger.MaxShards-1))
	default:
		return ledger.RunKey{Job: ref.Job, Tick: ref.Tick.UTC(), Trigger: ref.Trigger, Shard: ref.Shard}, true
	}
	return ledger.RunKey{}, false
}

// cancelRun is POST /api/runs/cancel: asks the node running the run to
// stop it (schedule.RequestCancel). 202 with the request's ID and the
// running attempt; 404 when the ledger holds no such run, 409 when it has
// ended.
func (h *handler) cancelRun(w http.ResponseWriter, r *http.Request) {
	k, ok := h.readRunRef(w, r)
	if !ok {
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
// that is running or did not fail.
func (h *handler) retryRun(w http.ResponseWriter, r *http.Request) {
	k, ok := h.readRunRef(w, r)
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

// readNote reads the optional body {"note": "..."} of a trigger: "" for an
// empty body. It answers 400 and reports false for anything else, or a
// note longer than apijson.MaxNote bytes or not UTF-8.
func readNote(w http.ResponseWriter, r *http.Request) (string, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<10))
	if err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return "", false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return "", true
	}
	var in struct {
		Note string `json:"note"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "body: want nothing or JSON {\"note\": \"...\"}: "+err.Error())
		return "", false
	}
	note := strings.TrimSpace(in.Note)
	switch {
	case len(note) > apijson.MaxNote:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("note: %d bytes, more than %d", len(note), apijson.MaxNote))
		return "", false
	case !utf8.ValidString(note):
		writeError(w, http.StatusBadRequest, "note: not UTF-8")
		return "", false
	}
	return note, true
}

package dashboard

import (
	"context"
	"net/http"
	"strconv"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/ledger"
)

// notifyScanPages bounds the audit pages one GET /api/notifications reads
// looking for deliveries among the other entries.
const notifyScanPages = 10

// notifications is GET /api/notifications?job=&limit=&before=: the
// delivery log of the notifications tasklock serve sent (every attempt to
// deliver one to one target), newest first, read from the audit list
// (entries with action apijson.NotifyAction); "next" is the Seq to pass as
// before for the next page, "" at the end.
func (h *handler) notifications(w http.ResponseWriter, r *http.Request) {
	cat, ok := h.store.(ledger.Catalog)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this store keeps no audit list, where the delivery log is kept")
		return
	}
	limit, err := pageLimit(r, 50)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var before int64
	if b := r.URL.Query().Get("before"); b != "" {
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before <= 0 {
			writeError(w, http.StatusBadRequest, "before: want the next of a previous page")
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	out, next, err := apijson.ReadDeliveries(ctx, cat, r.URL.Query().Get("job"), before, limit, notifyScanPages)
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	nextText := ""
	if next > 0 {
		nextText = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, map[string]any{"notifications": out, "next": nextText})
}

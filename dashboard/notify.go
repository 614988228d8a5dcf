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
	q := ledger.AuditQuery{Job: r.URL.Query().Get("job"), Limit: max(limit, 100)}
	if b := r.URL.Query().Get("before"); b != "" {
		if q.Before, err = strconv.ParseInt(b, 10, 64); err != nil || q.Before <= 0 {
			writeError(w, http.StatusBadRequest, "before: want the next of a previous page")
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	out := []apijson.Delivery{}
	next := ""
scan:
	for page := 1; ; page++ {
		es, err := cat.Audit(ctx, q)
		if err != nil {
			h.storeError(w, r, err)
			return
		}
		for _, e := range es {
			d, ok := apijson.FromDelivery(e)
			if !ok {
				continue
			}
			if len(out) == limit {
				next = strconv.FormatInt(out[limit-1].Seq, 10)
				break scan
			}
			out = append(out, d)
		}
		if len(es) < q.Limit {
			break // the end of the list
		}
		q.Before = es[len(es)-1].Seq
		if page == notifyScanPages {
			next = strconv.FormatInt(q.Before, 10) // go on from here
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"notifications": out, "next": next})
}

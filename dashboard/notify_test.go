package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// GET /api/notifications lists a job's delivery log — the audit entries
// with action notify, not the others — newest first, page by page.
func TestDashboardNotifications(t *testing.T) {
	st := memstore.New(nil)
	ctx := context.Background()
	add := func(job, action, detail string) {
		t.Helper()
		if err := st.AppendAudit(ctx, ledger.AuditEntry{Who: "serve:n1", Job: job, Action: action, Detail: detail}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 5; i++ {
		add("a", apijson.NotifyAction, apijson.DeliveryDetail(apijson.Delivery{ID: "id" + strconv.Itoa(i), Event: "failure", Target: "webhook https://h/x", Attempt: i, Result: "retrying"}))
		add("a", "pause", "")
		add("b", apijson.NotifyAction, apijson.DeliveryDetail(apijson.Delivery{ID: "other", Event: "recovery", Attempt: 1, Result: "delivered"}))
	}
	srv := server(t, st, "", nil)
	var all []apijson.Delivery
	next := ""
	for pages := 0; ; pages++ {
		u := srv.URL + "/api/notifications?job=a&limit=2"
		if next != "" {
			u += "&before=" + next
		}
		code, body, _ := call(t, nil, "GET", u, nil, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", u, code, body)
		}
		var page struct {
			Notifications []apijson.Delivery `json:"notifications"`
			Next          string             `json:"next"`
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Notifications...)
		if next = page.Next; next == "" || pages > 5 {
			break
		}
	}
	if len(all) != 5 {
		t.Fatalf("%d deliveries, want 5: %+v", len(all), all)
	}
	for i, d := range all {
		if want := 5 - i; d.ID != "id"+strconv.Itoa(want) || d.Attempt != want || d.Job != "a" || d.Node != "n1" || d.Event != "failure" || d.At.IsZero() {
			t.Errorf("delivery %d: %+v", i, d)
		}
	}
	if code, body, _ := call(t, nil, "GET", srv.URL+"/api/notifications?before=x", nil, ""); code != http.StatusBadRequest {
		t.Errorf("before=x: %d %s", code, body)
	}
}

package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// TestDashboardActAPI: cancel asks for a running run to stop through the
// ledger (404 unknown, 409 ended, nothing changed), retry re-runs a failed
// tick or triggers a failed triggered run again (409 for a run that did
// not fail), trigger keeps a bounded note, and every one is in the audit
// with who did it.
func TestDashboardActAPI(t *testing.T) {
	st := memstore.New(nil)
	srv := server(t, st, testToken, nil)
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	ctx := context.Background()
	tick := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	if _, err := st.SetJobState(ctx, ledger.JobStateParams{Job: "a", Op: ledger.JobRegister, Spec: "@every 1m", Since: tick.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordRuns(ctx, []ledger.RunRecord{
		{Job: "a", Tick: tick, Attempt: 1, Node: "n1", Start: tick, Status: ledger.RunRunning},
		{Job: "a", Tick: tick.Add(-time.Minute), Attempt: 1, Node: "n1", Start: tick, End: tick, Status: ledger.RunFailed},
		{Job: "a", Tick: tick.Add(-2 * time.Minute), Attempt: 1, Node: "n1", Start: tick, End: tick, Status: ledger.RunOK},
		{Job: "a", Tick: tick.Add(-90 * time.Second), Trigger: "tr1", Attempt: 1, Node: "n2", Start: tick, End: tick, Status: ledger.RunTimeout},
	}); err != nil {
		t.Fatal(err)
	}
	body := func(tk time.Time, trigger string) string {
		return fmt.Sprintf(`{"job":"a","tick":%q,"trigger":%q,"shard":0,"attempt":1}`, tk.Format(time.RFC3339Nano), trigger)
	}
	pending := func() []ledger.TriggerRequest {
		sts, err := st.JobStates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sts {
			if s.Job == "a" {
				return s.Triggers
			}
		}
		return nil
	}

	if code, b, _ := call(t, nil, "POST", srv.URL+"/api/runs/cancel", nil, body(tick, "")); code != http.StatusUnauthorized {
		t.Errorf("anonymous cancel: %d %s, want 401", code, b)
	}
	code, b, _ := call(t, nil, "POST", srv.URL+"/api/runs/cancel", bearer, body(tick, ""))
	if code != http.StatusAccepted || !strings.Contains(b, `"cancel":"cancel-`) || !strings.Contains(b, `"status":"running"`) {
		t.Fatalf("cancel of the running run: %d %s, want 202 with the request", code, b)
	}
	if trs := pending(); len(trs) != 1 || !trs[0].Cancel || !trs[0].Tick.Equal(tick) {
		t.Fatalf("pending requests after cancel: %+v, want one cancel of %v", trs, tick)
	}
	for _, c := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"an ended run", body(tick.Add(-time.Minute), ""), http.StatusConflict, "ended failed"},
		{"an unknown run", body(tick.Add(time.Minute), ""), http.StatusNotFound, "no such run"},
		{"another shard", `{"job":"a","tick":"` + tick.Format(time.RFC3339) + `","shard":1}`, http.StatusNotFound, "no such run"},
		{"no tick", `{"job":"a"}`, http.StatusBadRequest, "tick:"},
		{"a bad shard", `{"job":"a","tick":"` + tick.Format(time.RFC3339) + `","shard":-1}`, http.StatusBadRequest, "shard:"},
		{"an unknown field", `{"job":"a","tik":"x"}`, http.StatusBadRequest, "body:"},
	} {
		if code, b, _ := call(t, nil, "POST", srv.URL+"/api/runs/cancel", bearer, c.body); code != c.code || !strings.Contains(b, c.want) {
			t.Errorf("cancel of %s: %d %s, want %d with %q", c.name, code, b, c.code, c.want)
		}
	}
	if trs := pending(); len(trs) != 1 {
		t.Fatalf("refused cancels changed the requests: %+v", trs)
	}

	// Retry.
	code, b, _ = call(t, nil, "POST", srv.URL+"/api/runs/retry", bearer, body(tick.Add(-time.Minute), ""))
	if code != http.StatusAccepted || !strings.Contains(b, `"rerun":"rr-`) {
		t.Fatalf("retry of the failed tick: %d %s, want 202 with the re-run request", code, b)
	}
	trs := pending()
	if len(trs) != 2 || !trs[1].Rerun || !trs[1].Tick.Equal(tick.Add(-time.Minute)) {
		t.Fatalf("pending requests after retry: %+v, want a re-run of %v", trs, tick.Add(-time.Minute))
	}
	code, b, _ = call(t, nil, "POST", srv.URL+"/api/runs/retry", bearer, body(tick.Add(-90*time.Second), "tr1"))
	if code != http.StatusAccepted || !strings.Contains(b, `"trigger":"`) {
		t.Fatalf("retry of the timed out trigger: %d %s, want 202 with a new trigger", code, b)
	}
	if trs := pending(); len(trs) != 3 || trs[2].Cancel || !trs[2].Tick.IsZero() {
		t.Fatalf("pending requests after the trigger's retry: %+v, want a trigger-now", trs)
	}
	for _, c := range []struct {
		name, body string
		code       int
	}{
		{"a running run", body(tick, ""), http.StatusConflict},
		{"an ok run", body(tick.Add(-2*time.Minute), ""), http.StatusConflict},
		{"an unknown run", body(tick.Add(time.Minute), ""), http.StatusNotFound},
	} {
		if code, b, _ := call(t, nil, "POST", srv.URL+"/api/runs/retry", bearer, c.body); code != c.code {
			t.Errorf("retry of %s: %d %s, want %d", c.name, code, b, c.code)
		}
	}

	// Trigger with a note, bounded.
	cookie, csrf := login(t, srv.URL)
	sess := map[string]string{"Cookie": "tasklock_session=" + cookie, "X-CSRF-Token": csrf}
	code, b, _ = call(t, nil, "POST", srv.URL+"/api/jobs/a/trigger", sess, `{"note":"deploy 42: warm the cache"}`)
	if code != http.StatusOK || !strings.Contains(b, `"note":"deploy 42: warm the cache"`) {
		t.Fatalf("trigger with a note: %d %s", code, b)
	}
	if code, b, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/trigger", bearer, `{"note":"`+strings.Repeat("x", 1001)+`"}`); code != http.StatusBadRequest || !strings.Contains(b, "note: 1001 bytes, more than 1000") {
		t.Errorf("trigger with a long note: %d %s, want 400", code, b)
	}
	if code, b, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/trigger", bearer, `{"nope":1}`); code != http.StatusBadRequest {
		t.Errorf("trigger with an unknown field: %d %s, want 400", code, b)
	}
	if code, b, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/trigger", bearer, ""); code != http.StatusOK {
		t.Errorf("trigger without a body: %d %s, want 200", code, b)
	}
	if trs := pending(); len(trs) != 5 {
		t.Fatalf("pending requests after 2 triggers: %+v, want 5 (refused ones add none)", trs)
	}

	// The audit: who, what, when, newest first.
	code, b, _ = call(t, nil, "GET", srv.URL+"/api/audit?job=a", bearer, "")
	if code != http.StatusOK {
		t.Fatalf("audit: %d %s", code, b)
	}
	for _, want := range []string{
		`"who":"api:token","job":"a","action":"cancel","detail":"tick ` + tick.Format(time.RFC3339Nano) + ` attempt 1 on node n1 (request cancel-`,
		`"action":"retry","detail":"tick ` + tick.Add(-time.Minute).Format(time.RFC3339Nano) + ` attempt 1 failed: re-run as its next attempt`,
		`"action":"retry","detail":"tick ` + tick.Add(-90*time.Second).Format(time.RFC3339Nano) + ` trigger tr1 attempt 1 timeout: triggered again`,
		`"who":"api:session:`,
		`, note: deploy 42: warm the cache"`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("audit lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(b, testToken) || strings.Contains(b, cookie) {
		t.Errorf("the audit shows a secret: %s", b)
	}
	if n := strings.Count(b, `"action":`); n != 5 {
		t.Errorf("audit has %d entries, want 5 (cancel, 2 retries, 2 triggers): %s", n, b)
	}
}
